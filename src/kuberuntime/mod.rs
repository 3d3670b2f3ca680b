//! The generic runtime manager (upstream `pkg/kubelet/kuberuntime`): turns
//! pod specs into CRI calls and CRI state back into pod status.

pub mod actions;
pub mod container;
pub mod ephemeral;
#[cfg(test)]
pub mod fake_runtime;
pub mod gc;
pub mod helpers;
mod hugepages;
mod image_volumes;
mod init_actions;
pub mod kill;
pub mod killer;
pub mod labels;
pub mod lifecycle;
mod listing_memo;
pub mod oom_group;
mod pods;
pub mod post_start;
pub mod qos;
pub mod recursive_read_only;
pub mod resize;
pub mod sandbox;
mod sandbox_resources;
pub mod security_context;
mod sidecar;
mod start;
pub mod swap;
pub mod termination;

use rkubelet_util::lock;
use start::StartTarget;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;

use crate::container::{PodStatus, RuntimePod};
use crate::cri::{api, CriError, RemoteRuntime};
use crate::events::{self, EventRecorder, EventType};
use crate::images::{ImageManager, PullError};
use crate::lifecycle::handler_runner::HandlerRunner;
use crate::podutil::PodExt;
use crate::util::backoff::Backoff;
pub use kill::KillProgress;

/// The least grace a container gets after its preStop hook (upstream).
const MINIMUM_GRACE_PERIOD_SECONDS: u64 = 2;
/// CrashLoopBackOff: 10 s doubling to 5 min, forgotten after 10 quiet minutes.
const CRASH_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
const CRASH_BACKOFF_MAX: Duration = Duration::from_secs(300);
const CRASH_BACKOFF_RESET: Duration = Duration::from_secs(600);
/// A pod in CrashLoopBackOff is synced again after upstream's worker
/// back-off, jittered by up to half (wait.Jitter(backOffPeriod, 0.5)).
const CRASH_BACKOFF_RESYNC: Duration = Duration::from_secs(10);
const CRASH_BACKOFF_RESYNC_JITTER: f64 = 0.5;

/// upstream setTerminationGracePeriod: a deleted pod's grace, else the
/// failed probe's own, else the pod's; never under the 2 s minimum.
fn container_kill_grace(pod: &Pod, kill: &actions::ContainerToKill) -> i64 {
    let probe = kill
        .probe_grace
        .filter(|_| pod.metadata.deletion_grace_period_seconds.is_none());
    match probe {
        Some(g) => g.max(MINIMUM_GRACE_PERIOD_SECONDS as i64),
        None => pod.kill_grace_seconds(),
    }
}

/// The node settings container and sandbox configs are made from.
#[derive(Debug, Clone)]
pub struct RuntimeManagerConfig {
    pub root_dir: PathBuf,
    pub pod_logs_dir: PathBuf,
    pub resolv_conf: PathBuf,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    pub cpu_cfs_quota: bool,
    pub cpu_cfs_quota_period_us: i64,
    pub machine_memory: u64,
    /// serializeImagePulls, maxParallelImagePulls, registryPullQPS/Burst.
    pub image_pulls: crate::images::PullerConfig,
    /// Where the `<pod>_<ns>_<container>-<id>.log` symlinks go
    /// (/var/log/containers beside the default /var/log/pods).
    pub container_logs_dir: PathBuf,
    /// What `resourceFieldRef` reports for a limit that is not set.
    pub node_allocatable: crate::fieldpath::NodeAllocatable,
    /// With cgroupsPerQOS: names each pod's cgroup, the sandbox's
    /// cgroup_parent. None leaves the choice to the runtime.
    pub pod_cgroups: Option<crate::cm::PodCgroupNamer>,
    /// `seccompDefault`: containers without a seccomp profile get
    /// RuntimeDefault rather than Unconfined.
    pub seccomp_default: bool,
    /// memorySwap.swapBehavior and what the node has to give.
    pub swap: swap::SwapConfig,
    /// The machine's huge page sizes in bytes, each limited per container.
    pub hugepage_sizes: Vec<u64>,
    /// Containers' cgroups kill as a whole on OOM (cgroup v2 unless
    /// `singleProcessOOMKill`).
    pub oom_group_kill: bool,
    /// The `ImageVolume` feature gate (beta, off by default in v1.33 and
    /// v1.34): image volumes are pulled and passed to the runtime.
    pub image_volumes: bool,
}

