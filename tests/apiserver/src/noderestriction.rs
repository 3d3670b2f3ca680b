//! The NodeRestriction admission plugin's checks that need the object
//! (plugin/pkg/admission/noderestriction, `--node-restriction`), for a
//! `system:node:<n>` user: a CSINode may only be created under the node's
//! own name (admitCSINode; update, patch and delete are checked by URL in
//! handlers::authorize); a Node may only be created under the node's name,
//! without a configSource, and with labels a kubelet may set; an update
//! (any subresource) may not change its taints nor labels outside that
//! set (admitNode, getForbiddenLabels, k8s.io/kubelet IsKubeletLabel).
//! Mutating admission runs before the strategy and validation, so these
//! 403s come before a 422.

use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::util::{get, name_of};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// kubeletapis.kubeletLabels: the well-known labels a kubelet may set.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
/// kubeletapis.kubeletLabelNamespaces (and their subdomains).
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
/// v1.LabelNamespaceNodeRestriction.
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn in_namespace(ns: &str, of: &str) -> bool {
    ns == of || ns.ends_with(&format!(".{}", of))
}

fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|n| in_namespace(label_namespace(key), n))
}

/// getForbiddenLabels, sorted as sets.String.List() is.
fn forbidden_labels(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|k| {
            let ns = label_namespace(k);
            let kubernetes = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
            in_namespace(ns, NODE_RESTRICTION_NAMESPACE) || (kubernetes && !is_kubelet_label(k))
        })
        .cloned()
        .collect()
}

fn labels(o: &Value) -> Map<String, Value> {
    get(o, &["metadata", "labels"])
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// getModifiedLabels: keys added, removed or changed.
fn modified_labels(new: &Value, old: Option<&Value>) -> BTreeSet<String> {
    let (a, b) = (labels(new), old.map(labels).unwrap_or_default());
    let mut out = BTreeSet::new();
    for (k, v) in &a {
        if b.get(k) != Some(v) {
            out.insert(k.clone());
        }
    }
    for (k, v) in &b {
        if a.get(k) != Some(v) {
            out.insert(k.clone());
        }
    }
    out
}

/// A Go slice compared with Semantic.DeepEqual: absent, null and empty alike.
fn list_at<'a>(o: &'a Value, path: &[&str]) -> Option<&'a Vec<Value>> {
    get(o, path)
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
}

/// NodeRestriction on a create by node `node`.
pub fn admit_create(node: &str, def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let name = name_of(obj);
    let forbidden = |why: String| Err(ApiError::forbidden(&def.qualified(), name, &why));
    match (def.group, def.plural) {
        ("storage.k8s.io", "csinodes") if name != node => {
            forbidden("can only access CSINode with the same name as the requesting node".into())
        }
        ("", "nodes") => {
            if name != node {
                return forbidden(format!(
                    "node {:?} is not allowed to modify node {:?}",
                    node, name
                ));
            }
            if get(obj, &["spec", "configSource"]).is_some_and(|c| !c.is_null()) {
                return forbidden(format!(
                    "node {:?} is not allowed to create pods with a non-nil configSource",
                    node
                ));
            }
            let bad = forbidden_labels(&modified_labels(obj, None));
            if !bad.is_empty() {
                return forbidden(format!(
                    "node {:?} is not allowed to set the following labels: {}",
                    node,
                    bad.join(", ")
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// NodeRestriction on an update or patch (any subresource) by node
/// `node`: `new` is the object the request proposes, before the strategy.
pub fn admit_update(
    node: &str,
    def: &ResourceDef,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    if !def.is("", "nodes") {
        return Ok(());
    }
    let name = name_of(old);
    let forbidden = |why: String| Err(ApiError::forbidden("nodes", name, &why));
    let source = |o: &Value| {
        get(o, &["spec", "configSource"])
            .filter(|c| !c.is_null())
            .cloned()
    };
    if source(new).is_some() && source(new) != source(old) {
        return forbidden(format!(
            "node {:?} is not allowed to update configSource to a new non-nil configSource",
            node
        ));
    }
    if list_at(new, &["spec", "taints"]) != list_at(old, &["spec", "taints"]) {
        return forbidden(format!("node {:?} is not allowed to modify taints", node));
    }
    let bad = forbidden_labels(&modified_labels(new, Some(old)));
    if !bad.is_empty() {
        return forbidden(format!(
            "is not allowed to modify labels: {}",
            bad.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(g: &str, p: &str) -> &'static ResourceDef {
        crate::resources::find(g, "v1", p).unwrap()
    }

    #[test]
    fn csinode_create_by_name() {
        let d = def("storage.k8s.io", "csinodes");
        assert!(admit_create("n", d, &json!({"metadata": {"name": "n"}})).is_ok());
        let e = admit_create("n", d, &json!({"metadata": {"name": "m"}})).unwrap_err();
        assert_eq!(
            e.message,
            "csinodes.storage.k8s.io \"m\" is forbidden: can only access CSINode with the same name as the requesting node"
        );
    }

    #[test]
    fn node_labels_and_taints() {
        let d = def("", "nodes");
        let ok = json!({"metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n",
            "kubernetes.io/os": "linux", "topology.hostpath.csi/node": "n",
            "feature.node.kubernetes.io/x": "y", "example.com/a": "b"}}});
        assert!(admit_create("n", d, &ok).is_ok());
        let bad = json!({"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/master": "",
            "node-restriction.kubernetes.io/pool": "a", "kubernetes.io/os": "linux"}}});
        assert_eq!(
            admit_create("n", d, &bad).unwrap_err().message,
            "nodes \"n\" is forbidden: node \"n\" is not allowed to set the following labels: node-restriction.kubernetes.io/pool, node-role.kubernetes.io/master"
        );
        let mut changed = ok.clone();
        changed["metadata"]["labels"]["topology.hostpath.csi/zone"] = json!("z");
        assert!(admit_update("n", d, &ok, &changed).is_ok());
        changed["metadata"]["labels"]["x.k8s.io/y"] = json!("z");
        assert_eq!(
            admit_update("n", d, &ok, &changed).unwrap_err().message,
            "nodes \"n\" is forbidden: is not allowed to modify labels: x.k8s.io/y"
        );
        let mut tainted = ok.clone();
        tainted["spec"] = json!({"taints": [{"key": "k", "effect": "NoSchedule"}]});
        assert!(admit_update("n", d, &tainted, &ok).is_err());
        let mut empty = ok.clone();
        empty["spec"] = json!({"taints": []});
        assert!(admit_update("n", d, &ok, &empty).is_ok());
    }
}
