//! The kubelet: the pod manager, the pod syncer the workers call, and the
//! sync loop on the main thread (upstream `pkg/kubelet/kubelet.go`).

mod active_deadline;
mod eviction;
mod getters;
mod housekeeping;
pub mod pod_container_deletor;
mod resize;
mod runtime_state;
mod sync_error;
mod syncer;

use rkubelet_util::lock;
pub use runtime_state::{OnRuntimeChange, RuntimeState, RuntimeStatus};
use syncer::SyncerParts;
pub use syncer::{host_ips, KilledStatus, Syncer};

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{select, tick, Receiver};
use k8s_openapi::api::core::v1::Pod;

use crate::cm::ContainerManager;
use crate::container::cache::Cache;
use crate::container::{ContainerState, PodStatus, RuntimePod};
use crate::kuberuntime::{sandbox, KubeRuntimeManager};
use crate::lifecycle::admission;
use crate::pleg::{EventType as PlegEvent, GenericPleg, PodLifecycleEvent};
use crate::pod::mirror_client::MirrorClient;
use crate::pod::{is_mirror_pod_of, PodManager};
use crate::podutil::PodExt;
use crate::podworkers::{
    PodSyncer, PodWorkers, SyncFailure, UpdatePodOptions, UpdateType, WORKER_BACKOFF,
};
use crate::prober::{ContainerInfo, ProbeKind, ProbeResult, ProberManager, ResultUpdate};
use crate::server::stats::SummaryProvider;
use crate::status::conditions::need_to_reconcile_readiness;
use crate::status::generate::{
    generate_api_pod_status, StatusContext, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE,
};
use crate::status::StatusManager;
use crate::token::TokenManager;
use crate::types::{is_mirror_pod, is_static_pod, PodOperation, PodUpdate};
use crate::util::backoff::Exponential;
use crate::util::workqueue::WorkQueue;
use crate::volumemanager::{VolumeManager, FAILED_MOUNT};
use k8s_openapi::api::core::v1::Node;

pub const SYNC_PERIOD: Duration = Duration::from_secs(1);
/// How long a pod sync waits for its volumes before giving its worker back.
const VOLUME_WAIT: Duration = Duration::from_secs(2);
/// When a pod whose volumes are not ready is retried at the latest; the
/// volume manager re-queues it sooner once they are.
const VOLUME_RETRY: Duration = Duration::from_secs(5);
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_secs(2);
/// How often housekeeping unmaps the executable's idle code
/// (util::memory::IdleCodeTrimmer): what ran within the last minute stays.
const IDLE_CODE_TRIM_PERIOD: Duration = Duration::from_secs(60);
/// How often housekeeping gives the heap's free pages back when no pod
/// went meanwhile (util::memory::HeapTrimmer).
const HEAP_TRIM_PERIOD: Duration = Duration::from_secs(30);
/// The runtime is considered down when its status has not been confirmed
/// for this long (upstream maxWaitForContainerRuntime).
const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);

/// The node-level settings the kubelet's modules need.
#[derive(Debug, Clone)]
pub struct Settings {
    pub node_ip: Option<String>,
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    /// syncFrequency: how often a healthy pod is resynced.
    pub sync_frequency: Duration,
    pub max_pods: usize,
    pub pod_workers: usize,
    /// The sysctl allowlist and the host's AppArmor support (admission).
    pub security: crate::lifecycle::handlers::SecurityAdmitHandlers,
}

/// The channels the sync loop selects over, besides its own tickers.
pub struct LoopChannels {
    pub config: Receiver<PodUpdate>,
    pub pleg: Receiver<PodLifecycleEvent>,
    /// Probe result changes (liveness, readiness, startup).
    pub probes: Receiver<ResultUpdate>,
    pub shutdown: Receiver<()>,
}

