//! The pod syncer the workers call (upstream kubelet.go SyncPod,
//! SyncTerminatingPod, SyncTerminatedPod): a pod and its runtime status in,
//! CRI actions and an API status out.

use rkubelet_util::lock;

use super::sync_error::PodSyncError;
use super::*;
use crate::kuberuntime::actions::ProbeResults;
use crate::kuberuntime::KillProgress;
use crate::podworkers::{Synced, Termination};
use crate::prober::ProbeKind;
use crate::types::PodPhase;

/// What the pod workers call: turns a pod and its runtime status into CRI
/// actions and an API status. It holds what the pod sync uses, nothing of
/// the sync loop's.
pub struct Syncer {
    pub(super) runtime: Arc<KubeRuntimeManager>,
    /// This node's Node object (for hostIP), when there is an API server.
    node: Arc<RwLock<Option<Node>>>,
    status_manager: Arc<StatusManager>,
    pod_manager: Arc<PodManager>,
    /// With an API server: keeps each static pod's mirror pod in place.
    mirror_client: Option<Arc<MirrorClient>>,
    runtime_state: Arc<RuntimeState>,
    settings: Settings,
    /// Containers whose liveness probe failed, by container ID.
    /// Containers whose liveness or startup probe failed, by ID.
    liveness_failed: Mutex<HashMap<String, ProbeKind>>,
    /// Probe results: readiness and startup feed the status.
    prober: Arc<ProberManager>,
    /// Sets up and tears down the pods' volumes.
    volume_manager: Arc<VolumeManager>,
    /// With an API server: service-account tokens, forgotten with their pod.
    token_manager: Option<Arc<TokenManager>>,
    /// With cgroupsPerQOS: the pod cgroups.
    pub(super) container_manager: Option<Arc<ContainerManager>>,
    /// What each pod was allocated and given (in-place resize).
    pub(super) allocation: Arc<crate::allocation::Manager>,
    /// Pods the eviction or node shutdown manager stopped, by UID, with
    /// the status they carry (upstream killPodNow's status function).
    evicted: Mutex<HashMap<String, KilledStatus>>,
}

/// The status a pod the kubelet stopped for the node's sake carries.
#[derive(Clone, Debug)]
pub struct KilledStatus {
    /// `Evicted`, or `Terminated` for a node shutdown.
    pub reason: &'static str,
    pub message: String,
    /// A Succeeded pod stays Succeeded (node shutdown); else Failed.
    pub keep_succeeded: bool,
}

/// What a [`Syncer`] is built from.
pub(super) struct SyncerParts {
    pub runtime: Arc<KubeRuntimeManager>,
    pub node: Arc<RwLock<Option<Node>>>,
    pub status_manager: Arc<StatusManager>,
    pub pod_manager: Arc<PodManager>,
    pub mirror_client: Option<Arc<MirrorClient>>,
    pub runtime_state: Arc<RuntimeState>,
    pub settings: Settings,
    pub prober: Arc<ProberManager>,
    pub volume_manager: Arc<VolumeManager>,
    pub token_manager: Option<Arc<TokenManager>>,
    pub container_manager: Option<Arc<ContainerManager>>,
    pub allocation: Arc<crate::allocation::Manager>,
}

impl Syncer {
    pub(super) fn new(p: SyncerParts) -> Syncer {
        Syncer {
            runtime: p.runtime,
            node: p.node,
            status_manager: p.status_manager,
            pod_manager: p.pod_manager,
            mirror_client: p.mirror_client,
            runtime_state: p.runtime_state,
            settings: p.settings,
            liveness_failed: Mutex::new(HashMap::new()),
            prober: p.prober,
            volume_manager: p.volume_manager,
            token_manager: p.token_manager,
            container_manager: p.container_manager,
            allocation: p.allocation,
            evicted: Mutex::new(HashMap::new()),
        }
    }

    /// A liveness or startup probe failed: the pod's next sync restarts
    /// the container.
    pub(super) fn record_liveness_failure(&self, container_id: String, kind: ProbeKind) {
        lock(&self.liveness_failed).insert(container_id, kind);
    }

