//! Table tests after upstream's helpers_test.go and eviction_manager_test.go,
//! with a fake summary, pod set and killer.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::api::*;
use super::helpers::*;
use super::rank::*;
use super::*;
use crate::server::stats::types::{
    ContainerStats, FsStats, MemoryStats, NodeStats, PodReference, PodStats, ProcessStats,
    RlimitStats, RuntimeStats, Summary, Time,
};

pub(super) const MI: u64 = 1 << 20;
pub(super) const GI: u64 = 1 << 30;

pub(super) fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub(super) fn parse(
    alloc: &[&str],
    hard: &[(&str, &str)],
    soft: &[(&str, &str)],
    grace: &[(&str, &str)],
    reclaim: &[(&str, &str)],
) -> Result<Vec<Threshold>, ThresholdError> {
    let alloc: Vec<String> = alloc.iter().map(|s| s.to_string()).collect();
    let (h, s, g, r) = (map(hard), map(soft), map(grace), map(reclaim));
    parse_threshold_config(&ThresholdConfig {
        enforce_node_allocatable: &alloc,
        hard: &h,
        soft: &s,
        soft_grace_period: &g,
        minimum_reclaim: &r,
    })
}

pub(super) fn mi(n: i128) -> ThresholdValue {
    ThresholdValue::Quantity(n * (1 << 20) * 1000)
}

/// upstream TestParseThresholdConfig.
#[test]
fn parse_threshold_config_cases() {
    // Hard, soft with its grace period, minimum reclaims on both.
    let t = parse(
        &[],
        &[("memory.available", "150Mi")],
        &[("memory.available", "300Mi")],
        &[("memory.available", "30s")],
        &[("memory.available", "0")],
    )
    .unwrap();
    assert_eq!(
        t,
        vec![
            Threshold {
                signal: Signal::MemoryAvailable,
                value: mi(150),
                grace_period: Duration::ZERO,
                min_reclaim: Some(ThresholdValue::Quantity(0)),
            },
            Threshold {
                signal: Signal::MemoryAvailable,
                value: mi(300),
                grace_period: Duration::from_secs(30),
                min_reclaim: Some(ThresholdValue::Quantity(0)),
            },
        ]
    );
    // enforceNodeAllocatable pods copies the hard memory threshold.
    let t = parse(&["pods"], &[("memory.available", "150Mi")], &[], &[], &[]).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1].signal, Signal::AllocatableMemoryAvailable);
    assert_eq!(t[1].value, mi(150));
    // Percentages, and 0%/100% turn a threshold off.
    let t = parse(
        &[],
        &[
            ("nodefs.available", "10%"),
            ("imagefs.available", "0%"),
            ("pid.available", "100%"),
        ],
        &[],
        &[],
        &[("nodefs.available", "5%")],
    )
    .unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].value, ThresholdValue::Percentage(0.1));
    assert_eq!(t[0].min_reclaim, Some(ThresholdValue::Percentage(0.05)));
    // Errors: a soft threshold without a grace period, an unknown signal,
    // a negative or zero quantity, a bad grace period.
    assert!(parse(&[], &[], &[("memory.available", "1Gi")], &[], &[])
        .unwrap_err()
        .to_string()
        .contains("grace period must be specified"));
    assert!(parse(&[], &[("mem.available", "1Gi")], &[], &[], &[]).is_err());
    assert!(parse(&[], &[("memory.available", "-1Gi")], &[], &[], &[]).is_err());
    assert!(parse(&[], &[("memory.available", "0")], &[], &[], &[]).is_err());
    assert!(parse(
        &[],
        &[],
        &[("memory.available", "1Gi")],
        &[("memory.available", "soon")],
        &[]
    )
    .is_err());
    assert!(parse(&[], &[], &[], &[], &[("memory.available", "-1")]).is_err());
    // The defaults parse.
    let d = crate::kubeletconfig::default_eviction_hard();
    let none = BTreeMap::new();
    let t = parse_threshold_config(&ThresholdConfig {
        enforce_node_allocatable: &[],
        hard: &d,
        soft: &none,
        soft_grace_period: &none,
        minimum_reclaim: &none,
    })
    .unwrap();
    assert_eq!(t.len(), 5);
}

pub(super) fn hard(signal: Signal, value: ThresholdValue) -> Threshold {
    Threshold {
        signal,
        value,
        grace_period: Duration::ZERO,
        min_reclaim: None,
    }
}

pub(super) fn obs(available: u64, capacity: u64) -> Observation {
    Observation {
        available: i128::from(available),
        capacity: i128::from(capacity),
        time: 1,
    }
}

