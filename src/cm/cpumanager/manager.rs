//! The CPU manager itself (upstream `cpu_manager.go`): the policy and its
//! state behind one lock, its hints and allocations for the topology
//! manager's admission, the CPU set a container is created with (GetCPUs),
//! and the reconcile loop that moves running containers when the shared
//! pool changes.
//!
//! With the `none` policy it holds nothing: containers get no CPU set and
//! no thread runs. With `static`, the `cpu-manager` thread runs the
//! reconcile pass every `cpuManagerReconcilePeriod`, and at once when
//! housekeeping frees the CPUs of a pod that is gone.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::{Container, Pod};

use super::policy_static::{self, AllocateError, PolicyError, StaticPolicy, StaticPolicyOptions};
use super::state::{CpuManagerState, StateError};
use super::topology::{CpuTopology, TopologyError};
use crate::cm::cpuset::CpuSet;
use crate::cm::topologymanager::{HintProvider, ResourceHints, TopologyHint};
use crate::kubeletconfig::KubeletConfiguration;
use crate::lifecycle::admission::{unexpected_admission_error, Rejection};
use crate::util::worker::{self, ShutdownStage, Worker};

const SMT_ALIGNMENT_ERROR: &str = "SMTAlignmentError";
const FULL_PCPUS_ONLY: &str = "full-pcpus-only";
const DISTRIBUTE_CPUS_ACROSS_NUMA: &str = "distribute-cpus-across-numa";
const ALIGN_BY_SOCKET: &str = "align-by-socket";

/// Why the CPU manager cannot start; the kubelet stops with it.
#[derive(Debug, thiserror::Error)]
pub enum CpuManagerError {
    #[error("cpuManagerPolicy: unknown policy: {0:?}")]
    UnknownPolicy(String),
    #[error("cpuManagerPolicyOptions: unknown CPU Manager Policy option: {0:?}")]
    UnknownOption(String),
    #[error("cpuManagerPolicyOptions: bad value for option {name:?}: {value:?} is not a boolean")]
    BadOption { name: String, value: String },
    #[error(
        "cpuManagerPolicyOptions: Topology manager single-numa-node policy is incompatible \
         with CPUManager align-by-socket policy option"
    )]
    AlignBySocketSingleNuma,
    #[error("cpuManagerPolicy static: reading the machine's CPUs: {0}")]
    Topology(#[from] TopologyError),
    #[error("new static policy error: {0}")]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("starting the cpu-manager thread: {0}")]
    Thread(std::io::Error),
}

/// A running container of an active pod, as housekeeping saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningContainer {
    pub pod_uid: String,
    pub name: String,
    pub id: String,
}

/// Changes a running container's CPU set (CRI UpdateContainerResources).
pub trait UpdateCpuset: Send + Sync {
    fn update_cpuset(&self, container_id: &str, cpus: &CpuSet) -> Result<(), String>;
}

impl UpdateCpuset for crate::cri::RemoteRuntime {
    fn update_cpuset(&self, container_id: &str, cpus: &CpuSet) -> Result<(), String> {
        let resources = crate::cri::api::LinuxContainerResources {
            cpuset_cpus: cpus.to_string(),
            ..Default::default()
        };
        self.update_container_resources(container_id, resources)
            .map_err(|e| e.to_string())
    }
}

/// The CPU manager; clones share it. `none` when built by `Default`.
#[derive(Clone, Default)]
pub struct CpuManager {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    root_dir: PathBuf,
    reconcile_period: Duration,
    core: Mutex<Core>,
    /// Wakes the reconcile loop before its period (bounded(1): kicks
    /// coalesce, and a kick never blocks).
    kick: (Sender<()>, Receiver<()>),
}

struct Core {
    policy: StaticPolicy,
    state: CpuManagerState,
    /// What each running container was last given (upstream
    /// lastUpdateState), by pod UID and container name.
    last_update: HashMap<(String, String), CpuSet>,
    /// The running containers of active pods, from the last housekeeping.
    running: Vec<RunningContainer>,
}

impl CpuManager {
    /// Upstream NewManager and Start: the policy from the configuration,
    /// its state restored from `<root-dir>/cpu_manager_state` (written
    /// when new) and checked against this machine. `reservedSystemCPUs`
    /// was validated and checked against the machine before.
    pub fn start(
        config: &KubeletConfiguration,
        root_dir: &Path,
        sysfs: &Path,
    ) -> Result<CpuManager, CpuManagerError> {
        match config.cpu_manager_policy.as_str() {
            "" | "none" => {
                for name in config.cpu_manager_policy_options.keys() {
                    log::warn!("cpuManagerPolicyOptions: {name:?} ignored by the none policy");
                }
                CpuManagerState::restore(root_dir, "none")?;
                Ok(CpuManager::default())
            }
            policy_static::POLICY_NAME => {
                let policy = new_static_policy(config, sysfs)?;
                let mut state = CpuManagerState::restore(root_dir, policy_static::POLICY_NAME)?;
                policy.start(&mut state)?;
                state.store(root_dir)?;
                log::info!(
                    "cpu manager: static policy, reserved CPUs {}, shared pool {}, {} exclusive assignments",
                    policy.reserved(),
                    state.default_cpu_set,
                    state.assignments.len()
                );
                Ok(CpuManager {
                    inner: Some(Arc::new(Inner {
                        root_dir: root_dir.to_path_buf(),
                        reconcile_period: config.cpu_manager_reconcile_period.0,
                        core: Mutex::new(Core {
                            policy,
                            state,
                            last_update: HashMap::new(),
                            running: Vec::new(),
                        }),
                        kick: crossbeam_channel::bounded(1),
                    })),
                })
            }
            other => Err(CpuManagerError::UnknownPolicy(other.to_string())),
        }
    }

