//! Downward API values (upstream `pkg/fieldpath` and
//! `pkg/api/v1/resource`'s ExtractContainerResourceValue): what `fieldRef`
//! and `resourceFieldRef` resolve to, for env vars and downwardAPI volumes.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use std::collections::BTreeMap;

use crate::podutil::PodExt;
use crate::util::quantity;

/// What `resourceFieldRef` falls back to when a container sets no limit
/// (upstream MergeContainerResourceLimits: node allocatable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu_milli: i128,
    pub memory: i128,
    pub ephemeral_storage: i128,
}

/// The pod's runtime facts `fieldRef` can name besides its spec.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodFacts<'a> {
    pub pod_ips: &'a [String],
    pub host_ips: &'a [String],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError(pub String);

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FieldError {}

/// A `fieldRef.fieldPath` value (upstream ExtractFieldPathAsString plus the
/// kubelet's podIP/hostIP/nodeName/serviceAccountName additions).
pub fn field_value(pod: &Pod, path: &str, facts: &PodFacts<'_>) -> Result<String, FieldError> {
    let spec = pod.spec_or_default();
    Ok(match path {
        "metadata.name" => pod.name().to_string(),
        "metadata.namespace" => pod.namespace().to_string(),
        "metadata.uid" => pod.uid().to_string(),
        "metadata.labels" => format_map(pod.metadata.labels.as_ref()),
        "metadata.annotations" => format_map(pod.metadata.annotations.as_ref()),
        "spec.nodeName" => spec.node_name.clone().unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.clone().unwrap_or_default(),
        "status.podIP" => facts.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => facts.pod_ips.join(","),
        "status.hostIP" => facts.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => facts.host_ips.join(","),
        other => {
            if let Some(key) = subscript(other, "metadata.labels") {
                return Ok(lookup(pod.metadata.labels.as_ref(), key));
            }
            if let Some(key) = subscript(other, "metadata.annotations") {
                return Ok(lookup(pod.metadata.annotations.as_ref(), key));
            }
            return Err(FieldError(format!("unsupported fieldPath: {other}")));
        }
    })
}

/// `metadata.labels['key']` → `key` (single quotes, as the API validates).
fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?
        .strip_prefix("['")?
        .strip_suffix("']")
}

fn lookup(map: Option<&BTreeMap<String, String>>, key: &str) -> String {
    map.and_then(|m| m.get(key)).cloned().unwrap_or_default()
}

