//! The eviction manager (upstream `pkg/kubelet/eviction`): every 10 s it
//! observes the node's signals (memory.available, allocatableMemory.available,
//! nodefs/imagefs available and inodesFree, pid.available), decides which
//! hard and soft thresholds are met, reports MemoryPressure, DiskPressure
//! and PIDPressure, reclaims node-level resources (dead containers, unused
//! images) for disk signals, and failing that evicts one pod, ranked as
//! upstream ranks them. Pods are also evicted for exceeding an emptyDir
//! `sizeLimit` or a container's `ephemeral-storage` limit.
//!
//! The manager holds configuration and state only; what it reads and acts
//! on comes through [`EvictionDeps`] (upstream's summary provider, pod
//! function, killPodFunc, image and container GC), so its logic runs in
//! unit tests against fakes. `helpers` and `rank` are pure functions.

pub mod api;
pub mod helpers;
mod local_storage;
mod manager;
pub mod message;
pub mod rank;

#[cfg(test)]
mod manager_tests;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, select, Receiver};
use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

pub use api::{NodeCondition, Signal, Threshold, ThresholdConfig, ThresholdError, ThresholdValue};
pub use helpers::PodsCgroupMemory;
pub use message::REASON;

use crate::kuberuntime::qos::{qos_class, QosClass};
use crate::lifecycle::admission::Rejection;
use crate::server::stats::types::Summary;

/// upstream evictionMonitoringPeriod.
pub const MONITORING_PERIOD: Duration = Duration::from_secs(10);
/// upstream podCleanupTimeout / podCleanupPollFreq: how long, and how
/// often, the manager waits for an evicted pod's resources to be freed
/// before it looks again.
pub const POD_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
pub const POD_CLEANUP_POLL: Duration = Duration::from_secs(1);
/// upstream immediateEvictionGracePeriodSeconds: the grace of a pod
/// evicted for a hard threshold.
pub const IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS: i64 = 1;

/// The eviction settings of the KubeletConfiguration (upstream eviction Config).
#[derive(Clone, Debug)]
pub struct Config {
    pub thresholds: Vec<Threshold>,
    /// evictionMaxPodGracePeriod: the most a soft eviction grants.
    pub max_pod_grace_period_seconds: i64,
    /// evictionPressureTransitionPeriod.
    pub pressure_transition_period: Duration,
    /// localStorageCapacityIsolation: emptyDir sizeLimit and
    /// ephemeral-storage limits are enforced.
    pub local_storage_capacity_isolation: bool,
}

impl Config {
    pub fn from_kubelet_config(
        c: &crate::kubeletconfig::KubeletConfiguration,
    ) -> Result<Config, ThresholdError> {
        let thresholds = api::parse_threshold_config(&ThresholdConfig {
            enforce_node_allocatable: &c.enforce_node_allocatable,
            hard: &c.eviction_hard,
            soft: &c.eviction_soft,
            soft_grace_period: &c.eviction_soft_grace_period,
            minimum_reclaim: &c.eviction_minimum_reclaim,
        })?;
        Ok(Config {
            thresholds,
            max_pod_grace_period_seconds: i64::from(c.eviction_max_pod_grace_period),
            pressure_transition_period: c.eviction_pressure_transition_period.std(),
            local_storage_capacity_isolation: c.local_storage_capacity_isolation,
        })
    }

    /// Whether any threshold watches the kubepods cgroup.
    pub fn watches_allocatable_memory(&self) -> bool {
        self.thresholds
            .iter()
            .any(|t| t.signal == Signal::AllocatableMemoryAvailable)
    }
}

/// What the manager reads and acts on (upstream's injected summary
/// provider, podFunc, killPodFunc, podCleanedUpFunc, image and container
/// GC, recorder). The manager only logs their errors.
pub trait EvictionDeps: Send + Sync {
    /// The stats summary (upstream summaryProvider.Get): `with_pods`, the
    /// whole of it; without, only the node's figures the signals read.
    fn summary(&self, with_pods: bool) -> Result<Summary, DepsError>;
    /// The kubepods cgroup's memory, when allocatable memory is watched.
    fn pods_cgroup_memory(&self) -> Option<PodsCgroupMemory>;
    /// Admitted pods not yet finished (upstream GetActivePods).
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Fails the pod (phase Failed, reason Evicted, `message`) and stops it
    /// with `grace_seconds`, without waiting for the stop (upstream
    /// killPodFunc with its status function).
    fn kill_pod(&self, pod: &Arc<Pod>, grace_seconds: i64, message: &str) -> Result<(), DepsError>;
    /// A Warning event `Evicted` on the pod.
    fn record_eviction(&self, pod: &Pod, message: &str);
    /// Whether the pod's containers are stopped (upstream podCleanedUpFunc).
    fn pod_cleaned_up(&self, pod: &Pod) -> bool;
    /// Whether images live on a filesystem of their own.
    fn has_dedicated_image_fs(&self) -> Result<bool, DepsError>;
    /// upstream ImageGC.DeleteUnusedImages.
    fn delete_unused_images(&self) -> Result<(), DepsError>;
    /// upstream ContainerGC.DeleteAllUnusedContainers.
    fn delete_all_unused_containers(&self) -> Result<(), DepsError>;
    /// Bytes used under a pod's emptyDir volume, None when unknown.
    fn empty_dir_usage(&self, pod: &Pod, volume: &str) -> Option<u64>;
}