/// The kubelet: what the sync loop and housekeeping use (upstream's Kubelet
/// struct). The pod sync itself is [`Syncer`]'s, which holds what it uses;
/// the other modules read through the accessors below.
pub struct Kubelet {
    settings: Settings,
    runtime: Arc<KubeRuntimeManager>,
    cache: Arc<Cache>,
    pleg: Arc<GenericPleg>,
    pod_workers: Arc<PodWorkers>,
    pod_manager: Arc<PodManager>,
    status_manager: Arc<StatusManager>,
    work_queue: Arc<WorkQueue>,
    runtime_state: Arc<RuntimeState>,
    syncer: Arc<Syncer>,
    /// Probes start and stop with the pods (upstream probeManager).
    prober: Arc<ProberManager>,
    /// With an API server: removes orphaned mirror pods.
    mirror_client: Option<Arc<MirrorClient>>,
    /// With cgroupsPerQOS: housekeeping removes orphaned pod cgroups.
    container_manager: Option<Arc<ContainerManager>>,
    /// When the sync loop last began an iteration (for /healthz).
    sync_loop_monitor: Mutex<Option<Instant>>,
    /// Sources the sync loop has received updates from.
    seen_sources: Mutex<HashSet<String>>,
    /// Whether every configured source has delivered (PodConfig).
    sources_ready: SourcesReady,
    /// This node's Node object, when there is an API server (admission
    /// checks labels and allocatable against it).
    node: Arc<RwLock<Option<Node>>>,
    /// The Node this kubelet would register, made from the machine, for
    /// admission until the reflector has one (upstream getNodeAnyWay).
    initial_node: OnceLock<getters::InitialNode>,
    volume_manager: Arc<VolumeManager>,
    /// Dead containers to remove now, for the `gc` thread.
    container_deletor: pod_container_deletor::PodContainerDeletor,
    /// The node's pressure conditions and the eviction admission rule.
    eviction: Arc<crate::eviction::Manager>,
    stats_provider: Arc<SummaryProvider>,
    /// Graceful node shutdown: its admission rule and Ready error.
    node_shutdown: Arc<crate::nodeshutdown::Manager>,
    /// Device plugins: their admission rule and node capacity.
    device_manager: crate::cm::devicemanager::DeviceManager,
    /// ResourceClaims: unprepared once no active pod uses them.
    dra_manager: crate::cm::dra::DraManager,
    /// Exclusive CPUs: their stale assignments (housekeeping).
    cpu_manager: crate::cm::cpumanager::CpuManager,
    /// Memory blocks: their stale assignments (housekeeping).
    memory_manager: crate::cm::memorymanager::MemoryManager,
    /// Admission of the resources placed by NUMA node (CPUs, memory).
    topology_manager: Arc<crate::cm::topologymanager::TopologyManager>,
    /// What each pod was allocated: admission and the sync read it in
    /// place of the spec's resources (upstream allocationManager).
    allocation: Arc<crate::allocation::Manager>,
    /// Housekeeping's own: the executable's idle code out of the RSS.
    code_trimmer: crate::util::memory::IdleCodeTrimmer,
    heap_trimmer: crate::util::memory::HeapTrimmer,
}

/// The managers the kubelet is built from besides the runtime (upstream
/// NewMainKubelet's probeManager, volumeManager, tokenManager).
pub struct Managers {
    pub prober: Arc<ProberManager>,
    pub volume_manager: Arc<VolumeManager>,
    pub token_manager: Option<Arc<TokenManager>>,
    /// None when cgroupsPerQOS is off.
    pub container_manager: Option<Arc<ContainerManager>>,
    pub eviction: Arc<crate::eviction::Manager>,
    /// The one stats provider: /stats/summary and the eviction manager
    /// read it (upstream kl.StatsProvider).
    pub stats_provider: Arc<SummaryProvider>,
    pub node_shutdown: Arc<crate::nodeshutdown::Manager>,
    /// Told of every pod by the pod manager: the secret and configMap
    /// managers.
    pub registrars: Vec<Arc<dyn crate::pod::PodRegistrar>>,
    pub device_manager: crate::cm::devicemanager::DeviceManager,
    pub dra_manager: crate::cm::dra::DraManager,
    pub cpu_manager: crate::cm::cpumanager::CpuManager,
    pub memory_manager: crate::cm::memorymanager::MemoryManager,
    pub topology_manager: Arc<crate::cm::topologymanager::TopologyManager>,
    /// What each pod was allocated and given (in-place resize).
    pub allocation: Arc<crate::allocation::Manager>,
}

