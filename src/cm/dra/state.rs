//! The claims prepared on this node, and their checkpoint
//! `dra_manager_state` in the root directory, in upstream's format
//! (`cm/dra/state`): `{"Data": "<JSON>", "Checksum": <CRC-32 of Data>}`,
//! Data holding the claims, the pods that use each and what each driver
//! prepared. An upstream kubelet started on the same node reads ours, and
//! we its.
//!
//! The checkpoint is written before a claim is prepared (so a pod that
//! goes meanwhile still gets it unprepared) and after (with its devices).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checkpointmanager::{write_atomic, CheckpointError};

/// The file name (upstream DRACheckpointFileName).
pub(super) const CHECKPOINT: &str = "dra_manager_state";
const KIND: &str = "DRACheckpoint";
const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";

/// One device a driver prepared for a claim (upstream state.Device).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Device {
    #[serde(rename = "PoolName")]
    pub pool_name: String,
    #[serde(rename = "DeviceName")]
    pub device_name: String,
    /// The claim's requests it serves; empty: all of them.
    #[serde(rename = "RequestNames")]
    pub request_names: Option<Vec<String>>,
    #[serde(rename = "CDIDeviceIDs")]
    pub cdi_device_ids: Option<Vec<String>>,
}

impl Device {
    /// Whether the device serves `request` of its claim (a subrequest
    /// `request/sub` serves its parent's name too).
    pub fn serves(&self, request: &str) -> bool {
        let names = self.request_names.as_deref().unwrap_or(&[]);
        request.is_empty()
            || names.is_empty()
            || names.iter().any(|n| {
                n == request
                    || n.strip_prefix(request)
                        .is_some_and(|rest| rest.starts_with('/'))
            })
    }
}

/// upstream state.DriverState.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct DriverState {
    #[serde(rename = "Devices")]
    pub devices: Option<Vec<Device>>,
}

/// One claim as the node holds it (upstream state.ClaimInfoState).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ClaimInfo {
    #[serde(rename = "ClaimUID")]
    pub claim_uid: String,
    #[serde(rename = "ClaimName")]
    pub claim_name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// A set in Go, written as an object of empty objects.
    #[serde(rename = "PodUIDs", with = "uid_set")]
    pub pod_uids: BTreeSet<String>,
    /// Every driver with devices allocated in the claim.
    #[serde(rename = "DriverState")]
    pub driver_state: BTreeMap<String, DriverState>,
    /// The drivers answered NodePrepareResources; not in the checkpoint
    /// (upstream neither), so after a restart a claim is prepared again
    /// before another sandbox uses it (drivers take that as a no-op).
    #[serde(skip)]
    pub prepared: bool,
}

impl ClaimInfo {
    /// The claim as the DRA API names it to a driver.
    pub fn as_claim(&self) -> crate::cri::dra::v1::api::Claim {
        crate::cri::dra::v1::api::Claim {
            namespace: self.namespace.clone(),
            uid: self.claim_uid.clone(),
            name: self.claim_name.clone(),
            ..Default::default()
        }
    }

    /// The CDI device IDs of what serves `request` (every device for "").
    pub fn cdi_devices(&self, request: &str) -> Vec<String> {
        self.driver_state
            .values()
            .flat_map(|d| d.devices.iter().flatten())
            .filter(|d| d.serves(request))
            .flat_map(|d| d.cdi_device_ids.iter().flatten().cloned())
            .collect()
    }
}

mod uid_set {
    use std::collections::{BTreeMap, BTreeSet};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize, Default)]
    struct Empty {}

    pub fn serialize<S: Serializer>(set: &BTreeSet<String>, s: S) -> Result<S::Ok, S::Error> {
        let map: BTreeMap<&String, Empty> = set.iter().map(|u| (u, Empty {})).collect();
        map.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
        let map: Option<BTreeMap<String, serde::de::IgnoredAny>> = Option::deserialize(d)?;
        Ok(map.unwrap_or_default().into_keys().collect())
    }
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

#[derive(Serialize, Deserialize)]
struct CheckpointData {
    #[serde(default)]
    kind: String,
    #[serde(default, rename = "apiVersion")]
    api_version: String,
    #[serde(rename = "Entries")]
    entries: Option<Vec<ClaimInfo>>,
}

/// The checkpoint's path under `root_dir`.
pub(super) fn path(root_dir: &Path) -> PathBuf {
    root_dir.join(CHECKPOINT)
}

/// The claims `path` holds; none when it does not exist. A corrupt or
/// unreadable checkpoint is an error: the node's prepared devices are
/// unknown, and upstream refuses to start then too.
pub(super) fn load(path: &Path) -> Result<Vec<ClaimInfo>, CheckpointError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(restore_error(path, e.to_string())),
    };
    let cp: Checkpoint =
        serde_json::from_slice(&bytes).map_err(|e| restore_error(path, e.to_string()))?;
    let want = crc32fast::hash(cp.data.as_bytes());
    if want != cp.checksum {
        return Err(restore_error(
            path,
            format!(
                "checkpoint is corrupted: checksum {} is not the data's {want}",
                cp.checksum
            ),
        ));
    }
    let data: CheckpointData =
        serde_json::from_str(&cp.data).map_err(|e| restore_error(path, e.to_string()))?;
    Ok(data.entries.unwrap_or_default())
}

/// Writes `claims` whole, or leaves the last checkpoint.
pub(super) fn store(path: &Path, claims: &[ClaimInfo]) -> Result<(), CheckpointError> {
    let data = CheckpointData {
        kind: KIND.into(),
        api_version: API_VERSION.into(),
        entries: Some(claims.to_vec()),
    };
    let write_err = |source| CheckpointError::Write {
        manager: "DRA manager",
        path: path.to_path_buf(),
        source,
    };
    let data = serde_json::to_string(&data).map_err(|e| write_err(e.into()))?;
    let cp = Checkpoint {
        checksum: crc32fast::hash(data.as_bytes()),
        data,
    };
    let bytes = serde_json::to_vec(&cp).map_err(|e| write_err(e.into()))?;
    write_atomic(path, &bytes).map_err(write_err)
}

fn restore_error(path: &Path, reason: String) -> CheckpointError {
    CheckpointError::Restore {
        manager: "DRA manager",
        reason,
        path: path.to_path_buf(),
    }
}