impl RuntimeManagerConfig {
    #[cfg(test)]
    pub fn for_tests() -> Self {
        RuntimeManagerConfig {
            root_dir: std::env::temp_dir().join("rkubelet-test-root"),
            pod_logs_dir: std::env::temp_dir().join("rkubelet-test-logs"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            cluster_dns: vec![],
            cluster_domain: "cluster.local".into(),
            cpu_cfs_quota: true,
            cpu_cfs_quota_period_us: 100_000,
            machine_memory: 8 << 30,
            image_pulls: crate::images::PullerConfig::default(),
            container_logs_dir: std::env::temp_dir().join("rkubelet-test-containers"),
            node_allocatable: crate::fieldpath::NodeAllocatable::default(),
            pod_cgroups: None,
            seccomp_default: false,
            swap: Default::default(),
            hugepage_sizes: Vec::new(),
            oom_group_kill: false,
            image_volumes: false,
        }
    }
}

/// Why one step of a sync failed. `reason` is what the container's Waiting
/// state reports (CrashLoopBackOff, ErrImageNeverPull, ...).
#[derive(Debug, Clone)]
pub struct SyncError {
    pub container: Option<String>,
    pub reason: &'static str,
    pub message: String,
    /// When retrying sooner is pointless (a back-off still running).
    pub retry_after: Option<Duration>,
}

impl SyncError {
    fn new(container: Option<&str>, reason: &'static str, message: impl Into<String>) -> Self {
        SyncError {
            container: container.map(str::to_string),
            reason,
            message: message.into(),
            retry_after: None,
        }
    }

    fn runtime(container: Option<&str>, reason: &'static str, err: &CriError) -> Self {
        SyncError::new(container, reason, err.to_string())
    }

    /// A container create or start the runtime refused: upstream's status
    /// message is the gRPC status's message alone (`s.Message()`).
    fn runtime_message(container: &str, reason: &'static str, err: &CriError) -> Self {
        SyncError::new(Some(container), reason, err.message.clone())
    }

    /// The image is not there (yet): the container waits with the image
    /// manager's reason (ContainerCreating while its pull runs).
    fn from_image(container: &str, e: &PullError) -> Self {
        let mut err = SyncError::new(Some(container), e.reason(), e.message());
        err.retry_after = e.retry_after();
        err
    }
}

impl std::fmt::Display for SyncError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.container {
            Some(c) => write!(f, "container {c:?}: {}: {}", self.reason, self.message),
            None => write!(f, "{}: {}", self.reason, self.message),
        }
    }
}

/// The pod's imagePullSecrets that exist (upstream getPullSecretsForPod:
/// a missing one is logged and skipped, the pull goes on without it).
fn pull_secrets(
    src: &dyn container::EnvSource,
    pod: &Pod,
) -> Vec<k8s_openapi::api::core::v1::Secret> {
    let names = pod.spec_or_default().image_pull_secrets.iter().flatten();
    let mut out = Vec::new();
    for r in names {
        match src.secret(pod.namespace(), &r.name) {
            Ok(Some(s)) => out.push((*s).clone()),
            Ok(None) => log::warn!(
                "pod {}: imagePullSecrets: secret {:?} not found; pulling without it",
                pod.namespaced_name(),
                r.name
            ),
            Err(e) => log::warn!(
                "pod {}: imagePullSecrets: secret {:?}: {e}",
                pod.namespaced_name(),
                r.name
            ),
        }
    }
    out
}

