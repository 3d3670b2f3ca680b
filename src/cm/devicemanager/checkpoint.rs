//! The device manager's checkpoint, `kubelet_internal_checkpoint` in the
//! device-plugins directory, in upstream's JSON (checkpoint/checkpoint.go),
//! so assignments survive a restart, and an upstream kubelet started on the
//! same node reads ours (and we its).
//!
//! Read and written through `serde_json::Value`, whose code the binary
//! has anyway, rather than derived decoders of its own.

use std::path::Path;

use base64::Engine as _;
use protobuf::Message as _;
use serde_json::{Map, Value};

use super::pod_devices::{Allocation, Held};
use super::{Inner, Resource, State};
use crate::cri::deviceplugin::v1beta1::api as pluginapi;

/// The file name (upstream kubeletDeviceManagerCheckpoint).
pub(super) const CHECKPOINT: &str = "kubelet_internal_checkpoint";

/// upstream checkpointData. Go writes a nil slice or map as null, which
/// the checksum tells from an empty one: each Option keeps the difference.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Data {
    pub entries: Option<Vec<Entry>>,
    /// Resource -> healthy device IDs, sorted by resource.
    pub registered: Option<Vec<(String, Option<Vec<String>>)>>,
}

/// upstream PodDevicesEntry.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Entry {
    pub pod_uid: String,
    pub container_name: String,
    pub resource_name: String,
    /// NUMA node -> device IDs (upstream DevicesPerNUMA), sorted by node.
    pub device_ids: Option<Vec<(i64, Option<Vec<String>>)>>,
    /// The plugin's ContainerAllocateResponse, serialized.
    pub alloc_resp: Option<Vec<u8>>,
}

/// The checkpoint's content for `state`: allocated devices only (a
/// reservation whose answer is not in is asked for again by admission
/// after a restart), and each resource's healthy devices.
pub(super) fn from_state(s: &State) -> Data {
    let mut entries = Vec::new();
    for h in s.pods.iter() {
        let Allocation::Allocated(resp) = &h.allocation else {
            continue;
        };
        let by_node = s
            .ids_by_node(h)
            .into_iter()
            .map(|(node, ids)| (node, Some(ids)))
            .collect();
        entries.push(Entry {
            pod_uid: h.uid.clone(),
            container_name: h.container.clone(),
            resource_name: h.resource.clone(),
            device_ids: Some(by_node),
            alloc_resp: Some(resp.write_to_bytes().unwrap_or_default()),
        });
    }
    let mut registered: Vec<(String, Option<Vec<String>>)> = s
        .resources
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                Some(r.healthy().into_iter().map(String::from).collect()),
            )
        })
        .collect();
    registered.sort();
    Data {
        entries: (!entries.is_empty()).then_some(entries),
        registered: Some(registered),
    }
}

/// Restores the allocations and registered resources of `data`; an entry
/// whose answer does not parse is dropped with a warning.
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
        let mut ids: Vec<String> = e
            .device_ids
            .into_iter()
            .flatten()
            .flat_map(|(_, ids)| ids.unwrap_or_default())
            .collect();
        ids.sort();
        ids.dedup();
        s.pods.insert(Held {
            uid: e.pod_uid,
            container: e.container_name,
            resource: e.resource_name,
            ids,
            allocation: Allocation::Allocated(resp),
        });
    }
    // upstream: each registered resource starts as a stopped endpoint
    // with no devices, in its grace period until the plugin registers.
    for (name, _) in data.registered.into_iter().flatten() {
        s.resources.push(Resource::stopped_since(name, now));
    }
    s
}

/// Upstream's checksum of the data: FNV-32a over go-spew's dump.
pub(super) fn checksum(data: &Data) -> u32 {
    super::spew::checksum(data)
}

fn strings_json(ids: &Option<Vec<String>>) -> Value {
    ids.as_ref().map_or(Value::Null, |ids| {
        Value::Array(ids.iter().cloned().map(Value::String).collect())
    })
}

