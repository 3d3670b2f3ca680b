//! Resource arithmetic (upstream `cm/helpers_linux.go`: MilliCPUToShares,
//! MilliCPUToQuota, ResourceConfigForPod; `cm/cgroup_v2_manager_linux.go`
//! getCPUWeight; `api/v1/resource` PodRequests and PodLimits).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::kuberuntime::qos::{qos_class, QosClass};
use crate::podutil::PodExt;
use crate::util::quantity;

/// Taken by upstream from lmctfy: the kernel's minimum and maximum.
pub const MIN_SHARES: u64 = 2;
pub const MAX_SHARES: u64 = 262_144;
const SHARES_PER_CPU: i128 = 1024;
const MILLI_CPU_TO_CPU: i128 = 1000;
/// The smallest CFS quota upstream writes: 1 ms.
const MIN_QUOTA_PERIOD: i64 = 1000;

/// What a cgroup is set to; `None` leaves the kernel's value alone
/// (upstream ResourceConfig).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceConfig {
    /// Bytes; -1 is unlimited.
    pub memory: Option<i64>,
    pub cpu_shares: Option<u64>,
    /// Microseconds per period; -1 is unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<u64>,
    /// -1 is unlimited.
    pub pids_limit: Option<i64>,
}

/// cpu.shares for a cpu request: 1024 per CPU, at least 2 (an unset
/// request also maps to 2, the kernel's real minimum), at most 262144.
pub fn milli_cpu_to_shares(milli_cpu: i64) -> u64 {
    if milli_cpu <= 0 {
        return MIN_SHARES;
    }
    let shares = i128::from(milli_cpu) * SHARES_PER_CPU / MILLI_CPU_TO_CPU;
    (shares.max(MIN_SHARES as i128) as u64).min(MAX_SHARES)
}

/// cpu.cfs_quota_us for a cpu limit over `period_us`; 0 for no limit, at
/// least 1 ms otherwise.
pub fn milli_cpu_to_quota(milli_cpu: i64, period_us: i64) -> i64 {
    if milli_cpu == 0 {
        return 0;
    }
    let quota = i128::from(milli_cpu) * i128::from(period_us) / MILLI_CPU_TO_CPU;
    (quota as i64).max(MIN_QUOTA_PERIOD)
}

/// cgroup v2 cpu.weight for v1 shares: [2, 262144] mapped linearly onto
/// [1, 10000].
pub fn cpu_shares_to_weight(shares: u64) -> u64 {
    if shares >= MAX_SHARES {
        return 10_000;
    }
    // Below the minimum (never produced by milli_cpu_to_shares) maps to 1
    // rather than underflowing.
    let shares = shares.max(MIN_SHARES);
    1 + ((shares - 2) * 9999) / 262_142
}

pub type ResourceList = BTreeMap<String, i128>;

/// A container's requests in milli-units; a missing request takes the
/// limit, as the API's defaulting does (static pods included: upstream
/// decodes them with defaults).
fn container_requests(c: &Container) -> ResourceList {
    let res = c.resources.as_ref();
    let mut out = parse_list(res.and_then(|r| r.limits.as_ref()));
    out.extend(parse_list(res.and_then(|r| r.requests.as_ref())));
    out
}

fn container_limits(c: &Container) -> ResourceList {
    parse_list(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

/// Unparsable quantities are skipped: the API server rejects them, and a
/// static pod with one is not worth failing the whole pod cgroup over.
fn parse_list(list: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), quantity::parse_quantity(&q.0).ok()?)))
        .collect()
}

