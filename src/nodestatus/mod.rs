//! Node registration and status (upstream pkg/kubelet/kubelet_node_status.go
//! and pkg/kubelet/nodestatus): registers the Node (or reconciles the one
//! that exists), then keeps its status current on the "node-status" thread:
//! every nodeStatusUpdateFrequency it GETs the node, runs the setters, and
//! PATCHes `nodes/<name>/status` with a strategic merge patch when the
//! status changed or nodeStatusReportFrequency passed since the last report.
//! Until the node first reports Ready it also tries every 100 ms to patch the
//! Ready transition at once (fastStatusUpdateOnce).

pub mod address;
pub mod machine;
pub mod patch;
mod register;
pub mod setters;

pub use register::{initial_node_object, reconcile_existing_node};
use rkubelet_util::lock;

#[cfg(test)]
mod tests;

use crate::events::EventRecorder;
use crate::util::backoff::Exponential;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::client::{paths, ApiError, Client, PatchType};
use crate::stats::FsInfo;
use machine::{HostPaths, MachineInfo};
use setters::{NodeEvent, Pressure, Reservation};

/// nodeStatusUpdateRetry: tries per status update.
const NODE_STATUS_UPDATE_RETRY: usize = 5;
/// nodeReadyGracePeriod: how long the fast status update keeps trying.
const NODE_READY_GRACE_PERIOD: Duration = Duration::from_secs(120);
/// The fast status update's period.
const FAST_STATUS_UPDATE_PERIOD: Duration = Duration::from_millis(100);
/// Registration backoff: 100 ms doubling to 7 s.
const REGISTER_FIRST_STEP: Duration = Duration::from_millis(100);
const REGISTER_MAX_STEP: Duration = Duration::from_secs(7);
/// How often registration looks for the bootstrapped client certificate.
const CERT_CHECK: Duration = Duration::from_millis(250);
/// wait.JitterUntil's jitter factor for the status loop.
const JITTER: f64 = 0.04;

/// The annotation that hands volume attach/detach to the controller.
pub const CONTROLLER_MANAGED_ATTACH_ANNOTATION: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";

pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_OS_STABLE: &str = "kubernetes.io/os";
pub const LABEL_ARCH_STABLE: &str = "kubernetes.io/arch";
pub const LABEL_OS_BETA: &str = "beta.kubernetes.io/os";
pub const LABEL_ARCH_BETA: &str = "beta.kubernetes.io/arch";

/// What the node status manager needs from the kubelet's configuration.
#[derive(Clone, Debug)]
pub struct NodeStatusConfig {
    pub node_name: String,
    /// `--node-ip`; detected from the host when absent.
    pub node_ip: Option<IpAddr>,
    /// `--node-labels`.
    pub node_labels: BTreeMap<String, String>,
    pub register_with_taints: Vec<Taint>,
    pub register_node: bool,
    pub max_pods: i64,
    pub kubelet_port: i32,
    /// The kubelet's root directory: its filesystem is ephemeral-storage.
    pub root_dir: PathBuf,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    /// Signal → threshold (`"memory.available" → "100Mi"`, `"nodefs.available" → "10%"`).
    pub eviction_hard: BTreeMap<String, String>,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    /// -1: all images.
    pub node_status_max_images: i32,
    /// `"v1.34.0"`.
    pub kubelet_version: String,
    pub provider_id: String,
    pub enable_controller_attach_detach: bool,
}

impl NodeStatusConfig {
    /// The kubelet's defaults for `node_name`.
    pub fn new(node_name: impl Into<String>) -> NodeStatusConfig {
        NodeStatusConfig {
            node_name: node_name.into(),
            node_ip: None,
            node_labels: BTreeMap::new(),
            register_with_taints: Vec::new(),
            register_node: true,
            max_pods: 110,
            kubelet_port: 10250,
            root_dir: PathBuf::from("/var/lib/kubelet"),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            eviction_hard: crate::kubeletconfig::default_eviction_hard(),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_status_max_images: 50,
            kubelet_version: "v1.34.0".into(),
            provider_id: String::new(),
            enable_controller_attach_detach: true,
        }
    }

