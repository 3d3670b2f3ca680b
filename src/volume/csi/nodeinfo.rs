//! What a registered CSI driver changes on the API server (upstream
//! `csi/nodeinfomanager`): its entry in the node's `CSINode`, the node's
//! `csi.volume.kubernetes.io/nodeid` annotation and its topology labels.
//! Objects are read and written as JSON values: the kubelet touches a few
//! fields and must keep every other one as the server has it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::client::{paths, Client, PatchType};

/// The node annotation naming each driver's node ID (a JSON object).
pub const NODE_ID_ANNOTATION: &str = "csi.volume.kubernetes.io/nodeid";
/// The CSINode annotation listing in-tree plugins migrated to CSI.
pub const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";
/// What upstream v1.22 writes there with its default feature gates (see
/// `../shared/fidelity`): Cinder's migration is on by default. This kubelet
/// has no in-tree volume plugins at all, so a Cinder volume can only reach
/// it through CSI, which is what the annotation tells the controllers.
const MIGRATED_PLUGINS: &str = "kubernetes.io/cinder";
/// Conflicts (409) retried per update, as upstream's updateBackoff.
const CONFLICT_RETRIES: u32 = 5;

/// One driver's entry in `CSINode.spec.drivers`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInfo {
    pub name: String,
    pub node_id: String,
    /// `max_volumes_per_node`; 0: no limit reported.
    pub max_volumes: i64,
    /// Topology segments: labels on the node, keys in the CSINode entry.
    pub topology: BTreeMap<String, String>,
}

impl DriverInfo {
    fn entry(&self) -> Value {
        let mut e = json!({
            "name": self.name,
            "nodeID": self.node_id,
            "topologyKeys": self.topology.keys().collect::<Vec<_>>(),
        });
        if self.max_volumes > 0 {
            e["allocatable"] = json!({"count": self.max_volumes});
        }
        if self.topology.is_empty() {
            e["topologyKeys"] = Value::Null;
        }
        e
    }
}

/// Writes the node-side CSI objects for `node_name`.
pub struct NodeInfoManager {
    client: Client,
    node_name: String,
}

impl NodeInfoManager {
    pub fn new(client: Client, node_name: String) -> Self {
        NodeInfoManager { client, node_name }
    }

    /// Upstream InitializeCSINodeWithAnnotation: makes sure the CSINode
    /// exists, owned by the Node, with the migrated-plugins annotation.
    pub fn init_csinode(&self) -> Result<(), String> {
        self.update_csinode(|_| false)
    }

    /// Adds (or refreshes) a driver: the node's labels and annotation
    /// first, then its CSINode entry, as upstream InstallCSIDriver.
    pub fn install_driver(&self, info: &DriverInfo) -> Result<(), String> {
        self.patch_node(&info.name, Some(&info.node_id), &info.topology)?;
        let entry = info.entry();
        self.update_csinode(|drivers| {
            if drivers.contains(&entry) {
                return false;
            }
            drivers.retain(|d| d["name"] != json!(info.name));
            drivers.push(entry.clone());
            true
        })
    }

    /// Removes a driver from the CSINode and the annotation. Its topology
    /// labels stay, as upstream leaves them.
    pub fn uninstall_driver(&self, name: &str) -> Result<(), String> {
        self.update_csinode(|drivers| {
            let before = drivers.len();
            drivers.retain(|d| d["name"] != json!(name));
            drivers.len() != before
        })?;
        self.patch_node(name, None, &BTreeMap::new())
    }

    fn get_node(&self) -> Result<Value, String> {
        self.client
            .get(&paths::node(&self.node_name))
            .map_err(|e| format!("get node {}: {e}", self.node_name))
    }