/// The node's IPs, asked at each container start.
pub type HostIps = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// What the runtime manager uses besides the CRI, given at construction.
///
/// Two of these lead back to the pod workers, which run the syncer that
/// holds this manager: `on_image_pulled` re-queues through the kubelet's
/// work queue, and `on_container_stopped` wakes the pod workers, whose pool
/// is made before the manager and given the syncer only when its threads
/// start (`PodWorkers::start`), so neither is a cycle of owners.
pub struct RuntimeDeps {
    /// Where pod and container events go.
    pub recorder: Arc<dyn EventRecorder>,
    /// Services, ConfigMaps and Secrets for container environments; None
    /// in standalone mode.
    pub env_source: Option<Arc<dyn container::EnvSource>>,
    /// The volume manager's set-up volumes, for container mounts
    /// (upstream's runtime helper asks the volume manager the same way).
    pub volumes: Arc<dyn PodVolumes>,
    /// Where `status.hostIP(s)` env values come from: --node-ip, else the
    /// Node.
    pub host_ips: HostIps,
    /// RuntimeClass -> handler; None in standalone mode.
    pub runtime_classes: Option<Arc<crate::runtimeclass::Manager>>,
    /// Where pods whose image pull finished are re-queued.
    pub on_image_pulled: crate::images::image_manager::OnPodPulled,
    /// Who is told (by pod UID) when a container stop or a postStart hook
    /// finishes.
    pub on_container_stopped: killer::OnStopped,
    /// What device plugins give each container; None in tests.
    pub devices: Option<crate::cm::devicemanager::DeviceManager>,
    /// The pods' ResourceClaims; None in tests.
    pub dra: Option<crate::cm::dra::DraManager>,
    /// Each container's CPU set (the CPU manager's static policy).
    pub cpus: crate::cm::cpumanager::CpuManager,
    /// Each container's memory nodes (the memory manager's Static policy).
    pub memory: crate::cm::memorymanager::MemoryManager,
    /// What each started container was given (in-place resize).
    pub allocation: Arc<crate::allocation::Manager>,
    /// The ID blocks of `hostUsers: false` pods; None when it could not
    /// start (such pods are then refused).
    pub userns: Option<Arc<crate::userns::UsernsManager>>,
}

/// The set-up volumes of a pod, by volume name.
pub trait PodVolumes: Send + Sync {
    fn mounted_volumes(&self, pod_uid: &str) -> HashMap<String, crate::volume::MountedVolume>;
}

/// A pod's containers that are waiting, by name: (reason, message) as the
/// last start attempt left them (upstream's reasonCache).
pub type WaitingReasons = std::collections::BTreeMap<String, (String, String)>;

pub struct KubeRuntimeManager {
    runtime: Arc<RemoteRuntime>,
    cfg: RuntimeManagerConfig,
    crash_backoff: Backoff,
    images: Arc<ImageManager>,
    recorder: Arc<dyn EventRecorder>,
    /// Services, ConfigMaps and Secrets for container environments.
    env_source: Option<Arc<dyn container::EnvSource>>,
    /// The volume manager's set-up volumes, for container mounts.
    volumes: Arc<dyn PodVolumes>,
    /// The node's IPs as the kubelet knows them (--node-ip, else the Node).
    host_ips: HostIps,
    /// Why each container of each pod is waiting, by pod UID, read by
    /// status generation.
    reasons: Mutex<HashMap<String, WaitingReasons>>,
    /// Termination messages of exited instances, read once each.
    term_messages: termination::TerminationMessages,
    /// What GetPods kept of the last relist's listings.
    listings: listing_memo::ListingMemo,
    /// Container stops under way, off the pod workers.
    killer: killer::Killer,
    /// postStart hooks under way or failed, off the pod workers.
    post_start: post_start::PostStartHooks,
    /// Runs httpGet and sleep hooks (exec hooks are async CRI calls).
    hook_runner: Arc<HandlerRunner>,
    /// RuntimeClass -> handler, with an API server; None in standalone mode.
    runtime_classes: Option<Arc<crate::runtimeclass::Manager>>,
    devices: Option<crate::cm::devicemanager::DeviceManager>,
    dra: Option<crate::cm::dra::DraManager>,
    cpus: crate::cm::cpumanager::CpuManager,
    memory: crate::cm::memorymanager::MemoryManager,
    allocation: Arc<crate::allocation::Manager>,
    userns: Option<Arc<crate::userns::UsernsManager>>,
    /// The runtime's handlers as of its last ready CRI Status (the
    /// kubelet's runtime-status thread keeps them current).
    runtime_handlers: std::sync::Mutex<Vec<crate::container::RuntimeHandler>>,
}

