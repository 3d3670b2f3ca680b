//! What GetPods needs of each sandbox and container of the last listing,
//! kept by the hash of the element's bytes. The relist lists everything
//! every second and little changes, so only elements whose bytes changed
//! are decoded; the rest are taken from the last listing.
//!
//! The key is [`element_key`]: std's SipHash of each of the element's
//! fields under this process's random keys, summed, so the random order
//! in which Go writes map entries does not matter. Two different elements
//! collide with probability about 2⁻⁶⁴, and nobody outside the process can
//! choose bytes that do. An element carries its ID, state and times, so a
//! change of any of them changes its key.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::sync::Mutex;

use protobuf::Message;
use rkubelet_util::lock;

use super::{from_unix_nanos, labels};
use crate::container::{ContainerState, RuntimeContainer, RuntimeSandbox};
use crate::cri::api;
use crate::cri::listing::{element_key, RawListing};

/// A sandbox as GetPods keeps it; None when it is not the kubelet's.
pub(super) type SandboxEntry = Option<(labels::PodIdentity, RuntimeSandbox)>;
/// A container as GetPods keeps it; None when it is not the kubelet's.
pub(super) type ContainerEntry = Option<(labels::PodIdentity, RuntimeContainer)>;

/// The last listing's entries, by element hash.
#[derive(Default)]
pub(super) struct ListingMemo {
    inner: Mutex<Memo>,
}

#[derive(Default)]
struct Memo {
    keys: RandomState,
    sandboxes: HashMap<u64, SandboxEntry>,
    containers: HashMap<u64, ContainerEntry>,
}

impl ListingMemo {
    /// The entries of these listings, decoding only what is new.
    pub fn entries(
        &self,
        sandboxes: &RawListing,
        containers: &RawListing,
    ) -> protobuf::Result<(Vec<SandboxEntry>, Vec<ContainerEntry>)> {
        let sandboxes = sandboxes.elements()?;
        let containers = containers.elements()?;
        let mut memo = lock(&self.inner);
        let Memo {
            keys,
            sandboxes: old_sandboxes,
            containers: old_containers,
        } = &mut *memo;
        let s = refresh(old_sandboxes, keys, &sandboxes, sandbox_entry)?;
        let c = refresh(old_containers, keys, &containers, container_entry)?;
        Ok((s, c))
    }
}

/// The entries of `elements`, each taken from `memo` when its key was in
/// the last listing, else decoded. `memo` then holds this listing's
/// entries only, so what went is forgotten.
fn refresh<T: Clone>(
    memo: &mut HashMap<u64, T>,
    keys: &RandomState,
    elements: &[&[u8]],
    decode: fn(&[u8]) -> protobuf::Result<T>,
) -> protobuf::Result<Vec<T>> {
    let mut next = HashMap::with_capacity(elements.len());
    let mut out = Vec::with_capacity(elements.len());
    for bytes in elements {
        let key = element_key(keys, bytes)?;
        let entry = match memo.remove(&key) {
            Some(entry) => entry,
            None => decode(bytes)?,
        };
        out.push(entry.clone());
        next.insert(key, entry);
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
        let keys = RandomState::new();
        let mut memo = HashMap::new();
        let (a, b, b2) = (el("a"), el("b"), el("b2"));
        let first = refresh(&mut memo, &keys, &[&a, &b], counted).unwrap();
        assert_eq!(first, ["a", "b"]);
        assert_eq!(DECODED.load(Ordering::SeqCst), 2);
        // "b" changed to "b2"; "a" is as it was, in another place.
        let second = refresh(&mut memo, &keys, &[&b2, &a], counted).unwrap();
        assert_eq!(second, ["b2", "a"]);
        assert_eq!(DECODED.load(Ordering::SeqCst), 3, "only b2 decoded");
        assert_eq!(memo.len(), 2, "b is forgotten");
        // "b" again is new again.
        refresh(&mut memo, &keys, &[&b], counted).unwrap();
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

    #[test]
    fn a_state_change_is_seen_and_foreign_containers_are_kept_as_none() {
        let memo = ListingMemo::default();
        let running = encoded_container("c1", api::ContainerState::CONTAINER_RUNNING);
        let foreign = api::Container {
            id: "not-ours".into(),
            ..Default::default()
        }
        .write_to_bytes()
        .unwrap();
        let (_, c) = memo
            .entries(&RawListing::default(), &listing(&[running, foreign]))
            .unwrap();
        let (pod, first) = c[0].clone().unwrap();
        assert_eq!((pod.uid.as_str(), pod.name.as_str()), ("uid-1", "web"));
        assert_eq!(
            (first.id.as_str(), first.name.as_str(), first.hash.as_str()),
            ("c1", "app", "h1")
        );
        assert_eq!(first.state, ContainerState::Running);
        assert!(c[1].is_none());
        let exited = encoded_container("c1", api::ContainerState::CONTAINER_EXITED);
        let (_, c) = memo
            .entries(&RawListing::default(), &listing(&[exited]))
            .unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].as_ref().unwrap().1.state, ContainerState::Exited);
    }

    #[test]
    fn a_malformed_element_fails_the_listing() {
        let memo = ListingMemo::default();
        // Field 1, 2 bytes long, holding a truncated varint field.
        let bad = RawListing::from_bytes(vec![(1 << 3) | 2, 2, 8 << 3, 0x80]);
        assert!(memo.entries(&bad, &RawListing::default()).is_err());
    }
}