/// PodConfig's "has every source delivered" check, by source names.
pub type SourcesReady = Box<dyn Fn(&[String]) -> bool + Send + Sync>;

/// What cluster mode adds to the kubelet.
pub struct ClusterDeps {
    pub mirror_client: Arc<MirrorClient>,
    /// Filled by the Node reflector.
    pub node: Arc<RwLock<Option<Node>>>,
    /// Told when the runtime goes down or comes back (node status).
    pub on_runtime_change: OnRuntimeChange,
}

/// The pod workers, their resync queue and the status cache they read.
/// Made before the runtime manager, which wakes the workers when a stop
/// finishes and re-queues pods whose image pull ended: the pool is given
/// what it runs (the syncer, which holds the runtime manager) only when
/// its threads start.
pub struct PodWork {
    pub queue: Arc<WorkQueue>,
    pub workers: Arc<PodWorkers>,
    /// Tells `workers` of each relist (`PodWorkers::cache_listener`).
    pub cache: Arc<Cache>,
}

/// Pods admitted and not in a terminal phase: what the QoS cgroup tiers
/// are sized for.
/// As allocated: a resize the node has not taken does not count.
fn unfinished_pods(
    pods: &PodManager,
    statuses: &StatusManager,
    allocation: &crate::allocation::Manager,
) -> Vec<Arc<Pod>> {
    pods.pods()
        .into_iter()
        .filter(|p| !statuses.phase(p.uid()).is_terminal())
        .map(|p| allocation.allocated_pod(&p))
        .collect()
}

impl Kubelet {
    /// Wires the modules together; starts nothing (upstream NewMainKubelet).
    pub fn new(
        settings: Settings,
        runtime: Arc<KubeRuntimeManager>,
        pleg: Arc<GenericPleg>,
        work: PodWork,
        sources_ready: SourcesReady,
        cluster: Option<ClusterDeps>,
        managers: Managers,
    ) -> Arc<Self> {
        let PodWork {
            queue: work_queue,
            workers: pod_workers,
            cache,
        } = work;
        let Managers {
            prober,
            volume_manager,
            token_manager,
            container_manager,
            eviction,
            stats_provider,
            node_shutdown,
            registrars,
            device_manager,
            dra_manager,
            cpu_manager,
            memory_manager,
            topology_manager,
            allocation,
        } = managers;
        let status_manager = Arc::new(StatusManager::new());
        let pod_manager = Arc::new(PodManager::new(registrars));
        let (node, mirror_client, on_runtime_change) = match cluster {
            Some(c) => (c.node, Some(c.mirror_client), Some(c.on_runtime_change)),
            None => (Arc::new(RwLock::new(None)), None, None),
        };
        let runtime_state = Arc::new(RuntimeState::new(on_runtime_change));
        let syncer = Arc::new(Syncer::new(SyncerParts {
            runtime: Arc::clone(&runtime),
            node: Arc::clone(&node),
            status_manager: Arc::clone(&status_manager),
            pod_manager: Arc::clone(&pod_manager),
            mirror_client: mirror_client.clone(),
            runtime_state: Arc::clone(&runtime_state),
            settings: settings.clone(),
            prober: Arc::clone(&prober),
            volume_manager: Arc::clone(&volume_manager),
            token_manager,
            container_manager: container_manager.clone(),
            allocation: Arc::clone(&allocation),
        }));
        Arc::new(Kubelet {
            settings,
            runtime,
            cache,
            pleg,
            pod_workers,
            pod_manager,
            status_manager,
            work_queue,
            runtime_state,
            syncer,
            prober,
            mirror_client,
            container_manager,
            sync_loop_monitor: Mutex::new(None),
            seen_sources: Mutex::new(HashSet::new()),
            sources_ready,
            node,
            initial_node: OnceLock::new(),
            volume_manager,
            container_deletor: Default::default(),
            eviction,
            stats_provider,
            node_shutdown,
            device_manager,
            dra_manager,
            cpu_manager,
            memory_manager,
            topology_manager,
            allocation,
            code_trimmer: crate::util::memory::IdleCodeTrimmer::new(IDLE_CODE_TRIM_PERIOD),
            heap_trimmer: crate::util::memory::HeapTrimmer::new(HEAP_TRIM_PERIOD),
        })
    }