    fn reservation(&self) -> Reservation {
        Reservation {
            system_reserved: self.system_reserved.clone(),
            kube_reserved: self.kube_reserved.clone(),
            eviction_hard: self.eviction_hard.clone(),
        }
    }
}

/// One image on the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageInfo {
    /// Repo digests then repo tags.
    pub names: Vec<String>,
    pub size_bytes: u64,
}

/// What the kubelet's health looks like now; provided by the kubelet as a closure.
#[derive(Clone, Debug, Default)]
pub struct KubeletHealth {
    /// runtimeState.runtimeErrors (e.g. "container runtime is down").
    pub runtime_errors: Vec<String>,
    /// e.g. "container runtime network not ready: NetworkReady=false ...".
    pub network_error: Option<String>,
    /// e.g. "PLEG is not healthy: pleg was last seen active 3m0s ago; threshold is 3m0s".
    pub pleg_error: Option<String>,
    /// `(name, version)`, e.g. `("containerd", "1.7.24")`.
    pub runtime_version: Option<(String, String)>,
    /// The runtime's handlers and features, as of its last ready answer.
    pub runtime_handlers: Vec<crate::container::RuntimeHandler>,
    pub runtime_features: Option<crate::container::RuntimeFeatures>,
    pub images: Vec<ImageInfo>,
    /// The eviction manager's conditions (upstream IsUnderMemoryPressure,
    /// IsUnderDiskPressure, IsUnderPIDPressure).
    pub memory_pressure: bool,
    pub disk_pressure: bool,
    pub pid_pressure: bool,
    /// The node shutdown manager's "node is shutting down" (upstream
    /// ShutdownStatus, last of the Ready errors).
    pub shutdown_error: Option<String>,
    /// The device plugins' resources (upstream
    /// devicePluginResourceCapacityFunc).
    pub devices: crate::cm::devicemanager::DeviceCapacity,
    /// The persistent volumes in use (upstream
    /// volumeManager.GetVolumesInUse), sorted; None until the volume
    /// manager's states are synced, when the node's list is left as it is.
    pub volumes_in_use: Option<Vec<String>>,
}

pub type HealthFn = Box<dyn Fn() -> KubeletHealth + Send + Sync>;

/// State of the status thread.
#[derive(Default, Clone)]
struct SyncState {
    /// When the status was last PATCHed (lastStatusReportTime).
    last_status_report: Option<Instant>,
    /// lastNodeUnschedulable.
    last_unschedulable: bool,
    /// The container runtime's name, once known.
    runtime_name: Option<String>,
}

/// What the machine is, read once: upstream's kubelet reads cadvisor's
/// MachineInfo and the version info at start and keeps them.
struct MachineFacts {
    info: MachineInfo,
    kernel_version: String,
    os_image: String,
}

/// Everything the setters read, gathered once per status computation.
struct Inputs {
    health: KubeletHealth,
    machine: Result<Arc<MachineFacts>, String>,
    rootfs: Option<FsInfo>,
    addresses: Result<Vec<k8s_openapi::api::core::v1::NodeAddress>, String>,
}

/// Registers the node and keeps its status current.
pub struct NodeStatusManager {
    cfg: NodeStatusConfig,
    client: Client,
    health: HealthFn,
    paths: HostPaths,
    /// Read at the first status computation that could read them.
    machine: Mutex<Option<Arc<MachineFacts>>>,
    /// The route table and interface addresses, as last read.
    host_network: Mutex<address::HostNetwork>,
    registered: AtomicBool,
    node: Mutex<Option<Node>>,
    sink: Option<Arc<dyn EventRecorder>>,
    state: Mutex<SyncState>,
    /// An update asked for now rather than at the next tick.
    kicks: Receiver<()>,
    after_sync: Option<AfterSync>,
}

/// Work that needs the Node to exist, done on this thread after each
/// status sync once the node is registered: the DRA manager's
/// ResourceSlice wipes.
pub type AfterSync = Box<dyn Fn(&Client, &str) + Send + Sync>;

/// Who node status talks with besides the API server, given at
/// construction.
pub struct NodeStatusLinks {
    /// Where node events go (the kubelet's recorder); without one they are
    /// logged.
    pub recorder: Option<Arc<dyn EventRecorder>>,
    /// Asks for a status update now rather than at the next tick (the
    /// runtime went down or came back). A channel: the runtime state that
    /// sends is made with the kubelet, which node status reads through its
    /// health function, so it exists before this manager.
    pub kicks: Receiver<()>,
    pub after_sync: Option<AfterSync>,
}