/// upstream TestThresholdsMet: with and without minimum reclaim.
#[test]
fn thresholds_met_with_minimum_reclaim() {
    let mut t = hard(Signal::MemoryAvailable, mi(500));
    t.min_reclaim = Some(mi(500));
    let observed = |avail: u64| Observations::from([(Signal::MemoryAvailable, obs(avail, 2 * GI))]);
    // Below the threshold: met.
    assert_eq!(
        thresholds_met(&[t.clone()], &observed(400 * MI), false).len(),
        1
    );
    // Above it: not met, unless the minimum reclaim is enforced.
    assert!(thresholds_met(&[t.clone()], &observed(600 * MI), false).is_empty());
    assert_eq!(
        thresholds_met(&[t.clone()], &observed(600 * MI), true).len(),
        1
    );
    assert!(thresholds_met(&[t.clone()], &observed(1200 * MI), true).is_empty());
    // No observation: not met.
    assert!(thresholds_met(&[t], &Observations::new(), false).is_empty());
    // A percentage against the capacity.
    let p = hard(Signal::NodeFsAvailable, ThresholdValue::Percentage(0.1));
    let fs = |a| Observations::from([(Signal::NodeFsAvailable, obs(a, 1000))]);
    assert_eq!(
        thresholds_met(std::slice::from_ref(&p), &fs(99), false).len(),
        1
    );
    assert!(thresholds_met(&[p], &fs(100), false).is_empty());
}

pub(super) fn summary(mem_available: u64, mem_ws: u64) -> Summary {
    let fs = |avail: u64, cap: u64, ifree: u64, inodes: u64| FsStats {
        time: Time(5),
        available_bytes: Some(avail),
        capacity_bytes: Some(cap),
        inodes_free: Some(ifree),
        inodes: Some(inodes),
        ..Default::default()
    };
    Summary {
        node: NodeStats {
            memory: Some(MemoryStats {
                time: Time(5),
                available_bytes: Some(mem_available),
                working_set_bytes: Some(mem_ws),
                ..Default::default()
            }),
            fs: Some(fs(10 * GI, 100 * GI, 900, 1000)),
            runtime: Some(RuntimeStats {
                image_fs: Some(fs(20 * GI, 50 * GI, 90, 100)),
                container_fs: None,
            }),
            rlimit: Some(RlimitStats {
                time: Time(5),
                max_pid: Some(1000),
                num_of_running_processes: Some(300),
            }),
            ..Default::default()
        },
        pods: Vec::new(),
    }
}

/// upstream TestMakeSignalObservations.
#[test]
fn signal_observations_from_the_summary() {
    let o = make_signal_observations(
        &summary(GI, 3 * GI),
        Some(PodsCgroupMemory {
            limit: 2 * GI,
            working_set: GI / 2,
            time: 7,
        }),
    );
    let got = |s| *o.get(&s).unwrap();
    assert_eq!(
        got(Signal::MemoryAvailable),
        Observation {
            available: GI.into(),
            capacity: (4 * GI).into(),
            time: 5
        }
    );
    assert_eq!(
        got(Signal::AllocatableMemoryAvailable),
        Observation {
            available: (3 * GI / 2).into(),
            capacity: (2 * GI).into(),
            time: 7
        }
    );
    assert_eq!(got(Signal::NodeFsAvailable).available, (10 * GI).into());
    assert_eq!(
        got(Signal::NodeFsInodesFree),
        Observation {
            available: 900,
            capacity: 1000,
            time: 5
        }
    );
    assert_eq!(got(Signal::ImageFsAvailable).capacity, (50 * GI).into());
    assert_eq!(got(Signal::ImageFsInodesFree).available, 90);
    assert_eq!(
        got(Signal::PidAvailable),
        Observation {
            available: 700,
            capacity: 1000,
            time: 5
        }
    );
    // Missing stats give no observation.
    let empty = make_signal_observations(&Summary::default(), None);
    assert!(empty.is_empty());
}

pub(super) struct PodBuilder(pub(super) Pod);

