//! Label syntax, after apimachinery pkg/util/validation (qualified names
//! and label values; used for `--node-labels` and `registerWithTaints`),
//! and the `--node-labels` namespace rule of options.ValidateKubeletFlags:
//! only the labels the NodeRestriction admission plugin lets a kubelet set
//! on itself.

use std::collections::BTreeMap;

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn check_name_part(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if s.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    let alnum_ends = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !alnum_ends || !s.chars().all(is_label_char) {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', \
                    and must start and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}

/// RFC 1123 subdomain: dot-separated lowercase alphanumeric/'-' labels, <= 253 chars.
fn check_dns_subdomain(s: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.is_empty() || s.len() > 253 || !s.split('.').all(label_ok) {
        return Err("prefix part must be a lowercase RFC 1123 subdomain".into());
    }
    Ok(())
}

/// A label/annotation key: `[prefix/]name`.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    match key.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix)?;
            check_name_part(name)
        }
        None => check_name_part(key),
    }
}

/// A label value: empty, or a name part.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    check_name_part(v).map_err(|e| e.replace("name part", "value"))
}

/// Labels in the kubernetes.io / k8s.io namespaces the kubelet may set on itself.
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
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn in_namespace(ns: &str, root: &str) -> bool {
    ns == root
        || ns
            .strip_suffix(root)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Whether the NodeRestriction admission plugin would let the kubelet set this label.
fn is_allowed_kubernetes_label(key: &str) -> bool {
    let Some((ns, _)) = key.split_once('/') else {
        return true;
    };
    let reserved = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
    !reserved
        || KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|root| in_namespace(ns, root))
}

/// `--node-labels` checks from options.ValidateKubeletFlags.
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    let mut errs = Vec::new();
    for (k, v) in labels {
        if let Err(reason) = check_qualified_name(k) {
            errs.push(format!("invalid label key {k:?}: {reason}"));
        }
        if let Err(reason) = check_label_value(v) {
            errs.push(format!("invalid value {v:?} for label {k:?}: {reason}"));
        }
        if !is_allowed_kubernetes_label(k) {
            errs.push(format!(
                "label {k:?} is in the 'kubernetes.io' or 'k8s.io' namespace and must begin with an \
                 allowed prefix ({}) or be one of {KUBELET_LABELS:?}",
                KUBELET_LABEL_NAMESPACES.join(", ")
            ));
        }
    }
    errs
}
