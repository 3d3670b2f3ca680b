//! The CSI volume plugin, node side (upstream `pkg/volume/csi`): CSI
//! persistent volumes, inline CSI volumes and, through their claims,
//! generic ephemeral volumes, mounted by the driver that registered
//! through the plugin manager ([`registration`]).
//!
//! | path under the root dir | what |
//! | --- | --- |
//! | `plugins/kubernetes.io/csi/pv/<pv>/globalmount` | staging path (`NodeStageVolume`) |
//! | `plugins/kubernetes.io/csi/pv/<pv>/vol_data.json` | driver and handle of the staged volume |
//! | `pods/<uid>/volumes/kubernetes.io~csi/<name>/mount` | target path (`NodePublishVolume`) |
//! | `pods/<uid>/volumes/kubernetes.io~csi/<name>/vol_data.json` | what tear-down needs after a restart |
//!
//! `<name>` is the PV's name, or the pod's volume name for an inline
//! volume: upstream v1.22's layout, so either kubelet can tear down what
//! the other set up.
//!
//! Set-up and tear-down are asynchronous, as upstream's operation
//! executor: the volume manager's reconciler starts an operation (a future
//! on the plugins' completion-queue thread) and finds it running, failed or
//! done at its next pass. A hung driver holds only its own volumes.

pub mod block;
pub mod client;
pub mod driver;
pub mod nodeinfo;
pub mod registration;
pub mod setup;
pub mod stats;
mod teardown;
pub mod voldata;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use grpcio::Environment;
use rkubelet_util::lock;

use crate::client::Client;
use client::{NodeCaps, NodeConn};
use nodeinfo::NodeInfoManager;
use voldata::LifecycleMode;

/// The plugin's name, as upstream names volumes (`kubernetes.io/csi/<driver>^<handle>`).
pub const PLUGIN_NAME: &str = "kubernetes.io/csi";

/// How often, at most, a published volume's claim is read again for an
/// expansion. Upstream reads it at each pod sync (its periodic one comes
/// every syncFrequency); this bounds the reads when syncs come faster.
pub const RESIZE_RECHECK: Duration = Duration::from_secs(10);

/// A registered driver.
#[derive(Clone)]
struct Driver {
    name: String,
    conn: NodeConn,
    caps: NodeCaps,
}

/// Where an operation on one target path stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum OpState {
    Running,
    Failed(String),
    /// Set up; published again at each remount when the driver asks.
    Published {
        republish: bool,
    },
    /// A tear-down whose failure was reported: tried again at the next
    /// call, in use meanwhile.
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Mount,
    Unmount,
}

/// One operation, by target path (unique per pod and volume): a set-up,
/// then the volume while it stays set up; or a tear-down.
#[derive(Debug)]
struct Op {
    target: PathBuf,
    handle: String,
    driver: String,
    state: OpState,
    /// `kubernetes.io/csi/<driver>^<handle>` of a persistent volume,
    /// reported in the node's `volumesInUse` while set up or torn down.
    in_use: Option<String>,
    work: Work,
}

#[derive(Debug)]
enum Work {
    Mount(Mount),
    Unmount,
}

/// What a set-up knows of its pod and volume (for usage calls and
/// expansion); a tear-down, made from `vol_data.json`, has none of it.
#[derive(Debug)]
struct Mount {
    /// The pod's name for the volume, its UID and the claim behind it.
    volume: String,
    pod_uid: String,
    claim: Option<(String, String)>,
    read_only: bool,
    /// Expanded by the driver; the claim's status is not updated yet.
    resized: bool,
    /// The driver has `EXPAND_VOLUME`: the claim is read again now and then
    /// for an expansion while the volume is published.
    expandable: bool,
    /// When the claim was last read for an expansion.
    checked: Instant,
    /// `NodeExpandVolume` of a published volume is running.
    expanding: bool,
}

impl Op {
    fn kind(&self) -> OpKind {
        match self.work {
            Work::Mount(_) => OpKind::Mount,
            Work::Unmount => OpKind::Unmount,
        }
    }

    fn mount(&self) -> Option<&Mount> {
        match &self.work {
            Work::Mount(m) => Some(m),
            Work::Unmount => None,
        }
    }
}

