//! The API server pod source (upstream `pkg/kubelet/config/apiserver.go`):
//! a reflector over the pods bound to this node. Upstream keeps the pods in
//! an "undelta" store and hands PodConfig the whole set after every event;
//! here a (re)list is the whole set (SET) and each watch event goes on as
//! the one change it is (ADD, UPDATE, REMOVE), which PodConfig merges the
//! same way. That saves a copy of every pod and a clone of all of them per
//! event.

use crate::util::worker::{ShutdownStage, Worker};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::Pod;

use super::send_update;
use crate::client::{paths, start_reflector, Client, ReflectorEvent};
use crate::podutil::{shrink_list, shrink_status_to_fit};
use crate::types::{PodOperation, PodUpdate, API_SOURCE};

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
) -> std::io::Result<Worker> {
    let stop = shutdown.clone();
    let handler = Box::new(move |event: ReflectorEvent<Pod>| {
        send_update(&updates, update_for(event), &stop);
    });
    start_reflector("api-pods", client, pods_path(node_name), handler, shutdown)
        .map(|h| Worker::adopt(h, ShutdownStage::Sources))
}

/// The change a watch event makes. A (re)list is the whole set; each watch
/// event names one pod, which PodConfig merges alone, so no copy of the
/// pods is kept here.
fn update_for(event: ReflectorEvent<Pod>) -> PodUpdate {
    let (op, pods) = match event {
        ReflectorEvent::Replace(pods) => (PodOperation::Set, pods),
        ReflectorEvent::Added(p) => (PodOperation::Add, vec![p]),
        ReflectorEvent::Modified(p) => (PodOperation::Update, vec![p]),
        ReflectorEvent::Deleted(p) => (PodOperation::Remove, vec![p]),
    };
    PodUpdate {
        pods: pods
            .into_iter()
            .map(|mut p| {
                shrink_to_fit(&mut p);
                Arc::new(p)
            })
            .collect(),
        op,
        source: API_SOURCE.to_string(),
    }
}

/// Gives back the spare capacity JSON decoding leaves in the pod's lists.
/// A Volume is 3.2 KB (k8s-openapi keeps every volume source inline), and a
/// list decoded element by element grows by doubling: three volumes hold
/// room for four. The pod is kept for its whole life, so this is paid once.
fn shrink_to_fit(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        shrink_list(&mut spec.volumes);
        for v in spec.volumes.iter_mut().flatten() {
            if let Some(p) = v.projected.as_mut() {
                shrink_list(&mut p.sources);
            }
        }
        shrink_list(&mut spec.tolerations);
        spec.containers.shrink_to_fit();
        shrink_list(&mut spec.init_containers);
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            shrink_list(&mut c.volume_mounts);
            shrink_list(&mut c.env);
            shrink_list(&mut c.ports);
        }
    }
    if let Some(status) = pod.status.as_mut() {
        shrink_status_to_fit(status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podutil::PodExt;

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

    fn op_and_uids(u: &PodUpdate) -> (PodOperation, Vec<&str>) {
        (u.op, u.pods.iter().map(|p| p.uid()).collect())
    }

    /// A relist is the whole set; each watch event is its one change. Run
    /// through PodConfig's storage, the merged state follows the watch.
    #[test]
    fn watch_events_become_single_changes_that_merge_into_the_set() {
        use crate::config::PodStorage;
        let seen = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
        let mut storage = PodStorage::new(Arc::clone(&seen));
        let events = [
            ReflectorEvent::Replace(vec![pod("a", "x:1")]),
            ReflectorEvent::Added(pod("b", "x:1")),
            ReflectorEvent::Modified(pod("a", "x:2")),
            ReflectorEvent::Deleted(pod("b", "x:1")),
            // A relist replaces whatever the watch missed.
            ReflectorEvent::Replace(vec![pod("c", "x:1")]),
        ];
        let want = [
            (PodOperation::Set, vec!["a"]),
            (PodOperation::Add, vec!["b"]),
            (PodOperation::Update, vec!["a"]),
            (PodOperation::Remove, vec!["b"]),
            (PodOperation::Set, vec!["c"]),
        ];
        let mut merged = Vec::new();
        for (event, want) in events.into_iter().zip(want) {
            let update = update_for(event);
            assert_eq!(op_and_uids(&update), want);
            assert_eq!(update.source, API_SOURCE);
            merged.extend(storage.merge(API_SOURCE, update));
        }
        assert!(
            seen.lock().unwrap().contains(API_SOURCE),
            "a list marks the source seen"
        );
        let ops: Vec<(PodOperation, Vec<&str>)> = merged.iter().map(op_and_uids).collect();
        assert_eq!(
            ops,
            vec![
                (PodOperation::Add, vec!["a"]),
                (PodOperation::Add, vec!["b"]),
                (PodOperation::Update, vec!["a"]),
                (PodOperation::Remove, vec!["b"]),
                (PodOperation::Remove, vec!["a"]),
                (PodOperation::Add, vec!["c"]),
            ]
        );
        let state: Vec<String> = storage
            .merged_state()
            .iter()
            .map(|p| p.uid().to_string())
            .collect();
        assert_eq!(state, vec!["c"]);
    }

    #[test]
    fn path_selects_this_node() {
        let p = pods_path("node-1");
        assert!(p.starts_with("/api/v1/pods?"), "{p}");
        assert!(p.contains("fieldSelector=spec.nodeName%3Dnode-1"), "{p}");
    }
}
