//! One checkpointed map of pod UID -> container name -> resources
//! (upstream `allocation/state`: the in-memory state and its checkpoint).
//!
//! The file is upstream's shape: `{"data": "<JSON of the map>",
//! "checksum": N}`, the data being `{uid: {"containerResources": {name:
//! ResourceRequirements}}}`. The checksum is FNV-1a over the data's bytes,
//! not upstream's hash of Go's dump of it, so the files are not
//! interchangeable with the Go kubelet's (docs/deviations.md).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::ResourceRequirements;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::checkpointmanager::{fnv32a, write_atomic};

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
struct PodResourceInfo {
    #[serde(rename = "containerResources", default)]
    containers: Containers,
}

/// A pod's containers by name, sorted: a pod has a handful, and a
/// `BTreeMap` spent a whole node (1.2 KB) on each pod's one or two
/// (issue 53's heap profile). Written as the checkpoint's JSON object.
#[derive(Debug, Default, Clone, PartialEq)]
struct Containers(Vec<(String, ResourceRequirements)>);

impl Containers {
    fn get(&self, name: &str) -> Option<&ResourceRequirements> {
        let i = self
            .0
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .ok()?;
        Some(&self.0[i].1)
    }

    fn insert(&mut self, name: &str, resources: ResourceRequirements) {
        match self.0.binary_search_by(|(n, _)| n.as_str().cmp(name)) {
            Ok(i) => self.0[i].1 = resources,
            Err(i) => self.0.insert(i, (name.to_string(), resources)),
        }
    }
}

impl From<BTreeMap<String, ResourceRequirements>> for Containers {
    fn from(m: BTreeMap<String, ResourceRequirements>) -> Self {
        // Already sorted by name.
        Containers(m.into_iter().collect())
    }
}

impl Serialize for Containers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(n, r)| (n, r)))
    }
}

impl<'de> Deserialize<'de> for Containers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(d).map(Containers::from)
    }
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    data: String,
    checksum: u32,
}

#[derive(Default)]
pub(super) struct Store {
    pods: HashMap<String, PodResourceInfo>,
    path: Option<PathBuf>,
}

impl Store {
    /// The checkpoint at `path`, or an empty store when there is none. A
    /// corrupt one is logged and set aside: the pods it held are admitted
    /// again from their specs, as upstream does.
    pub(super) fn load(path: Option<PathBuf>) -> Store {
        let pods = path.as_ref().map(read).unwrap_or_default();
        Store { pods, path }
    }

    pub(super) fn has_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    pub(super) fn get(&self, uid: &str, name: &str) -> Option<&ResourceRequirements> {
        self.pods.get(uid)?.containers.get(name)
    }

    pub(super) fn set_pod(
        &mut self,
        uid: &str,
        containers: BTreeMap<String, ResourceRequirements>,
    ) {
        let info = PodResourceInfo {
            containers: containers.into(),
        };
        if self.pods.get(uid) != Some(&info) {
            self.pods.insert(uid.to_string(), info);
            self.save();
        }
    }

    pub(super) fn set(&mut self, uid: &str, name: &str, resources: ResourceRequirements) {
        let pod = self.pods.entry(uid.to_string()).or_default();
        if pod.containers.get(name) != Some(&resources) {
            pod.containers.insert(name, resources);
            self.save();
        }
    }

    pub(super) fn retain(&mut self, keep: &HashSet<String>) {
        let before = self.pods.len();
        self.pods.retain(|uid, _| keep.contains(uid));
        if self.pods.len() != before {
            self.save();
        }
    }

    /// Written whole on each change: a failed write is logged, and the
    /// next change writes everything again.
    fn save(&self) {
        let Some(path) = &self.path else { return };
        let data = match serde_json::to_string(&self.pods) {
            Ok(d) => d,
            Err(e) => {
                log::error!("allocation checkpoint {path:?}: encoding: {e}");
                return;
            }
        };
        let checksum = fnv32a(data.as_bytes());
        let body = serde_json::to_vec(&Checkpoint { data, checksum }).unwrap_or_default();
        if let Err(e) = write_atomic(path, &body) {
            log::error!("allocation checkpoint {path:?}: writing: {e}");
        }
    }
}

fn read(path: &PathBuf) -> HashMap<String, PodResourceInfo> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return HashMap::new(),
        Err(e) => {
            log::warn!("allocation checkpoint {path:?}: {e}; starting empty");
            return HashMap::new();
        }
    };
    let parsed = serde_json::from_slice::<Checkpoint>(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|c| {
            if fnv32a(c.data.as_bytes()) != c.checksum {
                return Err("checksum mismatch".to_string());
            }
            serde_json::from_str(&c.data).map_err(|e| e.to_string())
        });
    parsed.unwrap_or_else(|e| {
        log::warn!("allocation checkpoint {path:?} is corrupt ({e}); starting empty");
        HashMap::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(cpu: &str) -> ResourceRequirements {
        let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into());
        ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".to_string(), q)])),
            ..Default::default()
        }
    }

    #[test]
    fn containers_keep_the_checkpoints_object_shape_and_their_order() {
        let mut c = Containers::default();
        c.insert("b", req("1"));
        c.insert("a", req("2"));
        c.insert("b", req("3"));
        assert_eq!(c.get("b"), Some(&req("3")));
        assert_eq!(c.get("c"), None);
        let json = serde_json::to_string(&c).expect("encode");
        assert_eq!(
            json,
            r#"{"a":{"requests":{"cpu":"2"}},"b":{"requests":{"cpu":"3"}}}"#
        );
        let back: Containers = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, c);
    }
}
