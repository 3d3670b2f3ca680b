//! The plugin manager's handler for `CSIPlugin` plugins (upstream
//! `csi.RegistrationHandler`): a driver that registers is asked for its
//! node ID, topology and capabilities, recorded, and written into the
//! node's CSINode, annotation and labels; one that goes is removed again.

use std::collections::BTreeMap;
use std::sync::Arc;

use rkubelet_util::lock;

use super::client::NodeConn;
use super::nodeinfo::DriverInfo;
use super::{CsiPlugin, Driver};
use crate::pluginmanager::{PluginHandler, PluginManagerError};

pub struct RegistrationHandler {
    plugin: Arc<CsiPlugin>,
}

impl RegistrationHandler {
    pub fn new(plugin: Arc<CsiPlugin>) -> Self {
        RegistrationHandler { plugin }
    }
}

/// Whether a version a driver names is CSI 1.x, the only major version
/// the kubelet speaks (upstream's highestSupportedVersion refuses < 1.0.0
/// and > 1.x).
fn supported_version(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    v.split('.').next() == Some("1") && v.split('.').all(|p| p.parse::<u32>().is_ok())
}

fn refused(msg: String) -> PluginManagerError {
    PluginManagerError::Handler(msg)
}

impl PluginHandler for RegistrationHandler {
    fn validate_plugin(
        &self,
        name: &str,
        _: &str,
        versions: &[String],
        found_in_deprecated_dir: bool,
    ) -> Result<(), PluginManagerError> {
        // Upstream allowed the old directory to CSI 0.x drivers only, and
        // this kubelet speaks CSI 1.x: a driver there is refused, saying so.
        if found_in_deprecated_dir {
            return Err(refused(format!(
                "socket for CSI driver {name:?} versions {versions:?} was found in a deprecated dir. \
                 Drivers implementing CSI 1.x+ must use the new dir"
            )));
        }
        if !versions.iter().any(|v| supported_version(v)) {
            return Err(refused(format!(
                "validation failed for CSI Driver {name}: none of the CSI versions reported by \
                 this driver are supported ({versions:?}; this kubelet speaks 1.x)"
            )));
        }
        Ok(())
    }

    /// NodeGetInfo and NodeGetCapabilities (each within 10 s), then the
    /// API objects. A driver whose objects cannot be written is not kept:
    /// the plugin manager retries the registration.
    fn register_plugin(
        &self,
        name: &str,
        endpoint: &str,
        _: &[String],
    ) -> Result<(), PluginManagerError> {
        let p = &self.plugin;
        let conn = NodeConn::dial(&p.env, endpoint);
        let info = conn
            .get_info()
            .map_err(|e| refused(format!("CSI driver {name}: {e}")))?;
        if info.node_id.is_empty() {
            return Err(refused(format!(
                "CSI driver {name}: NodeGetInfo returned an empty node ID"
            )));
        }
        let caps = conn
            .capabilities()
            .map_err(|e| refused(format!("CSI driver {name}: {e}")))?;
        let topology: BTreeMap<String, String> = info
            .accessible_topology
            .as_ref()
            .map(|t| {
                t.segments
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        p.node_info()
            .install_driver(&DriverInfo {
                name: name.to_string(),
                node_id: info.node_id.clone(),
                max_volumes: info.max_volumes_per_node,
                topology,
            })
            .map_err(|e| refused(format!("CSI driver {name}: {e}")))?;
        let mut drivers = lock(&p.drivers);
        drivers.retain(|d| d.name != name);
        drivers.push(Driver {
            name: name.to_string(),
            conn,
            caps,
        });
        drop(drivers);
        log::info!(
            "CSI driver {name} registered at {endpoint} (node ID {:?})",
            info.node_id
        );
        p.wake();
        Ok(())
    }

    fn deregister_plugin(&self, name: &str, _: &str) {
        lock(&self.plugin.drivers).retain(|d| d.name != name);
        if let Err(e) = self.plugin.node_info().uninstall_driver(name) {
            log::warn!("CSI driver {name} deregistered, but: {e}");
        }
    }
}

#[cfg(test)]
pub(super) fn is_supported_version(v: &str) -> bool {
    supported_version(v)
}