    /// Regenerates the pod's API status from a runtime status.
    pub fn refresh_status(&self, pod: &Pod, status: &PodStatus) {
        self.update_status(pod, status, false);
    }

    /// `terminal`: the kubelet has stopped the pod for good, so its phase
    /// is final (Succeeded or Failed), as upstream's podIsTerminal.
    fn update_status(&self, pod: &Pod, status: &PodStatus, terminal: bool) -> PodPhase {
        let uid = pod.uid().to_string();
        let runtime = Arc::clone(&self.runtime);
        let waiting = move |c: &str| runtime.waiting_reason(&uid, c);
        let runtime_name = self.runtime_state.runtime_name();
        let host_ip = self.host_ip();
        let (prober, prober2, puid, puid2) = (
            Arc::clone(&self.prober),
            Arc::clone(&self.prober),
            pod.uid().to_string(),
            pod.uid().to_string(),
        );
        let is_ready = move |c: &str| prober.is_ready(&puid, c);
        let is_started = move |c: &str| prober2.is_started(&puid2, c);
        let old = self.status_manager.get(pod.uid());
        // Upstream activeDeadlineHandler.ShouldEvict, for a pod not yet final.
        let deadline_exceeded = !active_deadline::is_terminal(old.as_ref())
            && active_deadline::past_active_deadline(pod, old.as_ref(), SystemTime::now());
        let uid = pod.uid();
        let actuated = |name: &str| self.allocation.actuated(uid, name);
        let resize = crate::status::generate::ResizeState {
            pending: self.allocation.pending(uid),
            in_progress: self.allocation.in_progress(uid),
            actuated: Some(&actuated),
        };
        let ctx = StatusContext {
            supports_recursive_read_only: self.runtime.pod_supports_recursive_read_only(pod),
            resize: &resize,
            runtime_name: &runtime_name,
            host_ip: host_ip.as_deref(),
            waiting_reason: &waiting,
            is_ready: &is_ready,
            is_started: &is_started,
            pod_is_terminal: terminal,
            old: old.as_ref(),
            deadline_exceeded,
        };
        let mut api_status = generate_api_pod_status(pod, status, &ctx);
        self.apply_eviction(pod, &mut api_status);
        if deadline_exceeded {
            log::info!("pod {}: {DEADLINE_EXCEEDED_MESSAGE}", pod.full_name());
            self.runtime.recorder().pod_event(
                pod,
                crate::events::EventType::Normal,
                DEADLINE_EXCEEDED,
                DEADLINE_EXCEEDED_MESSAGE,
            );
        }
        let known = PodPhase::of(old.as_ref());
        let phase = PodPhase::of(Some(&api_status));
        if phase == PodPhase::Running && known == PodPhase::Pending {
            // Upstream SyncPod: kubelet_pod_start_duration_seconds runs from
            // the config.seen annotation to the first Running status.
            if let Some(d) = crate::types::since_first_seen(pod) {
                crate::metrics::pod_started(d);
            }
        }
        if self.status_manager.set_pod_status(pod, api_status) {
            log::debug!("pod {}: status updated, phase {phase}", pod.full_name());
        }
        phase
    }

    /// Marks the pod stopped by the kubelet: from now on its status
    /// carries `status`.
    pub fn mark_killed(&self, uid: &str, status: KilledStatus) {
        lock(&self.evicted).insert(uid.to_string(), status);
    }

    /// Forgets a gone pod's eviction.
    pub fn forget_eviction(&self, uid: &str) {
        lock(&self.evicted).remove(uid);
    }

