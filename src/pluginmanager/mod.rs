//! The plugin manager (upstream pkg/kubelet/pluginmanager): one thread
//! that watches `<root-dir>/plugins_registry` (and the old `plugins`) for
//! plugin sockets and hands each plugin to the handler of its type (CSI
//! drivers, device plugins), taking it back when its socket goes.
//!
//! The registration RPCs are behind [`PluginDialer`] and [`PluginClient`]
//! so the transport stays out of the watcher and the reconciler.

mod cache;
mod grpc;
mod reconciler;
mod watcher;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};
use log::{error, info};

use crate::util::worker::{self, ShutdownStage, Worker};
use cache::{ActualStateOfWorld, DesiredStateOfWorld};
pub(crate) use grpc::GrpcDialer;
pub(crate) use reconciler::Reconciler;
use watcher::Watcher;

/// The registry directory under the kubelet's root dir.
pub(crate) const PLUGINS_REGISTRY_DIR: &str = "plugins_registry";
/// The registry of before upstream 1.13, still watched for old plugins
/// (upstream 1.13 to 1.16 did): its first level only, and never its
/// `kubernetes.io` directory, where volumes are mounted.
pub(crate) const DEPRECATED_PLUGINS_DIR: &str = "plugins";
/// The plugin types upstream's registration API names.
pub(crate) const DEVICE_PLUGIN: &str = "DevicePlugin";
/// The plugin type of CSI drivers, handled by the CSI volume plugin.
pub(crate) const CSI_PLUGIN: &str = "CSIPlugin";

/// How long one wait for inotify lasts: the bound on noticing shutdown
/// (well within a second), and on noticing the deprecated directory's
/// events. The registry's events end the wait at once. Each idle wakeup
/// costs CPU (at 100 ms, 38 ms a minute).
const TICK: Duration = Duration::from_millis(500);
/// How often plugins whose registration failed are tried again, as
/// upstream's reconciler period.
const RECONCILE_PERIOD: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub(crate) enum PluginManagerError {
    #[error("creating plugin directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("watching {path} with inotify: {source}")]
    Watch {
        path: PathBuf,
        source: nix::errno::Errno,
    },
    #[error("dialing plugin socket {socket}: {message}")]
    Dial { socket: PathBuf, message: String },
    #[error("{call} on plugin socket {socket}: {message}")]
    Rpc {
        call: &'static str,
        socket: PathBuf,
        message: String,
    },
    #[error("{0}")]
    Handler(String),
}

/// What a plugin says about itself (pluginregistration v1 `PluginInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PluginInfo {
    pub plugin_type: String,
    pub name: String,
    /// Where the plugin serves its own API; empty means the registration
    /// socket itself.
    pub endpoint: String,
    pub supported_versions: Vec<String>,
}

/// One plugin's registration service (pluginregistration v1
/// `Registration`). Each call must give up after `timeout`.
pub(crate) trait PluginClient {
    fn get_info(&self, timeout: Duration) -> Result<PluginInfo, PluginManagerError>;
    fn notify_registration_status(
        &self,
        registered: bool,
        error: &str,
        timeout: Duration,
    ) -> Result<(), PluginManagerError>;
}

/// Connects to a plugin's registration socket.
pub(crate) trait PluginDialer: Send {
    fn dial(
        &self,
        socket: &Path,
        timeout: Duration,
    ) -> Result<Box<dyn PluginClient>, PluginManagerError>;
}

/// What a plugin type's owner does with its plugins (upstream's
/// cache.PluginHandler).
pub(crate) trait PluginHandler: Send + Sync {
    /// `found_in_deprecated_dir`: the socket is under `plugins/`, the
    /// registry of before upstream 1.13.
    fn validate_plugin(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
        found_in_deprecated_dir: bool,
    ) -> Result<(), PluginManagerError>;
    fn register_plugin(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), PluginManagerError>;
    fn deregister_plugin(&self, name: &str, endpoint: &str);
}

/// The watcher, both caches and the reconciler, run by one thread.
pub(crate) struct PluginManager {
    watcher: Watcher,
    deprecated: Watcher,
    desired: DesiredStateOfWorld,
    actual: ActualStateOfWorld,
    reconciler: Reconciler,
}

impl PluginManager {
    /// A manager for `<root_dir>/plugins_registry`.
    pub fn new(root_dir: &Path, mut reconciler: Reconciler) -> Self {
        let deprecated = root_dir.join(DEPRECATED_PLUGINS_DIR);
        reconciler.set_deprecated_dir(deprecated.clone());
        PluginManager {
            watcher: Watcher::new(root_dir.join(PLUGINS_REGISTRY_DIR)),
            deprecated: Watcher::new(deprecated).limited(1, "kubernetes.io"),
            desired: DesiredStateOfWorld::default(),
            actual: ActualStateOfWorld::default(),
            reconciler,
        }
    }

    /// Watches and reconciles until `shutdown` closes or gets a message:
    /// at once after a change, else every [`RECONCILE_PERIOD`].
    pub fn run(&mut self, shutdown: &Receiver<()>) {
        self.reconciler.start(shutdown);
        for w in [&mut self.watcher, &mut self.deprecated] {
            if let Err(e) = w.start(&mut self.desired) {
                error!("Plugin watcher failed to start, trying again: {e}");
            }
        }
        let mut last = None::<Instant>;
        loop {
            // (the old directory's events wait for the tick at most)
            let changed = self.watcher.wait(TICK, &mut self.desired)
                | self.deprecated.wait(Duration::ZERO, &mut self.desired);
            if !matches!(shutdown.try_recv(), Err(TryRecvError::Empty)) {
                break;
            }
            if changed || last.is_none_or(|at| at.elapsed() >= RECONCILE_PERIOD) {
                self.reconciler.reconcile(&self.desired, &mut self.actual);
                last = Some(Instant::now());
            }
        }
        info!("Plugin manager stopped");
    }
}

/// Starts the "plugin-manager" thread: one, whatever the number of
/// plugins.
pub(crate) fn start(
    root_dir: &Path,
    reconciler: Reconciler,
    shutdown: Receiver<()>,
) -> std::io::Result<Worker> {
    let mut manager = PluginManager::new(root_dir, reconciler);
    worker::spawn_supervised(
        "plugin-manager",
        ShutdownStage::Workers,
        shutdown,
        move |shutdown| manager.run(shutdown),
    )
}