pub(super) fn pod(name: &str) -> PodBuilder {
    PodBuilder(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            annotations: Some(BTreeMap::from([(
                crate::types::CONFIG_SOURCE_ANNOTATION.to_string(),
                crate::types::API_SOURCE.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "app".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    })
}

impl PodBuilder {
    pub(super) fn spec(&mut self) -> &mut PodSpec {
        self.0.spec.as_mut().unwrap()
    }
    pub(super) fn resources(mut self, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Self {
        let q = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        self.spec().containers[0].resources = Some(ResourceRequirements {
            requests: q(requests),
            limits: q(limits),
            ..Default::default()
        });
        self
    }
    pub(super) fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }
    pub(super) fn arc(self) -> Arc<Pod> {
        Arc::new(self.0)
    }
}

pub(super) fn pod_stats(p: &Pod, mem_ws: u64) -> PodStats {
    PodStats {
        pod_ref: PodReference {
            name: p.metadata.name.clone().unwrap(),
            namespace: "default".into(),
            uid: p.metadata.uid.clone().unwrap(),
        },
        memory: Some(MemoryStats {
            working_set_bytes: Some(mem_ws),
            ..Default::default()
        }),
        containers: vec![ContainerStats {
            name: "app".into(),
            memory: Some(MemoryStats {
                working_set_bytes: Some(mem_ws),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub(super) fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
    pods.iter()
        .map(|p| p.metadata.name.as_deref().unwrap())
        .collect()
}

/// upstream TestOrderedByExceedsRequestMemory, TestOrderedByPriority and
/// TestOrderedbyMemory in one: exceeding requests, then priority, then
/// usage above requests.
#[test]
fn memory_ranking_is_upstreams() {
    let below = pod("below-requests")
        .resources(&[("memory", "200Mi")], &[])
        .arc();
    let exceeds = pod("exceeds-requests")
        .resources(&[("memory", "100Mi")], &[])
        .arc();
    let be_low = pod("besteffort-low").arc();
    let be_high = pod("besteffort-high").arc();
    let be_prio = pod("besteffort-priority").priority(1000).arc();
    let no_stats = pod("no-stats").priority(5000).arc();
    let s = Summary {
        pods: vec![
            pod_stats(&below, 150 * MI),
            pod_stats(&exceeds, 150 * MI),
            pod_stats(&be_low, 100 * MI),
            pod_stats(&be_high, 400 * MI),
            pod_stats(&be_prio, 800 * MI),
        ],
        ..Default::default()
    };
    let stats = StatsFunc::new(&s);
    let mut pods = vec![below, be_prio, exceeds, be_low, no_stats, be_high];
    rank_memory_pressure(&mut pods, &stats);
    assert_eq!(
        names(&pods),
        [
            "no-stats",
            "besteffort-high",
            "besteffort-low",
            "exceeds-requests",
            "besteffort-priority",
            "below-requests"
        ]
    );
}

/// upstream TestOrderedByPriorityProcess: priority, then most processes.
#[test]
fn pid_ranking_is_upstreams() {
    let few = pod("few").arc();
    let many = pod("many").arc();
    let important = pod("important").priority(100).arc();
    let with_procs = |p: &Pod, n| PodStats {
        process_stats: Some(ProcessStats {
            process_count: Some(n),
        }),
        ..pod_stats(p, 0)
    };
    let s = Summary {
        pods: vec![
            with_procs(&few, 3),
            with_procs(&many, 30),
            with_procs(&important, 300),
        ],
        ..Default::default()
    };
    let stats = StatsFunc::new(&s);
    let mut pods = vec![important, few, many];
    rank_pid_pressure(&mut pods, &stats);
    assert_eq!(names(&pods), ["many", "few", "important"]);
}

/// upstream TestOrderedByExceedsRequestDisk and TestOrderedbyDisk: usage
/// over the ephemeral-storage request first, then priority, then usage.
#[test]
fn disk_ranking_is_upstreams() {
    let within = pod("within")
        .resources(&[("ephemeral-storage", "1Gi")], &[])
        .arc();
    let over = pod("over")
        .resources(&[("ephemeral-storage", "10Mi")], &[])
        .arc();
    let small = pod("small").arc();
    let with_disk = |p: &Pod, root: u64, logs: u64| {
        let mut ps = pod_stats(p, 0);
        ps.containers[0].rootfs = Some(FsStats {
            used_bytes: Some(root),
            inodes_used: Some(root / MI),
            ..Default::default()
        });
        ps.containers[0].logs = Some(FsStats {
            used_bytes: Some(logs),
            ..Default::default()
        });
        ps
    };
    let s = Summary {
        pods: vec![
            with_disk(&within, 500 * MI, 10 * MI),
            with_disk(&over, 20 * MI, 0),
            with_disk(&small, MI, MI),
        ],
        ..Default::default()
    };
    let stats = StatsFunc::new(&s);
    let mut pods = vec![within.clone(), small.clone(), over.clone()];
    let all = fs_stats_for(Signal::NodeFsAvailable, false);
    rank_disk_pressure(
        &mut pods,
        &stats,
        &all,
        super::api::Resource::EphemeralStorage,
    );
    assert_eq!(names(&pods), ["over", "small", "within"]);
    // With a dedicated imagefs, nodefs counts only logs and volumes.
    let logs = fs_stats_for(Signal::NodeFsAvailable, true);
    assert_eq!(logs, [FsStatsType::Logs, FsStatsType::LocalVolumeSource]);
    assert_eq!(
        pod_disk_usage(
            &within,
            &s.pods[0],
            &logs,
            super::api::Resource::EphemeralStorage
        ),
        (10 * MI).into()
    );
    assert_eq!(
        fs_stats_for(Signal::ImageFsAvailable, true),
        [FsStatsType::Root]
    );
}

#[test]
fn critical_pods() {
    assert!(!is_critical_pod(&pod("plain").0));
    assert!(is_critical_pod(
        &pod("sys").priority(SYSTEM_CRITICAL_PRIORITY).0
    ));
    let mut static_pod = pod("static").0;
    static_pod.metadata.annotations = Some(BTreeMap::from([(
        crate::types::CONFIG_SOURCE_ANNOTATION.to_string(),
        crate::types::FILE_SOURCE.to_string(),
    )]));
    assert!(is_critical_pod(&static_pod));
}

/// upstream TestAdmit (memory and disk pressure).
#[test]
fn admission_under_pressure() {
    let best_effort = pod("be").0;
    let burstable = pod("bu").resources(&[("memory", "100Mi")], &[]).0;
    let critical = pod("crit").priority(SYSTEM_CRITICAL_PRIORITY).0;
    let mut tolerant = pod("tolerant").0;
    tolerant.spec.as_mut().unwrap().tolerations = Some(vec![Toleration {
        key: Some("node.kubernetes.io/memory-pressure".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    }]);
    let mem = [NodeCondition::MemoryPressure];
    assert!(admit(&best_effort, &[]).is_ok());
    let r = admit(&best_effort, &mem).unwrap_err();
    assert_eq!(r.reason, "Evicted");
    assert_eq!(r.message, "The node had condition: [MemoryPressure]. ");
    assert!(admit(&burstable, &mem).is_ok());
    assert!(admit(&critical, &mem).is_ok());
    assert!(admit(&tolerant, &mem).is_ok());
    let disk = [NodeCondition::DiskPressure];
    assert!(admit(&burstable, &disk).is_err());
    assert!(admit(&tolerant, &disk).is_err());
    assert!(admit(&critical, &disk).is_ok());
    let both = [NodeCondition::MemoryPressure, NodeCondition::DiskPressure];
    assert_eq!(
        admit(&burstable, &both).unwrap_err().message,
        "The node had condition: [MemoryPressure DiskPressure]. "
    );
}

/// upstream buildSignalToNodeReclaimFuncs.
#[test]
fn node_reclaim_by_signal() {
    use super::manager::node_reclaim_funcs;
    assert_eq!(
        node_reclaim_funcs(Signal::NodeFsAvailable, false),
        (true, true)
    );
    assert_eq!(
        node_reclaim_funcs(Signal::NodeFsAvailable, true),
        (false, false)
    );
    assert_eq!(
        node_reclaim_funcs(Signal::ImageFsInodesFree, true),
        (true, true)
    );
    assert_eq!(
        node_reclaim_funcs(Signal::MemoryAvailable, false),
        (false, false)
    );
    assert_eq!(
        node_reclaim_funcs(Signal::PidAvailable, false),
        (false, false)
    );
}

#[test]
fn memory_signals_sort_first() {
    let mut t = vec![
        hard(Signal::NodeFsAvailable, mi(1)),
        hard(Signal::PidAvailable, mi(1)),
        hard(Signal::AllocatableMemoryAvailable, mi(1)),
        hard(Signal::MemoryAvailable, mi(1)),
    ];
    sort_by_eviction_priority(&mut t);
    let order: Vec<Signal> = t.iter().map(|t| t.signal).collect();
    assert_eq!(
        order,
        [
            Signal::AllocatableMemoryAvailable,
            Signal::MemoryAvailable,
            Signal::NodeFsAvailable,
            Signal::PidAvailable
        ]
    );
}

#[test]
fn grace_and_transition_helpers() {
    let t0 = Instant::now();
    let soft = Threshold {
        grace_period: Duration::from_secs(30),
        ..hard(Signal::MemoryAvailable, mi(1))
    };
    let first = thresholds_first_observed_at(std::slice::from_ref(&soft), &Vec::new(), t0);
    assert!(thresholds_met_grace_period(&first, t0 + Duration::from_secs(29)).is_empty());
    // Carried over: the first observation time is kept.
    let again = thresholds_first_observed_at(&[soft], &first, t0 + Duration::from_secs(20));
    assert_eq!(again[0].1, t0);
    assert_eq!(
        thresholds_met_grace_period(&again, t0 + Duration::from_secs(30)).len(),
        1
    );
    let seen =
        node_conditions_last_observed_at(&[NodeCondition::DiskPressure], &Default::default(), t0);
    let period = Duration::from_secs(60);
    assert_eq!(
        node_conditions_observed_since(&seen, period, t0 + Duration::from_secs(59)),
        [NodeCondition::DiskPressure]
    );
    assert!(node_conditions_observed_since(&seen, period, t0 + period).is_empty());
}
