//! The API server pod source (upstream `pkg/kubelet/config/apiserver.go`):
//! a reflector over the pods bound to this node, kept as an "undelta"
//! store that hands PodConfig a full snapshot after every change, like the
//! file and URL sources do.

use std::collections::BTreeMap;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::Pod;

use super::send_update;
use crate::client::{paths, start_reflector, Client, ReflectorEvent};
use crate::podutil::PodExt;
use crate::types::{PodUpdate, API_SOURCE};

/// The list path of the pods bound to `node_name`.
pub fn pods_path(node_name: &str) -> String {
    paths::with_query(
        &paths::all_pods(),
        &[("fieldSelector", &format!("spec.nodeName={node_name}"))],
    )
}

/// Starts the reflector thread ("api-pods") feeding `updates`.
pub fn start_api_source(
    client: Client,
    node_name: &str,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let mut store = UndeltaStore::default();
    let stop = shutdown.clone();
    let handler = Box::new(move |event: ReflectorEvent<Pod>| {
        if store.apply(event) {
            send_update(
                &updates,
                PodUpdate::set(API_SOURCE, store.snapshot()),
                &stop,
            );
        }
    });
    start_reflector("api-pods", client, pods_path(node_name), handler, shutdown)
}

/// Pods by UID; every change yields the whole set.
#[derive(Default)]
struct UndeltaStore {
    pods: BTreeMap<String, Pod>,
    /// A snapshot is owed even when the first list is empty: it marks the
    /// source as seen.
    listed: bool,
}

impl UndeltaStore {
    /// Applies one event; returns whether a snapshot should be sent.
    fn apply(&mut self, event: ReflectorEvent<Pod>) -> bool {
        match event {
            ReflectorEvent::Replace(pods) => {
                let fresh: BTreeMap<String, Pod> =
                    pods.into_iter().map(|p| (p.uid().to_string(), p)).collect();
                let changed = !self.listed || fresh != self.pods;
                self.pods = fresh;
                self.listed = true;
                changed
            }
            ReflectorEvent::Added(p) | ReflectorEvent::Modified(p) => {
                let uid = p.uid().to_string();
                let changed = self.pods.get(&uid) != Some(&p);
                self.pods.insert(uid, p);
                changed
            }
            ReflectorEvent::Deleted(p) => self.pods.remove(p.uid()).is_some(),
        }
    }

    fn snapshot(&self) -> Vec<Pod> {
        self.pods.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, image: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(format!("p-{uid}"));
        p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers: vec![k8s_openapi::api::core::v1::Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    #[test]
    fn snapshots_follow_the_watch() {
        let mut s = UndeltaStore::default();
        // An empty first list still marks the source as seen.
        assert!(s.apply(ReflectorEvent::Replace(vec![])));
        assert!(!s.apply(ReflectorEvent::Replace(vec![])));
        assert!(s.apply(ReflectorEvent::Added(pod("a", "x:1"))));
        assert!(!s.apply(ReflectorEvent::Modified(pod("a", "x:1"))));
        assert!(s.apply(ReflectorEvent::Modified(pod("a", "x:2"))));
        assert!(s.apply(ReflectorEvent::Added(pod("b", "x:1"))));
        assert_eq!(s.snapshot().len(), 2);
        assert!(s.apply(ReflectorEvent::Deleted(pod("a", "x:2"))));
        assert!(!s.apply(ReflectorEvent::Deleted(pod("a", "x:2"))));
        // A relist replaces whatever the watch missed.
        assert!(s.apply(ReflectorEvent::Replace(vec![pod("c", "x:1")])));
        let uids: Vec<String> = s.snapshot().iter().map(|p| p.uid().to_string()).collect();
        assert_eq!(uids, vec!["c"]);
    }

    #[test]
    fn path_selects_this_node() {
        let p = pods_path("node-1");
        assert!(p.starts_with("/api/v1/pods?"), "{p}");
        assert!(p.contains("fieldSelector=spec.nodeName%3Dnode-1"), "{p}");
    }
}
