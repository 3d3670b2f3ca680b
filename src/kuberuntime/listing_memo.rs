//! What GetPods needs of each sandbox and container of the last listing,
//! kept by the element's ID and state. The relist lists everything every
//! second and little changes, so only new elements, and elements whose
//! state changed, are decoded; the rest are taken from the last listing.
//!
//! The key is [`ElementKey`]: the element's ID and state, read from its
//! bytes without decoding it. CRI fixes everything else GetPods reads of
//! an element (its labels, its name, the kubelet's annotations, its
//! creation time) when the runtime creates it, so the key needs no hash
//! of the rest, and the random order in which Go writes map entries does
//! not matter.
//!
//! A listing whose keys are all those of the last one (the idle relist,
//! every second) gives back the last listing's pods as they were: the
//! same `Arc`, so the PLEG can tell nothing changed without a diff.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use protobuf::Message;
use rkubelet_util::lock;

use super::{from_unix_nanos, labels};
use crate::container::{ContainerState, RuntimeContainer, RuntimePod, RuntimeSandbox};
use crate::cri::api;
use crate::cri::listing::{element_key, ElementKey, ElementKind, RawListing};

/// A sandbox as GetPods keeps it; None when it is not the kubelet's.
pub(super) type SandboxEntry = Option<(labels::PodIdentity, RuntimeSandbox)>;
/// A container as GetPods keeps it; None when it is not the kubelet's.
pub(super) type ContainerEntry = Option<(labels::PodIdentity, RuntimeContainer)>;

/// The last listing's entries, by element ID.
#[derive(Default)]
pub(super) struct ListingMemo {
    inner: Mutex<Memo>,
}

#[derive(Default)]
struct Memo {
    sandboxes: Entries<SandboxEntry>,
    containers: Entries<ContainerEntry>,
    /// The last listing: its sandboxes' and containers' keys, each
    /// sorted, and the pods grouped from it.
    last: Option<Last>,
}

/// Each element's state and entry, by ID.
type Entries<T> = HashMap<Box<[u8]>, (u64, T)>;

/// An [`ElementKey`] kept past its listing.
type OwnedKey = (Box<[u8]>, u64);

struct Last {
    sandboxes: Vec<OwnedKey>,
    containers: Vec<OwnedKey>,
    pods: Arc<Vec<RuntimePod>>,
}

/// Groups a listing's entries into pods (GetPods).
pub(super) type Group = fn(Vec<SandboxEntry>, Vec<ContainerEntry>) -> Vec<RuntimePod>;

impl ListingMemo {
    /// The pods of these listings: the last ones when no element changed,
    /// else grouped from entries of which only the new are decoded.
    pub fn pods(
        &self,
        sandboxes: &RawListing,
        containers: &RawListing,
        group: Group,
    ) -> protobuf::Result<Arc<Vec<RuntimePod>>> {
        let mut memo = lock(&self.inner);
        let sandboxes = keyed(ElementKind::Sandbox, &sandboxes.elements()?)?;
        let containers = keyed(ElementKind::Container, &containers.elements()?)?;
        // (the runtime lists its elements in no particular order)
        let (sandbox_keys, container_keys) = (sorted_keys(&sandboxes), sorted_keys(&containers));
        if let Some(last) = &memo.last {
            if same_keys(&last.sandboxes, &sandbox_keys)
                && same_keys(&last.containers, &container_keys)
            {
                return Ok(Arc::clone(&last.pods));
            }
        }
        let s = refresh(&mut memo.sandboxes, &sandboxes, sandbox_entry)?;
        let c = refresh(&mut memo.containers, &containers, container_entry)?;
        let pods = Arc::new(group(s, c));
        memo.last = Some(Last {
            sandboxes: owned(&sandbox_keys),
            containers: owned(&container_keys),
            pods: Arc::clone(&pods),
        });
        Ok(pods)
    }
}

/// Each element with its key.
fn keyed<'a>(
    kind: ElementKind,
    elements: &[&'a [u8]],
) -> protobuf::Result<Vec<(ElementKey<'a>, &'a [u8])>> {
    elements
        .iter()
        .map(|bytes| Ok((element_key(kind, bytes)?, *bytes)))
        .collect()
}

fn sorted_keys<'a>(elements: &[(ElementKey<'a>, &[u8])]) -> Vec<ElementKey<'a>> {
    let mut keys: Vec<ElementKey<'a>> = elements.iter().map(|e| e.0).collect();
    keys.sort_unstable();
    keys
}

