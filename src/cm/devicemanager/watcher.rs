//! Device plugins that register through the plugin watcher
//! (`plugins_registry/`) rather than `Register` on kubelet.sock: the
//! device manager as the plugin manager's handler of "DevicePlugin"
//! (upstream's ValidatePlugin, RegisterPlugin and DeRegisterPlugin). Runs
//! on the plugin-manager thread.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use super::endpoint::Endpoint;
use super::server::check_resource_name;
use super::{DeviceManager, Inner, SUPPORTED_VERSIONS};
use crate::pluginmanager::{PluginHandler, PluginManagerError};

/// Deadline of GetDevicePluginOptions at registration.
const OPTIONS_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct WatcherHandler {
    inner: Arc<Inner>,
}

impl DeviceManager {
    /// The handler the plugin manager gives "DevicePlugin" plugins to.
    pub(crate) fn watcher_handler(&self) -> WatcherHandler {
        WatcherHandler {
            inner: Arc::clone(&self.inner),
        }
    }
}

fn refused(msg: String) -> PluginManagerError {
    PluginManagerError::Handler(msg)
}

impl PluginHandler for WatcherHandler {
    /// upstream ValidatePlugin, its messages word for word.
    fn validate_plugin(
        &self,
        name: &str,
        _: &str,
        versions: &[String],
        // (upstream's device manager accepts a plugin from either directory)
        _: bool,
    ) -> Result<(), PluginManagerError> {
        if !versions
            .iter()
            .any(|v| SUPPORTED_VERSIONS.contains(&v.as_str()))
        {
            return Err(refused(format!(
                "manager version, {}, is not among plugin supported versions {versions:?}",
                SUPPORTED_VERSIONS[0]
            )));
        }
        check_resource_name(name)
            .map_err(|e| refused(format!("invalid name of device plugin socket: {e}")))
    }

    fn register_plugin(
        &self,
        name: &str,
        endpoint: &str,
        _: &[String],
    ) -> Result<(), PluginManagerError> {
        let mut e = Endpoint::dial(
            &self.inner.env,
            name,
            Path::new(endpoint),
            Default::default(),
        )
        .map_err(refused)?;
        e.ask_options(OPTIONS_TIMEOUT).map_err(refused)?;
        self.inner.add_endpoint(Arc::new(e));
        Ok(())
    }

    /// upstream DeRegisterPlugin: the devices turn unhealthy and the
    /// resource's grace period starts.
    fn deregister_plugin(&self, name: &str, _: &str) {
        let mut s = lock(&self.inner.state);
        if let Some(res) = s.resource_mut(name) {
            res.stop(Instant::now());
        }
        drop(s);
        log::info!("device plugin {name} deregistered: its socket went");
        (self.inner.on_capacity_changed)();
    }
}