    /// An evicted pod's status is Failed, reason Evicted (upstream applies
    /// the eviction manager's status function to every status it makes of
    /// the pod from then on).
    /// With upstream's DisruptionTarget condition (reason
    /// TerminationByKubelet); the status manager keeps its transition time.
    fn apply_eviction(&self, pod: &Pod, s: &mut k8s_openapi::api::core::v1::PodStatus) {
        let Some(KilledStatus {
            reason,
            message,
            keep_succeeded,
        }) = lock(&self.evicted).get(pod.uid()).cloned()
        else {
            return;
        };
        if !(keep_succeeded && PodPhase::of(Some(s)) == PodPhase::Succeeded) {
            s.phase = Some(PodPhase::Failed.as_str().into());
        }
        s.reason = Some(reason.into());
        s.message = Some(message.clone());
        let now = k8s_openapi::jiff::Timestamp::now();
        let at = k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
        let condition = k8s_openapi::api::core::v1::PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(TERMINATION_BY_KUBELET.into()),
            message: Some(message),
            last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at)),
            ..Default::default()
        };
        let conds = s.conditions.get_or_insert_with(Vec::new);
        match conds.iter_mut().find(|c| c.type_ == DISRUPTION_TARGET) {
            Some(c) if c.status == "True" && c.reason == condition.reason => {}
            Some(c) => *c = condition,
            None => conds.push(condition),
        }
    }

    /// The node's IP for hostIP: --node-ip, else the Node's first
    /// InternalIP as node status reported it (upstream takes it from the
    /// Node object too).
    fn host_ip(&self) -> Option<String> {
        host_ips(self.settings.node_ip.as_deref(), &self.node)
            .into_iter()
            .next()
    }

    /// Upstream syncPod's mirror pod step: a stale or deleted mirror pod is
    /// removed, and a missing one created. Failures are retried by the next
    /// sync; they never stop the static pod from running.
    fn ensure_mirror_pod(&self, pod: &Pod) {
        let Some(mc) = &self.mirror_client else {
            return;
        };
        let mut missing = true;
        if let Some(mirror) = self.pod_manager.mirror_of(pod) {
            missing = false;
            if mirror.is_being_deleted() || !is_mirror_pod_of(&mirror, pod) {
                log::info!(
                    "mirror pod of {} is stale; deleting it",
                    pod.namespaced_name()
                );
                match mc.delete_mirror_pod(&mirror) {
                    Ok(deleted) => missing = deleted,
                    Err(e) => log::warn!("delete mirror pod: {e}"),
                }
            }
        }
        if missing {
            match mc.create_mirror_pod(pod) {
                // A new mirror pod has no status yet: send it ours again.
                Ok(()) => self.status_manager.resync(pod.uid()),
                Err(e) => log::warn!("create mirror pod for {}: {e}", pod.namespaced_name()),
            }
        }
    }

    /// The pod's cgroup before its sandbox (upstream syncPod's
    /// EnsureExists): a failure keeps this pod Pending with an event
    /// naming the path and errno; other pods are not affected.
    fn ensure_pod_cgroup(&self, pod: &Pod) -> Result<(), PodSyncError> {
        let Some(cm) = &self.container_manager else {
            return Ok(());
        };
        // The QoS tiers are sized for the pods not yet finished.
        let active =
            || super::unfinished_pods(&self.pod_manager, &self.status_manager, &self.allocation);
        cm.ensure_pod_cgroup(pod, &active).map_err(|e| {
            let e = PodSyncError::PodCgroup(e);
            self.runtime.recorder().pod_event(
                pod,
                crate::events::EventType::Warning,
                crate::cm::FAILED_TO_CREATE_POD_CONTAINER,
                &e.to_string(),
            );
            e
        })
    }

    fn make_pod_dirs(&self, pod: &Pod) -> std::io::Result<()> {
        let dir = self.settings.root_dir.join("pods").join(pod.uid());
        for sub in ["volumes", "plugins", "containers"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        Ok(())
    }

    /// The prober learns which container instances run, and since when
    /// (upstream UpdatePodStatus): probes start and stop with them.
    fn tell_prober(&self, pod: &Pod, status: &PodStatus) {
        // Sidecars are probed like app containers (upstream prober).
        let sidecars = pod
            .init_containers()
            .iter()
            .filter(|c| crate::podutil::is_restartable_init(c));
        let containers: Vec<ContainerInfo> = pod
            .containers()
            .iter()
            .chain(sidecars)
            .map(|c| {
                let newest = status.find_container(&c.name);
                ContainerInfo {
                    name: c.name.clone(),
                    id: newest.map(|s| s.id.clone()).unwrap_or_default(),
                    running: newest.is_some_and(|s| s.state == ContainerState::Running),
                    started_at: newest.and_then(|s| s.started_at),
                }
            })
            .collect();
        // Probes aim at status.podIP, which for a host-network pod is the
        // node's IP (the sandbox has none of its own).
        let ip = if pod.is_host_network() {
            self.host_ip()
        } else {
            status.ips().into_iter().next()
        };
        self.prober
            .update_pod_status(pod.uid(), ip.as_deref(), &containers);
    }

    /// What the runtime manager needs of the probes: the containers to
    /// restart, and which sidecars passed their startup probe (the next
    /// init container waits for that).
    fn probe_results(&self, pod: &Pod, status: &PodStatus) -> ProbeResults {
        let started = pod
            .init_containers()
            .iter()
            .filter(|c| crate::podutil::is_restartable_init(c) && c.startup_probe.is_some())
            .filter(|c| self.prober.is_started(pod.uid(), &c.name))
            .filter_map(|c| status.find_container(&c.name))
            .map(|s| s.id.clone())
            .collect();
        ProbeResults {
            failed: self.liveness_failures(status),
            started,
        }
    }

    fn liveness_failures(&self, status: &PodStatus) -> HashMap<String, ProbeKind> {
        let mut failed = lock(&self.liveness_failed);
        let ids: HashSet<&str> = status.containers.iter().map(|c| c.id.as_str()).collect();
        let mine: HashMap<String, ProbeKind> = failed
            .iter()
            .filter(|(id, _)| ids.contains(id.as_str()))
            .map(|(id, kind)| (id.clone(), *kind))
            .collect();
        // Forget failures of containers that are no longer running.
        failed.retain(|id, _| {
            !ids.contains(id.as_str())
                || status
                    .containers
                    .iter()
                    .any(|c| &c.id == id && c.state == ContainerState::Running)
        });
        mine
    }
}