    /// Starts the pod worker threads, which run this kubelet's syncer.
    pub fn start_pod_workers(
        &self,
        shutdown: Receiver<()>,
    ) -> std::io::Result<Vec<crate::util::worker::Worker>> {
        let syncer = Arc::clone(&self.syncer) as Arc<dyn PodSyncer>;
        self.pod_workers
            .start(self.settings.pod_workers, &self.cache, &syncer, shutdown)
    }

    /// Pods that keep their devices: wanted and not finished, or with
    /// containers still running (a pod being deleted holds its devices
    /// until they stop). None until every source has delivered, so that
    /// after a restart no pod loses the devices its checkpoint holds
    /// before its source is heard (upstream updateAllocatedDevices).
    fn device_holders(&self) -> Option<HashSet<String>> {
        if !self.sources_ready() {
            return None;
        }
        let unfinished = unfinished_pods(&self.pod_manager, &self.status_manager, &self.allocation);
        let running = self.pleg.running_pods();
        Some(
            unfinished
                .iter()
                .map(|p| p.uid().to_string())
                .chain(running.iter().map(|rp| rp.uid.clone()))
                .collect(),
        )
    }

    /// When the sync loop last began an iteration: None before it started.
    pub fn last_loop_iteration(&self) -> Option<Instant> {
        *lock(&self.sync_loop_monitor)
    }

    pub fn sources_ready(&self) -> bool {
        let seen: Vec<String> = lock(&self.seen_sources).iter().cloned().collect();
        (self.sources_ready)(&seen)
    }

    /// Whether every source has delivered, given the sources seen so far.
    pub fn sources_ready_with(&self, seen: &[String]) -> bool {
        (self.sources_ready)(seen)
    }

    /// Queries CRI Status once, and Version when it is due, and records
    /// the result (upstream updateRuntimeUp; called every 5 s from its own
    /// thread).
    pub fn update_runtime_up(&self) {
        let rt = self.runtime.runtime();
        let version = if self.runtime_state.version_due() {
            rt.version()
                .map(|v| Some((v.runtime_name, v.runtime_version)))
        } else {
            Ok(None)
        };
        let result = version
            .and_then(|v| rt.status().map(|s| (v, s)))
            .map(|(version, s)| RuntimeStatus::from_cri(version, &s));
        if let Err(e) = &result {
            log::error!("container runtime sanity check failed: {e}");
        }
        let was_down = !self.runtime_state.runtime_errors().is_empty();
        self.runtime_state.update(result);
        self.runtime
            .set_runtime_handlers(self.runtime_state.runtime_handlers());
        let errors = self.runtime_state.runtime_errors();
        if was_down && errors.is_empty() {
            log::info!(
                "container runtime {} is up",
                self.runtime_state.runtime_name()
            );
        }
        if let Some(e) = self.runtime_state.network_error() {
            log::warn!("{e}");
        }
    }

