//! The reconciler (upstream pluginmanager/reconciler and the register and
//! unregister steps of its operationexecutor): brings the actual state of
//! world to the desired one, on the plugin manager's thread.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use log::{info, warn};

use super::cache::{ActualStateOfWorld, DesiredPlugin, DesiredStateOfWorld, RegisteredPlugin};
use super::{PluginClient, PluginDialer, PluginHandler, PluginInfo, PluginManagerError};

/// Upstream's bounds on the registration calls.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(10);
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Registers and deregisters plugins through the handler of their type.
pub(crate) struct Reconciler {
    handlers: HashMap<String, Arc<dyn PluginHandler>>,
    dialer: Box<dyn PluginDialer>,
}

impl Reconciler {
    pub fn new(dialer: Box<dyn PluginDialer>) -> Self {
        Reconciler {
            handlers: HashMap::new(),
            dialer,
        }
    }

    /// Routes plugins of `plugin_type` ("CSIPlugin", "DevicePlugin") to
    /// `handler`.
    pub fn add_handler(&mut self, plugin_type: &str, handler: Arc<dyn PluginHandler>) {
        self.handlers.insert(plugin_type.to_string(), handler);
    }

    /// Deregisters what left or was replaced, then registers what is new,
    /// so a replaced socket's plugin is taken back before it is given again.
    pub fn reconcile(&self, desired: &DesiredStateOfWorld, actual: &mut ActualStateOfWorld) {
        for plugin in actual.plugins() {
            if !desired.is_current(&plugin.socket_path, plugin.timestamp) {
                self.deregister(&plugin, actual);
            }
        }
        for plugin in desired.plugins() {
            if !actual.is_current(&plugin.socket_path, plugin.timestamp) {
                if let Err(e) = self.register(&plugin, actual) {
                    warn!("Plugin at {}: {e}", plugin.socket_path.display());
                }
            }
        }
    }

    fn deregister(&self, plugin: &RegisteredPlugin, actual: &mut ActualStateOfWorld) {
        info!(
            "Deregistering {} plugin {} ({})",
            plugin.plugin_type,
            plugin.name,
            plugin.socket_path.display()
        );
        if let Some(handler) = self.handlers.get(&plugin.plugin_type) {
            handler.deregister_plugin(&plugin.name, &plugin.endpoint);
        }
        actual.remove(&plugin.socket_path);
    }

    /// Upstream's registration: GetInfo, find the handler, validate, record,
    /// register, and tell the plugin how it went. A plugin that cannot be
    /// reached is tried again next round; one that was refused is not,
    /// until its socket changes, as upstream.
    fn register(
        &self,
        plugin: &DesiredPlugin,
        actual: &mut ActualStateOfWorld,
    ) -> Result<(), PluginManagerError> {
        let socket = &plugin.socket_path;
        let client = self.dialer.dial(socket, DIAL_TIMEOUT)?;
        let info = client.get_info(GET_INFO_TIMEOUT)?;
        let Some(handler) = self.handlers.get(&info.plugin_type) else {
            let msg = format!(
                "no handler registered for plugin type: {} at socket {}",
                info.plugin_type,
                socket.display()
            );
            return refuse(client.as_ref(), socket, msg);
        };
        let endpoint = endpoint_of(&info, socket);
        let versions = &info.supported_versions;
        if let Err(e) = handler.validate_plugin(&info.name, &endpoint, versions) {
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
