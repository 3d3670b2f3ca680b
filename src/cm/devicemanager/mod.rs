//! The device manager (upstream `pkg/kubelet/cm/devicemanager`): serves the
//! device plugin API v1beta1 `Registration` on
//! `<root-dir>/device-plugins/kubelet.sock`, dials each plugin back on its
//! endpoint and follows its `ListAndWatch`, puts the resources in node
//! capacity and allocatable, and gives containers their devices.
//!
//! Threads: `device-manager` (registrations, the endpoint grace period,
//! the checkpoint's writes) and `grpc-cq-0`, the completion-queue thread
//! of the gRPC environment the runtime client shares with every plugin:
//! the Registration server's handler, every plugin's `ListAndWatch`
//! stream and every `Allocate` complete there. Neither count grows with
//! plugins, devices or pods.
//!
//! Deviation: upstream calls `GetPreferredAllocation` and `Allocate` in its
//! admission handler, on the sync loop, and a slow plugin holds every pod.
//! Here admission only reserves devices (and refuses, with upstream's
//! reason and message, a pod there are not enough for); the RPCs then run
//! on the completion queue, and the pod's containers wait as
//! `ContainerCreating` until the answer is in. A plugin that fails
//! `Allocate` leaves them in `CreateContainerConfigError` with its message,
//! and the call is made again (at most every 10 s) when the pod's worker
//! next asks.

mod admission;
mod allocate;
mod checkpoint;
mod endpoint;
mod pod_devices;
mod server;
mod spew;
#[cfg(test)]
mod tests;
mod topology_hints;
mod watcher;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use crate::cri::api;
use crate::cri::deviceplugin::v1beta1::api as pluginapi;
use crate::events::{EventRecorder, EventType};
use crate::podutil::PodExt;
use crate::util::worker::{self, ShutdownStage, Worker};
use endpoint::Endpoint;
use pod_devices::{Allocation, Held, PodDevices};

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
    /// (resource, devices, healthy devices), by resource name.
    pub resources: Vec<(String, i64, i64)>,
    pub removed: Vec<String>,
}

/// What a container gets from its plugins (upstream
/// DeviceRunContainerOptions).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RunOptions {
    pub envs: Vec<(String, String)>,
    pub mounts: Vec<api::Mount>,
    pub devices: Vec<api::Device>,
    pub annotations: Vec<(String, String)>,
}

/// A container's devices of one resource on one NUMA node (none: devices
/// without topology), for the pod resources API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devices {
    pub resource: String,
    pub ids: Vec<String>,
    pub numa: Vec<i64>,
}

/// One device the node has, healthy or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatableDevice {
    pub resource: String,
    pub id: String,
    pub numa: Vec<i64>,
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
    name: String,
    /// None once the plugin went away, from `stopped`.
    endpoint: Option<Arc<Endpoint>>,
    stopped: Option<Instant>,
    /// As the last `ListAndWatch` message listed them.
    devices: Vec<Device>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Device {
    id: String,
    healthy: bool,
    numa: Vec<i64>,
}

impl Resource {
    fn stopped_since(name: String, at: Instant) -> Resource {
        Resource {
            name,
            endpoint: None,
            stopped: Some(at),
            devices: Vec::new(),
        }
    }

    /// Its plugin went (stream ended, socket gone): the devices turn
    /// unhealthy and the grace period starts (upstream
    /// markResourceUnhealthy and the endpoint's stop time).
    fn stop(&mut self, at: Instant) {
        self.endpoint = None;
        self.stopped = Some(at);
        for d in &mut self.devices {
            d.healthy = false;
        }
    }

    /// The healthy devices' IDs, sorted.
    fn healthy(&self) -> Vec<&str> {
        let mut ids: Vec<&str> = self
            .devices
            .iter()
            .filter(|d| d.healthy)
            .map(|d| d.id.as_str())
            .collect();
        ids.sort_unstable();
        ids
    }
}

/// `PreStartContainer` for one start of one container: None while the
/// call runs.
struct PreStart {
    uid: String,
    container: String,
    result: Option<Result<(), String>>,
}

