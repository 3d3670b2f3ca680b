//! Status change detection and the strategic merge patch.

use super::*;

fn status_with(conds: Vec<NodeCondition>) -> NodeStatus {
    NodeStatus {
        conditions: Some(conds),
        capacity: Some(BTreeMap::from([("memory".to_string(), q("1Gi"))])),
        ..Default::default()
    }
}

#[test]
fn status_change_ignores_heartbeat() {
    let a = status_with(vec![ready("True", "KubeletReady", "m", 0, 0)]);
    let b = status_with(vec![ready("True", "KubeletReady", "m", 0, 50)]);
    assert!(!node_status_has_changed(Some(&a), Some(&b)));
    // Semantic quantity equality.
    let mut c = b.clone();
    c.capacity = Some(BTreeMap::from([("memory".to_string(), q("1024Mi"))]));
    assert!(!node_status_has_changed(Some(&a), Some(&c)));
    // Order of conditions does not matter.
    let mut two = status_with(vec![
        ready("True", "KubeletReady", "m", 0, 0),
        NodeCondition {
            type_: "DiskPressure".into(),
            status: "False".into(),
            ..Default::default()
        },
    ]);
    let mut swapped = two.clone();
    swapped.conditions.as_mut().unwrap().reverse();
    assert!(!node_status_has_changed(Some(&two), Some(&swapped)));
    // A message, status or transition change counts.
    let d = status_with(vec![ready("True", "KubeletReady", "other", 0, 50)]);
    assert!(node_status_has_changed(Some(&a), Some(&d)));
    let e = status_with(vec![ready("False", "KubeletReady", "m", 0, 0)]);
    assert!(node_status_has_changed(Some(&a), Some(&e)));
    // Other fields count.
    two.images = Some(vec![Default::default()]);
    assert!(node_status_has_changed(Some(&swapped), Some(&two)));
    assert!(node_status_has_changed(None, Some(&a)));
    assert!(!node_status_has_changed(None, None));
}

#[test]
fn strategic_merge_patch_for_status() {
    let mut original = named("n");
    original.metadata.resource_version = Some("7".into());
    original.status = Some(NodeStatus {
        addresses: Some(vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.1".into(),
        }]),
        conditions: Some(vec![
            NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                reason: Some("KubeletHasSufficientMemory".into()),
                message: Some("kubelet has sufficient memory available".into()),
                last_heartbeat_time: Some(t(0)),
                last_transition_time: Some(t(0)),
            },
            ready("False", "KubeletNotReady", "x", 0, 0),
        ]),
        ..Default::default()
    });
    let mut node = original.clone();
    // The spec never goes into a status patch.
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    {
        let st = node.status.as_mut().unwrap();
        let conds = st.conditions.as_mut().unwrap();
        conds[0].last_heartbeat_time = Some(t(10));
        conds[1] = ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            10,
            10,
        );
        st.addresses = Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.2".into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "n".into(),
            },
        ]);
    }
    node.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/os".to_string(),
        "linux".to_string(),
    )]));
    let patch = node_status_patch(&original, &node).unwrap();
    let hb0 = "2023-11-14T22:13:30Z";
    assert_eq!(serde_json::to_value(t(10)).unwrap(), json!(hb0));
    assert_eq!(
        patch,
        json!({
            "metadata": {"labels": {"kubernetes.io/os": "linux"}},
            "status": {
                "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                "conditions": [
                    {"type": "MemoryPressure", "lastHeartbeatTime": hb0},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": hb0, "lastTransitionTime": hb0},
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.2"},
                    {"type": "Hostname", "address": "n"},
                    {"$patch": "replace"},
                ],
            }
        })
    );
    // First addresses on a node without any: a plain list.
    let mut bare = original.clone();
    bare.status.as_mut().unwrap().addresses = None;
    let patch = node_status_patch(&bare, &node).unwrap();
    assert_eq!(
        patch["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n"}])
    );
    // Nothing changed: an empty patch.
    assert_eq!(node_status_patch(&original, &original).unwrap(), json!({}));
}
