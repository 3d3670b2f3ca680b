//! The Node object the kubelet registers and how an existing one is brought
//! in line with it (upstream kubelet_node_status.go: initialNode without
//! its status, reconcileExistingNode, updateDefaultLabels,
//! reconcileCMADAnnotationWithExistingNode, reconcileHugePageResource).

use super::*;

/// The labels reconciled onto an existing Node when the initial node has them
/// (updateDefaultLabels).
const DEFAULT_LABELS: [&str; 12] = [
    LABEL_HOSTNAME,
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    LABEL_OS_STABLE,
    LABEL_ARCH_STABLE,
    "node.kubernetes.io/windows-build",
    LABEL_OS_BETA,
    LABEL_ARCH_BETA,
];

/// The Node object before its status (initialNode without setNodeStatus):
/// default and `--node-labels` labels, the attach-detach annotation, the
/// registration taints and the provider ID.
pub fn initial_node_object(cfg: &NodeStatusConfig) -> Node {
    let arch = machine::go_arch();
    let mut labels: BTreeMap<String, String> = [
        (LABEL_HOSTNAME, cfg.node_name.as_str()),
        (LABEL_OS_STABLE, "linux"),
        (LABEL_ARCH_STABLE, arch),
        (LABEL_OS_BETA, "linux"),
        (LABEL_ARCH_BETA, arch),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in &cfg.node_labels {
        if let Some(old) = labels.get(k) {
            log::info!("The node label {k}={v} will overwrite default setting {old}");
        }
        labels.insert(k.clone(), v.clone());
    }
    let annotations = cfg.enable_controller_attach_detach.then(|| {
        BTreeMap::from([(
            CONTROLLER_MANAGED_ATTACH_ANNOTATION.to_string(),
            "true".to_string(),
        )])
    });
    Node {
        metadata: ObjectMeta {
            name: Some(cfg.node_name.clone()),
            labels: Some(labels),
            annotations,
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!cfg.register_with_taints.is_empty())
                .then(|| cfg.register_with_taints.clone()),
            provider_id: (!cfg.provider_id.is_empty()).then(|| cfg.provider_id.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// Reconciles an existing Node with the initial one, in place; true when it
/// changed (reconcileCMADAnnotationWithExistingNode, updateDefaultLabels,
/// reconcileHugePageResource with updateDefaultResources).
pub fn reconcile_existing_node(initial: &Node, existing: &mut Node) -> bool {
    let mut changed = reconcile_cmad_annotation(initial, existing);
    changed |= update_default_labels(initial, existing);
    changed |= reconcile_hugepage_resources(initial, existing);
    changed
}

fn reconcile_cmad_annotation(initial: &Node, existing: &mut Node) -> bool {
    let wanted = initial
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH_ANNOTATION));
    let have = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONTROLLER_MANAGED_ATTACH_ANNOTATION));
    if wanted.map_or("", String::as_str) == have.map_or("", String::as_str) {
        return false;
    }
    match wanted {
        None => {
            log::info!("Controller attach-detach setting changed to false; updating existing Node");
            if let Some(a) = existing.metadata.annotations.as_mut() {
                a.remove(CONTROLLER_MANAGED_ATTACH_ANNOTATION);
            }
        }
        Some(v) => {
            log::info!("Controller attach-detach setting changed to true; updating existing Node");
            existing
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONTROLLER_MANAGED_ATTACH_ANNOTATION.to_string(), v.clone());
        }
    }
    true
}

fn update_default_labels(initial: &Node, existing: &mut Node) -> bool {
    let empty = BTreeMap::new();
    let want = initial.metadata.labels.as_ref().unwrap_or(&empty);
    let labels = existing.metadata.labels.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for key in DEFAULT_LABELS {
        let Some(value) = want.get(key) else {
            continue;
        };
        if labels.get(key).map_or("", String::as_str) != value {
            labels.insert(key.to_string(), value.clone());
            changed = true;
        }
        if labels.get(key).is_some_and(|v| v.is_empty()) {
            labels.remove(key);
        }
    }
    changed
}

fn reconcile_hugepage_resources(initial: &Node, existing: &mut Node) -> bool {
    let init = initial.status.clone().unwrap_or_default();
    let status = existing.status.get_or_insert_with(Default::default);
    let mut changed = false;
    // updateDefaultResources
    if status.capacity.is_none() {
        if let Some(c) = &init.capacity {
            status.capacity = Some(c.clone());
            changed = true;
        }
    }
    if status.allocatable.is_none() {
        if let Some(a) = &init.allocatable {
            status.allocatable = Some(a.clone());
            changed = true;
        }
    }
    let init_cap = init.capacity.unwrap_or_default();
    let init_alloc = init.allocatable.unwrap_or_default();
    let capacity = status.capacity.get_or_insert_with(BTreeMap::new);
    let allocatable = status.allocatable.get_or_insert_with(BTreeMap::new);
    for (name, cap) in init_cap.iter().filter(|(k, _)| k.starts_with("hugepages-")) {
        let supported = capacity.contains_key(name);
        if !supported || capacity.get(name) != Some(cap) {
            capacity.insert(name.clone(), cap.clone());
            changed = true;
        }
        let alloc = init_alloc.get(name).cloned().unwrap_or_default();
        if !supported || allocatable.get(name) != Some(&alloc) {
            allocatable.insert(name.clone(), alloc);
            changed = true;
        }
    }
    let stale: Vec<String> = capacity
        .keys()
        .filter(|k| k.starts_with("hugepages-") && !init_cap.contains_key(*k))
        .cloned()
        .collect();
    for name in stale {
        log::info!("Removing huge page resource which is no longer supported: {name}");
        capacity.remove(&name);
        allocatable.remove(&name);
        changed = true;
    }
    changed
}