impl Default for NodeStatusLinks {
    fn default() -> Self {
        NodeStatusLinks {
            recorder: None,
            kicks: crossbeam_channel::never(),
            after_sync: None,
        }
    }
}

/// Now, at the second precision a Time keeps.
fn now_time() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Waits up to `d`; true when shutdown was signalled or its sender dropped.
fn wait_for_shutdown(shutdown: &Receiver<()>, d: Duration) -> bool {
    !matches!(shutdown.recv_timeout(d), Err(RecvTimeoutError::Timeout))
}

/// Why a wait between updates ended.
enum Wake {
    Shutdown,
    Kicked,
    Timeout,
}

/// Waits up to `d` for shutdown (signalled or its sender dropped) or a kick.
fn wait_for(shutdown: &Receiver<()>, kick: &Receiver<()>, d: Duration) -> Wake {
    crossbeam_channel::select! {
        recv(shutdown) -> _ => Wake::Shutdown,
        recv(kick) -> _ => Wake::Kicked,
        default(d) => Wake::Timeout,
    }
}

impl NodeStatusManager {
    pub fn new(
        cfg: NodeStatusConfig,
        client: Client,
        health: HealthFn,
        links: NodeStatusLinks,
    ) -> Arc<Self> {
        Arc::new(NodeStatusManager {
            cfg,
            client,
            health,
            paths: HostPaths::default(),
            machine: Mutex::new(None),
            host_network: Mutex::new(address::HostNetwork::new()),
            registered: AtomicBool::new(false),
            node: Mutex::new(None),
            sink: links.recorder,
            state: Mutex::new(SyncState::default()),
            kicks: links.kicks,
            after_sync: links.after_sync,
        })
    }

