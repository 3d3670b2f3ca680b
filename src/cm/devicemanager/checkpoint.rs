//! The device manager's checkpoint, `kubelet_internal_checkpoint` in the
//! device-plugins directory, in upstream's JSON (checkpoint/checkpoint.go),
//! so assignments survive a restart, and an upstream kubelet started on the
//! same node reads ours (and we its).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use protobuf::Message as _;
use serde::{Deserialize, Serialize};

use super::pod_devices::{Allocation, ContainerDevices, NODE_WITHOUT_TOPOLOGY};
use super::{Inner, Resource, State};
use crate::cri::deviceplugin::v1beta1::api as pluginapi;

/// The file name (upstream kubeletDeviceManagerCheckpoint).
pub(super) const CHECKPOINT: &str = "kubelet_internal_checkpoint";

#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
pub(super) struct File {
    #[serde(rename = "Data")]
    pub data: Data,
    #[serde(rename = "Checksum")]
    pub checksum: u64,
}

#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
pub(super) struct Data {
    // Go writes a nil slice or map as null, which the checksum tells
    // from an empty one: every Option here keeps that difference.
    #[serde(rename = "PodDeviceEntries")]
    pub entries: Option<Vec<Entry>>,
    #[serde(rename = "RegisteredDevices")]
    pub registered: Option<BTreeMap<String, Option<Vec<String>>>>,
}

#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
pub(super) struct Entry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    #[serde(rename = "ContainerName")]
    pub container_name: String,
    #[serde(rename = "ResourceName")]
    pub resource_name: String,
    /// NUMA node -> device IDs (upstream DevicesPerNUMA).
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<BTreeMap<i64, Option<Vec<String>>>>,
    /// The plugin's ContainerAllocateResponse, serialized, base64 in JSON.
    #[serde(rename = "AllocResp", with = "base64_bytes")]
    pub alloc_resp: Option<Vec<u8>>,
}

mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match b {
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    /// Go writes a nil []byte as null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(s) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

/// The checkpoint's content for `state`: allocated devices only (a
/// reservation whose answer is not in is asked for again after a
/// restart, by admission), and the healthy devices of each resource.
pub(super) fn from_state(s: &State) -> Data {
    let mut entries = Vec::new();
    for (uid, container, resource, d) in s.pods.iter() {
        let Allocation::Allocated(resp) = &d.allocation else {
            continue;
        };
        let numa = s.resources.get(resource).map(|r| &r.devices);
        let mut device_ids: BTreeMap<i64, Option<Vec<String>>> = BTreeMap::new();
        for id in &d.ids {
            let nodes = numa
                .and_then(|m| m.get(id))
                .map(|i| i.numa.clone())
                .unwrap_or_default();
            if nodes.is_empty() {
                let ids = device_ids.entry(NODE_WITHOUT_TOPOLOGY).or_default();
                ids.get_or_insert_with(Vec::new).push(id.clone());
            }
            for n in nodes {
                device_ids
                    .entry(n)
                    .or_default()
                    .get_or_insert_with(Vec::new)
                    .push(id.clone());
            }
        }
        entries.push(Entry {
            pod_uid: uid.to_string(),
            container_name: container.to_string(),
            resource_name: resource.to_string(),
            device_ids: Some(device_ids),
            alloc_resp: Some(resp.write_to_bytes().unwrap_or_default()),
        });
    }
    let registered = s
        .resources
        .iter()
        .map(|(name, r)| (name.clone(), Some(r.healthy().into_iter().collect())))
        .collect();
    Data {
        entries: (!entries.is_empty()).then_some(entries),
        registered: Some(registered),
    }
}

/// Restores the allocations and registered resources of `data`; entries
/// whose answer does not parse are dropped with a warning.
pub(super) fn into_state(data: Data, now: std::time::Instant) -> State {
    let mut s = State::default();
    for e in data.entries.into_iter().flatten() {
        let bytes = e.alloc_resp.unwrap_or_default();
        let resp = match pluginapi::ContainerAllocateResponse::parse_from_bytes(&bytes) {
            Ok(r) => r,
            Err(err) => {
                log::warn!(
                    "device checkpoint: pod {} container {} {}: AllocResp: {err}; entry dropped",
                    e.pod_uid,
                    e.container_name,
                    e.resource_name
                );
                continue;
            }
        };
        let ids: BTreeSet<String> = e
            .device_ids
            .into_iter()
            .flat_map(BTreeMap::into_values)
            .flatten()
            .flatten()
            .collect();
        let d = ContainerDevices {
            ids,
            allocation: Allocation::Allocated(resp),
        };
        s.pods
            .insert(&e.pod_uid, &e.container_name, &e.resource_name, d);
    }
    // upstream: each registered resource starts as a stopped endpoint
    // with no devices, in its grace period until the plugin registers.
    for name in data.registered.into_iter().flatten().map(|(k, _)| k) {
        s.resources.insert(name, Resource::stopped_since(now));
    }
    s
}

/// Empties `dir` but for the checkpoint (upstream removeContents): stale
/// plugin sockets go, so every plugin sees the kubelet is new and
/// registers again.
pub(super) fn remove_contents(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name() == CHECKPOINT {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = removed {
            log::warn!("device plugins: removing {}: {e}", path.display());
        }
    }
    Ok(())
}

impl Inner {
    pub(super) fn write_checkpoint(&self, s: &State) {
        let path = self.dir.join(CHECKPOINT);
        let written = encode(from_state(s))
            .map_err(std::io::Error::other)
            .and_then(|b| write_atomic(&path, &b));
        if let Err(e) = written {
            log::error!("device checkpoint {}: {e}", path.display());
        }
    }

    /// Reads the checkpoint; a missing one is a first start, a bad one is
    /// logged and ignored, as upstream continues after failing to read it.
    pub(super) fn restore_checkpoint(&self) {
        let path = self.dir.join(CHECKPOINT);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                log::warn!(
                    "device checkpoint {}: {e}; device allocations start empty",
                    path.display()
                );
                return;
            }
        };
        match decode(&bytes) {
            Ok(data) => {
                *rkubelet_util::lock(&self.state) = into_state(data, std::time::Instant::now())
            }
            Err(e) => log::warn!(
                "device checkpoint {}: {e}; continuing, device allocations start empty",
                path.display()
            ),
        }
    }
}

/// Upstream's checksum of the data: FNV-32a over go-spew's dump.
pub(super) fn checksum(data: &Data) -> u32 {
    super::spew::checksum(data)
}

/// The file's JSON for `data`, with its checksum.
pub(super) fn encode(data: Data) -> serde_json::Result<Vec<u8>> {
    let file = File {
        checksum: u64::from(checksum(&data)),
        data,
    };
    serde_json::to_vec(&file)
}

/// Parses a checkpoint file and checks its checksum.
pub(super) fn decode(bytes: &[u8]) -> Result<Data, String> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let want = u64::from(checksum(&file.data));
    if want != file.checksum {
        return Err(format!(
            "checkpoint is corrupted: checksum {} does not match the data's {want}",
            file.checksum
        ));
    }
    Ok(file.data)
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames
/// it over `path`, so a crash leaves the old checkpoint or the new one.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
