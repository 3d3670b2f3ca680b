//! The initial node and reconciling an existing one.

use super::*;

#[test]
fn initial_node_labels_annotation_taints() {
    let mut cfg = NodeStatusConfig::new("node-a");
    cfg.node_labels.insert("role".into(), "worker".into());
    cfg.node_labels
        .insert(LABEL_HOSTNAME.into(), "override".into());
    cfg.register_with_taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("x".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }];
    cfg.provider_id = "kind://docker/a".into();
    let node = initial_node_object(&cfg);
    let labels = node.metadata.labels.clone().unwrap();
    let arch = machine::go_arch();
    assert_eq!(labels.get(LABEL_HOSTNAME).unwrap(), "override");
    assert_eq!(labels.get(LABEL_OS_STABLE).unwrap(), "linux");
    assert_eq!(labels.get(LABEL_ARCH_STABLE).unwrap(), arch);
    assert_eq!(labels.get(LABEL_OS_BETA).unwrap(), "linux");
    assert_eq!(labels.get(LABEL_ARCH_BETA).unwrap(), arch);
    assert_eq!(labels.get("role").unwrap(), "worker");
    assert_eq!(
        node.metadata
            .annotations
            .unwrap()
            .get(CONTROLLER_MANAGED_ATTACH_ANNOTATION)
            .unwrap(),
        "true"
    );
    let spec = node.spec.unwrap();
    assert_eq!(spec.taints.unwrap()[0].key, "dedicated");
    assert_eq!(spec.provider_id.as_deref(), Some("kind://docker/a"));
    assert_eq!(spec.unschedulable, None);

    cfg.enable_controller_attach_detach = false;
    cfg.register_with_taints.clear();
    cfg.provider_id.clear();
    let node = initial_node_object(&cfg);
    assert!(node.metadata.annotations.is_none());
    let spec = node.spec.unwrap();
    assert!(spec.taints.is_none() && spec.provider_id.is_none());
    assert_eq!(
        arch,
        if cfg!(target_arch = "x86_64") {
            "amd64"
        } else {
            arch
        }
    );
}

#[test]
fn reconcile_existing_node_sets_defaults_and_annotation() {
    let cfg = NodeStatusConfig::new("node-a");
    let initial = initial_node_object(&cfg);
    let mut existing = named("node-a");
    existing.metadata.labels = Some(BTreeMap::from([
        (LABEL_HOSTNAME.to_string(), "old".to_string()),
        ("custom".to_string(), "kept".to_string()),
    ]));
    assert!(reconcile_existing_node(&initial, &mut existing));
    let labels = existing.metadata.labels.clone().unwrap();
    assert_eq!(labels.get(LABEL_HOSTNAME).unwrap(), "node-a");
    assert_eq!(labels.get(LABEL_OS_STABLE).unwrap(), "linux");
    assert_eq!(labels.get("custom").unwrap(), "kept");
    assert_eq!(
        existing
            .metadata
            .annotations
            .clone()
            .unwrap()
            .get(CONTROLLER_MANAGED_ATTACH_ANNOTATION)
            .unwrap(),
        "true"
    );
    // Already reconciled: nothing to do.
    let mut again = existing.clone();
    assert!(!reconcile_existing_node(&initial, &mut again));

    // Attach-detach turned off: the annotation goes.
    let mut cfg2 = cfg.clone();
    cfg2.enable_controller_attach_detach = false;
    let initial2 = initial_node_object(&cfg2);
    assert!(reconcile_existing_node(&initial2, &mut again));
    assert!(again.metadata.annotations.unwrap().is_empty());
}

#[test]
fn reconcile_hugepages_replaces_unsupported_sizes() {
    let mut initial = named("n");
    initial.status = Some(NodeStatus {
        capacity: Some(BTreeMap::from([
            ("hugepages-2Mi".to_string(), q("1Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        allocatable: Some(BTreeMap::from([
            ("hugepages-2Mi".to_string(), q("1Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        ..Default::default()
    });
    let mut existing = named("n");
    existing.status = Some(NodeStatus {
        capacity: Some(BTreeMap::from([
            ("hugepages-1Gi".to_string(), q("2Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        allocatable: Some(BTreeMap::from([
            ("hugepages-1Gi".to_string(), q("2Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        ..Default::default()
    });
    assert!(reconcile_existing_node(&initial, &mut existing));
    let st = existing.status.unwrap();
    let cap = st.capacity.unwrap();
    assert_eq!(cap.get("hugepages-2Mi"), Some(&q("1Gi")));
    assert!(!cap.contains_key("hugepages-1Gi"));
    assert!(!st.allocatable.unwrap().contains_key("hugepages-1Gi"));
}