/// PLEG's view of the runtime: the inherent methods, which the pod workers
/// and housekeeping also call directly.
impl crate::container::PodSource for KubeRuntimeManager {
    fn get_pods(&self) -> Result<Arc<Vec<RuntimePod>>, CriError> {
        KubeRuntimeManager::get_pods(self)
    }

    fn get_pod_status(&self, uid: &str, name: &str, ns: &str) -> Result<PodStatus, CriError> {
        KubeRuntimeManager::get_pod_status(self, uid, name, ns)
    }
}

/// What one SyncPod did.
#[derive(Debug, Default)]
pub struct SyncPodResult {
    /// What failed; empty is success.
    pub errors: Vec<SyncError>,
    /// A sandbox was made or a container started: the next relist reports
    /// a change, and the pod's status waits for it.
    pub started: bool,
}

impl KubeRuntimeManager {
    pub fn new(runtime: Arc<RemoteRuntime>, cfg: RuntimeManagerConfig, deps: RuntimeDeps) -> Self {
        let RuntimeDeps {
            recorder,
            env_source,
            volumes,
            host_ips,
            runtime_classes,
            on_image_pulled,
            on_container_stopped,
            devices,
            dra,
            cpus,
            memory,
            allocation,
            userns,
        } = deps;
        let images = ImageManager::new(
            Arc::clone(&runtime) as Arc<dyn crate::images::puller::ImageService>,
            Arc::clone(&recorder),
            cfg.image_pulls,
            on_image_pulled,
        );
        KubeRuntimeManager {
            runtime: Arc::clone(&runtime),
            cfg,
            crash_backoff: Backoff::new(
                CRASH_BACKOFF_INITIAL,
                CRASH_BACKOFF_MAX,
                CRASH_BACKOFF_RESET,
            ),
            images,
            recorder,
            env_source,
            volumes,
            host_ips,
            reasons: Mutex::new(HashMap::new()),
            term_messages: termination::TerminationMessages::default(),
            listings: listing_memo::ListingMemo::default(),
            killer: killer::Killer::new(
                Arc::clone(&runtime) as Arc<dyn killer::StopContainer>,
                on_container_stopped,
            ),
            post_start: post_start::PostStartHooks::default(),
            hook_runner: Arc::default(),
            runtime_classes,
            devices,
            dra,
            cpus,
            memory,
            allocation,
            userns,
            runtime_handlers: std::sync::Mutex::default(),
        }
    }

    /// The pod's RuntimeClass handler (upstream createPodSandbox's
    /// LookupRuntimeHandler); standalone mode has no classes to look in.
    fn runtime_handler(&self, pod: &Pod) -> Result<String, crate::runtimeclass::LookupError> {
        let name = pod.spec_or_default().runtime_class_name.as_deref();
        match (&self.runtime_classes, name.filter(|n| !n.is_empty())) {
            (_, None) => Ok(String::new()),
            (Some(m), name) => m.lookup_runtime_handler(name),
            (None, Some(n)) => Err(crate::runtimeclass::LookupError::NoApiServer(n.into())),
        }
    }

    /// Frees the ID blocks of pods neither known nor running (upstream
    /// CleanupOrphanedPodUsernsAllocations, from housekeeping).
    pub fn cleanup_user_namespaces(&self, active: &HashSet<String>) {
        if let Some(m) = &self.userns {
            m.clean_up_orphans(active);
        }
    }

    /// What containers are given of the node's swap.
    pub fn swap_config(&self) -> &swap::SwapConfig {
        &self.cfg.swap
    }

    /// Where pod and container events go.
    pub fn recorder(&self) -> &Arc<dyn EventRecorder> {
        &self.recorder
    }

    pub fn runtime(&self) -> &Arc<RemoteRuntime> {
        &self.runtime
    }

    /// Brings the pod's runtime state one step closer to its spec (upstream
    /// SyncPod).
    pub fn sync_pod(
        &self,
        pod: &Pod,
        status: &PodStatus,
        probes: &actions::ProbeResults,
    ) -> SyncPodResult {
        let mut started = false;
        let errors = self.sync_pod_steps(pod, status, probes, &mut started);
        SyncPodResult { errors, started }
    }