/// The CSI plugin; shared by the volume manager, the plugin manager's
/// handler and node status.
pub struct CsiPlugin {
    root_dir: PathBuf,
    node_name: String,
    env: Arc<Environment>,
    client: Client,
    nodeinfo: NodeInfoManager,
    drivers: Mutex<Vec<Driver>>,
    ops: Mutex<Vec<Op>>,
    /// Wakes the volume manager when an operation ends.
    wake: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Asks node status for an update when a volume joins `volumesInUse`.
    status_kick: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// The persistent volumes of admitted pods, by pod UID, from their
    /// first set-up on (upstream's desired state of the world): in use
    /// before the driver is called.
    wanted: Mutex<Vec<(String, String)>>,
    /// The drivers' last usage answers, by target path.
    usage: Mutex<Vec<(PathBuf, stats::VolumeUsage)>>,
    /// volumeStatsAggPeriod, and the last round of usage calls.
    stats_period: std::time::Duration,
    stats_at: Mutex<Option<std::time::Instant>>,
    /// The node as the `api-node` watch last saw it: its
    /// `volumesAttached` is the attach-detach controller's word.
    node: Arc<std::sync::RwLock<Option<k8s_openapi::api::core::v1::Node>>>,
}

impl CsiPlugin {
    pub fn new(
        root_dir: PathBuf,
        node_name: String,
        env: Arc<Environment>,
        client: Client,
        stats_period: std::time::Duration,
        node: Arc<std::sync::RwLock<Option<k8s_openapi::api::core::v1::Node>>>,
    ) -> Arc<Self> {
        Arc::new(CsiPlugin {
            nodeinfo: NodeInfoManager::new(client.clone(), node_name.clone()),
            root_dir,
            node_name,
            env,
            client,
            drivers: Mutex::new(Vec::new()),
            ops: Mutex::new(Vec::new()),
            wake: OnceLock::new(),
            status_kick: OnceLock::new(),
            wanted: Mutex::new(Vec::new()),
            usage: Mutex::new(Vec::new()),
            stats_period,
            stats_at: Mutex::new(None),
            node,
        })
    }

    /// Set once by the volume manager.
    pub fn set_wake(&self, wake: Box<dyn Fn() + Send + Sync>) {
        let _ = self.wake.set(wake);
    }

    fn wake(&self) {
        if let Some(w) = self.wake.get() {
            w();
        }
    }

    /// Set once by the kubelet: asks node status for an update now.
    pub fn set_status_kick(&self, kick: Box<dyn Fn() + Send + Sync>) {
        let _ = self.status_kick.set(kick);
    }

    /// Asks node status for an update now.
    pub fn kick_status(&self) {
        if let Some(kick) = self.status_kick.get() {
            kick();
        }
    }

    /// The pod uses the persistent volume `unique`: it goes into
    /// `volumesInUse` now, before the driver stages it.
    fn want_in_use(&self, pod_uid: &str, unique: &str) {
        let mut wanted = lock(&self.wanted);
        if wanted.iter().any(|(u, v)| u == pod_uid && v == unique) {
            return;
        }
        wanted.push((pod_uid.to_string(), unique.to_string()));
        drop(wanted);
        self.kick_status();
    }

    /// Keeps only what the pods `desired` still want: a pod that left the
    /// desired state no longer wants its volumes (what it set up stays in
    /// use until torn down).
    pub fn retain_wanted(&self, desired: impl Fn(&str) -> bool) {
        lock(&self.wanted).retain(|(u, _)| desired(u));
    }

    /// Upstream's CSINode initialisation at start: the node must be
    /// registered first, so this tries with a back-off (0.5 s doubling,
    /// about 30 s in all) and then leaves it to the first driver's
    /// registration, which creates a missing CSINode too.
    pub fn initialize_csinode(&self, shutdown: &crossbeam_channel::Receiver<()>) {
        let mut wait = std::time::Duration::from_millis(500);
        for _ in 0..6 {
            match self.nodeinfo.init_csinode() {
                Ok(()) => return,
                Err(e) => log::debug!("CSINode not initialised yet: {e}"),
            }
            if !matches!(
                shutdown.recv_timeout(wait),
                Err(crossbeam_channel::RecvTimeoutError::Timeout)
            ) {
                return;
            }
            wait *= 2;
        }
        log::warn!(
            "CSINode {}: not initialised; the first CSI driver's registration will create it",
            self.node_name
        );
    }

    pub fn node_info(&self) -> &NodeInfoManager {
        &self.nodeinfo
    }

    fn driver(&self, name: &str) -> Option<Driver> {
        lock(&self.drivers).iter().find(|d| d.name == name).cloned()
    }

