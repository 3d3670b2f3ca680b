//! Swap for containers (NodeSwap, GA in v1.34; upstream
//! kuberuntime_container_linux.go `configureContainerSwapResources`,
//! `GetContainerSwapBehavior`, `calcSwapForBurstablePods`).
//!
//! Every container is told how much swap it may use, through the same CRI
//! resources that carry its memory limit:
//! * cgroup v2: `unified["memory.swap.max"]`: `0`, or for a LimitedSwap
//!   container its share of the node's swap;
//! * cgroup v1: no swap at all, `memory_swap_limit_in_bytes` equal to the
//!   memory limit (LimitedSwap needs cgroup v2).
//!
//! Where the kernel has no swap controller nothing is set, as upstream.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::qos::{qos_class, QosClass};
use crate::cri::api;
use crate::podutil::PodExt;
use crate::util::quantity;

/// The cgroup v2 file a container's swap limit is written to.
pub const SWAP_MAX: &str = "memory.swap.max";

/// `memorySwap.swapBehavior`: anything but LimitedSwap is NoSwap, the
/// empty default included (configuration validation refuses the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SwapBehavior {
    #[default]
    NoSwap,
    LimitedSwap,
}

impl SwapBehavior {
    pub fn from_config(value: &str) -> SwapBehavior {
        match value {
            "LimitedSwap" => SwapBehavior::LimitedSwap,
            _ => SwapBehavior::NoSwap,
        }
    }
}

/// The swap controls the node's cgroups offer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SwapController {
    /// No swap accounting in the kernel: nothing is set.
    #[default]
    Unavailable,
    /// `memory.memsw.limit_in_bytes`.
    V1,
    /// `memory.swap.max`.
    V2,
}

impl SwapController {
    /// Upstream `swapControllerAvailable`: v2 when the kubelet's own
    /// cgroup has `memory.swap.max`, v1 when the memory hierarchy has
    /// `memory.memsw.limit_in_bytes`.
    pub fn detect() -> SwapController {
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.controllers").exists() {
            let own = std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|t| own_v2_cgroup(&t));
            let dir = own.map_or_else(|| root.to_path_buf(), |p| root.join(p));
            if dir.join(SWAP_MAX).exists() {
                return SwapController::V2;
            }
            return SwapController::Unavailable;
        }
        if root.join("memory/memory.memsw.limit_in_bytes").exists() {
            SwapController::V1
        } else {
            SwapController::Unavailable
        }
    }
}

/// The unified hierarchy's line of /proc/self/cgroup (`0::/path`), as a
/// path relative to the mount.
fn own_v2_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_start_matches('/').to_string())
}

/// What the runtime manager needs to give each container its swap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapConfig {
    pub behavior: SwapBehavior,
    pub controller: SwapController,
    /// MemTotal, bytes.
    pub memory_capacity: u64,
    /// SwapTotal, bytes: all of it is shared among LimitedSwap containers.
    pub swap_capacity: u64,
}

impl SwapConfig {
    /// Upstream `GetContainerSwapBehavior`: LimitedSwap only on cgroup v2,
    /// for a container that asks for memory without its request equalling
    /// its limit, in a Burstable pod that is not critical.
    pub fn container_behavior(&self, pod: &Pod, container: &Container) -> SwapBehavior {
        if self.behavior != SwapBehavior::LimitedSwap || self.controller != SwapController::V2 {
            return SwapBehavior::NoSwap;
        }
        if crate::eviction::rank::is_critical_pod(pod) || qos_class(pod) != QosClass::Burstable {
            return SwapBehavior::NoSwap;
        }
        let (request, limit) = memory(container);
        if (request.is_none() && limit.is_none()) || request == limit {
            return SwapBehavior::NoSwap;
        }
        SwapBehavior::LimitedSwap
    }

    /// Sets the container's swap limit in `r`, whose memory limit is
    /// already set.
    pub fn apply(&self, pod: &Pod, container: &Container, r: &mut api::LinuxContainerResources) {
        match self.controller {
            SwapController::Unavailable => {}
            // No swap: the memory+swap limit is the memory limit (0, no
            // limit, when the container has none).
            SwapController::V1 => r.memory_swap_limit_in_bytes = r.memory_limit_in_bytes,
            SwapController::V2 => {
                let max = match self.container_behavior(pod, container) {
                    SwapBehavior::NoSwap => 0,
                    SwapBehavior::LimitedSwap => self.limited_swap(pod, container),
                };
                r.unified.insert(SWAP_MAX.to_string(), max.to_string());
            }
        }
    }

    fn limited_swap(&self, pod: &Pod, container: &Container) -> i64 {
        let request = memory(container).0.unwrap_or(0);
        calc_swap_for_burstable_pods(request, self.memory_capacity, self.swap_capacity)
            .unwrap_or_else(|e| {
                log::warn!(
                    "pod {}: container {}: cannot calculate swap allocation amount; disallowing swap: {e}",
                    pod.full_name(),
                    container.name
                );
                0
            })
    }
}

/// The container's own memory request and limit in bytes (zero counts as
/// unset). The API server defaults a missing request to the limit.
fn memory(container: &Container) -> (Option<i128>, Option<i128>) {
    let res = container.resources.as_ref();
    let get = |list: Option<&BTreeMap<String, Quantity>>| {
        list.and_then(|l| l.get("memory"))
            .and_then(|q| quantity::parse_quantity_value(&q.0).ok())
            .filter(|v| *v > 0)
    };
    let limit = get(res.and_then(|r| r.limits.as_ref()));
    let has_request = res
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|r| r.contains_key("memory"));
    let request = if has_request {
        get(res.and_then(|r| r.requests.as_ref()))
    } else {
        limit
    };
    (request, limit)
}

