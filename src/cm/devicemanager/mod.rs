//! The device manager (upstream `pkg/kubelet/cm/devicemanager`): serves the
//! device plugin API v1beta1 `Registration` on
//! `<root-dir>/device-plugins/kubelet.sock`, dials each plugin back on its
//! endpoint and follows its `ListAndWatch`, puts the resources in node
//! capacity and allocatable, and gives containers their devices.
//!
//! Threads: `device-manager` (registrations, the endpoint grace period)
//! and `grpc-plugins-0`, the completion-queue thread of the plugins' gRPC
//! environment: the Registration server's handler, every plugin's
//! `ListAndWatch` stream and every `Allocate` complete there. Neither
//! count grows with plugins, devices or pods.
//!
//! Deviation: upstream calls `GetPreferredAllocation` and `Allocate` in its
//! admission handler, on the sync loop, and a slow plugin holds every pod.
//! Here admission only reserves devices (and refuses, with upstream's
//! reason and message, a pod there are not enough for); the RPCs then run
//! on the completion queue, and the pod's containers wait as
//! `ContainerCreating` until the answer is in. A plugin that fails
//! `Allocate` leaves them in `CreateContainerConfigError` with its message,
//! and the call is tried again at the next sync.

mod allocate;
mod checkpoint;
mod endpoint;
mod pod_devices;
mod server;
mod spew;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use crate::cri::api;
use crate::cri::deviceplugin::v1beta1::api as pluginapi;
use crate::events::{EventRecorder, EventType};
use crate::lifecycle::admission::Rejection;
use crate::podutil::PodExt;
use crate::util::worker::{self, ShutdownStage, Worker};
use endpoint::Endpoint;
use pod_devices::{Allocation, ContainerDevices, PodDevices};

/// The directory under the root dir (upstream DevicePluginPath).
pub const DEVICE_PLUGINS_DIR: &str = "device-plugins";
/// The kubelet's own socket in it (upstream KubeletSocket).
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The API version served (upstream SupportedVersions).
pub const SUPPORTED_VERSIONS: &[&str] = &["v1beta1"];
/// Upstream's value for a healthy device.
const HEALTHY: &str = "Healthy";
/// How long a resource whose plugin went away stays in capacity, at zero
/// allocatable, before it is removed (upstream endpointStopGracePeriod).
const ENDPOINT_STOP_GRACE: Duration = Duration::from_secs(5 * 60);
/// How often the manager thread looks for expired resources.
const TICK: Duration = Duration::from_secs(5);
/// Registrations waiting for the manager thread; a full queue refuses.
const REGISTRATION_QUEUE: usize = 16;
/// How soon a failed `Allocate` is tried again, when the pod's worker
/// asks (its own retry is later still).
const ALLOCATE_RETRY: Duration = Duration::from_secs(10);
/// The admission refusal's reason (upstream lifecycle.UnexpectedAdmissionError).
const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

#[derive(Debug, thiserror::Error)]
pub enum DeviceManagerError {
    #[error("device plugin directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("serving device plugin registration on {path}: {message}")]
    Serve { path: PathBuf, message: String },
    #[error("starting the device-manager thread: {0}")]
    Thread(std::io::Error),
}

/// Called with a pod's UID when its devices are allocated: its worker
/// takes the answer at once rather than at its next retry.
pub type OnAllocated = Arc<dyn Fn(&str) + Send + Sync>;

/// What node status shows of the device plugins (upstream
/// GetCapacity): capacity counts every device, allocatable the healthy
/// ones; `removed` resources are reported at zero capacity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceCapacity {
    pub capacity: BTreeMap<String, i64>,
    pub allocatable: BTreeMap<String, i64>,
    pub removed: Vec<String>,
}

/// What a container gets from its plugins (upstream
/// DeviceRunContainerOptions).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<api::Mount>,
    pub devices: Vec<api::Device>,
    pub annotations: BTreeMap<String, String>,
}

/// Why a container cannot start yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceWait {
    /// The plugin's answer is not in yet; the pod is woken when it is.
    Pending,
    /// The plugin refused or failed: the message for the container's
    /// `CreateContainerConfigError`.
    Failed(String),
}

