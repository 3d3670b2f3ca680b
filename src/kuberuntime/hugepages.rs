//! Huge page limits of a container (upstream
//! `GetHugepageLimitsFromResources`): every page size the machine has is
//! limited, to 0 unless the container's limits name it, so a container
//! never maps huge pages it did not ask for. The runtime writes them to
//! the hugetlb controller; containerd's CRI ignores them unless
//! `disable_hugetlb_controller = false` (its default is true), as it does
//! for upstream's kubelet.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::api;
use crate::util::quantity;

const RESOURCE_PREFIX: &str = "hugepages-";
const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];

/// Upstream `HugePageUnitSizeFromByteSize`: 2097152 → `2MB`; `None` for
/// a size that is not a whole number of its largest unit.
pub fn page_size_name(bytes: u64) -> Option<String> {
    let (mut size, mut unit) = (bytes, 0);
    while size % 1024 == 0 && size > 0 && unit < UNITS.len() - 1 {
        size /= 1024;
        unit += 1;
    }
    if size > 1024 && unit < UNITS.len() - 1 {
        return None;
    }
    Some(format!("{size}{}", UNITS[unit]))
}

/// The CRI limits for `container` of `pod` on a machine with huge pages
/// of `machine_sizes` bytes. A size the container does not limit takes the
/// pod-level limit where the pod sets one (pod-level resources).
pub fn limits(machine_sizes: &[u64], pod: &Pod, container: &Container) -> Vec<api::HugepageLimit> {
    let requested = by_size(
        container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|(name, amount)| {
                Some((name, quantity::parse_quantity_value(&amount.0).ok()?))
            }),
    );
    let pod_level = crate::cm::helpers::pod_level(pod, true);
    let pod_requested = by_size(pod_level.iter().map(|(name, milli)| (name, milli / 1000)));
    machine_sizes
        .iter()
        .filter_map(|&bytes| page_size_name(bytes))
        .map(|page_size| {
            let find = |list: &[(String, u64)]| {
                list.iter()
                    .find(|(size, _)| *size == page_size)
                    .map(|(_, limit)| *limit)
            };
            let limit = find(&requested)
                .or_else(|| find(&pod_requested))
                .unwrap_or(0);
            api::HugepageLimit {
                page_size,
                limit,
                ..Default::default()
            }
        })
        .collect()
}

/// `hugepages-<size>` amounts in bytes, by upstream's page size name.
fn by_size<'a>(list: impl Iterator<Item = (&'a String, i128)>) -> Vec<(String, u64)> {
    list.filter_map(|(name, bytes)| {
        let size = quantity::parse_quantity_value(name.strip_prefix(RESOURCE_PREFIX)?).ok()?;
        let size = page_size_name(u64::try_from(size).ok()?)?;
        Some((size, u64::try_from(bytes).ok()?))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn page_sizes_are_named_as_upstream() {
        assert_eq!(page_size_name(2 << 20).as_deref(), Some("2MB"));
        assert_eq!(page_size_name(1 << 30).as_deref(), Some("1GB"));
        assert_eq!(page_size_name(64 << 10).as_deref(), Some("64KB"));
        assert_eq!(page_size_name(3 * 1025), None);
    }

    #[test]
    fn every_machine_size_is_limited_to_what_the_container_asked() {
        let c: Container = serde_json::from_value(json!({"name": "c", "resources": {
            "limits": {"hugepages-2Mi": "100Mi", "memory": "1Gi"}}}))
        .expect("container");
        let pod = Pod::default();
        let got: Vec<(String, u64)> = limits(&[2 << 20, 1 << 30], &pod, &c)
            .into_iter()
            .map(|l| (l.page_size, l.limit))
            .collect();
        assert_eq!(
            got,
            [("2MB".to_string(), 100 << 20), ("1GB".to_string(), 0)]
        );
        let plain: Container = serde_json::from_value(json!({"name": "c"})).expect("container");
        assert!(limits(&[2 << 20], &pod, &plain)
            .iter()
            .all(|l| l.limit == 0));
        assert!(limits(&[], &pod, &c).is_empty());
        // A pod-level limit covers the containers that set none.
        let pod_level: Pod = serde_json::from_value(json!({"spec": {
            "resources": {"limits": {"hugepages-2Mi": "10Mi"}}, "containers": [{"name": "c"}]}}))
        .expect("pod");
        let got: Vec<u64> = limits(&[2 << 20], &pod_level, &plain)
            .iter()
            .map(|l| l.limit)
            .collect();
        assert_eq!(got, [10 << 20]);
    }
}
