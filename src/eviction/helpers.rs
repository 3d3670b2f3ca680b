//! Signal observations and the threshold bookkeeping of a synchronize
//! round (upstream `pkg/kubelet/eviction/helpers.go`): which thresholds
//! are met, since when, which have waited out their grace period, and
//! which node conditions hold through the transition period. All pure;
//! the caller passes `now`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::api::{NodeCondition, Signal, Threshold};
use crate::server::stats::types::{FsStats, Summary};

/// What was observed for one signal (upstream signalObservation), in
/// whole units (bytes, inodes, pids).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observation {
    pub available: i128,
    pub capacity: i128,
    /// The sample's time in ns since the epoch; 0 when unknown.
    pub time: i64,
}

pub type Observations = BTreeMap<Signal, Observation>;

/// The kubepods cgroup's memory, for allocatableMemory.available
/// (upstream reads it as the `pods` system container of the summary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodsCgroupMemory {
    /// The cgroup's memory limit.
    pub limit: u64,
    /// usage − inactive_file.
    pub working_set: u64,
    pub time: i64,
}

fn i(v: u64) -> i128 {
    i128::from(v)
}

/// upstream makeSignalObservations: memory from the node's memory stats
/// (available, and capacity = available + working set), allocatable
/// memory from the kubepods cgroup, nodefs from the node's fs, imagefs
/// from the runtime's, pids from the rlimit stats.
pub fn make_signal_observations(
    summary: &Summary,
    pods_cgroup: Option<PodsCgroupMemory>,
) -> Observations {
    let mut out = Observations::new();
    let node = &summary.node;
    if let Some(m) = &node.memory {
        if let (Some(avail), Some(ws)) = (m.available_bytes, m.working_set_bytes) {
            out.insert(
                Signal::MemoryAvailable,
                Observation {
                    available: i(avail),
                    capacity: i(avail) + i(ws),
                    time: m.time.0,
                },
            );
        }
    }
    if let Some(p) = pods_cgroup {
        out.insert(
            Signal::AllocatableMemoryAvailable,
            Observation {
                available: i(p.limit.saturating_sub(p.working_set)),
                capacity: i(p.limit),
                time: p.time,
            },
        );
    }
    if let Some(fs) = &node.fs {
        fs_observations(
            &mut out,
            fs,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        );
    }
    if let Some(fs) = node.runtime.as_ref().and_then(|r| r.image_fs.as_ref()) {
        fs_observations(
            &mut out,
            fs,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        );
    }
    if let Some(r) = &node.rlimit {
        if let (Some(max), Some(running)) = (r.max_pid, r.num_of_running_processes) {
            out.insert(
                Signal::PidAvailable,
                Observation {
                    available: i128::from(max) - i128::from(running),
                    capacity: i128::from(max),
                    time: r.time.0,
                },
            );
        }
    }
    out
}

fn fs_observations(out: &mut Observations, fs: &FsStats, bytes: Signal, inodes: Signal) {
    if let (Some(avail), Some(cap)) = (fs.available_bytes, fs.capacity_bytes) {
        out.insert(
            bytes,
            Observation {
                available: i(avail),
                capacity: i(cap),
                time: fs.time.0,
            },
        );
    }
    if let (Some(free), Some(total)) = (fs.inodes_free, fs.inodes) {
        out.insert(
            inodes,
            Observation {
                available: i(free),
                capacity: i(total),
                time: fs.time.0,
            },
        );
    }
}

/// upstream thresholdsMet: the thresholds whose signal is below them;
/// with `enforce_min_reclaim`, below them plus their minimum reclaim (a
/// threshold stays met until that much more is free).
pub fn thresholds_met(
    thresholds: &[Threshold],
    observations: &Observations,
    enforce_min_reclaim: bool,
) -> Vec<Threshold> {
    thresholds
        .iter()
        .filter(|t| {
            let Some(obs) = observations.get(&t.signal) else {
                log::debug!("eviction manager: no observation for signal {}", t.signal);
                return false;
            };
            let mut quantity = t.value.value(obs.capacity);
            if enforce_min_reclaim {
                if let Some(min) = &t.min_reclaim {
                    quantity += min.value(obs.capacity);
                }
            }
            quantity > obs.available
        })
        .cloned()
        .collect()
}

