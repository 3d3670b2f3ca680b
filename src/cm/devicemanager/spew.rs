//! Upstream's checkpoint checksum, reproduced: FNV-32a over go-spew's
//! `%#v` dump of the checkpoint data (checkpointmanager/checksum with
//! `Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true`).
//!
//! The dump of these Go types, and only these, is written out below:
//! every struct field and the top value carry their type in parentheses,
//! elements and map entries do not; strings print raw, byte slices as
//! decimal numbers, a nil slice or map as `<nil>`; map keys sort
//! numerically (int64) or bytewise (string); single spaces separate items.
//! The golden tests hold it to checkpoints upstream kubelets wrote.

use std::fmt::Write as _;

use super::checkpoint::{Data, Entry};

/// FNV-32a of the dump of `data`.
pub(super) fn checksum(data: &Data) -> u32 {
    crate::checkpointmanager::fnv32a(dump(data).as_bytes())
}

pub(super) fn dump(data: &Data) -> String {
    let mut out =
        String::from("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)");
    match &data.entries {
        None => out.push_str("<nil>"),
        Some(entries) => {
            out.push('[');
            for (i, e) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                entry(&mut out, e);
            }
            out.push(']');
        }
    }
    out.push_str(" RegisteredDevices:(map[string][]string)");
    match &data.registered {
        None => out.push_str("<nil>"),
        Some(m) => {
            out.push_str("map[");
            // Sorted by key, bytewise, as spew sorts string keys.
            for (i, (k, ids)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                strings(&mut out, ids);
            }
            out.push(']');
        }
    }
    out.push('}');
    out
}

fn entry(out: &mut String, e: &Entry) {
    let _ = write!(
        out,
        "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} DeviceIDs:(checkpoint.DevicesPerNUMA)",
        e.pod_uid, e.container_name, e.resource_name
    );
    match &e.device_ids {
        None => out.push_str("<nil>"),
        Some(m) => {
            out.push_str("map[");
            // Sorted numerically, as spew sorts int keys.
            for (i, (node, ids)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{node}:");
                strings(out, ids);
            }
            out.push(']');
        }
    }
    out.push_str(" AllocResp:([]uint8)");
    match &e.alloc_resp {
        None => out.push_str("<nil>"),
        Some(b) => {
            out.push('[');
            for (i, byte) in b.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{byte}");
            }
            out.push(']');
        }
    }
    out.push('}');
}

/// A `[]string` element: a nil one (JSON null) prints `<nil>`.
fn strings(out: &mut String, ids: &Option<Vec<String>>) {
    let Some(ids) = ids else {
        out.push_str("<nil>");
        return;
    };
    out.push('[');
    out.push_str(&ids.join(" "));
    out.push(']');
}
