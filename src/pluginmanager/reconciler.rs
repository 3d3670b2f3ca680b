//! The reconciler (upstream pluginmanager/reconciler and the register and
//! unregister steps of its operationexecutor): brings the actual state of
//! world to the desired one, on the plugin manager's thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkubelet_util::Exponential;

use log::{debug, info, warn};

use super::cache::{ActualStateOfWorld, DesiredPlugin, DesiredStateOfWorld, RegisteredPlugin};
use super::{PluginClient, PluginDialer, PluginHandler, PluginInfo, PluginManagerError};

/// Upstream's bounds on the registration calls.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(10);
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
/// A socket whose registration failed is tried again after this, doubling
/// to [`RETRY_MAX`] (upstream's operation executor: 500 ms to 2 min 2 s),
/// so one socket that is not a plugin does not hold the thread every round.
const RETRY_INITIAL: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(122);

/// Told why a plugin's registration failed (the kubelet records a node
/// event).
pub(crate) type OnFailure = Box<dyn Fn(&str) + Send>;

/// Run once on the manager's thread before it watches (the CSI plugin
/// makes sure of the node's CSINode), given the shutdown channel.
pub(crate) type OnStart = Box<dyn FnOnce(&crossbeam_channel::Receiver<()>) + Send>;

/// A socket whose registration failed.
struct Retry {
    socket: PathBuf,
    timestamp: u64,
    at: Instant,
    backoff: Exponential,
}

/// Registers and deregisters plugins through the handler of their type.
pub(crate) struct Reconciler {
    /// By plugin type; two at most.
    handlers: Vec<(String, Arc<dyn PluginHandler>)>,
    dialer: Box<dyn PluginDialer>,
    /// Sockets whose registration failed: the socket's timestamp then, and
    /// when it may be tried again.
    retry: Vec<Retry>,
    on_failure: Option<OnFailure>,
    on_start: Option<OnStart>,
    /// The registry of before upstream 1.13 (`<root-dir>/plugins`).
    deprecated_dir: Option<PathBuf>,
}

impl Reconciler {
    pub fn new(dialer: Box<dyn PluginDialer>) -> Self {
        Reconciler {
            handlers: Vec::new(),
            dialer,
            retry: Vec::new(),
            on_failure: None,
            on_start: None,
            deprecated_dir: None,
        }
    }

    /// Sockets under `dir` are from the old registry: handlers are told,
    /// and one that is not a registration socket (a CSI driver's own
    /// endpoint lives there too) is retried quietly, without an event.
    pub fn set_deprecated_dir(&mut self, dir: PathBuf) {
        self.deprecated_dir = Some(dir);
    }

    fn in_deprecated_dir(&self, socket: &Path) -> bool {
        self.deprecated_dir
            .as_ref()
            .is_some_and(|d| socket.starts_with(d))
    }

    pub fn on_start(&mut self, f: OnStart) {
        self.on_start = Some(f);
    }

    /// Runs the start hook, once.
    pub fn start(&mut self, shutdown: &crossbeam_channel::Receiver<()>) {
        if let Some(f) = self.on_start.take() {
            f(shutdown);
        }
    }

    /// Where failures are reported, besides the log.
    pub fn on_failure(&mut self, f: OnFailure) {
        self.on_failure = Some(f);
    }

    /// Routes plugins of `plugin_type` ("CSIPlugin", "DevicePlugin") to
    /// `handler`.
    pub fn add_handler(&mut self, plugin_type: &str, handler: Arc<dyn PluginHandler>) {
        self.handlers.retain(|(t, _)| t != plugin_type);
        self.handlers.push((plugin_type.to_string(), handler));
    }

    /// Deregisters what left or was replaced, then registers what is new,
    /// so a replaced socket's plugin is taken back before it is given again.
    pub fn reconcile(&mut self, desired: &DesiredStateOfWorld, actual: &mut ActualStateOfWorld) {
        for plugin in actual.plugins() {
            if !desired.is_current(&plugin.socket_path, plugin.timestamp) {
                self.deregister(&plugin, actual);
            }
        }
        // A socket that went or changed starts afresh.
        self.retry.retain(|r| desired.contains(&r.socket));
        let now = Instant::now();
        for plugin in desired.plugins() {
            if actual.is_current(&plugin.socket_path, plugin.timestamp) {
                // Registered, even when its handler then refused it (as
                // upstream, it stays in the actual state): nothing of it
                // is to be tried again, so no retry may keep the manager
                // waking for it.
                self.retry.retain(|r| r.socket != plugin.socket_path);
                continue;
            }
            let waiting = self.retry.iter().find(|r| r.socket == plugin.socket_path);
            if waiting.is_some_and(|r| r.timestamp == plugin.timestamp && now < r.at) {
                continue;
            }
            match self.register(&plugin, actual) {
                Ok(()) => self.retry.retain(|r| r.socket != plugin.socket_path),
                Err(e) => self.failed(&plugin.socket_path, plugin.timestamp, &e),
            }
        }
    }