    /// SyncPod's steps; returns what failed, and sets `started` when a
    /// sandbox was made or a container started.
    fn sync_pod_steps(
        &self,
        pod: &Pod,
        status: &PodStatus,
        probes: &actions::ProbeResults,
        started: &mut bool,
    ) -> Vec<SyncError> {
        let plan = actions::compute_pod_actions(pod, status, probes);
        log::debug!("pod {}: actions {plan:?}", pod.full_name());
        let mut errors = self.kill_failed_post_start(pod, status);

        if plan.kill_pod {
            if plan.create_sandbox && plan.attempt > 0 {
                if let Some(fresh) = self.sandbox_still_current(pod) {
                    // The sandbox stands: the sync goes on from what the
                    // runtime says now (it cannot come back here, as that
                    // status has the sandbox unchanged).
                    errors.extend(self.sync_pod_steps(pod, &fresh, probes, started));
                    return errors;
                }
                self.recorder.pod_event(
                    pod,
                    EventType::Normal,
                    events::SANDBOX_CHANGED,
                    "Pod sandbox changed, it will be killed and re-created.",
                );
            }
            match self.kill_pod_status(Some(pod), status, None) {
                Ok(KillProgress::Done) => {}
                // Resumed when the stops finish (the pod is woken).
                Ok(KillProgress::Stopping) => return errors,
                Err(e) => {
                    errors.push(e);
                    return errors;
                }
            }
            if plan.create_sandbox {
                self.purge_init_containers(pod, status);
            }
        } else {
            let mut stopping = false;
            for k in &plan.containers_to_kill {
                log::info!("pod {}: {}", pod.full_name(), k.reason);
                let grace = Some(container_kill_grace(pod, k));
                match self.kill_container(pod, &k.id, &k.name, grace, Some(&k.reason)) {
                    Ok(p) => stopping |= p == KillProgress::Stopping,
                    Err(e) => {
                        errors.push(e);
                        return errors;
                    }
                }
            }
            // Restarts wait for the stops: the next sync (woken by their
            // completion) sees the containers exited and starts them.
            if stopping {
                return errors;
            }
        }
        // Starts wait for a postStart hook under way, as upstream's
        // sequential starts do; its completion wakes the pod.
        if self.post_start.running(pod.uid()) {
            return errors;
        }

        let (sandbox_id, pod_ips) = if plan.create_sandbox {
            match self.create_sandbox(pod, plan.attempt) {
                Ok(v) => {
                    *started = true;
                    v
                }
                Err(e) => {
                    errors.push(e);
                    return errors;
                }
            }
        } else {
            match &plan.sandbox_id {
                Some(id) if !plan.kill_pod => (id.clone(), status.ips()),
                _ => return errors,
            }
        };
        let userns = match self.pod_user_namespace(pod) {
            Ok(m) => m,
            Err(e) => {
                errors.push(SyncError::new(None, "CreatePodSandboxError", e));
                return errors;
            }
        };
        let sandbox_config =
            sandbox::generate_sandbox_config(pod, plan.attempt, &self.cfg, userns.as_ref());
        let target = StartTarget {
            pod,
            sandbox_id: &sandbox_id,
            sandbox_config: &sandbox_config,
            pod_ips: &pod_ips,
            status,
        };

        // Before init containers, as upstream: a debugger must start even
        // when an init container cannot.
        for ec in plan
            .ephemeral_to_start
            .iter()
            .filter_map(|&i| pod.ephemeral_containers().get(i))
        {
            let c = crate::podutil::ephemeral_as_container(ec);
            match self.start_container(&target, &c) {
                Ok(()) => *started = true,
                Err(e) => errors.push(e),
            }
        }
        for c in plan
            .init_to_start
            .iter()
            .filter_map(|&i| pod.init_containers().get(i))
        {
            match self.start_container(&target, c) {
                Ok(()) => *started = true,
                Err(e) => {
                    errors.push(e);
                    // A sidecar that cannot start yet (back-off) must not
                    // hold back the others or the app containers; a regular
                    // init container must finish before anything after it.
                    if !crate::podutil::is_restartable_init(c) {
                        return errors;
                    }
                }
            }
            if self.post_start.running(pod.uid()) {
                return errors;
            }
        }
        for &i in &plan.containers_to_start {
            match self.start_container(&target, &pod.containers()[i]) {
                Ok(()) => *started = true,
                Err(e) => errors.push(e),
            }
            if self.post_start.running(pod.uid()) {
                break;
            }
        }
        errors
    }