impl PodSyncer for Syncer {
    fn sync_pod(
        &self,
        update: UpdateType,
        pod: &Arc<Pod>,
        status: &PodStatus,
    ) -> Result<Synced, SyncFailure> {
        log::debug!("pod {}: sync ({update:?})", pod.full_name());
        // As allocated: a resize the node has not taken is not acted on.
        let pod = &self.allocation.allocated_pod(pod);
        // The prober first: a container without a readiness probe is ready
        // once the prober knows it runs, and the status below reads that
        // (upstream's generateAPIPodStatus calls UpdatePodStatus first).
        self.tell_prober(pod, status);
        let phase = self.update_status(pod, status, false);
        if phase.is_terminal() {
            log::info!("pod {} reached phase {phase}", pod.full_name());
            return Ok(Synced::Terminal);
        }
        self.make_pod_dirs(pod).map_err(PodSyncError::PodDirs)?;
        if is_static_pod(pod) {
            self.ensure_mirror_pod(pod);
        }
        // Upstream WaitForAttachAndMount, but bounded short: a pod whose
        // volumes are not ready gives its worker back and is re-queued by
        // the volume manager when they are.
        if let Err(e) = self
            .volume_manager
            .wait_for_attach_and_mount(pod, VOLUME_WAIT)
        {
            // Upstream's sync blocks up to 2 min 3 s on the volumes and
            // posts this when that wait times out; ours returns sooner, and
            // posts it once the pod has waited as long.
            let report = e.report;
            let e = PodSyncError::Volumes(e);
            if report {
                self.runtime.recorder().pod_event(
                    pod,
                    crate::events::EventType::Warning,
                    FAILED_MOUNT,
                    &e.to_string(),
                );
            }
            return Err(e.into());
        }
        self.ensure_pod_cgroup(pod)?;
        // A resize's status (resources, its conditions) is posted now, as
        // upstream's is, not at the next periodic sync.
        if self.resize_running_containers(pod, status) {
            self.update_status(pod, status, false);
        }
        let probes = self.probe_results(pod, status);
        let reasons = self.runtime.waiting_reasons(pod.uid());
        let result = self.runtime.sync_pod(pod, status, &probes);
        // A start that failed for a new reason (CrashLoopBackOff,
        // ErrImagePull, ...) or succeeded after one makes the status set
        // above stale: make it again now rather than at the next sync.
        if self.runtime.waiting_reasons(pod.uid()) != reasons {
            self.update_status(pod, status, false);
        }
        if result.errors.is_empty() {
            Ok(Synced::Running {
                started: result.started,
            })
        } else {
            Err(PodSyncError::Containers(result.errors).into())
        }
    }