/// Upstream FormatMap: `key="value"` lines in key order, values quoted as
/// Go's %q does, no trailing newline.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's strconv.Quote for the strings labels and annotations hold.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A `resourceFieldRef` value for `container` (upstream
/// ExtractContainerResourceValue): cpu rounded up in units of the divisor
/// (default 1, and a zero divisor is 1), memory and ephemeral-storage
/// likewise; a missing limit is
/// node allocatable.
pub fn resource_value(
    sel: &ResourceFieldSelector,
    container: &Container,
    node: &NodeAllocatable,
) -> Result<String, FieldError> {
    let res = container.resources.as_ref();
    let get = |limits: bool, name: &str| -> Result<Option<i128>, FieldError> {
        let map = if limits {
            res.and_then(|r| r.limits.as_ref())
        } else {
            res.and_then(|r| r.requests.as_ref())
        };
        map.and_then(|m| m.get(name))
            .map(|q| quantity::parse_quantity(&q.0))
            .transpose()
            .map_err(|e| FieldError(format!("{name}: {e}")))
    };
    // The API server serializes an unset divisor as Quantity's zero value,
    // "0"; upstream reads a zero divisor as 1, as it reads a missing one.
    let divisor_milli = sel
        .divisor
        .as_ref()
        .map(|d| quantity::parse_quantity(&d.0))
        .transpose()
        .map_err(|e| FieldError(format!("divisor: {e}")))?
        .filter(|&d| d != 0)
        .unwrap_or(1000);
    if divisor_milli < 0 {
        return Err(FieldError("divisor must be positive".into()));
    }
    let (limits, name) = match sel.resource.split_once('.') {
        Some(("limits", n)) => (true, n),
        Some(("requests", n)) => (false, n),
        _ => {
            return Err(FieldError(format!(
                "unsupported container resource: {}",
                sel.resource
            )))
        }
    };
    let fallback = match name {
        "cpu" => node.cpu_milli,
        "memory" => node.memory * 1000,
        "ephemeral-storage" => node.ephemeral_storage * 1000,
        n if n.starts_with("hugepages-") => 0,
        _ => {
            return Err(FieldError(format!(
                "unsupported container resource: {}",
                sel.resource
            )))
        }
    };
    // Limits default to allocatable; an unset request is 0.
    let milli = match get(limits, name)? {
        Some(v) => v,
        None if limits => fallback,
        None => 0,
    };
    Ok(ceil_div(milli, divisor_milli).to_string())
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 {
        q + 1
    } else {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Container {
        let map = |v: &[(&str, &str)]| {
            Some(
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect(),
            )
        };
        Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                limits: map(limits),
                requests: map(requests),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sel(resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
        ResourceFieldSelector {
            resource: resource.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
            container_name: None,
        }
    }

    const NODE: NodeAllocatable = NodeAllocatable {
        cpu_milli: 2000,
        memory: 8 << 30,
        ephemeral_storage: 100 << 30,
    };

    #[test]
    fn resource_values_round_up_in_divisor_units() {
        let c = container(&[("cpu", "500m"), ("memory", "64Mi")], &[("cpu", "250m")]);
        let v = |r, d| resource_value(&sel(r, d), &c, &NODE).unwrap();
        assert_eq!(v("limits.cpu", None), "1");
        assert_eq!(v("limits.cpu", Some("1m")), "500");
        assert_eq!(v("requests.cpu", Some("1m")), "250");
        assert_eq!(v("requests.cpu", None), "1");
        assert_eq!(v("requests.ephemeral-storage", None), "0");
        assert_eq!(v("limits.memory", None), "67108864");
        assert_eq!(v("limits.memory", Some("1Mi")), "64");
        assert_eq!(v("requests.memory", None), "0");
        // No limit: node allocatable.
        assert_eq!(v("limits.ephemeral-storage", Some("1Gi")), "100");
        let none = container(&[], &[]);
        assert_eq!(
            resource_value(&sel("limits.cpu", None), &none, &NODE).unwrap(),
            "2"
        );
        assert!(resource_value(&sel("limits.gpu", None), &c, &NODE).is_err());
        assert!(resource_value(&sel("limits.cpu", Some("-1")), &c, &NODE).is_err());
    }

    /// The API server stores an unset divisor as "0" (fidelity capture,
    /// objects-as-stored.json): it reads as 1, for every resource.
    #[test]
    fn zero_divisor_reads_as_one() {
        let c = container(&[("cpu", "1500m"), ("memory", "64Mi")], &[("cpu", "250m")]);
        for (r, want) in [
            ("limits.cpu", "2"),
            ("requests.cpu", "1"),
            ("limits.memory", "67108864"),
        ] {
            for zero in ["0", "0m", "0Mi"] {
                let got = resource_value(&sel(r, Some(zero)), &c, &NODE).unwrap();
                assert_eq!(got, want, "{r} with divisor {zero:?}");
            }
        }
    }

    #[test]
    fn labels_are_formatted_like_upstream() {
        let m = BTreeMap::from([
            ("b".to_string(), "two \"q\"".to_string()),
            ("a".to_string(), "x\ny".to_string()),
        ]);
        assert_eq!(format_map(Some(&m)), "a=\"x\\ny\"\nb=\"two \\\"q\\\"\"");
        assert_eq!(format_map(None), "");
    }

    #[test]
    fn field_paths() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        let ips = vec!["10.0.0.5".to_string(), "fd00::5".to_string()];
        let host = vec!["192.168.1.2".to_string()];
        let facts = PodFacts {
            pod_ips: &ips,
            host_ips: &host,
        };
        let f = |p| field_value(&pod, p, &facts).unwrap();
        assert_eq!(f("metadata.namespace"), "ns");
        assert_eq!(f("metadata.labels['app']"), "web");
        assert_eq!(f("metadata.labels['none']"), "");
        assert_eq!(f("status.podIPs"), "10.0.0.5,fd00::5");
        assert_eq!(f("status.hostIP"), "192.168.1.2");
        assert!(field_value(&pod, "spec.containers", &facts).is_err());
    }
}