    /// Kills the containers whose async postStart hook failed since the
    /// last sync (upstream kills right after the hook); each is reported
    /// as a PostStartHookError.
    fn kill_failed_post_start(&self, pod: &Pod, status: &PodStatus) -> Vec<SyncError> {
        let mut errors = Vec::new();
        for f in self.post_start.take_failed(pod.uid()) {
            let running = status.running_containers().any(|c| c.id == f.container_id);
            if running {
                let grace = Some(pod.kill_grace_seconds());
                if let Err(e) =
                    self.kill_container(pod, &f.container_id, &f.container, grace, Some(&f.message))
                {
                    log::warn!("pod {}: kill after failed postStart: {e}", pod.full_name());
                }
            }
            errors.push(SyncError::new(
                Some(&f.container),
                "PostStartHookError",
                f.message,
            ));
        }
        errors
    }

    fn create_sandbox(&self, pod: &Pod, attempt: u32) -> Result<(String, Vec<String>), SyncError> {
        self.prepare_dynamic_resources(pod)?;
        // Upstream: the event carries the error, the pod's status the
        // longer message createPodSandbox builds.
        let fail = |err: String| {
            self.recorder.pod_event(
                pod,
                EventType::Warning,
                events::FAILED_CREATE_POD_SANDBOX,
                &format!("Failed to create pod sandbox: {err}"),
            );
            let msg = format!(
                "Failed to create sandbox for pod \"{}({})\": {err}",
                pod.full_name(),
                pod.uid()
            );
            SyncError::new(None, "CreatePodSandboxError", msg)
        };
        let handler = self.runtime_handler(pod).map_err(|e| {
            crate::metrics::started_pod(false);
            fail(e.to_string())
        })?;
        if !handler.is_empty() {
            log::info!(
                "pod {}: running with runtime handler {handler:?}",
                pod.full_name()
            );
        }
        let userns = self.sandbox_user_namespace(pod, &handler).map_err(|e| {
            crate::metrics::started_pod(false);
            fail(e)
        })?;
        for field in security_context::unsupported_fields(pod) {
            log::warn!(
                "pod {}: {field} is not supported by rkubelet and is ignored",
                pod.full_name()
            );
        }
        let config = sandbox::generate_sandbox_config(pod, attempt, &self.cfg, userns.as_ref());
        std::fs::create_dir_all(&config.log_directory).map_err(|e| {
            SyncError::new(
                None,
                "CreatePodSandboxError",
                format!("create pod log directory {}: {e}", config.log_directory),
            )
        })?;
        let result = self.runtime.run_pod_sandbox(config, &handler);
        crate::metrics::started_pod(result.is_ok());
        let id = result.map_err(|e| fail(e.status_text()))?;
        let status = self
            .runtime
            .pod_sandbox_status(&id)
            .map_err(|e| SyncError::runtime(None, "CreatePodSandboxError", &e))?;
        let ips = sandbox::to_sandbox_status(&status)
            .ip
            .into_iter()
            .collect::<Vec<_>>();
        Ok((id, ips))
    }

    /// Removes a container together with its log files, rotated ones
    /// included, and its /var/log/containers symlink (upstream
    /// removeContainer + removeContainerLog). Already gone is fine.
    pub fn remove_container(&self, id: &str) -> Result<(), CriError> {
        match self.runtime.container_status(id) {
            Ok(status) => self.remove_container_log(id, &status),
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        }
        ignore_not_found(self.runtime.remove_container(id))
    }