#[derive(Default)]
struct State {
    resources: Vec<Resource>,
    pods: PodDevices,
    pre_start: Vec<PreStart>,
    /// Pods whose allocation future is under way.
    allocating: Vec<String>,
    /// The machine's NUMA nodes, which topology hints range over.
    numa_nodes: Vec<u32>,
}

impl State {
    fn resource(&self, name: &str) -> Option<&Resource> {
        self.resources.iter().find(|r| r.name == name)
    }

    fn resource_mut(&mut self, name: &str) -> Option<&mut Resource> {
        self.resources.iter_mut().find(|r| r.name == name)
    }

    fn endpoint(&self, name: &str) -> Option<Arc<Endpoint>> {
        self.resource(name)?.endpoint.clone()
    }

    /// A container's devices of one resource by the NUMA node they
    /// reported, sorted by node; those with no topology under upstream's
    /// `nodeWithoutTopology` (the checkpoint's DevicesPerNUMA, the pod
    /// resources API's grouping).
    fn ids_by_node(&self, h: &Held) -> Vec<(i64, Vec<String>)> {
        let devices = self
            .resource(&h.resource)
            .map(|r| r.devices.as_slice())
            .unwrap_or(&[]);
        let mut by_node: Vec<(i64, Vec<String>)> = Vec::new();
        for id in &h.ids {
            let numa = devices
                .iter()
                .find(|d| d.id == *id)
                .map(|d| d.numa.as_slice())
                .unwrap_or(&[]);
            let nodes = if numa.is_empty() {
                &[pod_devices::NODE_WITHOUT_TOPOLOGY][..]
            } else {
                numa
            };
            for n in nodes {
                match by_node.iter_mut().find(|(k, _)| k == n) {
                    Some((_, ids)) => ids.push(id.clone()),
                    None => by_node.push((*n, vec![id.clone()])),
                }
            }
        }
        by_node.sort_by_key(|(n, _)| *n);
        by_node
    }
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
    /// The checkpoint is behind the state: the manager thread writes it,
    /// so its fsync never holds the sync loop or the completion queue.
    checkpoint_due: (Sender<()>, Receiver<()>),
}

/// The device manager; cheap to share.
#[derive(Clone)]
pub struct DeviceManager {
    inner: Arc<Inner>,
}

pub struct DeviceManagerDeps {
    /// The gRPC environment of the plugins' servers and channels (the
    /// runtime client's: [`crate::cri::RemoteRuntime::grpc_env`]).
    pub grpc_env: Arc<grpcio::Environment>,
    pub recorder: Arc<dyn EventRecorder>,
    /// The machine's NUMA nodes, which topology hints range over.
    pub numa_nodes: Vec<u32>,
    pub on_allocated: OnAllocated,
    pub on_capacity_changed: Box<dyn Fn() + Send + Sync>,
}

impl DeviceManager {
    /// Reads the checkpoint under `<root_dir>/device-plugins`; nothing runs
    /// until [`DeviceManager::start`].
    pub fn new(root_dir: &Path, deps: DeviceManagerDeps) -> DeviceManager {
        let dir = root_dir.join(DEVICE_PLUGINS_DIR);
        let env = deps.grpc_env;
        let inner = Arc::new(Inner {
            dir,
            state: Mutex::new(State::default()),
            recorder: deps.recorder,
            on_allocated: deps.on_allocated,
            on_capacity_changed: deps.on_capacity_changed,
            env,
            checkpoint_due: crossbeam_channel::bounded(1),
        });
        inner.restore_checkpoint();
        // after the restore, which replaces the state
        lock(&inner.state).numa_nodes = deps.numa_nodes;
        DeviceManager { inner }
    }

    /// Empties the socket directory (but for the checkpoint) so that every
    /// plugin registers again, serves `Registration` on `kubelet.sock`,
    /// and starts the `device-manager` thread. A socket that cannot be
    /// served is reported (log and node event) and the thread runs
    /// without it: pods without devices, and plugins that register through
    /// the plugin watcher, are not held back by it.
    pub fn start(&self, shutdown: Receiver<()>) -> Result<Worker, DeviceManagerError> {
        let (tx, rx) = crossbeam_channel::bounded(REGISTRATION_QUEUE);
        let server = self.serve(tx).inspect_err(|e| {
            log::error!("{e}; device plugins cannot register on kubelet.sock");
            self.inner.recorder.node_event(
                EventType::Warning,
                "FailedDevicePluginServer",
                &format!("{e}; device plugins cannot register on kubelet.sock"),
            );
        });
        let server = server.ok();
        let inner = Arc::clone(&self.inner);
        worker::spawn("device-manager", ShutdownStage::Workers, move || {
            inner.run(rx, &shutdown);
            drop(server);
        })
        .map_err(DeviceManagerError::Thread)
    }