    /// The unique names of the persistent volumes that admitted pods use,
    /// or that are set up or being torn down here (node status
    /// `volumesInUse`, upstream GetVolumesInUse: every CSI PV is device
    /// mountable), sorted.
    pub fn volumes_in_use(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.ops)
            .iter()
            .filter_map(|o| o.in_use.clone())
            .collect();
        v.extend(lock(&self.wanted).iter().map(|(_, u)| u.clone()));
        v.sort();
        v.dedup();
        v
    }

    /// The volume `name` of the pod in `pod_dir` is published and its
    /// driver does not ask to publish it again: nothing to do.
    pub fn still_published(
        &self,
        pod_dir: &Path,
        name: &str,
    ) -> Option<crate::volume::MountedVolume> {
        self.published_as(pod_dir, name, |m| {
            // an expansion still to be recorded in the claim goes the long
            // way, as does a claim due to be read again for one
            let recheck = m.expandable && !m.expanding && m.checked.elapsed() >= RESIZE_RECHECK;
            !m.resized && !recheck
        })
    }

    /// The volume `name` of the pod in `pod_dir` is published, whatever is
    /// due for it: a claim that cannot be read again leaves it so.
    pub fn published(&self, pod_dir: &Path, name: &str) -> Option<crate::volume::MountedVolume> {
        self.published_as(pod_dir, name, |_| true)
    }

    fn published_as(
        &self,
        pod_dir: &Path,
        name: &str,
        settled: impl Fn(&Mount) -> bool,
    ) -> Option<crate::volume::MountedVolume> {
        let ops = lock(&self.ops);
        let (op, m) = ops.iter().find_map(|o| {
            let m = o.mount()?;
            (m.volume == name && o.target.starts_with(pod_dir)).then_some((o, m))
        })?;
        (op.state == OpState::Published { republish: false } && settled(m)).then(|| {
            crate::volume::MountedVolume {
                kind: crate::volume::PluginKind::Csi,
                host_path: op.target.clone(),
                read_only: m.read_only,
                block: self.layout_of_key(&op.target).block,
            }
        })
    }

    /// Whether node status lists `unique` in `volumesAttached` (upstream
    /// verifyControllerAttachedVolume).
    fn attached_per_node_status(&self, unique: &str) -> bool {
        self.node_status(|s| {
            s.volumes_attached
                .as_ref()
                .is_some_and(|list| list.iter().any(|a| a.name == unique))
        })
    }

    /// Whether the node, as the server has it, reports `unique` in
    /// `volumesInUse` (upstream ReportedInUse): until then the
    /// attach-detach controller may still detach it.
    fn reported_in_use(&self, unique: &str) -> bool {
        self.node_status(|s| {
            s.volumes_in_use
                .as_ref()
                .is_some_and(|list| list.iter().any(|v| v == unique))
        })
    }

    fn node_status(&self, f: impl FnOnce(&k8s_openapi::api::core::v1::NodeStatus) -> bool) -> bool {
        let node = self.node.read().unwrap_or_else(|e| e.into_inner());
        node.as_ref().and_then(|n| n.status.as_ref()).is_some_and(f)
    }

    /// `plugins/kubernetes.io/csi/pv/<pv>`: the staged volume's directory.
    fn global_dir(&self, pv: &str) -> PathBuf {
        self.root_dir
            .join("plugins")
            .join(PLUGIN_NAME)
            .join("pv")
            .join(pv)
    }

    /// `f` on the operation of `kind` at `target`, if there is one.
    fn with_op<R>(&self, target: &Path, kind: OpKind, f: impl FnOnce(&mut Op) -> R) -> Option<R> {
        lock(&self.ops)
            .iter_mut()
            .find(|o| o.target == target && o.kind() == kind)
            .map(f)
    }

    /// `f` on the set-up at `target`, if there is one.
    fn with_mount<R>(&self, target: &Path, f: impl FnOnce(&mut Mount) -> R) -> Option<R> {
        let mut ops = lock(&self.ops);
        let m = ops.iter_mut().find_map(|o| match &mut o.work {
            Work::Mount(m) if o.target == target => Some(m),
            _ => None,
        })?;
        Some(f(m))
    }

    fn set_state(&self, target: &Path, kind: OpKind, state: OpState) {
        self.with_op(target, kind, |op| op.state = state);
        self.wake();
    }
}

/// The CSI plugin's directory name under a pod's `volumes/`.
pub const CSI_DIR: &str = "kubernetes.io~csi";

/// Upstream's message for a volume whose driver has not registered.
fn not_registered(driver: &str) -> String {
    format!("driver name {driver} not found in the list of registered CSI drivers")
}

/// `kubernetes.io/csi/<driver>^<handle>`: how node status and the
/// attach-detach controller name a CSI volume.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("{PLUGIN_NAME}/{driver}^{handle}")
}

fn sha256_hex(parts: &[&str]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(p.as_bytes());
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The VolumeAttachment the attach-detach controller makes for a volume on
/// a node (upstream `getAttachmentName`).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    format!("csi-{}", sha256_hex(&[handle, driver, node]))
}

/// The handle of an inline volume (upstream `makeVolumeHandle`).
pub fn inline_volume_handle(pod_uid: &str, volume: &str) -> String {
    format!("csi-{}", sha256_hex(&[pod_uid, volume]))
}

impl LifecycleMode {
    fn is_persistent(self) -> bool {
        self == LifecycleMode::Persistent
    }
}

#[cfg(test)]
mod tests;