    fn remove_container_log(&self, id: &str, status: &api::ContainerStatus) {
        if !status.log_path.is_empty() {
            crate::logs::clean_logs(std::path::Path::new(&status.log_path));
        }
        let (Some(pod), Some(name)) = (
            labels::pod_identity(&status.labels),
            status.labels.get(labels::CONTAINER_NAME_LABEL),
        ) else {
            return;
        };
        if let Err(e) = crate::logs::remove_symlink(
            &self.cfg.container_logs_dir,
            &pod.name,
            &pod.namespace,
            name,
            id,
        ) {
            log::warn!("container {id}: removing log symlink: {e}");
        }
    }

    /// Removes every container and sandbox of a pod that is gone for good.
    pub fn remove_pod(&self, uid: &str) -> Result<(), CriError> {
        let selector = HashMap::from([(labels::POD_UID_LABEL.to_string(), uid.to_string())]);
        let c_filter = api::ContainerFilter {
            label_selector: selector.clone(),
            ..Default::default()
        };
        for c in self.runtime.list_containers(Some(c_filter))? {
            self.remove_container(&c.id)?;
        }
        let sb_filter = api::PodSandboxFilter {
            label_selector: selector,
            ..Default::default()
        };
        for sb in self.runtime.list_pod_sandbox(Some(sb_filter))? {
            // A stopped sandbox is not stopped again: each StopPodSandbox
            // runs the CNI teardown once more, and RemovePodSandbox stops
            // what still runs anyway (CRI); upstream's GC removes only
            // sandboxes that are not ready.
            if sb.state.enum_value_or_default() == api::PodSandboxState::SANDBOX_READY {
                ignore_not_found(self.runtime.stop_pod_sandbox(&sb.id))?;
            }
            ignore_not_found(self.runtime.remove_pod_sandbox(&sb.id))?;
        }
        self.forget_pod(uid);
        Ok(())
    }

    /// A new sandbox starts init from scratch: old init instances would
    /// otherwise read as progress made (upstream purgeInitContainers).
    fn purge_init_containers(&self, pod: &Pod, status: &PodStatus) {
        let inits: HashSet<&str> = pod
            .init_containers()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        for c in status
            .containers
            .iter()
            .filter(|c| inits.contains(c.name.as_str()))
        {
            if let Err(e) = self.remove_container(&c.id) {
                log::warn!(
                    "pod {}: remove init container {}: {e}",
                    pod.full_name(),
                    c.id
                );
            }
        }
    }

    /// Spawns the runtime manager's own threads: the image puller's and
    /// the hook runner's.
    pub fn start_threads(
        &self,
        shutdown: &crossbeam_channel::Receiver<()>,
    ) -> std::io::Result<Vec<crate::util::worker::Worker>> {
        let mut threads = self.images.start(shutdown)?;
        threads.extend(self.hook_runner.start(shutdown)?);
        Ok(threads)
    }

    /// Why the named container is waiting, if a sync recorded a reason.
    pub fn waiting_reason(&self, uid: &str, container: &str) -> Option<(String, String)> {
        let reasons = lock(&self.reasons);
        reasons.get(uid)?.get(container).cloned()
    }

    /// Every waiting reason recorded for the pod's containers, by name:
    /// the pod syncer compares them around a sync to know whether the
    /// status it made before the sync is out of date.
    pub fn waiting_reasons(&self, uid: &str) -> WaitingReasons {
        let reasons = lock(&self.reasons);
        reasons.get(uid).cloned().unwrap_or_default()
    }

    pub fn forget_pod(&self, uid: &str) {
        lock(&self.reasons).remove(uid);
        self.term_messages.forget_pod(uid);
        self.images.forget_pod(uid);
        self.killer.forget_pod(uid);
        self.post_start.forget_pod(uid);
        self.recorder.forget_pod(uid);
    }

    /// Drops back-off entries idle for long.
    pub fn gc_backoffs(&self) {
        let now = SystemTime::now();
        self.crash_backoff.gc(now);
        self.images.gc_backoffs(now);
        self.killer.gc(std::time::Instant::now());
    }
}

/// A call on something already gone has nothing left to do.
pub fn ignore_not_found(r: Result<(), CriError>) -> Result<(), CriError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

pub fn from_unix_nanos(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}