    fn serve(&self, registrations: Registrations) -> Result<grpcio::Server, DeviceManagerError> {
        let dir = &self.inner.dir;
        let io = |source| DeviceManagerError::Dir {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        checkpoint::remove_contents(dir).map_err(io)?;
        let socket = dir.join(KUBELET_SOCKET);
        server::serve(&self.inner.env, &socket, registrations)
    }

    /// Node status's view (upstream GetCapacity); drops resources whose
    /// plugin has been gone longer than the grace period.
    pub fn capacity(&self) -> DeviceCapacity {
        self.inner.capacity(Instant::now())
    }

    /// Before admission (upstream updateAllocatedDevices): frees the
    /// devices of pods not among `holders`, asked only for a pod that
    /// wants devices, so other admissions cost nothing here. The topology
    /// manager then reserves each container's devices
    /// ([`HintProvider::allocate`](crate::cm::topologymanager::HintProvider)).
    pub fn prepare_admission(&self, pod: &Pod, holders: impl FnOnce() -> Option<HashSet<String>>) {
        let containers = pod.init_containers().iter().chain(pod.containers());
        if !containers.map(device_limits).all(|l| l.is_empty()) {
            self.release_inactive(holders);
        }
    }

    /// Once the pod is admitted: asks the plugins for its reserved devices
    /// (upstream's Allocate RPCs), off the sync loop.
    pub fn allocate_reserved(&self, pod: &Pod) {
        self.inner.spawn_allocation(pod);
    }

    /// Frees the devices of pods not among `holders` (housekeeping);
    /// `holders` is asked only when some pod holds devices, and gives None
    /// while it cannot tell yet.
    pub fn release_inactive(&self, holders: impl FnOnce() -> Option<HashSet<String>>) {
        if lock(&self.inner.state).pods.is_empty() {
            return;
        }
        if let Some(holders) = holders() {
            self.inner.release_inactive(&holders);
        }
    }

    /// The devices `container` of pod `uid` was allocated, grouped by
    /// resource and NUMA node as upstream's getContainerDevices groups
    /// them; reservations whose answer is not in are not reported.
    pub fn container_devices(&self, uid: &str, container: &str) -> Vec<Devices> {
        let s = lock(&self.inner.state);
        let held = s.pods.container(uid, container);
        held.filter(|h| matches!(h.allocation, Allocation::Allocated(_)))
            .flat_map(|h| {
                s.ids_by_node(h).into_iter().map(|(node, ids)| Devices {
                    resource: h.resource.clone(),
                    ids,
                    numa: if node == pod_devices::NODE_WITHOUT_TOPOLOGY {
                        Vec::new()
                    } else {
                        vec![node]
                    },
                })
            })
            .collect()
    }

    /// Every device of every registered plugin (upstream
    /// GetAllocatableDevices), by resource then ID.
    pub fn allocatable_devices(&self) -> Vec<AllocatableDevice> {
        let s = lock(&self.inner.state);
        let mut out: Vec<AllocatableDevice> = s
            .resources
            .iter()
            .flat_map(|r| {
                r.devices.iter().map(|d| AllocatableDevice {
                    resource: r.name.clone(),
                    id: d.id.clone(),
                    numa: d.numa.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.resource, &a.id).cmp(&(&b.resource, &b.id)));
        out
    }

    /// The plugins' gRPC environment, for the other servers the kubelet
    /// runs on its completion-queue thread (the pod resources API).
    pub fn grpc_env(&self) -> &Arc<grpcio::Environment> {
        &self.inner.env
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
fn device_limits(c: &Container) -> Vec<(&str, usize)> {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    limits
        .into_iter()
        .flatten()
        .filter(|(name, _)| crate::nodestatus::setters::is_extended_resource_name(name))
        .filter_map(|(name, q)| q.0.trim().parse::<usize>().ok().map(|n| (name.as_str(), n)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

impl Inner {
    fn run(
        self: &Arc<Self>,
        mut registrations: Receiver<pluginapi::RegisterRequest>,
        shutdown: &Receiver<()>,
    ) {
        let ticker = crossbeam_channel::tick(TICK);
        let mut last = self.capacity(Instant::now());
        let due = self.checkpoint_due.1.clone();
        loop {
            crossbeam_channel::select! {
                recv(registrations) -> r => match r {
                    Ok(r) => self.add_registered(r),
                    // No server (it could not be bound): the rest goes on.
                    Err(_) => registrations = crossbeam_channel::never(),
                },
                recv(due) -> _ => self.flush_checkpoint(),
                recv(ticker) -> _ => {},
                recv(shutdown) -> _ => break,
            }
            let now = self.capacity(Instant::now());
            if now != last {
                (self.on_capacity_changed)();
                last = now;
            }
        }
        // What changed last is on disk before the kubelet exits.
        if due.try_recv().is_ok() {
            self.flush_checkpoint();
        }
    }

    /// A plugin that called `Register` on kubelet.sock.
    fn add_registered(self: &Arc<Self>, r: pluginapi::RegisterRequest) {
        let socket = self.dir.join(&r.endpoint);
        let options = r.options.clone().into_option().unwrap_or_default();
        match Endpoint::dial(&self.env, &r.resource_name, &socket, options) {
            Ok(e) => self.add_endpoint(Arc::new(e)),
            Err(e) => {
                let msg = format!("device plugin {}: {e}", r.resource_name);
                log::error!("{msg}");
                self.recorder
                    .node_event(EventType::Warning, "FailedRegistration", &msg);
            }
        }
    }

    /// Starts following a plugin's devices (upstream addEndpoint and
    /// registerEndpoint); a plugin that registered before is replaced.
    fn add_endpoint(self: &Arc<Self>, endpoint: Arc<Endpoint>) {
        let name = endpoint.resource().to_string();
        {
            let mut s = lock(&self.state);
            if s.resource(&name).is_none() {
                s.resources
                    .push(Resource::stopped_since(name.clone(), Instant::now()));
            }
            if let Some(res) = s.resource_mut(&name) {
                res.endpoint = Some(Arc::clone(&endpoint));
                res.stopped = None;
            }
        }
        log::info!(
            "device plugin {name} registered on {}",
            endpoint.socket().display()
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
        let Some(res) = s.resource_mut(e.resource()) else {
            return;
        };
        // A plugin that registered again replaced this endpoint.
        if !res.endpoint.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, e)) {
            return;
        }
        let ended = match update {
            Ok(devices) => {
                res.devices = devices_of(e.resource(), devices);
                None
            }
            Err(why) => {
                res.stop(Instant::now());
                Some(why)
            }
        };
        drop(s);
        if let Some(why) = ended {
            log::warn!("device plugin {}: {why}", e.resource());
            self.recorder.node_event(
                EventType::Warning,
                "DevicePluginUnhealthy",
                &format!(
                    "device plugin {} stopped: {why}; its devices are unhealthy until it registers again",
                    e.resource()
                ),
            );
        }
        (self.on_capacity_changed)();
    }

    fn capacity(&self, now: Instant) -> DeviceCapacity {
        let mut s = lock(&self.state);
        let mut out = DeviceCapacity::default();
        let expired = |r: &Resource| {
            r.stopped
                .is_some_and(|t| now.duration_since(t) > ENDPOINT_STOP_GRACE)
        };
        for r in s.resources.iter().filter(|r| expired(r)) {
            out.removed.push(r.name.clone());
        }
        s.resources.retain(|r| !expired(r));
        for r in &s.resources {
            let healthy = r.devices.iter().filter(|d| d.healthy).count();
            out.resources
                .push((r.name.clone(), r.devices.len() as i64, healthy as i64));
        }
        out.resources.sort();
        if !out.removed.is_empty() {
            self.checkpoint_changed();
        }
        out
    }

    fn release_inactive(&self, holders: &HashSet<String>) {
        let mut s = lock(&self.state);
        if s.pods.retain_pods(|uid| holders.contains(uid)) {
            s.pre_start.retain(|p| holders.contains(&p.uid));
            self.checkpoint_changed();
        }
    }

    fn run_options(self: &Arc<Self>, pod: &Pod, container: &str) -> Result<RunOptions, DeviceWait> {
        let uid = pod.uid();
        let mut s = lock(&self.state);
        let mut answers = Vec::new();
        let mut pre_start = Vec::new();
        let mut failed = None;
        for h in s.pods.container(uid, container) {
            match &h.allocation {
                Allocation::Allocated(resp) => answers.push(resp.clone()),
                Allocation::Reserved => return Err(DeviceWait::Pending),
                Allocation::Failed { why, at } => {
                    failed = Some((why.clone(), *at));
                    break;
                }
            }
            let wants = s
                .endpoint(&h.resource)
                .is_some_and(|e| e.options().pre_start_required);
            if wants {
                pre_start.push((h.resource.clone(), h.ids.clone()));
            }
        }
        if let Some((why, at)) = failed {
            drop(s);
            if at.elapsed() >= ALLOCATE_RETRY {
                self.retry_allocation(pod);
            }
            return Err(DeviceWait::Failed(why));
        }
        if !pre_start.is_empty() {
            let at = s
                .pre_start
                .iter()
                .position(|p| p.uid == uid && p.container == container);
            match at.map(|i| (i, s.pre_start[i].result.clone())) {
                // This start's call answered: used once.
                Some((i, Some(result))) => {
                    s.pre_start.swap_remove(i);
                    result.map_err(DeviceWait::Failed)?;
                }
                Some((_, None)) => return Err(DeviceWait::Pending),
                None => {
                    s.pre_start.push(PreStart {
                        uid: uid.to_string(),
                        container: container.to_string(),
                        result: None,
                    });
                    drop(s);
                    self.spawn_pre_start(pod, container, pre_start);
                    return Err(DeviceWait::Pending);
                }
            }
        }
        Ok(merge_responses(answers.iter()))
    }
}

/// The devices a `ListAndWatch` message lists; a second device with an ID
/// already listed is ignored, as upstream's map keeps one.
fn devices_of(resource: &str, devices: Vec<pluginapi::Device>) -> Vec<Device> {
    let mut out: Vec<Device> = Vec::with_capacity(devices.len());
    for d in devices {
        if d.ID.is_empty() {
            log::warn!("device plugin {resource}: a device without an ID is ignored");
            continue;
        }
        if out.iter().any(|x| x.id == d.ID) {
            continue;
        }
        let numa = d
            .topology
            .as_ref()
            .map(|t| t.nodes.iter().map(|n| n.ID).collect())
            .unwrap_or_default();
        out.push(Device {
            healthy: d.health == HEALTHY,
            id: d.ID,
            numa,
        });
    }
    out
}

/// The container's options from every resource's answer, in resource
/// order; a mount or device path already taken is not added twice, nor an
/// annotation key.
fn merge_responses<'a>(
    answers: impl Iterator<Item = &'a pluginapi::ContainerAllocateResponse>,
) -> RunOptions {
    let mut out = RunOptions::default();
    for resp in answers {
        let mut envs: Vec<(String, String)> = resp
            .envs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        envs.sort();
        out.envs.extend(envs);
        for m in &resp.mounts {
            if !out
                .mounts
                .iter()
                .any(|x| x.container_path == m.container_path)
            {
                out.mounts.push(api::Mount {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.clone(),
                    readonly: m.read_only,
                    ..Default::default()
                });
            }
        }
        for d in &resp.devices {
            if !out
                .devices
                .iter()
                .any(|x| x.container_path == d.container_path)
            {
                out.devices.push(api::Device {
                    container_path: d.container_path.clone(),
                    host_path: d.host_path.clone(),
                    permissions: d.permissions.clone(),
                    ..Default::default()
                });
            }
        }
        let mut annotations: Vec<(String, String)> = resp
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        annotations.sort();
        for (k, v) in annotations {
            if !out.annotations.iter().any(|(x, _)| *x == k) {
                out.annotations.push((k, v));
            }
        }
    }
    out
}

/// The registration requests' channel end the server sends on.
pub(crate) type Registrations = Sender<pluginapi::RegisterRequest>;