/// Why one of [`EvictionDeps`] failed, with what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum DepsError {
    #[error(transparent)]
    Runtime(#[from] crate::cri::CriError),
    #[error("image filesystem info: {0}")]
    ImageFsInfo(crate::cri::CriError),
    #[error("the runtime reported no image filesystem")]
    NoImageFs,
    #[error("stat {}: {error}", .path.display())]
    Stat {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    ImageGc(#[from] crate::images::gc::ImageGcError),
    #[error("container garbage collection: {0}")]
    ContainerGc(crate::cri::CriError),
}

/// What a round left behind for the next one and for node status.
#[derive(Default)]
struct State {
    /// The conditions reported (upstream nodeConditions).
    node_conditions: Vec<NodeCondition>,
    thresholds_first_observed_at: helpers::ThresholdsObservedAt,
    node_conditions_last_observed_at: helpers::ConditionsObservedAt,
    /// Thresholds acted on last round, held until their minimum reclaim.
    thresholds_met: Vec<Threshold>,
    last_observations: Option<helpers::Observations>,
    /// Cached once known (upstream dedicatedImageFs).
    dedicated_image_fs: Option<bool>,
}

/// The eviction manager: configuration and the state of the last round.
pub struct Manager {
    config: Config,
    state: Mutex<State>,
}

impl Manager {
    pub fn new(config: Config) -> Arc<Manager> {
        Arc::new(Manager {
            config,
            state: Mutex::default(),
        })
    }

    fn has_condition(&self, c: NodeCondition) -> bool {
        lock(&self.state).node_conditions.contains(&c)
    }

    /// upstream IsUnderMemoryPressure.
    pub fn is_under_memory_pressure(&self) -> bool {
        self.has_condition(NodeCondition::MemoryPressure)
    }

    /// upstream IsUnderDiskPressure.
    pub fn is_under_disk_pressure(&self) -> bool {
        self.has_condition(NodeCondition::DiskPressure)
    }

    /// upstream IsUnderPIDPressure.
    pub fn is_under_pid_pressure(&self) -> bool {
        self.has_condition(NodeCondition::PidPressure)
    }

    /// upstream Admit: under pressure only critical pods are admitted;
    /// under memory pressure alone, also pods that are not BestEffort or
    /// that tolerate the memory-pressure taint.
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let conditions = lock(&self.state).node_conditions.clone();
        admit(pod, &conditions)
    }

    /// Runs the manager on its own thread until `shutdown` closes
    /// (upstream Start): a round every [`MONITORING_PERIOD`]; after an
    /// eviction, the next round comes once the pod is cleaned up (at most
    /// [`POD_CLEANUP_TIMEOUT`]).
    pub fn start(
        self: &Arc<Self>,
        deps: Arc<dyn EvictionDeps>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<crate::util::worker::Worker> {
        let this = Arc::clone(self);
        crate::util::worker::spawn_supervised(
            "eviction-manager",
            crate::util::worker::ShutdownStage::Workers,
            shutdown,
            move |stop| this.run(deps.as_ref(), stop),
        )
    }

    fn run(&self, deps: &dyn EvictionDeps, shutdown: &Receiver<()>) {
        log::info!(
            "eviction manager: starting control loop with {} thresholds",
            self.config.thresholds.len()
        );
        loop {
            let evicted = self.synchronize(deps, Instant::now());
            let next = match evicted {
                Some(pod) => self.wait_for_pod_cleanup(deps, &pod, shutdown),
                None => select! {
                    recv(shutdown) -> _ => false,
                    default(MONITORING_PERIOD) => true,
                },
            };
            if !next {
                return;
            }
        }
    }

    /// upstream waitForPodsCleanup: polls until the pod is cleaned up or
    /// the timeout passes. False when shutdown came.
    fn wait_for_pod_cleanup(
        &self,
        deps: &dyn EvictionDeps,
        pod: &Pod,
        shutdown: &Receiver<()>,
    ) -> bool {
        let timeout = after(POD_CLEANUP_TIMEOUT);
        loop {
            select! {
                recv(shutdown) -> _ => return false,
                recv(timeout) -> _ => {
                    log::warn!(
                        "eviction manager: timed out waiting for pod {} to be cleaned up",
                        crate::podutil::PodExt::full_name(pod)
                    );
                    return true;
                },
                default(POD_CLEANUP_POLL) => {
                    if deps.pod_cleaned_up(pod) {
                        log::info!(
                            "eviction manager: pod {} is successfully cleaned up",
                            crate::podutil::PodExt::full_name(pod)
                        );
                        return true;
                    }
                },
            }
        }
    }
}

/// upstream's taint for memory pressure, which a BestEffort pod may tolerate.
const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";

fn tolerates_memory_pressure(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let effect_ok = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            let op = t.operator.as_deref().unwrap_or("Equal");
            let key_ok = match t.key.as_deref() {
                None | Some("") => op == "Exists",
                Some(k) => k == TAINT_MEMORY_PRESSURE,
            };
            let value_ok = op == "Exists" || t.value.as_deref().unwrap_or("").is_empty();
            effect_ok && key_ok && value_ok
        })
}

/// The admission rule on its own (upstream managerImpl.Admit).
pub fn admit(pod: &Pod, conditions: &[NodeCondition]) -> Result<(), Rejection> {
    if conditions.is_empty() || rank::is_critical_pod(pod) {
        return Ok(());
    }
    let only_memory = conditions == [NodeCondition::MemoryPressure];
    if only_memory && (qos_class(pod) != QosClass::BestEffort || tolerates_memory_pressure(pod)) {
        return Ok(());
    }
    let names: Vec<&str> = conditions.iter().map(|c| c.as_str()).collect();
    log::info!(
        "failed to admit pod {} to node: node conditions {names:?}",
        crate::podutil::PodExt::full_name(pod)
    );
    Err(Rejection {
        reason: REASON.to_string(),
        message: message::node_condition_message(&names),
    })
}