    /// When the next failed registration is due to be tried again; None
    /// when none failed. Nothing else makes a reconcile needed but a change
    /// in the desired state.
    pub fn next_retry(&self) -> Option<Instant> {
        self.retry.iter().map(|r| r.at).min()
    }

    fn failed(&mut self, socket: &Path, timestamp: u64, e: &PluginManagerError) {
        let msg = format!("plugin at {}: {e}", socket.display());
        let refused = matches!(e, PluginManagerError::Handler(_));
        if self.in_deprecated_dir(socket) && !refused {
            debug!("{msg} (in the deprecated plugin directory)");
        } else {
            warn!("{msg}");
            if let Some(f) = &self.on_failure {
                f(&msg);
            }
        }
        let at = self
            .retry
            .iter()
            .position(|r| r.socket == socket && r.timestamp == timestamp);
        let i = at.unwrap_or_else(|| {
            // New, or a socket replaced since: the back-off starts over.
            self.retry.retain(|r| r.socket != socket);
            self.retry.push(Retry {
                socket: socket.to_path_buf(),
                timestamp,
                at: Instant::now(),
                backoff: Exponential::new(RETRY_INITIAL, RETRY_MAX),
            });
            self.retry.len() - 1
        });
        let r = &mut self.retry[i];
        r.at = Instant::now() + r.backoff.next_delay();
    }

    fn handler(&self, plugin_type: &str) -> Option<&Arc<dyn PluginHandler>> {
        self.handlers
            .iter()
            .find(|(t, _)| t == plugin_type)
            .map(|(_, h)| h)
    }

    fn deregister(&self, plugin: &RegisteredPlugin, actual: &mut ActualStateOfWorld) {
        info!(
            "Deregistering {} plugin {} ({})",
            plugin.plugin_type,
            plugin.name,
            plugin.socket_path.display()
        );
        if let Some(handler) = self.handler(&plugin.plugin_type) {
            handler.deregister_plugin(&plugin.name, &plugin.endpoint);
        }
        actual.remove(&plugin.socket_path);
    }

    /// Upstream's registration: GetInfo, find the handler, validate, record,
    /// register, and tell the plugin how it went. A failure of any kind is
    /// the caller's to retry, with back-off (`failed`).
    fn register(
        &self,
        plugin: &DesiredPlugin,
        actual: &mut ActualStateOfWorld,
    ) -> Result<(), PluginManagerError> {
        let socket = &plugin.socket_path;
        let client = self.dialer.dial(socket, DIAL_TIMEOUT)?;
        let info = client.get_info(GET_INFO_TIMEOUT)?;
        let Some(handler) = self.handler(&info.plugin_type) else {
            let msg = format!(
                "no handler registered for plugin type: {} at socket {}",
                info.plugin_type,
                socket.display()
            );
            return refuse(client.as_ref(), socket, msg);
        };
        let endpoint = endpoint_of(&info, socket);
        let versions = &info.supported_versions;
        let deprecated = self.in_deprecated_dir(socket);
        if let Err(e) = handler.validate_plugin(&info.name, &endpoint, versions, deprecated) {
            let msg = format!("plugin validation failed with err: {e}");
            return refuse(client.as_ref(), socket, msg);
        }
        actual.add(RegisteredPlugin {
            socket_path: socket.clone(),
            timestamp: plugin.timestamp,
            plugin_type: info.plugin_type.clone(),
            name: info.name.clone(),
            endpoint: endpoint.clone(),
        });
        if let Err(e) = handler.register_plugin(&info.name, &endpoint, versions) {
            let msg = format!("plugin registration failed with err: {e}");
            return refuse(client.as_ref(), socket, msg);
        }
        info!("Registered {} plugin {}", info.plugin_type, info.name);
        client.notify_registration_status(true, "", NOTIFY_TIMEOUT)
    }
}

/// Tells the plugin it was refused, and why; the refusal is the error.
fn refuse(client: &dyn PluginClient, socket: &Path, msg: String) -> Result<(), PluginManagerError> {
    if let Err(e) = client.notify_registration_status(false, &msg, NOTIFY_TIMEOUT) {
        warn!("Plugin at {}: {e}", socket.display());
    }
    Err(PluginManagerError::Handler(msg))
}

fn endpoint_of(info: &PluginInfo, socket: &Path) -> String {
    if info.endpoint.is_empty() {
        socket.to_string_lossy().into_owned()
    } else {
        info.endpoint.clone()
    }
}