fn add(into: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_into(into: &mut ResourceList, from: &ResourceList) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_insert(*v);
        *e = (*e).max(*v);
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Sum over app containers, then the max with each init container, where
/// sidecars (restartable init containers) run alongside everything after
/// them (upstream PodRequests/PodLimits aggregation).
fn aggregate(pod: &Pod, per_container: impl Fn(&Container) -> ResourceList) -> ResourceList {
    let mut total = ResourceList::new();
    for c in pod.containers() {
        add(&mut total, &per_container(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in pod.init_containers() {
        let own = per_container(c);
        let during = if is_sidecar(c) {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut v = own;
            add(&mut v, &sidecars);
            v
        };
        max_into(&mut init_peak, &during);
    }
    max_into(&mut total, &init_peak);
    total
}

/// The resources pod-level `spec.resources` may set (upstream
/// IsSupportedPodLevelResource): CPU, memory and huge pages.
pub fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Pod-level requests (`limits` false) or limits in milli-units, the
/// supported resources only (PodLevelResources, beta and on from v1.34).
/// A limit without a request is also the request, as the API server
/// defaults it (static pods are not defaulted).
pub fn pod_level(pod: &Pod, limits: bool) -> ResourceList {
    let res = pod.spec.as_ref().and_then(|s| s.resources.as_ref());
    let mut out = parse_list(res.and_then(|r| r.limits.as_ref()));
    if !limits {
        out.extend(parse_list(res.and_then(|r| r.requests.as_ref())));
    }
    out.retain(|k, _| is_pod_level_resource(k));
    out
}

/// `spec.overhead` in milli-units.
pub fn overhead(pod: &Pod) -> ResourceList {
    parse_list(pod.spec.as_ref().and_then(|s| s.overhead.as_ref()))
}

/// The pod's effective requests in milli-units, overhead included.
pub fn pod_requests(pod: &Pod) -> ResourceList {
    let mut reqs = pod_requests_without_overhead(pod);
    add(&mut reqs, &overhead(pod));
    reqs
}

/// upstream PodRequests with ExcludeOverhead: what the pod's containers,
/// or the pod itself, ask for.
pub fn pod_requests_without_overhead(pod: &Pod) -> ResourceList {
    let mut reqs = aggregate(pod, container_requests);
    // Pod-level requests replace the containers' sum (upstream PodRequests).
    reqs.extend(pod_level(pod, false));
    reqs
}

/// upstream PodLimits with ExcludeOverhead.
pub fn pod_limits_without_overhead(pod: &Pod) -> ResourceList {
    let mut limits = aggregate(pod, container_limits);
    limits.extend(pod_level(pod, true));
    limits
}

/// The pod's effective limits in milli-units; overhead is added only to
/// resources that have a limit.
pub fn pod_limits(pod: &Pod) -> ResourceList {
    let mut limits = pod_limits_without_overhead(pod);
    for (k, v) in overhead(pod) {
        if let Some(l) = limits.get_mut(&k) {
            *l += v;
        }
    }
    limits
}

/// Whether every container (init ones included) limits `resource`, or
/// the pod does as a whole: a Burstable pod's cgroup is capped only then.
fn every_container_limits(pod: &Pod, resource: &str) -> bool {
    if pod_level(pod, true).get(resource).is_some_and(|v| *v != 0) {
        return true;
    }
    pod.containers()
        .iter()
        .chain(pod.init_containers())
        .all(|c| container_limits(c).get(resource).is_some_and(|v| *v != 0))
}

/// The pod cgroup's settings (upstream ResourceConfigForPod): Guaranteed
/// pods get shares, quota and memory; Burstable pods shares, and quota or
/// memory only when every container limits it; BestEffort pods 2 shares.
/// `cfs_quota` false (cpuCFSQuota) leaves the quota unlimited.
pub fn resource_config_for_pod(pod: &Pod, cfs_quota: bool, period_us: u64) -> ResourceConfig {
    let reqs = pod_requests(pod);
    let limits = pod_limits(pod);
    let milli = |l: &ResourceList, k: &str| l.get(k).copied().unwrap_or(0) as i64;
    let cpu_shares = milli_cpu_to_shares(milli(&reqs, "cpu"));
    let cpu_quota = if cfs_quota {
        milli_cpu_to_quota(milli(&limits, "cpu"), period_us as i64)
    } else {
        -1
    };
    // Memory in whole bytes, rounded up as Quantity.Value() does.
    let memory = (limits.get("memory").copied().unwrap_or(0) + 999).div_euclid(1000) as i64;
    let mut rc = ResourceConfig::default();
    match qos_class(pod) {
        QosClass::Guaranteed => {
            rc.cpu_shares = Some(cpu_shares);
            rc.cpu_quota = Some(cpu_quota);
            rc.cpu_period = Some(period_us);
            rc.memory = Some(memory);
        }
        QosClass::Burstable => {
            rc.cpu_shares = Some(cpu_shares);
            if every_container_limits(pod, "cpu") {
                rc.cpu_quota = Some(cpu_quota);
                rc.cpu_period = Some(period_us);
            }
            if every_container_limits(pod, "memory") {
                rc.memory = Some(memory);
            }
        }
        QosClass::BestEffort => rc.cpu_shares = Some(MIN_SHARES),
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn list(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        if pairs.is_empty() {
            return None;
        }
        Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    pub fn ctr(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: list(req),
                limits: list(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn pod_of(containers: Vec<Container>, init: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                init_containers: Some(init).filter(|v| !v.is_empty()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn shares_as_upstream() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(2), 2);
        assert_eq!(milli_cpu_to_shares(100), 102);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1500), 1536);
        assert_eq!(milli_cpu_to_shares(300_000), MAX_SHARES);
    }

    #[test]
    fn quota_as_upstream() {
        assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
        assert_eq!(milli_cpu_to_quota(5, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(9, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(10, 100_000), 1000);
        assert_eq!(milli_cpu_to_quota(200, 100_000), 20_000);
        assert_eq!(milli_cpu_to_quota(1500, 100_000), 150_000);
        assert_eq!(milli_cpu_to_quota(500, 50_000), 25_000);
    }

    #[test]
    fn weight_as_upstream() {
        assert_eq!(cpu_shares_to_weight(2), 1);
        assert_eq!(cpu_shares_to_weight(1024), 39);
        assert_eq!(cpu_shares_to_weight(102), 4);
        assert_eq!(cpu_shares_to_weight(262_143), 9999);
        assert_eq!(cpu_shares_to_weight(262_144), 10_000);
        assert_eq!(cpu_shares_to_weight(0), 1);
    }

    #[test]
    fn guaranteed_pod() {
        let p = pod_of(
            vec![
                ctr("a", &[], &[("cpu", "500m"), ("memory", "64Mi")]),
                ctr("b", &[], &[("cpu", "1"), ("memory", "64Mi")]),
            ],
            vec![],
        );
        let rc = resource_config_for_pod(&p, true, 100_000);
        assert_eq!(
            rc,
            ResourceConfig {
                memory: Some(128 << 20),
                cpu_shares: Some(1536),
                cpu_quota: Some(150_000),
                cpu_period: Some(100_000),
                pids_limit: None,
            }
        );
        let rc = resource_config_for_pod(&p, false, 100_000);
        assert_eq!(rc.cpu_quota, Some(-1));
    }

    #[test]
    fn burstable_limits_only_when_every_container_has_one() {
        let p = pod_of(
            vec![
                ctr(
                    "a",
                    &[("cpu", "100m")],
                    &[("cpu", "200m"), ("memory", "32Mi")],
                ),
                ctr("b", &[("cpu", "100m")], &[]),
            ],
            vec![],
        );
        let rc = resource_config_for_pod(&p, true, 100_000);
        assert_eq!(rc.cpu_shares, Some(204));
        assert_eq!((rc.cpu_quota, rc.cpu_period, rc.memory), (None, None, None));

        let p = pod_of(
            vec![ctr(
                "a",
                &[("cpu", "100m"), ("memory", "16Mi")],
                &[("memory", "32Mi")],
            )],
            vec![],
        );
        let rc = resource_config_for_pod(&p, true, 100_000);
        assert_eq!(rc.cpu_shares, Some(102));
        assert_eq!(rc.memory, Some(32 << 20));
        assert_eq!(rc.cpu_quota, None);
    }

    #[test]
    fn best_effort_gets_min_shares() {
        let p = pod_of(vec![ctr("a", &[], &[])], vec![]);
        assert_eq!(
            resource_config_for_pod(&p, true, 100_000),
            ResourceConfig {
                cpu_shares: Some(2),
                ..Default::default()
            }
        );
    }

    #[test]
    fn init_containers_take_the_max() {
        // An init container bigger than the app containers sets the pod's
        // requests and limits; a smaller one does not.
        let p = pod_of(
            vec![
                ctr("a", &[], &[("cpu", "200m"), ("memory", "32Mi")]),
                ctr("b", &[], &[("cpu", "200m"), ("memory", "32Mi")]),
            ],
            vec![
                ctr("big", &[], &[("cpu", "1"), ("memory", "16Mi")]),
                ctr("small", &[], &[("cpu", "100m"), ("memory", "8Mi")]),
            ],
        );
        let rc = resource_config_for_pod(&p, true, 100_000);
        assert_eq!(rc.cpu_shares, Some(1024));
        assert_eq!(rc.cpu_quota, Some(100_000));
        assert_eq!(rc.memory, Some(64 << 20));
    }

    #[test]
    fn sidecars_add_to_everything_after_them() {
        let mut side = ctr("side", &[("cpu", "100m")], &[]);
        side.restart_policy = Some("Always".into());
        let p = pod_of(
            vec![ctr("a", &[("cpu", "300m")], &[])],
            vec![side, ctr("init", &[("cpu", "500m")], &[])],
        );
        // max(app 300 + side 100, init 500 + side 100) = 600m.
        assert_eq!(pod_requests(&p).get("cpu"), Some(&600));
    }

    #[test]
    fn overhead_counts() {
        let mut p = pod_of(
            vec![ctr("a", &[], &[("cpu", "500m"), ("memory", "64Mi")])],
            vec![],
        );
        if let Some(s) = p.spec.as_mut() {
            s.overhead = list(&[("cpu", "250m"), ("memory", "16Mi")]);
        }
        let rc = resource_config_for_pod(&p, true, 100_000);
        assert_eq!(rc.cpu_shares, Some(768));
        assert_eq!(rc.cpu_quota, Some(75_000));
        assert_eq!(rc.memory, Some(80 << 20));
        // Overhead adds to requests even without limits, to limits only
        // where one is set.
        let mut p = pod_of(vec![ctr("a", &[("cpu", "100m")], &[])], vec![]);
        if let Some(s) = p.spec.as_mut() {
            s.overhead = list(&[("cpu", "100m"), ("memory", "16Mi")]);
        }
        assert_eq!(pod_requests(&p).get("cpu"), Some(&200));
        assert!(pod_limits(&p).is_empty());
    }

    /// The v1.34 capture's `v-podlevel`: two containers without resources
    /// under pod-level requests and limits.
    #[test]
    fn pod_level_resources_set_the_pod_cgroup_qos_and_requests() {
        let mut pod = pod_of(vec![ctr("a", &[], &[]), ctr("b", &[], &[])], vec![]);
        if let Some(spec) = pod.spec.as_mut() {
            spec.resources = Some(ResourceRequirements {
                requests: list(&[("cpu", "100m"), ("memory", "64Mi")]),
                limits: list(&[("cpu", "300m"), ("memory", "128Mi")]),
                ..Default::default()
            });
        }
        assert_eq!(qos_class(&pod), QosClass::Burstable);
        let rc = resource_config_for_pod(&pod, true, 100_000);
        assert_eq!(rc.cpu_shares, Some(102));
        assert_eq!(rc.cpu_quota, Some(30_000));
        assert_eq!(rc.memory, Some(128 << 20));
        assert_eq!(crate::lifecycle::admission::pod_request(&pod, "cpu"), 100);
        // Equal pod-level requests and limits make it Guaranteed, whatever
        // its containers say; a limit alone is also the request.
        if let Some(r) = pod.spec.as_mut().and_then(|s| s.resources.as_mut()) {
            r.requests = None;
        }
        assert_eq!(qos_class(&pod), QosClass::Guaranteed);
        assert_eq!(
            pod_requests(&pod).get("memory"),
            Some(&((128i128 << 20) * 1000))
        );
    }
}