    /// Registers, then keeps the status current on the "node-status" thread
    /// until `shutdown` receives or closes.
    pub fn start(
        self: &Arc<Self>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<crate::util::worker::Worker> {
        let this = self.clone();
        crate::util::worker::spawn_supervised(
            "node-status",
            crate::util::worker::ShutdownStage::Status,
            shutdown,
            move |s| this.run(s),
        )
    }

    /// Whether the node is registered (or, without registration, was found).
    pub fn registered(&self) -> bool {
        self.registered.load(Ordering::SeqCst)
    }

    /// The Node as last read from or written to the API server.
    pub fn node(&self) -> Option<Node> {
        lock(&self.node).clone()
    }

    fn store_node(&self, node: Node) {
        *lock(&self.node) = Some(node);
    }

    fn emit(&self, events: Vec<NodeEvent>) {
        for e in events {
            log::debug!(
                "Recording {} event for node {}: {}",
                e.reason,
                self.cfg.node_name,
                e.message
            );
            if let Some(r) = &self.sink {
                r.node_event(e.event_type, &e.reason, &e.message);
            }
        }
    }

    fn run(&self, shutdown: &Receiver<()>) {
        let start = Instant::now();
        let mut fast_done = false;
        let freq = self.cfg.node_status_update_frequency;
        loop {
            if !self.sync_node_status(shutdown) {
                return;
            }
            let next_sync = Instant::now() + rkubelet_util::jitter(freq, JITTER);
            loop {
                let now = Instant::now();
                if now >= next_sync {
                    break;
                }
                let left = next_sync - now;
                let wait = if fast_done {
                    left
                } else {
                    left.min(FAST_STATUS_UPDATE_PERIOD)
                };
                match wait_for(shutdown, &self.kicks, wait) {
                    Wake::Shutdown => return,
                    Wake::Kicked => break,
                    Wake::Timeout => {}
                }
                if !fast_done {
                    fast_done =
                        self.fast_node_status_update(start.elapsed() >= NODE_READY_GRACE_PERIOD);
                }
            }
        }
    }

    /// syncNodeStatus: registers if needed, then updates the status.
    /// False when shutdown interrupted registration.
    fn sync_node_status(&self, shutdown: &Receiver<()>) -> bool {
        if self.cfg.register_node && !self.registered() && !self.register_with_api_server(shutdown)
        {
            return false;
        }
        if let Err(e) = self.update_node_status() {
            log::error!("Unable to update node status: {e}");
        }
        if let Some(after) = self.after_sync.as_ref().filter(|_| self.registered()) {
            after(&self.client, &self.cfg.node_name);
        }
        true
    }

    /// The machine facts, read now if they could not be read before (the
    /// CPU count or the memory size unknown).
    fn machine_facts(&self) -> Result<Arc<MachineFacts>, String> {
        let mut cached = lock(&self.machine);
        if let Some(facts) = cached.as_ref() {
            return Ok(Arc::clone(facts));
        }
        let facts = Arc::new(MachineFacts {
            info: machine::read_machine_info(&self.paths)?,
            kernel_version: machine::kernel_version(&self.paths),
            os_image: machine::os_image(&self.paths),
        });
        *cached = Some(Arc::clone(&facts));
        Ok(facts)
    }

    /// Gathers the setters' inputs from the kubelet and the host.
    fn inputs(&self) -> Inputs {
        let health = (self.health)();
        let rootfs = crate::stats::statvfs(&self.cfg.root_dir)
            .inspect_err(|e| log::debug!("node filesystem: {e}"))
            .ok();
        Inputs {
            health,
            machine: self.machine_facts(),
            rootfs,
            addresses: lock(&self.host_network).detect(
                self.cfg.node_ip,
                &self.cfg.node_name,
                &self.paths.proc_dir,
            ),
        }
    }

    /// setNodeStatus: runs the setters in upstream's order.
    fn set_node_status(&self, node: &mut Node, state: &mut SyncState, events: &mut Vec<NodeEvent>) {
        let inputs = self.inputs();
        let now = now_time();
        if let Err(e) = setters::set_node_address(node, inputs.addresses.clone()) {
            log::error!("Failed to set some node status fields: {e}");
        }
        setters::set_machine_info(
            node,
            self.cfg.max_pods,
            inputs
                .machine
                .as_ref()
                .map(|m| &m.info)
                .map_err(|e| e.clone()),
            inputs.rootfs,
            &self.cfg.reservation(),
            events,
        );
        setters::set_device_plugin_resources(node, &inputs.health.devices);
        if let Some(in_use) = &inputs.health.volumes_in_use {
            setters::set_volumes_in_use(node, in_use);
        }
        if let Some((name, _)) = &inputs.health.runtime_version {
            state.runtime_name = Some(name.clone());
        }
        // Without the machine facts, the versions are read for this round.
        let (kernel_version, os_image) = match &inputs.machine {
            Ok(m) => (m.kernel_version.clone(), m.os_image.clone()),
            Err(_) => (
                machine::kernel_version(&self.paths),
                machine::os_image(&self.paths),
            ),
        };
        setters::set_version_info(
            node,
            &kernel_version,
            &os_image,
            state.runtime_name.as_deref(),
            inputs
                .health
                .runtime_version
                .as_ref()
                .map(|(_, v)| v.as_str()),
            &self.cfg.kubelet_version,
        );
        setters::set_daemon_endpoints(node, self.cfg.kubelet_port);
        setters::set_images(node, self.cfg.node_status_max_images, &inputs.health.images);
        setters::set_go_runtime(node);
        setters::set_runtime_handlers(node, &inputs.health.runtime_handlers);
        setters::set_node_features(node, inputs.health.runtime_features);
        setters::set_pressure_condition(
            node,
            &now,
            Pressure::Memory,
            inputs.health.memory_pressure,
            events,
        );
        setters::set_pressure_condition(
            node,
            &now,
            Pressure::Disk,
            inputs.health.disk_pressure,
            events,
        );
        setters::set_pressure_condition(
            node,
            &now,
            Pressure::Pid,
            inputs.health.pid_pressure,
            events,
        );
        let mut errors = inputs.health.runtime_errors.clone();
        errors.extend(inputs.health.pleg_error.clone());
        errors.extend(inputs.health.network_error.clone());
        errors.extend(inputs.health.shutdown_error.clone());
        setters::set_ready_condition(node, &now, &errors, events);
        setters::record_schedulable_event(node, &mut state.last_unschedulable, events);
    }

    /// initialNode: the Node this kubelet registers.
    fn initial_node(&self, state: &mut SyncState, events: &mut Vec<NodeEvent>) -> Node {
        let mut node = initial_node_object(&self.cfg);
        self.set_node_status(&mut node, state, events);
        node
    }

    /// The node this kubelet would register, for admission before the
    /// Node is known (upstream getNodeAnyWay's initialNode). Leaves the
    /// status thread's state as it was and records no event: this node
    /// is not sent.
    pub fn initial_node_now(&self) -> Node {
        let mut state = lock(&self.state).clone();
        self.initial_node(&mut state, &mut Vec::new())
    }

    /// registerWithAPIServer: tries until registered, backing off 100 ms
    /// doubling to 7 s. False when shutdown came first.
    fn register_with_api_server(&self, shutdown: &Receiver<()>) -> bool {
        let mut backoff = Exponential::new(REGISTER_FIRST_STEP, REGISTER_MAX_STEP);
        loop {
            if wait_for_shutdown(shutdown, backoff.next_delay()) {
                return false;
            }
            if !self.wait_for_client_cert(shutdown) {
                return false;
            }
            let mut events = Vec::new();
            let node = {
                let mut state = lock(&self.state);
                self.initial_node(&mut state, &mut events)
            };
            self.emit(events);
            log::info!("Attempting to register node {}", self.cfg.node_name);
            if self.try_register_with_api_server(&node) {
                log::info!("Successfully registered node {}", self.cfg.node_name);
                self.registered.store(true, Ordering::SeqCst);
                return true;
            }
        }
    }

    /// While the TLS bootstrap waits for its CSR nothing can be sent: waits
    /// (logged once) and registers within CERT_CHECK of the certificate
    /// arriving rather than at the end of a long back-off. False on shutdown.
    fn wait_for_client_cert(&self, shutdown: &Receiver<()>) -> bool {
        if !self.client.waiting_for_cert() {
            return true;
        }
        log::info!(
            "waiting for the client certificate (TLS bootstrap) before registering node {}",
            self.cfg.node_name
        );
        while self.client.waiting_for_cert() {
            if wait_for_shutdown(shutdown, CERT_CHECK) {
                return false;
            }
        }
        true
    }

    /// tryRegisterWithAPIServer: creates the node, or reconciles the one that
    /// exists (controller-managed attach-detach annotation, default labels,
    /// default resources and huge pages) and patches it if that changed it.
    fn try_register_with_api_server(&self, node: &Node) -> bool {
        let name = &self.cfg.node_name;
        let err = match self.client.create::<Node>(&paths::nodes(), node) {
            Ok(created) => {
                self.store_node(created);
                return true;
            }
            Err(e) => e,
        };
        if !err.is_already_exists() {
            log::error!("Unable to register node {name} with API server: {err}");
            return false;
        }
        let existing: Node = match self.client.get(&paths::node(name)) {
            Ok(n) => n,
            Err(e) => {
                log::error!("Unable to register node {name} with API server, error getting existing node: {e}");
                return false;
            }
        };
        log::info!("Node {name} was previously registered");
        let mut reconciled = existing.clone();
        let requires_update = reconcile_existing_node(node, &mut reconciled);
        if !requires_update {
            self.store_node(existing);
            return true;
        }
        match self.patch_status(&existing, &reconciled) {
            Ok(updated) => {
                self.store_node(updated);
                true
            }
            Err(e) => {
                log::error!(
                    "Unable to reconcile node {name} with API server, error updating node: {e}"
                );
                false
            }
        }
    }

    /// PatchNodeStatus: PATCH nodes/<name>/status from `original` to `node`.
    fn patch_status(&self, original: &Node, node: &Node) -> Result<Node, ApiError> {
        let body = patch::node_status_patch(original, node).map_err(|e| {
            ApiError::Decode(format!(
                "PATCH {}: {e}",
                paths::node_status(&self.cfg.node_name)
            ))
        })?;
        self.client.patch::<Node>(
            &paths::node_status(&self.cfg.node_name),
            PatchType::StrategicMerge,
            &body,
        )
    }

    /// updateNode: a copy of `original` with required labels and a fresh
    /// status, and whether anything changed.
    fn update_node(
        &self,
        original: &Node,
        state: &mut SyncState,
        events: &mut Vec<NodeEvent>,
    ) -> (Node, bool) {
        let mut node = original.clone();
        let labels = node.metadata.labels.get_or_insert_with(BTreeMap::new);
        let mut labels_missing = false;
        for (key, value) in [
            (LABEL_OS_STABLE, "linux"),
            (LABEL_ARCH_STABLE, machine::go_arch()),
        ] {
            if labels.get(key).map(String::as_str) != Some(value) {
                labels.insert(key.to_string(), value.to_string());
                labels_missing = true;
            }
        }
        if !labels_missing && original.metadata.labels.is_none() {
            node.metadata.labels = None;
        }
        self.set_node_status(&mut node, state, events);
        let changed =
            patch::node_status_has_changed(original.status.as_ref(), node.status.as_ref())
                || labels_missing;
        (node, changed)
    }

    /// patchNodeStatus: patches and records the report time and the result.
    fn patch_node_status(
        &self,
        original: &Node,
        node: &Node,
        state: &mut SyncState,
    ) -> Result<Node, ApiError> {
        let updated = self.patch_status(original, node)?;
        state.last_status_report = Some(Instant::now());
        self.store_node(updated.clone());
        Ok(updated)
    }

    /// updateNodeStatus: up to five tries.
    fn update_node_status(&self) -> Result<(), String> {
        for i in 0..NODE_STATUS_UPDATE_RETRY {
            match self.try_update_node_status(i) {
                Ok(()) => return Ok(()),
                Err(e) => log::error!(
                    "Error updating node status, will retry (try {}): {e}",
                    i + 1
                ),
            }
        }
        Err("update node status exceeds retry count".into())
    }

    /// tryUpdateNodeStatus: GET, update, and PATCH when the status changed
    /// or nodeStatusReportFrequency passed since the last report. The first
    /// try reads the server's cache (`resourceVersion=0`), as upstream's
    /// does, rather than a quorum read every 10 s; a retry after a conflict
    /// reads the latest.
    fn try_update_node_status(&self, try_number: usize) -> Result<(), String> {
        let name = &self.cfg.node_name;
        let path = match try_number {
            0 => paths::with_query(&paths::node(name), &[("resourceVersion", "0")]),
            _ => paths::node(name),
        };
        let original: Node = self
            .client
            .get(&path)
            .map_err(|e| format!("error getting node {name:?}: {e}"))?;
        if !self.cfg.register_node {
            self.registered.store(true, Ordering::SeqCst);
        }
        let mut events = Vec::new();
        let mut state = lock(&self.state);
        let (node, changed) = self.update_node(&original, &mut state, &mut events);
        self.emit(events);
        let report_due = state
            .last_status_report
            .is_none_or(|t| t.elapsed() >= self.cfg.node_status_report_frequency);
        if !(changed || report_due) {
            self.store_node(original);
            return Ok(());
        }
        self.patch_node_status(&original, &node, &mut state)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// fastNodeStatusUpdate: from the last known node, patches at once when
    /// the node just became ready. True when the fast updates are over
    /// (ready, patched, or past the grace period).
    fn fast_node_status_update(&self, timeout: bool) -> bool {
        if timeout {
            log::error!("Node not becoming ready in time after startup");
            return true;
        }
        let Some(original) = self.node() else {
            return false;
        };
        let ready = original
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        match ready {
            None => {
                log::error!(
                    "Node {} does not have NodeReady condition",
                    self.cfg.node_name
                );
                return false;
            }
            Some(c) if c.status == "True" => return true,
            Some(_) => {}
        }
        let mut events = Vec::new();
        let mut state = lock(&self.state);
        let (node, changed) = self.update_node(&original, &mut state, &mut events);
        self.emit(events);
        if !changed {
            return false;
        }
        let now_ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status != "False");
        if !now_ready {
            return false;
        }
        log::info!("Fast updating node status as it just became ready");
        if let Err(e) = self.patch_node_status(&original, &node, &mut state) {
            log::error!("Error updating node status, will retry with syncNodeStatus: {e}");
            drop(state);
            if let Err(e) = self.update_node_status() {
                log::error!("Unable to update node status: {e}");
            }
        }
        true
    }
}