/// An object of `fields`, built directly rather than through `json!`,
/// which would instantiate `to_value` for each field's type.
fn object(fields: Vec<(&str, Value)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn entry_json(e: &Entry) -> Value {
    let ids = e.device_ids.as_ref().map_or(Value::Null, |m| {
        let m: Map<String, Value> = m
            .iter()
            .map(|(n, ids)| (n.to_string(), strings_json(ids)))
            .collect();
        Value::Object(m)
    });
    let resp = e.alloc_resp.as_ref().map_or(Value::Null, |b| {
        Value::String(base64::engine::general_purpose::STANDARD.encode(b))
    });
    object(vec![
        ("PodUID", Value::String(e.pod_uid.clone())),
        ("ContainerName", Value::String(e.container_name.clone())),
        ("ResourceName", Value::String(e.resource_name.clone())),
        ("DeviceIDs", ids),
        ("AllocResp", resp),
    ])
}

/// The file's JSON for `data`, with its checksum.
pub(super) fn encode(data: &Data) -> serde_json::Result<Vec<u8>> {
    let entries = data.entries.as_ref().map_or(Value::Null, |entries| {
        Value::Array(entries.iter().map(entry_json).collect())
    });
    let registered = data.registered.as_ref().map_or(Value::Null, |m| {
        Value::Object(
            m.iter()
                .map(|(k, ids)| (k.clone(), strings_json(ids)))
                .collect(),
        )
    });
    let file = object(vec![
        (
            "Data",
            object(vec![
                ("PodDeviceEntries", entries),
                ("RegisteredDevices", registered),
            ]),
        ),
        ("Checksum", Value::from(checksum(data))),
    ]);
    serde_json::to_vec(&file)
}

/// Parses a checkpoint file and checks its checksum.
pub(super) fn decode(bytes: &[u8]) -> Result<Data, String> {
    let file: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let d = &file["Data"];
    let entries = match &d["PodDeviceEntries"] {
        Value::Null => None,
        Value::Array(list) => Some(list.iter().map(entry).collect::<Result<Vec<_>, _>>()?),
        _ => return Err("PodDeviceEntries is not a list".into()),
    };
    let registered = match &d["RegisteredDevices"] {
        Value::Null => None,
        Value::Object(m) => {
            let mut list = Vec::with_capacity(m.len());
            for (k, v) in m {
                list.push((k.clone(), strings(v, "RegisteredDevices")?));
            }
            list.sort_by(|a, b| a.0.cmp(&b.0));
            Some(list)
        }
        _ => return Err("RegisteredDevices is not a map".into()),
    };
    let data = Data {
        entries,
        registered,
    };
    let got = file["Checksum"]
        .as_u64()
        .ok_or("Checksum is not a number")?;
    let want = u64::from(checksum(&data));
    if got != want {
        return Err(format!(
            "checkpoint is corrupted: checksum {got} does not match the data's {want}"
        ));
    }
    Ok(data)
}

fn strings(v: &Value, field: &str) -> Result<Option<Vec<String>>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Array(list) => list
            .iter()
            .map(|s| {
                s.as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("{field}: not a string: {s}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        _ => Err(format!("{field} is not a list")),
    }
}

fn text(e: &Value, field: &str) -> Result<String, String> {
    e[field]
        .as_str()
        .map(String::from)
        .ok_or_else(|| format!("{field} is not a string"))
}

fn entry(e: &Value) -> Result<Entry, String> {
    let device_ids = match &e["DeviceIDs"] {
        Value::Null => None,
        Value::Object(m) => {
            let mut list = Vec::with_capacity(m.len());
            for (k, v) in m {
                let node: i64 = k
                    .parse()
                    .map_err(|_| format!("DeviceIDs: NUMA node {k:?} is not a number"))?;
                list.push((node, strings(v, "DeviceIDs")?));
            }
            list.sort_by_key(|(n, _)| *n);
            Some(list)
        }
        _ => return Err("DeviceIDs is not a map".into()),
    };
    let alloc_resp = match &e["AllocResp"] {
        Value::Null => None,
        Value::String(s) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|err| format!("AllocResp: {err}"))?,
        ),
        _ => return Err("AllocResp is not a string".into()),
    };
    Ok(Entry {
        pod_uid: text(e, "PodUID")?,
        container_name: text(e, "ContainerName")?,
        resource_name: text(e, "ResourceName")?,
        device_ids,
        alloc_resp,
    })
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
    /// The state changed: the manager thread writes the checkpoint (at
    /// once, coalescing changes that come while it writes).
    pub(super) fn checkpoint_changed(&self) {
        let _ = self.checkpoint_due.0.try_send(());
    }

    /// Writes the checkpoint of the state as it is now (the manager
    /// thread).
    pub(super) fn flush_checkpoint(&self) {
        let path = self.dir.join(CHECKPOINT);
        let data = from_state(&rkubelet_util::lock(&self.state));
        let written = encode(&data)
            .map_err(std::io::Error::other)
            .and_then(|b| crate::checkpointmanager::write_atomic(&path, &b));
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
                    "device checkpoint {}: {e}; continuing, device allocations start empty",
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