    /// The sync loop (upstream syncLoop): pauses with back-off while the
    /// runtime is down, otherwise dispatches one event per iteration.
    pub fn sync_loop(&self, ch: &LoopChannels) {
        log::info!("starting kubelet main sync loop");
        let sync_ticker = tick(SYNC_PERIOD);
        let housekeeping_ticker = tick(HOUSEKEEPING_PERIOD);
        let mut backoff = Exponential::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let errors = self.runtime_state.runtime_errors();
            if !errors.is_empty() {
                let delay = backoff.next_delay();
                // Before the runtime-status thread's first check (started
                // beside the loop, bounded by its CRI deadline) nothing is
                // known to be wrong: wait for it without an error.
                if self.runtime_state.checked() {
                    log::error!("skipping pod synchronization: {}", errors.join("; "));
                } else {
                    log::debug!("waiting for the first container runtime status check");
                }
                select! {
                    recv(ch.shutdown) -> _ => return,
                    default(delay) => continue,
                }
            }
            backoff.reset();
            self.mark_loop_alive();
            if !self.sync_loop_iteration(ch, &sync_ticker, &housekeeping_ticker) {
                return;
            }
            self.mark_loop_alive();
        }
    }

    fn mark_loop_alive(&self) {
        *lock(&self.sync_loop_monitor) = Some(Instant::now());
    }

    /// One select over every source of work (upstream syncLoopIteration).
    /// Returns false when the kubelet should stop.
    fn sync_loop_iteration(
        &self,
        ch: &LoopChannels,
        sync: &Receiver<Instant>,
        housekeeping: &Receiver<Instant>,
    ) -> bool {
        select! {
            recv(ch.config) -> u => match u {
                Ok(update) => self.handle_config_update(update),
                Err(_) => {
                    log::error!("update channel is closed, exiting the sync loop");
                    return false;
                }
            },
            recv(ch.pleg) -> e => {
                if let Ok(e) = e {
                    self.handle_pleg_event(&e);
                }
            },
            recv(sync) -> _ => {
                let pods = self.pods_to_sync();
                if !pods.is_empty() {
                    log::debug!("SyncLoop (SYNC) pods: {}", pods.len());
                    self.handle_pod_syncs(pods, UpdateType::Sync);
                }
            },
            recv(ch.probes) -> r => {
                if let Ok(r) = r {
                    self.handle_probe_update(r);
                }
            },
            recv(housekeeping) -> _ => {
                if self.sources_ready() {
                    self.handle_pod_cleanups();
                } else {
                    log::debug!("SyncLoop (housekeeping, skipped): sources aren't ready yet");
                }
            },
            recv(ch.shutdown) -> _ => return false,
        }
        true
    }

    /// Upstream getPodsToSync: pods whose work-queue time came, and pods
    /// past their active deadline (which must be failed and stopped).
    fn pods_to_sync(&self) -> Vec<Arc<Pod>> {
        let due: HashSet<String> = self.work_queue.get_work().into_iter().collect();
        let now = SystemTime::now();
        self.pod_manager
            .pods()
            .into_iter()
            .filter(|p| {
                if due.contains(p.uid()) {
                    return true;
                }
                // Every second: the status (a copy) only for the pods that
                // have a deadline at all.
                if !active_deadline::has_active_deadline(p) {
                    return false;
                }
                let st = self.status_manager.get(p.uid());
                !active_deadline::is_terminal(st.as_ref())
                    && active_deadline::past_active_deadline(p, st.as_ref(), now)
            })
            .collect()
    }

    fn handle_config_update(&self, update: PodUpdate) {
        lock(&self.seen_sources).insert(update.source.clone());
        let names = || {
            update
                .pods
                .iter()
                .map(|p| p.full_name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match update.op {
            PodOperation::Add => {
                if !update.pods.is_empty() {
                    log::info!("SyncLoop ADD source={} pods=[{}]", update.source, names());
                }
                self.handle_pod_additions(update.pods);
            }
            PodOperation::Update | PodOperation::Delete => {
                log::info!(
                    "SyncLoop {} source={} pods=[{}]",
                    update.op,
                    update.source,
                    names()
                );
                self.handle_pod_updates(update.pods);
            }
            PodOperation::Remove => {
                log::info!(
                    "SyncLoop REMOVE source={} pods=[{}]",
                    update.source,
                    names()
                );
                self.handle_pod_removes(update.pods);
            }
            PodOperation::Reconcile => {
                // Status-only changes; mirror pods stay apart from the pods
                // the kubelet runs (our own status PATCHes come back here).
                for p in update.pods {
                    if is_mirror_pod(&p) {
                        self.pod_manager.add_or_update_mirror(p);
                    } else {
                        self.pod_manager.add_or_update(Arc::clone(&p));
                        // Whoever held the older copy holds this one now.
                        self.pod_workers.refresh_pod(&p);
                        self.volume_manager.refresh_pod(&p);
                        self.prober.refresh_pod(&p);
                        // Another writer changed a readiness gate: sync so
                        // Ready follows (upstream HandlePodReconcile).
                        if need_to_reconcile_readiness(&p) {
                            self.dispatch(p, UpdateType::Sync);
                        }
                    }
                }
            }
            PodOperation::Set => log::error!("kubelet does not support snapshot updates"),
        }
    }

    fn handle_pod_additions(&self, mut pods: Vec<Arc<Pod>>) {
        pods.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        // Read once for the batch: before the Node is known it is made
        // from the machine, which takes reading it.
        let node = std::cell::OnceCell::new();
        for pod in pods {
            if is_mirror_pod(&pod) {
                self.handle_mirror_pod(pod);
                continue;
            }
            self.pod_manager.add_or_update(Arc::clone(&pod));
            if !pod.is_being_deleted() && !self.pod_workers.is_known(pod.uid()) {
                // Admitted as allocated: after a restart the checkpoint
                // may hold less than a resize since asked for.
                let pod = self.allocation.allocated_pod(&pod);
                let active = self.allocated_active_pods();
                let node = node.get_or_init(|| self.node_for_admission());
                let max_pods = self.settings.max_pods as i64;
                // In upstream's order: eviction, sysctls, the topology
                // manager (CPUs, memory, devices), the predicates, node
                // shutdown, AppArmor.
                let security = &self.settings.security;
                let admitted = self
                    .eviction
                    .admit(&pod)
                    .and_then(|()| security.sysctls.admit(&pod))
                    .and_then(|()| {
                        self.release_stale_resources(&pod);
                        self.topology_manager.admit(&pod)
                    })
                    .and_then(|()| admission::admit(&pod, &active, node.as_ref(), max_pods))
                    .and_then(|()| self.node_shutdown.admit())
                    .and_then(|()| {
                        crate::lifecycle::handlers::admit_apparmor(&security.apparmor, &pod)
                    });
                if let Err(r) = admitted {
                    // What the resource managers (devices, CPUs, memory)
                    // placed for it goes back.
                    self.topology_manager.release(pod.uid());
                    self.reject_pod(&pod, &r.reason, &r.message);
                    continue;
                }
                self.device_manager.allocate_reserved(&pod);
                self.allocation.add_pod(&pod);
            }
            self.handle_pod_resize(&pod);
            self.prober.add_pod(&pod);
            self.dispatch(pod, UpdateType::Create);
        }
    }

    /// A mirror pod changed in the API: track it and let its static pod's
    /// sync recreate or fix it (upstream handleMirrorPod).
    fn handle_mirror_pod(&self, mirror: Arc<Pod>) {
        self.pod_manager.add_or_update_mirror(Arc::clone(&mirror));
        if let Some(static_pod) = self.pod_manager.get_by_full_name(&mirror.full_name()) {
            self.dispatch(static_pod, UpdateType::Sync);
        }
    }

    /// Pods admitted and not finished: what admission counts against.
    pub fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pod_manager
            .pods()
            .into_iter()
            .filter(|p| {
                let uid = p.uid();
                let terminal = self.status_manager.phase(uid).is_terminal();
                !terminal && self.pod_workers.is_known(uid) && !p.is_being_deleted()
            })
            .collect()
    }

    fn reject_pod(&self, pod: &Pod, reason: &str, message: &str) {
        log::warn!("pod {} rejected: {reason}: {message}", pod.full_name());
        self.runtime
            .recorder()
            .pod_event(pod, crate::events::EventType::Warning, reason, message);
        let status = k8s_openapi::api::core::v1::PodStatus {
            phase: Some(crate::types::PodPhase::Failed.as_str().into()),
            reason: Some(reason.into()),
            message: Some(format!("Pod was rejected: {message}")),
            ..Default::default()
        };
        self.status_manager.set_pod_status(pod, status);
    }

    fn handle_pod_updates(&self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            if is_mirror_pod(&pod) {
                self.handle_mirror_pod(pod);
                continue;
            }
            self.pod_manager.add_or_update(Arc::clone(&pod));
            self.prober.refresh_pod(&pod);
            self.handle_pod_resize(&pod);
            self.dispatch(pod, UpdateType::Update);
        }
    }

    fn handle_pod_removes(&self, pods: Vec<Arc<Pod>>) {
        for pod in pods {
            if is_mirror_pod(&pod) {
                self.pod_manager.remove_mirror(&pod);
                if let Some(static_pod) = self.pod_manager.get_by_full_name(&pod.full_name()) {
                    self.dispatch(static_pod, UpdateType::Sync);
                }
                continue;
            }
            self.pod_manager.remove(pod.uid());
            self.prober.remove_pod(pod.uid());
            self.pod_workers.update_pod(UpdatePodOptions {
                update_type: UpdateType::Kill,
                pod: Some(pod),
                running_pod: None,
                grace_override: None,
                removed: true,
            });
        }
    }

    fn handle_pod_syncs(&self, pods: Vec<Arc<Pod>>, kind: UpdateType) {
        for pod in pods {
            self.dispatch(pod, kind);
        }
    }

    fn handle_pleg_event(&self, e: &PodLifecycleEvent) {
        // A removed container needs no sync (upstream isSyncPodWorthy).
        if e.kind == PlegEvent::ContainerRemoved {
            return;
        }
        if e.kind == PlegEvent::ContainerDied {
            // Upstream cleanUpContainersInPod: older dead instances go now.
            let (status, _) = self.cache.get(&e.pod_uid);
            self.container_deletor.delete_containers_in_pod(
                &e.container_id,
                &status,
                pod_container_deletor::CONTAINERS_TO_KEEP,
            );
        }
        match self.pod_manager.get(&e.pod_uid) {
            Some(pod) => {
                log::debug!(
                    "SyncLoop (PLEG): {:?} {} for pod {}",
                    e.kind,
                    e.container_id,
                    pod.full_name()
                );
                self.dispatch(pod, UpdateType::Sync);
            }
            None => log::debug!(
                "SyncLoop (PLEG): ignoring event for unknown pod {}",
                e.pod_uid
            ),
        }
    }

    /// A probe's verdict changed (upstream's liveness/readiness/startup
    /// cases of syncLoopIteration): readiness and startup go into the
    /// status at once (SetContainerReadiness/SetContainerStartup); a failed
    /// liveness or startup probe restarts the container; every change syncs
    /// the pod (handleProbeSync).
    fn handle_probe_update(&self, r: ResultUpdate) {
        let Some(pod) = self.pod_manager.get(&r.pod_uid) else {
            return;
        };
        let success = r.result == ProbeResult::Success;
        match r.kind {
            ProbeKind::Readiness => {
                self.status_manager
                    .set_container_readiness(&pod, &r.container_id, success)
            }
            ProbeKind::Startup => {
                self.status_manager
                    .set_container_startup(&pod, &r.container_id, success)
            }
            ProbeKind::Liveness => {}
        }
        let restart = r.result == ProbeResult::Failure
            && matches!(r.kind, ProbeKind::Liveness | ProbeKind::Startup);
        if restart {
            log::info!(
                "SyncLoop (probe): {} probe failed for container {} of pod {}",
                r.kind,
                r.container_name,
                pod.full_name()
            );
            self.syncer.record_liveness_failure(r.container_id, r.kind);
        }
        self.dispatch(pod, UpdateType::Sync);
    }

    fn dispatch(&self, pod: Arc<Pod>, update_type: UpdateType) {
        self.pod_workers.update_pod(UpdatePodOptions {
            update_type,
            pod: Some(pod),
            running_pod: None,
            grace_override: None,
            removed: false,
        });
    }
}
