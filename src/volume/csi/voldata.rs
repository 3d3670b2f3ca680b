//! `vol_data.json`: what upstream's CSI plugin writes beside each mount so
//! that a volume can be torn down after a restart, when the pod spec that
//! named its driver and handle may be gone (upstream `saveVolumeData` /
//! `loadVolumeData`). Same file name and keys as upstream v1.22, so a node
//! handed over from the upstream kubelet is cleaned up the same way.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

pub const FILE: &str = "vol_data.json";

/// The two volume lifecycle modes (CSIDriver `volumeLifecycleModes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifecycleMode {
    Persistent,
    Ephemeral,
}

impl LifecycleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleMode::Persistent => "Persistent",
            LifecycleMode::Ephemeral => "Ephemeral",
        }
    }
}

/// One volume's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolData {
    pub driver: String,
    pub volume_handle: String,
    /// The PV's name, or the pod's volume name for an inline volume.
    pub spec_vol_id: String,
    pub node_name: String,
    /// Empty when the driver needs no attach.
    pub attachment_id: String,
    pub mode: LifecycleMode,
}

impl VolData {
    fn to_map(&self) -> BTreeMap<&'static str, &str> {
        BTreeMap::from([
            ("driverName", self.driver.as_str()),
            ("volumeHandle", self.volume_handle.as_str()),
            ("specVolID", self.spec_vol_id.as_str()),
            ("nodeName", self.node_name.as_str()),
            ("attachmentID", self.attachment_id.as_str()),
            ("volumeLifecycleMode", self.mode.as_str()),
        ])
    }

    /// Writes `dir/vol_data.json`, creating `dir`.
    pub fn save(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let text = serde_json::to_vec(&self.to_map()).map_err(io::Error::other)?;
        std::fs::write(dir.join(FILE), text)
    }

    /// Reads `dir/vol_data.json`; a file without a driver or a handle is
    /// invalid data.
    pub fn load(dir: &Path) -> io::Result<VolData> {
        let path = dir.join(FILE);
        let text = std::fs::read(&path)?;
        let map: BTreeMap<String, String> = serde_json::from_slice(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })?;
        let get = |k: &str| map.get(k).cloned().unwrap_or_default();
        let data = VolData {
            driver: get("driverName"),
            volume_handle: get("volumeHandle"),
            spec_vol_id: get("specVolID"),
            node_name: get("nodeName"),
            attachment_id: get("attachmentID"),
            mode: match map.get("volumeLifecycleMode").map(String::as_str) {
                Some("Ephemeral") => LifecycleMode::Ephemeral,
                _ => LifecycleMode::Persistent,
            },
        };
        if data.driver.is_empty() || data.volume_handle.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: no driverName or volumeHandle", path.display()),
            ));
        }
        Ok(data)
    }
}