    /// Sets or clears `driver`'s key in the node ID annotation, and adds
    /// `labels`, with one strategic merge patch of the node (skipped when
    /// nothing changes).
    fn patch_node(
        &self,
        driver: &str,
        node_id: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let node = self.get_node()?;
        let meta = &node["metadata"];
        let mut ids: Map<String, Value> = meta["annotations"][NODE_ID_ANNOTATION]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let before = ids.clone();
        match node_id {
            Some(id) => {
                ids.insert(driver.to_string(), json!(id));
            }
            None => {
                ids.remove(driver);
            }
        }
        let new_labels: Map<String, Value> = labels
            .iter()
            .filter(|(k, v)| meta["labels"][k.as_str()].as_str() != Some(v.as_str()))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if ids == before && new_labels.is_empty() {
            return Ok(());
        }
        for k in new_labels.keys() {
            if let Some(old) = meta["labels"][k.as_str()].as_str() {
                // upstream refuses to overwrite a label another driver set
                return Err(format!(
                    "detected topology value collision: driver reported {k}:{} but existing \
                     label is {k}:{old}",
                    labels[k]
                ));
            }
        }
        let annotation = if ids.is_empty() {
            Value::Null
        } else {
            json!(Value::Object(ids).to_string())
        };
        let patch = json!({"metadata": {
            "annotations": {NODE_ID_ANNOTATION: annotation},
            "labels": new_labels,
        }});
        self.client
            .patch::<Value>(
                &paths::node_status(&self.node_name),
                PatchType::StrategicMerge,
                &patch,
            )
            .map(drop)
            .map_err(|e| format!("patch node {}: {e}", self.node_name))
    }

    /// Reads the CSINode (creating it when missing), lets `change` edit its
    /// drivers, and writes it back when `change` says it changed anything.
    /// A conflict reads it again.
    fn update_csinode(&self, change: impl Fn(&mut Vec<Value>) -> bool) -> Result<(), String> {
        let path = paths::csi_node(&self.node_name);
        let mut last = String::new();
        for attempt in 0..CONFLICT_RETRIES {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(100 << attempt));
            }
            let mut obj: Value = match self.client.get(&path) {
                Ok(v) => v,
                Err(e) if e.is_not_found() => return self.create_csinode(&change),
                Err(e) => return Err(format!("get CSINode {}: {e}", self.node_name)),
            };
            let mut drivers: Vec<Value> = obj["spec"]["drivers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let annotated = obj["metadata"]["annotations"][MIGRATED_PLUGINS_ANNOTATION].is_string();
            if !change(&mut drivers) && annotated {
                return Ok(());
            }
            obj["spec"]["drivers"] = Value::Array(drivers);
            if !annotated {
                obj["metadata"]["annotations"][MIGRATED_PLUGINS_ANNOTATION] =
                    json!(MIGRATED_PLUGINS);
            }
            match self.client.replace(&path, &obj) {
                Ok(_) => return Ok(()),
                Err(e) if e.is_conflict() => last = e.to_string(),
                Err(e) => return Err(format!("update CSINode {}: {e}", self.node_name)),
            }
        }
        Err(format!(
            "update CSINode {}: still conflicting after {CONFLICT_RETRIES} attempts: {last}",
            self.node_name
        ))
    }

    fn create_csinode(&self, change: &dyn Fn(&mut Vec<Value>) -> bool) -> Result<(), String> {
        let node = self.get_node()?;
        let mut drivers = Vec::new();
        change(&mut drivers);
        let obj = json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": self.node_name,
                "annotations": {MIGRATED_PLUGINS_ANNOTATION: MIGRATED_PLUGINS},
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.node_name,
                    "uid": node["metadata"]["uid"],
                }],
            },
            // upstream sends null for no drivers, as the capture shows
            "spec": {"drivers": if drivers.is_empty() { Value::Null } else { Value::Array(drivers) }},
        });
        // An AlreadyExists (made meanwhile) fails too: the plugin manager
        // retries the registration, which then finds it.
        self.client
            .create(&paths::csi_nodes(), &obj)
            .map(drop)
            .map_err(|e| format!("create CSINode {}: {e}", self.node_name))
    }
}