    /// Starts the `cpu-manager` thread (static policy only).
    pub fn start_reconciler(
        &self,
        runtime: Arc<dyn UpdateCpuset>,
        shutdown: Receiver<()>,
    ) -> Result<Option<Worker>, CpuManagerError> {
        let Some(inner) = self.inner.clone() else {
            return Ok(None);
        };
        worker::spawn("cpu-manager", ShutdownStage::Workers, move || {
            let ticker = crossbeam_channel::tick(inner.reconcile_period);
            loop {
                crossbeam_channel::select! {
                    recv(ticker) -> _ => {},
                    recv(inner.kick.1) -> _ => {},
                    recv(shutdown) -> _ => break,
                }
                inner.reconcile(runtime.as_ref());
            }
        })
        .map(Some)
        .map_err(CpuManagerError::Thread)
    }

    /// The CPU set a container is created with (upstream GetCPUs in
    /// PreCreateContainer): its exclusive CPUs, else the shared pool;
    /// None with the `none` policy. Remembered as what the container was
    /// given, so the reconcile loop leaves it until the pool changes.
    pub fn container_cpuset(&self, pod_uid: &str, container: &str) -> Option<CpuSet> {
        let inner = self.inner.as_ref()?;
        let mut core = inner.lock();
        let cpus = core.state.cpuset_or_default(pod_uid, container).clone();
        if cpus.is_empty() {
            return None;
        }
        let key = (pod_uid.to_string(), container.to_string());
        core.last_update.insert(key, cpus.clone());
        Some(cpus)
    }

    /// Housekeeping's round: the running containers of `active` pods,
    /// kept for the reconcile loop.
    pub fn set_running(&self, active: &HashSet<String>, running: Vec<RunningContainer>) {
        if let Some(inner) = &self.inner {
            let running = running.into_iter().filter(|c| active.contains(&c.pod_uid));
            inner.lock().running = running.collect();
        }
    }

    /// upstream removeStaleState: once the pod sources are ready, the
    /// CPUs of pods not in `active` go back to the shared pool, and the
    /// reconcile loop is woken. Also run at admission, as upstream's
    /// Allocate runs it, so a pod that just finished makes room at once.
    pub fn remove_stale_state(&self, active: &HashSet<String>, sources_ready: bool) {
        let (Some(inner), true) = (&self.inner, sources_ready) else {
            return;
        };
        let mut core = inner.lock();
        let Core { policy, state, .. } = &mut *core;
        let mut stale: Vec<String> = state
            .assignments
            .iter()
            .filter(|a| !active.contains(&a.pod_uid))
            .map(|a| a.pod_uid.clone())
            .collect();
        stale.dedup();
        if stale.is_empty() {
            return;
        }
        for uid in &stale {
            log::info!(
                "cpu manager: pod {uid} is no longer active; its CPUs go back to the shared pool"
            );
            release_pod(policy, state, uid);
        }
        inner.store(state);
        let _ = inner.kick.0.try_send(());
    }

    /// The exclusive CPUs of a container (the pod resources API).
    pub fn exclusive_cpus(&self, pod_uid: &str, container: &str) -> Vec<i64> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        let cpus = core.state.cpuset(pod_uid, container);
        cpus.into_iter()
            .flat_map(|s| s.iter())
            .map(i64::from)
            .collect()
    }

    /// The CPUs that can be given exclusively: every CPU but the
    /// reserved ones (upstream GetAllocatableCPUs, as 1.23 defines it).
    pub fn allocatable_cpus(&self) -> Vec<i64> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        let all = core.policy.topology().cpus();
        let cpus = all.difference(core.policy.reserved());
        cpus.iter().map(i64::from).collect()
    }

    pub fn is_static(&self) -> bool {
        self.inner.is_some()
    }
}

/// The CPU manager as the topology manager sees it: its hints, and its
/// part of admission (upstream Allocate, for each init, then each app
/// container). A refused pod's CPUs are released by the topology manager.
impl HintProvider for CpuManager {
    fn topology_hints(&self, pod: &Pod, container: &Container) -> ResourceHints {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        core.policy.topology_hints(&core.state, pod, container)
    }