    fn sync_terminating_pod(
        &self,
        pod: Option<&Pod>,
        running: Option<&RuntimePod>,
        status: &PodStatus,
        grace: Option<i64>,
    ) -> Result<Termination, SyncFailure> {
        let name = pod.map_or_else(|| status.uid.clone(), |p| p.full_name());
        log::debug!("pod {name}: terminating");
        let result = match running {
            Some(rp) => self.runtime.kill_pod(pod, rp, grace),
            None => self.runtime.kill_pod_status(pod, status, grace),
        };
        if result.map_err(PodSyncError::Kill)? == KillProgress::Stopping {
            return Ok(Termination::Stopping);
        }
        log::info!("pod {name}: terminated");
        if let Some(pod) = pod {
            if let Ok(fresh) = self
                .runtime
                .get_pod_status(pod.uid(), pod.name(), pod.namespace())
            {
                self.update_status(pod, &fresh, pod.is_being_deleted());
            }
        }
        Ok(Termination::Done)
    }

    fn sync_terminated_pod(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        removed: bool,
    ) -> Result<(), SyncFailure> {
        if let Some(p) = pod.filter(|p| p.is_being_deleted()) {
            // Everything is stopped: the status manager may now remove the
            // API object (grace period 0, UID precondition).
            self.status_manager.mark_for_deletion(p.uid());
        }
        if !removed {
            return Ok(());
        }
        let uid = pod.map_or(status.uid.as_str(), |p| p.uid());
        log::info!("pod {uid}: removing its containers, sandboxes and directories");
        self.runtime.remove_pod(uid).map_err(PodSyncError::Remove)?;
        if let Some(tokens) = &self.token_manager {
            tokens.delete_service_account_tokens(uid);
        }
        // Volumes first; the directory goes only when nothing is mounted in
        // it, else housekeeping's orphan cleanup retries.
        let pod_dir = self.settings.root_dir.join("pods").join(uid);
        if self.volume_manager.remove_pod(uid, VOLUME_WAIT) {
            if let Err(e) = self.volume_manager.remove_pod_dir(&pod_dir) {
                log::warn!("remove {}: {e}", pod_dir.display());
            }
            // After the volumes, as upstream: a memory-backed volume's
            // charge would otherwise move to the parent. The containers
            // went with the sandboxes, so the cgroup is empty; if not,
            // housekeeping retries.
            if let Some(cm) = &self.container_manager {
                cm.destroy_pod_cgroup(uid);
            }
        }
        if let Some(pod) = pod {
            let logs = sandbox::pod_log_dir(&self.settings.pod_logs_dir, pod);
            if let Err(e) = remove_dir_if_exists(&logs) {
                log::warn!("remove {}: {e}", logs.display());
            }
        }
        Ok(())
    }

    fn sync_failed(&self, pod: &Pod, message: &str) {
        self.runtime.recorder().pod_event(
            pod,
            crate::events::EventType::Warning,
            FAILED_SYNC,
            message,
        );
    }
}

/// upstream events.FailedSync.
const FAILED_SYNC: &str = "FailedSync";

/// upstream v1.DisruptionTarget and v1.PodReasonTerminationByKubelet.
const DISRUPTION_TARGET: &str = "DisruptionTarget";
const TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";

fn remove_dir_if_exists(dir: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The node's IPs: `--node-ip` (comma-separated), else the Node's
/// InternalIP addresses as node status reported them (upstream takes
/// hostIPs from the Node object).
pub fn host_ips(node_ip: Option<&str>, node: &RwLock<Option<Node>>) -> Vec<String> {
    if let Some(ips) = node_ip {
        return crate::kubeletconfig::node_ips(ips);
    }
    let node = node.read().unwrap_or_else(|e| e.into_inner());
    node.as_ref()
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
        .collect()
}
