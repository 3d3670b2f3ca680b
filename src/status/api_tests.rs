//! The status manager's requests against a scripted API server.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use serde_json::{json, Value};

use super::StatusManager;
use crate::client::testing::{client, Reply, TestServer};

const POD: &str = "/api/v1/namespaces/d/pods/p";

fn deleted_pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "d", "uid": "u1", "resourceVersion": "7",
                        "deletionTimestamp": "2026-01-01T00:00:00Z",
                        "deletionGracePeriodSeconds": 2},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]},
           "status": {"phase": "Running"}})
}

fn failed(message: &str) -> PodStatus {
    PodStatus {
        phase: Some("Failed".into()),
        message: Some(message.into()),
        ..Default::default()
    }
}

/// A server holding one pod being deleted; its DELETE answers `delete_code`
/// (200 removes the pod).
fn server(delete_code: Arc<AtomicU16>) -> TestServer {
    let exists = Arc::new(AtomicBool::new(true));
    TestServer::start(move |r| {
        let gone = || Reply::status(404, "NotFound", "pods \"p\" not found");
        match (r.method.as_str(), r.path_only()) {
            (_, POD) | (_, "/api/v1/namespaces/d/pods/p/status")
                if !exists.load(Ordering::SeqCst) =>
            {
                gone()
            }
            ("GET", POD) | ("PATCH", "/api/v1/namespaces/d/pods/p/status") => {
                Reply::json(200, &deleted_pod())
            }
            ("DELETE", POD) => match delete_code.load(Ordering::SeqCst) {
                200 => {
                    exists.store(false, Ordering::SeqCst);
                    Reply::json(200, &deleted_pod())
                }
                409 => Reply::status(
                    409,
                    "Conflict",
                    "Precondition failed: UID in precondition: u1",
                ),
                code => Reply::status(code, "InternalError", "etcd is down"),
            },
            _ => gone(),
        }
    })
}

/// The requests for the pod, in order (not the client's discovery).
fn pod_calls(s: &TestServer) -> Vec<String> {
    s.calls()
        .into_iter()
        .filter(|c| c.contains("/pods/"))
        .collect()
}

/// The pod stopped by the kubelet: its final status set and its removal due.
fn stopped_pod() -> (StatusManager, Pod) {
    let sm = StatusManager::new();
    let pod: Pod = serde_json::from_value(deleted_pod()).unwrap();
    assert!(sm.set_pod_status(&pod, failed("stopped")));
    sm.mark_for_deletion("u1");
    (sm, pod)
}

#[test]
fn a_deleted_pod_is_written_no_more() {
    let server = server(Arc::new(AtomicU16::new(200)));
    let c = client(&server.url);
    let (sm, pod) = stopped_pod();
    sm.sync_pod(&c, "u1");
    let removal = [
        "GET /api/v1/namespaces/d/pods/p",
        "PATCH /api/v1/namespaces/d/pods/p/status",
        "DELETE /api/v1/namespaces/d/pods/p",
    ];
    assert_eq!(pod_calls(&server), removal);
    // The kubelet marks it again when the API's REMOVE reaches the pod
    // worker, and may set a status once more: the object of this UID is
    // gone, so neither asks the server anything.
    sm.mark_for_deletion("u1");
    sm.sync_pod(&c, "u1");
    assert!(sm.set_pod_status(&pod, failed("stopped again")));
    sm.sync_pod(&c, "u1");
    sm.sync_batch(&c);
    assert_eq!(pod_calls(&server), removal);
}

#[test]
fn a_failed_delete_is_retried_and_a_conflict_is_final() {
    let code = Arc::new(AtomicU16::new(500));
    let server = server(code.clone());
    let c = client(&server.url);
    let (sm, _pod) = stopped_pod();
    sm.sync_pod(&c, "u1");
    let deletes = |s: &TestServer| s.count(|r| r.method == "DELETE");
    let first = deletes(&server);
    assert!(first > 0);
    // A server error (after the client's own retries) leaves the removal
    // due: the periodic sync tries again.
    sm.sync_batch(&c);
    let second = deletes(&server);
    assert!(second > first, "{second} DELETEs after {first}");
    // 409: the name now holds a pod of another UID; ours is gone.
    code.store(409, Ordering::SeqCst);
    sm.sync_batch(&c);
    assert_eq!(deletes(&server), second + 1);
    let before = pod_calls(&server);
    sm.mark_for_deletion("u1");
    sm.sync_batch(&c);
    assert_eq!(pod_calls(&server), before);
}