fn same_keys(last: &[OwnedKey], now: &[ElementKey<'_>]) -> bool {
    last.len() == now.len()
        && last
            .iter()
            .zip(now)
            .all(|((id, state), k)| **id == *k.id && *state == k.state)
}

fn owned(keys: &[ElementKey<'_>]) -> Vec<OwnedKey> {
    keys.iter().map(|k| (Box::from(k.id), k.state)).collect()
}

/// The entries of `elements`, each taken from `memo` when an element of
/// its ID and state was in the last listing, else decoded. `memo` then
/// holds this listing's entries only, so what went is forgotten.
fn refresh<T: Clone>(
    memo: &mut Entries<T>,
    elements: &[(ElementKey<'_>, &[u8])],
    decode: fn(&[u8]) -> protobuf::Result<T>,
) -> protobuf::Result<Vec<T>> {
    let mut next = HashMap::with_capacity(elements.len());
    let mut out = Vec::with_capacity(elements.len());
    for &(key, bytes) in elements {
        let entry = match memo.remove(key.id) {
            Some((state, entry)) if state == key.state => entry,
            _ => decode(bytes)?,
        };
        out.push(entry.clone());
        next.insert(Box::from(key.id), (key.state, entry));
    }
    *memo = next;
    Ok(out)
}

fn sandbox_entry(bytes: &[u8]) -> protobuf::Result<SandboxEntry> {
    let sb = api::PodSandbox::parse_from_bytes(bytes)?;
    let Some(pod) = labels::pod_identity(&sb.labels) else {
        return Ok(None);
    };
    let sandbox = RuntimeSandbox {
        ready: sb.state.enum_value_or_default() == api::PodSandboxState::SANDBOX_READY,
        created_at: from_unix_nanos(sb.created_at),
        id: sb.id,
    };
    Ok(Some((pod, sandbox)))
}

fn container_entry(bytes: &[u8]) -> protobuf::Result<ContainerEntry> {
    let mut c = api::Container::parse_from_bytes(bytes)?;
    let Some(pod) = labels::pod_identity(&c.labels) else {
        return Ok(None);
    };
    let container = RuntimeContainer {
        name: c.metadata.take().map(|m| m.name).unwrap_or_default(),
        state: container_state(c.state.enum_value_or_default()),
        hash: c
            .annotations
            .remove(labels::CONTAINER_HASH_ANNOTATION)
            .unwrap_or_default(),
        created_at: from_unix_nanos(c.created_at),
        grace_seconds: c
            .annotations
            .get(labels::POD_TERMINATION_GRACE_PERIOD_ANNOTATION)
            .and_then(|v| v.parse().ok()),
        id: c.id,
    };
    Ok(Some((pod, container)))
}

pub(super) fn container_state(s: api::ContainerState) -> ContainerState {
    match s {
        api::ContainerState::CONTAINER_CREATED => ContainerState::Created,
        api::ContainerState::CONTAINER_RUNNING => ContainerState::Running,
        api::ContainerState::CONTAINER_EXITED => ContainerState::Exited,
        api::ContainerState::CONTAINER_UNKNOWN => ContainerState::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DECODED: AtomicUsize = AtomicUsize::new(0);

    /// An element holding only its ID (field 1).
    fn el(id: &str) -> Vec<u8> {
        api::Container {
            id: id.into(),
            ..Default::default()
        }
        .write_to_bytes()
        .unwrap()
    }

    fn counted(bytes: &[u8]) -> protobuf::Result<String> {
        DECODED.fetch_add(1, Ordering::SeqCst);
        Ok(api::Container::parse_from_bytes(bytes)?.id)
    }

    #[test]
    fn only_new_elements_are_decoded_and_gone_ones_are_forgotten() {
        let mut memo = HashMap::new();
        fn keyed<'a>(els: &[&'a [u8]]) -> Vec<(ElementKey<'a>, &'a [u8])> {
            super::keyed(ElementKind::Container, els).unwrap()
        }
        let (a, b, b2) = (el("a"), el("b"), el("b2"));
        let first = refresh(&mut memo, &keyed(&[&a, &b]), counted).unwrap();
        assert_eq!(first, ["a", "b"]);
        assert_eq!(DECODED.load(Ordering::SeqCst), 2);
        // "b" changed to "b2"; "a" is as it was, in another place.
        let second = refresh(&mut memo, &keyed(&[&b2, &a]), counted).unwrap();
        assert_eq!(second, ["b2", "a"]);
        assert_eq!(DECODED.load(Ordering::SeqCst), 3, "only b2 decoded");
        assert_eq!(memo.len(), 2, "b is forgotten");
        // "b" again is new again.
        refresh(&mut memo, &keyed(&[&b]), counted).unwrap();
        assert_eq!(DECODED.load(Ordering::SeqCst), 4);
    }

    fn encoded_container(id: &str, state: api::ContainerState) -> Vec<u8> {
        api::Container {
            id: id.into(),
            state: state.into(),
            metadata: Some(api::ContainerMetadata {
                name: "app".into(),
                ..Default::default()
            })
            .into(),
            labels: [
                (labels::POD_UID_LABEL.to_string(), "uid-1".to_string()),
                (labels::POD_NAME_LABEL.to_string(), "web".to_string()),
            ]
            .into(),
            annotations: [(
                labels::CONTAINER_HASH_ANNOTATION.to_string(),
                "h1".to_string(),
            )]
            .into(),
            created_at: 5_000_000_000,
            ..Default::default()
        }
        .write_to_bytes()
        .unwrap()
    }

    fn listing(elements: &[Vec<u8>]) -> RawListing {
        api::ListContainersResponse {
            containers: elements
                .iter()
                .map(|e| api::Container::parse_from_bytes(e).unwrap())
                .collect(),
            ..Default::default()
        }
        .write_to_bytes()
        .map(RawListing::from_bytes)
        .unwrap()
    }

    fn pods(
        memo: &ListingMemo,
        sandboxes: &RawListing,
        containers: &[Vec<u8>],
    ) -> Arc<Vec<RuntimePod>> {
        memo.pods(
            sandboxes,
            &listing(containers),
            super::super::pods::group_pods,
        )
        .unwrap()
    }

    #[test]
    fn a_state_change_is_seen_and_foreign_containers_are_left_out() {
        let memo = ListingMemo::default();
        let none = RawListing::default();
        let running = encoded_container("c1", api::ContainerState::CONTAINER_RUNNING);
        let foreign = api::Container {
            id: "not-ours".into(),
            ..Default::default()
        }
        .write_to_bytes()
        .unwrap();
        let first = pods(&memo, &none, &[running, foreign]);
        assert_eq!(first.len(), 1, "the foreign container is no pod's");
        let pod = &first[0];
        assert_eq!((pod.uid.as_str(), pod.name.as_str()), ("uid-1", "web"));
        let c = &pod.containers[0];
        assert_eq!(
            (c.id.as_str(), c.name.as_str(), c.hash.as_str()),
            ("c1", "app", "h1")
        );
        assert_eq!(c.state, ContainerState::Running);
        let exited = encoded_container("c1", api::ContainerState::CONTAINER_EXITED);
        let second = pods(&memo, &none, &[exited]);
        assert_eq!(second[0].containers.len(), 1);
        assert_eq!(second[0].containers[0].state, ContainerState::Exited);
    }

    #[test]
    fn an_unchanged_listing_gives_back_the_same_pods_in_any_order() {
        let memo = ListingMemo::default();
        let none = RawListing::default();
        let c1 = encoded_container("c1", api::ContainerState::CONTAINER_RUNNING);
        let c2 = encoded_container("c2", api::ContainerState::CONTAINER_RUNNING);
        let first = pods(&memo, &none, &[c1.clone(), c2.clone()]);
        let again = pods(&memo, &none, &[c2, c1.clone()]);
        assert!(Arc::ptr_eq(&first, &again));
        // One change anywhere makes new pods.
        let c2_exited = encoded_container("c2", api::ContainerState::CONTAINER_EXITED);
        let changed = pods(&memo, &none, &[c1, c2_exited]);
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed[0].containers.len(), 2);
    }

    #[test]
    fn a_malformed_element_fails_the_listing() {
        let memo = ListingMemo::default();
        // Field 1, 2 bytes long, holding a truncated varint field.
        let bad = RawListing::from_bytes(vec![(1 << 3) | 2, 2, 8 << 3, 0x80]);
        let group = super::super::pods::group_pods;
        assert!(memo.pods(&bad, &RawListing::default(), group).is_err());
    }
}