/// The container's share of the node's swap: its memory request's share
/// of the node's memory, in floating point and truncated, as upstream.
pub fn calc_swap_for_burstable_pods(
    request: i128,
    node_memory: u64,
    node_swap: u64,
) -> Result<i64, String> {
    if node_memory == 0 {
        return Err("total node memory is 0".to_string());
    }
    if request > i128::from(node_memory) {
        return Err(format!(
            "container request {request} is larger than total node memory {node_memory}"
        ));
    }
    let proportion = request as f64 / node_memory as f64;
    Ok((proportion * node_swap as f64) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": containers}
        }))
        .expect("pod")
    }

    fn limited() -> SwapConfig {
        SwapConfig {
            behavior: SwapBehavior::LimitedSwap,
            controller: SwapController::V2,
            memory_capacity: 40 << 30,
            swap_capacity: 5 << 30,
        }
    }

    fn swap_max(cfg: &SwapConfig, p: &Pod) -> Vec<Option<String>> {
        p.spec
            .as_ref()
            .map(|s| &s.containers)
            .into_iter()
            .flatten()
            .map(|c| {
                let mut r = api::LinuxContainerResources::default();
                cfg.apply(p, c, &mut r);
                r.unified.get(SWAP_MAX).cloned()
            })
            .collect()
    }

    #[test]
    fn upstreams_formula() {
        // Upstream's own case: 1Gi of 40Gi memory, 5Gi swap.
        assert_eq!(
            calc_swap_for_burstable_pods(1 << 30, 42949672960, 5368709120),
            Ok(134217728)
        );
        assert_eq!(calc_swap_for_burstable_pods(1 << 30, 8 << 30, 0), Ok(0));
        assert!(calc_swap_for_burstable_pods(1, 0, 1).is_err());
        let e = calc_swap_for_burstable_pods(9 << 30, 8 << 30, 1).unwrap_err();
        assert!(e.contains("larger than total node memory"), "{e}");
    }

    #[test]
    fn only_burstable_containers_asking_for_memory_below_their_limit_swap() {
        let p = pod(json!([
            {"name": "req", "resources": {"requests": {"memory": "1Gi"}}},
            {"name": "req-lim", "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}},
            {"name": "equal", "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}},
            {"name": "none", "resources": {"requests": {"cpu": "1"}}},
        ]));
        let quarter_gib = Some("134217728".to_string());
        assert_eq!(
            swap_max(&limited(), &p),
            [
                quarter_gib.clone(),
                quarter_gib,
                Some("0".into()),
                Some("0".into())
            ]
        );
    }

    #[test]
    fn guaranteed_best_effort_and_critical_pods_never_swap() {
        let guaranteed = pod(json!([{"name": "c", "resources": {
            "limits": {"memory": "1Gi", "cpu": "1"}}}]));
        assert_eq!(swap_max(&limited(), &guaranteed), [Some("0".into())]);
        let best_effort = pod(json!([{"name": "c"}]));
        assert_eq!(swap_max(&limited(), &best_effort), [Some("0".into())]);
        let mut critical =
            pod(json!([{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]));
        if let Some(s) = critical.spec.as_mut() {
            s.priority = Some(2_000_000_000);
        }
        assert_eq!(swap_max(&limited(), &critical), [Some("0".into())]);
    }

    #[test]
    fn no_swap_v1_and_no_controller() {
        let p = pod(
            json!([{"name": "c", "resources": {"requests": {"memory": "1Gi"},
            "limits": {"memory": "2Gi"}}}]),
        );
        let no_swap = SwapConfig {
            behavior: SwapBehavior::NoSwap,
            ..limited()
        };
        assert_eq!(swap_max(&no_swap, &p), [Some("0".into())]);
        // cgroup v1: LimitedSwap needs v2; memory+swap is the memory limit.
        let v1 = SwapConfig {
            controller: SwapController::V1,
            ..limited()
        };
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let mut r = api::LinuxContainerResources {
            memory_limit_in_bytes: 2 << 30,
            ..Default::default()
        };
        v1.apply(&p, c, &mut r);
        assert_eq!(r.memory_swap_limit_in_bytes, 2 << 30);
        assert!(r.unified.is_empty());
        let none = SwapConfig {
            controller: SwapController::Unavailable,
            ..limited()
        };
        let mut r = api::LinuxContainerResources::default();
        none.apply(&p, c, &mut r);
        assert_eq!(r, api::LinuxContainerResources::default());
    }

    #[test]
    fn config_values() {
        assert_eq!(SwapBehavior::from_config(""), SwapBehavior::NoSwap);
        assert_eq!(SwapBehavior::from_config("NoSwap"), SwapBehavior::NoSwap);
        assert_eq!(
            SwapBehavior::from_config("LimitedSwap"),
            SwapBehavior::LimitedSwap
        );
        assert_eq!(
            own_v2_cgroup("0::/system.slice/kubelet.service\n").as_deref(),
            Some("system.slice/kubelet.service")
        );
        assert_eq!(own_v2_cgroup("4:memory:/x\n"), None);
    }
}