/// upstream mergeThresholds: `b`'s thresholds not already in `a`.
pub fn merge_thresholds(mut a: Vec<Threshold>, b: Vec<Threshold>) -> Vec<Threshold> {
    for t in b {
        if !has_threshold(&a, &t) {
            a.push(t);
        }
    }
    a
}

/// upstream hasThreshold: same signal, grace period and value.
fn has_threshold(list: &[Threshold], t: &Threshold) -> bool {
    list.iter()
        .any(|x| x.signal == t.signal && x.grace_period == t.grace_period && x.value == t.value)
}

/// When each threshold was first met, carried over from the last round.
pub type ThresholdsObservedAt = Vec<(Threshold, Instant)>;

/// upstream thresholdsFirstObservedAt.
pub fn thresholds_first_observed_at(
    thresholds: &[Threshold],
    last: &ThresholdsObservedAt,
    now: Instant,
) -> ThresholdsObservedAt {
    thresholds
        .iter()
        .map(|t| {
            let at = last.iter().find(|(x, _)| x == t).map_or(now, |(_, at)| *at);
            (t.clone(), at)
        })
        .collect()
}

/// upstream thresholdsMetGracePeriod: the thresholds met for at least
/// their grace period (hard ones at once).
pub fn thresholds_met_grace_period(
    observed: &ThresholdsObservedAt,
    now: Instant,
) -> Vec<Threshold> {
    observed
        .iter()
        .filter(|(t, at)| {
            let waited = now.saturating_duration_since(*at);
            if waited < t.grace_period {
                log::info!(
                    "eviction manager: eviction criteria not yet met for {t}, duration {waited:?}"
                );
                return false;
            }
            true
        })
        .map(|(t, _)| t.clone())
        .collect()
}

/// upstream nodeConditions: the conditions the thresholds map to, once each.
pub fn node_conditions(thresholds: &[Threshold]) -> Vec<NodeCondition> {
    let mut out: Vec<NodeCondition> = Vec::new();
    for t in thresholds {
        let c = t.signal.node_condition();
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

pub type ConditionsObservedAt = BTreeMap<NodeCondition, Instant>;

/// upstream nodeConditionsLastObservedAt: `conditions` were observed now,
/// the others keep their last time.
pub fn node_conditions_last_observed_at(
    conditions: &[NodeCondition],
    last: &ConditionsObservedAt,
    now: Instant,
) -> ConditionsObservedAt {
    let mut out = last.clone();
    for c in conditions {
        out.insert(*c, now);
    }
    out
}

/// upstream nodeConditionsObservedSince: conditions seen within `period`
/// (evictionPressureTransitionPeriod), so a condition does not flap.
pub fn node_conditions_observed_since(
    observed: &ConditionsObservedAt,
    period: Duration,
    now: Instant,
) -> Vec<NodeCondition> {
    observed
        .iter()
        .filter(|(_, at)| now.saturating_duration_since(**at) < period)
        .map(|(c, _)| *c)
        .collect()
}

/// upstream thresholdsUpdatedStats: thresholds whose signal has a newer
/// sample than last round (acting twice on one sample would evict twice
/// for one shortage).
pub fn thresholds_updated_stats(
    thresholds: Vec<Threshold>,
    observations: &Observations,
    last: &Observations,
) -> Vec<Threshold> {
    thresholds
        .into_iter()
        .filter(|t| {
            let Some(obs) = observations.get(&t.signal) else {
                return false;
            };
            match last.get(&t.signal) {
                None => true,
                Some(prev) => obs.time == 0 || obs.time > prev.time,
            }
        })
        .collect()
}

/// upstream byEvictionPriority: memory signals first, signals without a
/// resource to reclaim last (every signal here has one). Stable.
pub fn sort_by_eviction_priority(thresholds: &mut [Threshold]) {
    thresholds.sort_by_key(|t| !t.signal.is_memory());
}

/// Bytes (or inodes, pids) as upstream prints a quantity: `"100Mi"`,
/// `"1536Ki"`, `"12345"`.
pub fn format_quantity(v: i128, binary: bool) -> String {
    if !binary {
        return v.to_string();
    }
    crate::nodestatus::machine::quantity::binary_si(v * 1000)
}