    fn pod_topology_hints(&self, pod: &Pod) -> ResourceHints {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        core.policy.pod_topology_hints(&core.state, pod)
    }

    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        hint: TopologyHint,
    ) -> Result<(), Rejection> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let mut core = inner.lock();
        let Core { policy, state, .. } = &mut *core;
        let before = state.assignments.len();
        policy
            .allocate(state, pod, container, hint.affinity)
            .map_err(|e| rejection(&e))?;
        if state.assignments.len() != before {
            inner.store(state);
        }
        Ok(())
    }

    /// Gives back the CPUs of a pod that admission refused after all.
    fn release(&self, pod_uid: &str) {
        let Some(inner) = &self.inner else {
            return;
        };
        let mut core = inner.lock();
        let Core { policy, state, .. } = &mut *core;
        if release_pod(policy, state, pod_uid) {
            inner.store(state);
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A failed write is logged: the state in memory stays right, and the
    /// next change writes the file whole again.
    fn store(&self, state: &CpuManagerState) {
        if let Err(e) = state.store(&self.root_dir) {
            log::error!("cpu manager: {e}");
        }
    }

    /// Upstream reconcileState: every running container of an active pod
    /// is put on its exclusive CPUs or the shared pool, unless it already
    /// is. The RPCs run outside the lock; one that fails is tried again
    /// next round.
    fn reconcile(&self, runtime: &dyn UpdateCpuset) {
        let work: Vec<(RunningContainer, CpuSet)> = {
            let mut core = self.lock();
            let running: HashSet<(String, String)> = core
                .running
                .iter()
                .map(|c| (c.pod_uid.clone(), c.name.clone()))
                .collect();
            core.last_update.retain(|k, _| running.contains(k));
            core.running
                .iter()
                .filter_map(|c| {
                    let cpus = core.state.cpuset_or_default(&c.pod_uid, &c.name);
                    let key = (c.pod_uid.clone(), c.name.clone());
                    let done = cpus.is_empty() || core.last_update.get(&key) == Some(cpus);
                    (!done).then(|| (c.clone(), cpus.clone()))
                })
                .collect()
        };
        for (c, cpus) in work {
            match runtime.update_cpuset(&c.id, &cpus) {
                Ok(()) => {
                    log::info!(
                        "cpu manager: pod {} container {:?} now on CPUs {cpus}",
                        c.pod_uid,
                        c.name
                    );
                    self.lock().last_update.insert((c.pod_uid, c.name), cpus);
                }
                Err(e) => log::warn!(
                    "cpu manager: moving pod {} container {:?} to CPUs {cpus}: {e}",
                    c.pod_uid,
                    c.name
                ),
            }
        }
    }
}

/// Removes every assignment of a pod; true when there was one.
fn release_pod(policy: &StaticPolicy, state: &mut CpuManagerState, pod_uid: &str) -> bool {
    let names: Vec<String> = state
        .assignments
        .iter()
        .filter(|a| a.pod_uid == pod_uid)
        .map(|a| a.container.clone())
        .collect();
    for name in &names {
        policy.remove_container(state, pod_uid, name);
    }
    !names.is_empty()
}

/// Upstream GetPodAdmitResult: an SMT alignment error is its own reason,
/// anything else is unexpected.
fn rejection(e: &AllocateError) -> Rejection {
    match e {
        AllocateError::SmtAlignment { .. } => Rejection {
            reason: SMT_ALIGNMENT_ERROR.into(),
            message: e.to_string(),
        },
        AllocateError::NotEnough(_) => unexpected_admission_error(e),
    }
}

fn new_static_policy(
    config: &KubeletConfiguration,
    sysfs: &Path,
) -> Result<StaticPolicy, CpuManagerError> {
    let options = static_options(config)?;
    let topology = CpuTopology::discover(sysfs)?;
    let quantity = |m: &std::collections::BTreeMap<String, String>| {
        m.get("cpu")
            .and_then(|q| crate::util::quantity::parse_quantity(q).ok())
            .unwrap_or(0)
    };
    let reserved_milli = quantity(&config.system_reserved) + quantity(&config.kube_reserved);
    let list = CpuSet::parse(&config.reserved_system_cpus).unwrap_or_default();
    Ok(StaticPolicy::new(topology, &list, reserved_milli, options)?)
}

/// The static policy's options, each a boolean as Go's ParseBool reads
/// it. Upstream puts them behind the CPUManagerPolicy*Options feature
/// gates; rkubelet asks for none.
fn static_options(config: &KubeletConfiguration) -> Result<StaticPolicyOptions, CpuManagerError> {
    let mut options = StaticPolicyOptions::default();
    for (name, value) in &config.cpu_manager_policy_options {
        let field = match name.as_str() {
            FULL_PCPUS_ONLY => &mut options.full_pcpus_only,
            DISTRIBUTE_CPUS_ACROSS_NUMA => &mut options.distribute_cpus_across_numa,
            ALIGN_BY_SOCKET => &mut options.align_by_socket,
            _ => return Err(CpuManagerError::UnknownOption(name.clone())),
        };
        *field =
            crate::kubeletconfig::parse_go_bool(value).map_err(|_| CpuManagerError::BadOption {
                name: name.clone(),
                value: value.clone(),
            })?;
    }
    if options.align_by_socket && config.topology_manager_policy == "single-numa-node" {
        return Err(CpuManagerError::AlignBySocketSingleNuma);
    }
    Ok(options)
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
