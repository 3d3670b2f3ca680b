//! The sandbox's resources in its CRI config (upstream
//! applySandboxResources, kuberuntime_sandbox_linux.go): what the pod asks
//! for in total, and its RuntimeClass overhead, for a runtime that sizes
//! the sandbox itself (a VM-based one). runc's containerd ignores both.

use k8s_openapi::api::core::v1::Pod;

use super::RuntimeManagerConfig;
use crate::cm::helpers::{
    milli_cpu_to_quota, milli_cpu_to_shares, overhead, pod_limits_without_overhead,
    pod_requests_without_overhead, ResourceList,
};
use crate::cri::api;

/// Sets `resources` (the pod's requests and limits, overhead excluded) and
/// `overhead` (requests equal to limits; empty without one).
pub fn apply(pod: &Pod, cfg: &RuntimeManagerConfig, linux: &mut api::LinuxPodSandboxConfig) {
    let requests = pod_requests_without_overhead(pod);
    let limits = pod_limits_without_overhead(pod);
    linux.resources =
        protobuf::MessageField::some(calculate(cfg, requests.get("cpu").copied(), &limits));
    let extra = overhead(pod);
    linux.overhead = protobuf::MessageField::some(if has_overhead(pod) {
        calculate(cfg, Some(extra.get("cpu").copied().unwrap_or(0)), &extra)
    } else {
        api::LinuxContainerResources::default()
    });
}

fn has_overhead(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.overhead.is_some())
}

/// upstream calculateLinuxResources: shares from the CPU request (the
/// limit where none is asked), quota from the CPU limit, the memory limit
/// in bytes; group OOM kill where the containers get it.
fn calculate(
    cfg: &RuntimeManagerConfig,
    cpu_request: Option<i128>,
    limits: &ResourceList,
) -> api::LinuxContainerResources {
    let cpu_limit = clamp(limits.get("cpu").copied().unwrap_or(0));
    let memory_milli = limits.get("memory").copied().unwrap_or(0);
    let mut r = api::LinuxContainerResources {
        cpu_shares: milli_cpu_to_shares(cpu_request.map_or(cpu_limit, clamp)) as i64,
        // Quantity.Value() rounds up to whole bytes.
        memory_limit_in_bytes: clamp((memory_milli + 999).div_euclid(1000)),
        ..Default::default()
    };
    if cfg.cpu_cfs_quota {
        r.cpu_period = cfg.cpu_cfs_quota_period_us;
        r.cpu_quota = milli_cpu_to_quota(cpu_limit, cfg.cpu_cfs_quota_period_us);
    }
    super::oom_group::apply(cfg, &mut r);
    r
}

fn clamp(v: i128) -> i64 {
    v.clamp(0, i128::from(i64::MAX)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn the_containers_total_and_the_overhead_are_given_apart() {
        let p = pod(json!({"spec": {
        "overhead": {"cpu": "250m", "memory": "120Mi"},
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "64Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}}
        ]}}));
        let mut cfg = RuntimeManagerConfig::for_tests();
        cfg.oom_group_kill = true;
        let mut linux = api::LinuxPodSandboxConfig::default();
        apply(&p, &cfg, &mut linux);
        let r = linux.resources.as_ref().expect("resources");
        assert_eq!(r.cpu_shares, 768, "750m requested");
        // Only `a` limits CPU: the pod's limit is its 1 CPU.
        assert_eq!((r.cpu_quota, r.cpu_period), (100_000, 100_000));
        assert_eq!(r.memory_limit_in_bytes, 128 << 20);
        assert_eq!(
            r.unified.get("memory.oom.group").map(String::as_str),
            Some("1")
        );
        let o = linux.overhead.as_ref().expect("overhead");
        assert_eq!(o.cpu_shares, 256);
        assert_eq!(o.cpu_quota, 25_000);
        assert_eq!(o.memory_limit_in_bytes, 120 << 20);
    }

    #[test]
    fn a_best_effort_pod_without_overhead_gets_the_minimum() {
        let p = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
        let mut linux = api::LinuxPodSandboxConfig::default();
        apply(&p, &RuntimeManagerConfig::for_tests(), &mut linux);
        let r = linux.resources.as_ref().expect("resources");
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2, 0, 0)
        );
        assert!(r.unified.is_empty());
        assert_eq!(
            linux.overhead.as_ref(),
            Some(&api::LinuxContainerResources::default())
        );
    }
}