/// One registered resource.
struct Resource {
    /// None once the plugin went away, from `stopped`.
    endpoint: Option<Arc<Endpoint>>,
    stopped: Option<Instant>,
    /// Device ID -> healthy, and its NUMA nodes.
    devices: BTreeMap<String, DeviceInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct DeviceInfo {
    healthy: bool,
    numa: Vec<i64>,
}

impl Resource {
    fn stopped_since(at: Instant) -> Resource {
        Resource {
            endpoint: None,
            stopped: Some(at),
            devices: BTreeMap::new(),
        }
    }

    fn healthy(&self) -> BTreeSet<String> {
        self.devices
            .iter()
            .filter(|(_, d)| d.healthy)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

#[derive(Default)]
struct State {
    resources: BTreeMap<String, Resource>,
    pods: PodDevices,
    /// Containers whose `PreStartContainer` answered for the start under
    /// way: (uid, container) -> result.
    pre_start: BTreeMap<(String, String), Result<(), String>>,
    pre_start_pending: HashSet<(String, String)>,
    /// Pods whose allocation future is under way.
    allocating: HashSet<String>,
}

/// Shared by the manager thread, the gRPC callbacks, admission (the sync
/// loop), the pod workers and node status.
pub(crate) struct Inner {
    dir: PathBuf,
    state: Mutex<State>,
    recorder: Arc<dyn EventRecorder>,
    on_allocated: OnAllocated,
    /// Asks node status for an update now (capacity changed).
    on_capacity_changed: Box<dyn Fn() + Send + Sync>,
    env: Arc<grpcio::Environment>,
}

/// The device manager; cheap to share.
#[derive(Clone)]
pub struct DeviceManager {
    inner: Arc<Inner>,
}

pub struct DeviceManagerDeps {
    pub recorder: Arc<dyn EventRecorder>,
    pub on_allocated: OnAllocated,
    pub on_capacity_changed: Box<dyn Fn() + Send + Sync>,
}

impl DeviceManager {
    /// Reads the checkpoint under `<root_dir>/device-plugins`; nothing runs
    /// until [`DeviceManager::start`].
    pub fn new(root_dir: &Path, deps: DeviceManagerDeps) -> DeviceManager {
        let dir = root_dir.join(DEVICE_PLUGINS_DIR);
        let env = Arc::new(
            grpcio::EnvBuilder::new()
                .cq_count(1)
                .name_prefix("grpc-plugins")
                .build(),
        );
        let inner = Arc::new(Inner {
            dir,
            state: Mutex::new(State::default()),
            recorder: deps.recorder,
            on_allocated: deps.on_allocated,
            on_capacity_changed: deps.on_capacity_changed,
            env,
        });
        inner.restore_checkpoint();
        DeviceManager { inner }
    }

    /// Empties the socket directory (but for the checkpoint) so that every
    /// plugin registers again, serves `Registration` on `kubelet.sock`,
    /// and starts the `device-manager` thread.
    pub fn start(&self, shutdown: Receiver<()>) -> Result<Worker, DeviceManagerError> {
        let dir = &self.inner.dir;
        let io = |source| DeviceManagerError::Dir {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        checkpoint::remove_contents(dir).map_err(io)?;
        let (tx, rx) = crossbeam_channel::bounded(REGISTRATION_QUEUE);
        let socket = dir.join(KUBELET_SOCKET);
        let server = server::serve(&self.inner.env, &socket, tx)?;
        let inner = Arc::clone(&self.inner);
        worker::spawn("device-manager", ShutdownStage::Workers, move || {
            inner.run(&rx, &shutdown);
            drop(server);
        })
        .map_err(DeviceManagerError::Thread)
    }

    /// Node status's view (upstream GetCapacity); drops resources whose
    /// plugin has been gone longer than the grace period.
    pub fn capacity(&self) -> DeviceCapacity {
        self.inner.capacity(Instant::now())
    }

    /// Admission (upstream's resource allocator admit handler): reserves
    /// devices for every container of `pod` that asks for a plugin's
    /// resource, or refuses with upstream's reason and message. Devices of
    /// pods not in `holders` are freed first (upstream
    /// updateAllocatedDevices). The RPCs run afterwards, off the sync loop.
    pub fn admit(&self, pod: &Pod, holders: Option<&HashSet<String>>) -> Result<(), Rejection> {
        if let Some(holders) = holders {
            self.inner.release_inactive(holders);
        }
        match self.inner.reserve(pod) {
            Ok(true) => {
                self.inner.spawn_allocation(pod);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(e) => Err(Rejection {
                reason: UNEXPECTED_ADMISSION_ERROR.into(),
                message: format!("Allocate failed due to {e}, which is unexpected"),
            }),
        }
    }

    /// Undoes [`DeviceManager::admit`] for a pod a later admission check
    /// refused.
    pub fn release(&self, uid: &str) {
        let mut s = lock(&self.inner.state);
        s.pods.remove_pod(uid);
    }

    /// Frees the devices of pods that are gone (housekeeping).
    pub fn release_inactive(&self, active: &HashSet<String>) {
        self.inner.release_inactive(active);
    }

    /// What `container` of `pod` gets from its plugins, once they have
    /// answered; runs `PreStartContainer` before each start of a container
    /// whose plugin asks for it (upstream GetDeviceRunContainerOptions).
    pub fn run_options(&self, pod: &Pod, c: &Container) -> Result<RunOptions, DeviceWait> {
        self.inner.run_options(pod, &c.name)
    }
}

/// A container's requests of extended resources: the limits, as upstream
/// reads them (devices are integers; requests equal limits).
fn device_limits(c: &Container) -> BTreeMap<String, usize> {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    limits
        .into_iter()
        .flatten()
        .filter(|(name, _)| crate::nodestatus::setters::is_extended_resource_name(name))
        .filter_map(|(name, q)| q.0.trim().parse::<usize>().ok().map(|n| (name.clone(), n)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

impl Inner {
    fn run(
        self: &Arc<Self>,
        registrations: &Receiver<pluginapi::RegisterRequest>,
        shutdown: &Receiver<()>,
    ) {
        let ticker = crossbeam_channel::tick(TICK);
        let mut last = self.capacity(Instant::now());
        loop {
            crossbeam_channel::select! {
                recv(registrations) -> r => match r {
                    Ok(r) => self.add_endpoint(r),
                    Err(_) => return,
                },
                recv(ticker) -> _ => {},
                recv(shutdown) -> _ => return,
            }
            let now = self.capacity(Instant::now());
            if now != last {
                (self.on_capacity_changed)();
                last = now;
            }
        }
    }

    /// Dials a registered plugin back and starts following its devices
    /// (upstream addEndpoint); a plugin that registered before is replaced.
    fn add_endpoint(self: &Arc<Self>, r: pluginapi::RegisterRequest) {
        let socket = self.dir.join(&r.endpoint);
        let options = r.options.clone().into_option().unwrap_or_default();
        let endpoint = match Endpoint::dial(&self.env, &r.resource_name, &socket, options) {
            Ok(e) => Arc::new(e),
            Err(e) => {
                log::error!("device plugin {}: {e}", r.resource_name);
                self.node_event(
                    EventType::Warning,
                    "FailedRegistration",
                    &format!("device plugin {}: {e}", r.resource_name),
                );
                return;
            }
        };
        {
            let mut s = lock(&self.state);
            let res = s
                .resources
                .entry(r.resource_name.clone())
                .or_insert_with(|| Resource::stopped_since(Instant::now()));
            res.endpoint = Some(Arc::clone(&endpoint));
            res.stopped = None;
        }
        log::info!(
            "device plugin {} registered on {}",
            r.resource_name,
            socket.display()
        );
        let this = Arc::clone(self);
        let ep = Arc::clone(&endpoint);
        if let Err(e) = endpoint.list_and_watch(move |update| this.on_update(&ep, update)) {
            self.on_update(&endpoint, Err(e));
        }
    }

    /// A `ListAndWatch` message or the stream's end (upstream's endpoint
    /// callback and runEndpoint's aftermath).
    fn on_update(&self, e: &Arc<Endpoint>, update: Result<Vec<pluginapi::Device>, String>) {
        let mut s = lock(&self.state);
        let Some(res) = s.resources.get_mut(e.resource()) else {
            return;
        };
        // A plugin that registered again replaced this endpoint.
        if !res.endpoint.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, e)) {
            return;
        }
        match update {
            Ok(devices) => res.devices = devices_of(e.resource(), devices),
            Err(why) => {
                log::warn!("device plugin {}: ListAndWatch ended: {why}", e.resource());
                // upstream markResourceUnhealthy, then the grace period.
                res.endpoint = None;
                res.stopped = Some(Instant::now());
                for d in res.devices.values_mut() {
                    d.healthy = false;
                }
                drop(s);
                self.node_event(
                    EventType::Warning,
                    "DevicePluginUnhealthy",
                    &format!(
                        "device plugin {} stopped: {why}; its devices are unhealthy until it registers again",
                        e.resource()
                    ),
                );
                (self.on_capacity_changed)();
                return;
            }
        }
        drop(s);
        (self.on_capacity_changed)();
    }

    fn capacity(&self, now: Instant) -> DeviceCapacity {
        let mut s = lock(&self.state);
        let mut out = DeviceCapacity::default();
        let mut checkpoint = false;
        let expired: Vec<String> = s
            .resources
            .iter()
            .filter(|(_, r)| {
                r.stopped
                    .is_some_and(|t| now.duration_since(t) > ENDPOINT_STOP_GRACE)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in expired {
            s.resources.remove(&name);
            out.removed.push(name);
            checkpoint = true;
        }
        for (name, r) in &s.resources {
            out.capacity.insert(name.clone(), r.devices.len() as i64);
            let healthy = r.devices.values().filter(|d| d.healthy).count();
            out.allocatable.insert(name.clone(), healthy as i64);
        }
        if checkpoint {
            self.write_checkpoint(&s);
        }
        out
    }

    fn release_inactive(&self, active: &HashSet<String>) {
        let mut s = lock(&self.state);
        if s.pods.retain_pods(active) {
            s.pre_start.retain(|(uid, _), _| active.contains(uid));
            self.write_checkpoint(&s);
        }
    }

    /// Chooses devices for each container that asks for a plugin's
    /// resource and does not hold them yet; true when any was chosen.
    fn reserve(&self, pod: &Pod) -> Result<bool, String> {
        let uid = pod.uid();
        let mut s = lock(&self.state);
        let mut chosen = PodDevices::default();
        let mut reusable: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let containers = pod
            .init_containers()
            .iter()
            .map(|c| (c, true))
            .chain(pod.containers().iter().map(|c| (c, false)));
        for (c, init) in containers {
            for (resource, needed) in device_limits(c) {
                if let Some(have) = s.pods.get(uid, &c.name, &resource) {
                    // Already held (a restart read them from the checkpoint).
                    if init {
                        reusable
                            .entry(resource)
                            .or_default()
                            .extend(have.ids.iter().cloned());
                    }
                    continue;
                }
                let Some(res) = s.resources.get(&resource) else {
                    if s.pods.in_use(&resource).is_empty() {
                        // Not a device plugin's: fit checks it.
                        continue;
                    }
                    return Err(format!("can't allocate unregistered device {resource}"));
                };
                let healthy = res.healthy();
                let mut in_use = s.pods.in_use(&resource);
                in_use.extend(chosen.in_use(&resource));
                let reuse = reusable.get(&resource).cloned().unwrap_or_default();
                let ids = pod_devices::choose(&pod_devices::Request {
                    resource: &resource,
                    needed,
                    healthy: &healthy,
                    in_use: &in_use,
                    reusable: &reuse,
                })?;
                if init {
                    reusable
                        .entry(resource.clone())
                        .or_default()
                        .extend(ids.iter().cloned());
                } else if let Some(r) = reusable.get_mut(&resource) {
                    r.retain(|id| !ids.contains(id));
                }
                let d = ContainerDevices {
                    ids,
                    allocation: Allocation::Reserved,
                };
                chosen.insert(uid, &c.name, &resource, d);
            }
        }
        let any = chosen.has_pod(uid);
        for (u, c, r, d) in chosen.iter() {
            s.pods.insert(u, c, r, d.clone());
        }
        Ok(any)
    }

    fn run_options(self: &Arc<Self>, pod: &Pod, container: &str) -> Result<RunOptions, DeviceWait> {
        let uid = pod.uid();
        let mut s = lock(&self.state);
        let Some(held) = s.pods.container(uid, container) else {
            return Ok(RunOptions::default());
        };
        let mut responses = Vec::new();
        for (resource, d) in held {
            match &d.allocation {
                Allocation::Allocated(resp) => {
                    responses.push((resource.clone(), d.ids.clone(), resp.clone()));
                }
                Allocation::Reserved => return Err(DeviceWait::Pending),
                Allocation::Failed { why, at } => {
                    let (why, at) = (why.clone(), *at);
                    if at.elapsed() >= ALLOCATE_RETRY {
                        drop(s);
                        self.retry_allocation(pod);
                    }
                    return Err(DeviceWait::Failed(why));
                }
            }
        }
        let key = (uid.to_string(), container.to_string());
        let needs_pre_start: Vec<(String, BTreeSet<String>)> = responses
            .iter()
            .filter(|(r, _, _)| {
                s.resources
                    .get(r)
                    .and_then(|r| r.endpoint.as_ref())
                    .is_some_and(|e| e.options().pre_start_required)
            })
            .map(|(r, ids, _)| (r.clone(), ids.clone()))
            .collect();
        if !needs_pre_start.is_empty() {
            match s.pre_start.remove(&key) {
                Some(Ok(())) => {}
                Some(Err(why)) => return Err(DeviceWait::Failed(why)),
                None => {
                    if s.pre_start_pending.insert(key.clone()) {
                        drop(s);
                        self.spawn_pre_start(pod, key, needs_pre_start);
                    }
                    return Err(DeviceWait::Pending);
                }
            }
        }
        Ok(merge_responses(responses.iter().map(|(_, _, r)| r)))
    }

    fn node_event(&self, kind: EventType, reason: &str, message: &str) {
        self.recorder.node_event(kind, reason, message);
    }
}

/// The devices a `ListAndWatch` message lists, by ID; a second device
/// with an ID already listed is ignored, as upstream's map keeps one.
fn devices_of(resource: &str, devices: Vec<pluginapi::Device>) -> BTreeMap<String, DeviceInfo> {
    let mut out = BTreeMap::new();
    for d in devices {
        if d.ID.is_empty() {
            log::warn!("device plugin {resource}: a device without an ID is ignored");
            continue;
        }
        let numa = d
            .topology
            .as_ref()
            .map(|t| t.nodes.iter().map(|n| n.ID).collect())
            .unwrap_or_default();
        out.entry(d.ID).or_insert(DeviceInfo {
            healthy: d.health == HEALTHY,
            numa,
        });
    }
    out
}

/// The container's options from every resource's answer, in resource
/// order; a mount or device path already taken is not added twice.
fn merge_responses<'a>(
    responses: impl Iterator<Item = &'a pluginapi::ContainerAllocateResponse>,
) -> RunOptions {
    let mut out = RunOptions::default();
    for resp in responses {
        let mut envs: Vec<_> = resp.envs.iter().collect();
        envs.sort();
        for (k, v) in envs {
            out.envs.push((k.clone(), v.clone()));
        }
        for m in &resp.mounts {
            if out
                .mounts
                .iter()
                .any(|x| x.container_path == m.container_path)
            {
                continue;
            }
            out.mounts.push(api::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.read_only,
                ..Default::default()
            });
        }
        for d in &resp.devices {
            if out
                .devices
                .iter()
                .any(|x| x.container_path == d.container_path)
            {
                continue;
            }
            out.devices.push(api::Device {
                container_path: d.container_path.clone(),
                host_path: d.host_path.clone(),
                permissions: d.permissions.clone(),
                ..Default::default()
            });
        }
        for (k, v) in &resp.annotations {
            out.annotations
                .entry(k.clone())
                .or_insert_with(|| v.clone());
        }
    }
    out
}

/// The registration requests' channel end the server sends on.
pub(crate) type Registrations = Sender<pluginapi::RegisterRequest>;
