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

use log::{error, info, warn};
use rkubelet_util::shutdown::{wait_readable, Shutdown};

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
/// The plugin type of DRA drivers, handled by the DRA manager.
pub(crate) const DRA_PLUGIN: &str = "DRAPlugin";

/// The longest one wait lasts when nothing is due. Both registries'
/// events and shutdown (all in the same poll) end it at once, and a retry
/// or a watcher's restart shortens it, so the bound only keeps the wait
/// finite. Each idle wakeup costs CPU: a 500 ms tick took about 7 ms a
/// minute.
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// The pause after poll(2) itself failed, so the loop does not spin.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

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

    /// Watches and reconciles until `shutdown` comes: at once after a
    /// change, and when a failed registration is due again (upstream
    /// reconciles every second; between changes and retries that finds
    /// nothing to do).
    pub fn run(&mut self, shutdown: &Shutdown) {
        self.reconciler.start(&shutdown.channel);
        for w in [&mut self.watcher, &mut self.deprecated] {
            if let Err(e) = w.start(&mut self.desired) {
                error!("Plugin watcher failed to start, trying again: {e}");
            }
        }
        let mut first = true;
        loop {
            let changed = self.watcher.take_events(&mut self.desired)
                | self.deprecated.take_events(&mut self.desired);
            if shutdown.came() {
                break;
            }
            let retry_due = self
                .reconciler
                .next_retry()
                .is_some_and(|at| at <= Instant::now());
            if changed || retry_due || first {
                self.reconciler.reconcile(&self.desired, &mut self.actual);
                first = false;
            }
            self.wait_for_work(shutdown);
        }
        info!("Plugin manager stopped");
    }

    /// Sleeps until an event in either registry, shutdown, a retry's time
    /// or a watcher's restart, whichever is first.
    fn wait_for_work(&self, shutdown: &Shutdown) {
        let now = Instant::now();
        let due = [
            self.reconciler.next_retry(),
            self.watcher.restart_at(),
            self.deprecated.restart_at(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + IDLE_WAIT);
        let timeout = due.saturating_duration_since(now).min(IDLE_WAIT);
        let fds: Vec<_> = [self.watcher.fd(), self.deprecated.fd()]
            .into_iter()
            .flatten()
            .collect();
        if let Err(e) = wait_readable(&fds, &shutdown.fd, timeout) {
            warn!("Plugin manager: poll: {e}");
            std::thread::sleep(timeout.min(ERROR_PAUSE));
        }
    }
}

/// Starts the "plugin-manager" thread: one, whatever the number of
/// plugins.
pub(crate) fn start(
    root_dir: &Path,
    reconciler: Reconciler,
    shutdown: Shutdown,
) -> std::io::Result<Worker> {
    let mut manager = PluginManager::new(root_dir, reconciler);
    let channel = shutdown.channel.clone();
    worker::spawn_supervised(
        "plugin-manager",
        ShutdownStage::Workers,
        channel,
        move |_| manager.run(&shutdown),
    )
}
