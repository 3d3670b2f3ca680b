//! The node lease heartbeat (upstream
//! component-helpers/apimachinery/lease/controller.go, with the kubelet's
//! SetNodeOwnerFunc as the post-processing step).
//!
//! On the "node-lease" thread, every leaseDuration/4 (jittered by 4%): renew
//! the lease last written with a PUT on its resourceVersion; when that fails
//! (or there is none yet) ensure the lease exists — GET, create if missing —
//! backing off 200 ms doubling to 7 s, and renew it. A 409 on renewal fetches
//! a fresh copy and retries, at most five times per renewal.
//!
//! The lease is owned by the Node (ownerReference v1/Node/<name>/<uid>), so
//! it is created only once the node's UID is known, and then at once: until
//! the lease exists the thread looks every 100 ms (in memory) whether the
//! node has registered. A lease found without an owner gets one at its
//! next renewal.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use rkubelet_util::lock;

use crate::client::{paths, ApiError, Client};
use crate::util::backoff::Exponential;

/// Where node leases live.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Immediate, successive update tries per renewal (maxUpdateRetries).
const MAX_UPDATE_RETRIES: usize = 5;
/// The longest wait between tries to ensure the lease (maxBackoff).
const MAX_BACKOFF: Duration = Duration::from_secs(7);
/// The first wait between tries (upstream doubles its 100 ms start before
/// the first wait).
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The renew interval as a fraction of the lease duration
/// (nodeLeaseRenewIntervalFraction).
const RENEW_INTERVAL_FRACTION: f64 = 0.25;
const JITTER: f64 = 0.04;
/// How often a controller without a lease looks whether the node has
/// registered (in memory, no API call).
const NODE_POLL: Duration = Duration::from_millis(100);

/// The node's UID, once the node is registered.
pub type NodeUidFn = Box<dyn Fn() -> Option<String> + Send + Sync>;

/// Creates and renews this node's lease.
pub struct LeaseController {
    client: Client,
    node_name: String,
    lease_duration_seconds: i32,
    renew_interval: Duration,
    node_uid: NodeUidFn,
    /// The lease as last created or updated (latestLease).
    latest: Mutex<Option<Lease>>,
    last_renew: Mutex<Option<Instant>>,
}

/// Waits up to `d`; true when shutdown was signalled or its sender dropped.
fn wait_for_shutdown(shutdown: &Receiver<()>, d: Duration) -> bool {
    !matches!(shutdown.recv_timeout(d), Err(RecvTimeoutError::Timeout))
}

/// Now, at the microsecond precision a MicroTime keeps.
fn now_micro() -> MicroTime {
    let now = k8s_openapi::jiff::Timestamp::now();
    MicroTime(k8s_openapi::jiff::Timestamp::from_microsecond(now.as_microsecond()).unwrap_or(now))
}

impl LeaseController {
    pub fn new(
        client: Client,
        node_name: String,
        lease_duration_seconds: i32,
        node_uid: NodeUidFn,
    ) -> Arc<Self> {
        let secs = f64::from(lease_duration_seconds.max(1));
        Arc::new(LeaseController {
            client,
            node_name,
            lease_duration_seconds,
            renew_interval: Duration::from_secs_f64(secs * RENEW_INTERVAL_FRACTION),
            node_uid,
            latest: Mutex::new(None),
            last_renew: Mutex::new(None),
        })
    }

    /// Renews the lease on the "node-lease" thread until `shutdown` receives or closes.
    pub fn start(
        self: &Arc<Self>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<crate::util::worker::Worker> {
        let this = self.clone();
        crate::util::worker::spawn_supervised(
            "node-lease",
            crate::util::worker::ShutdownStage::Status,
            shutdown,
            move |s| this.run(s),
        )
    }

    /// When the lease was last created or renewed.
    #[cfg(test)]
    pub fn last_renew(&self) -> Option<Instant> {
        *lock(&self.last_renew)
    }

    /// leaseDuration × 0.25.
    #[cfg(test)]
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }

    fn run(&self, shutdown: &Receiver<()>) {
        let mut next_sync = Instant::now();
        loop {
            // Until the lease exists, a node that just registered gets its
            // lease at once, not at the next renewal (upstream's kubelet
            // has the node by then); looking costs no API call.
            let no_lease = lock(&self.latest).is_none();
            if Instant::now() >= next_sync || (no_lease && (self.node_uid)().is_some()) {
                self.sync(shutdown);
                next_sync = Instant::now() + rkubelet_util::jitter(self.renew_interval, JITTER);
            }
            let mut wait = next_sync.saturating_duration_since(Instant::now());
            if lock(&self.latest).is_none() {
                wait = wait.min(NODE_POLL);
            }
            if wait_for_shutdown(shutdown, wait) {
                return;
            }
        }
    }

    /// One renewal: update the latest lease, else ensure it exists and update it.
    fn sync(&self, shutdown: &Receiver<()>) {
        let latest = lock(&self.latest).clone();
        if let Some(lease) = latest {
            // Optimistically assume nobody else changed it since our last write.
            match self.retry_update_lease(Some(lease), shutdown) {
                Ok(()) => return,
                Err(e) => log::info!(
                    "Failed to update lease using latest lease, fallback to ensure lease: {e}"
                ),
            }
        }
        let Some((lease, created)) = self.backoff_ensure_lease(shutdown) else {
            return;
        };
        *lock(&self.latest) = lease.clone();
        // A lease just created needs no update.
        if let (false, Some(lease)) = (created, lease) {
            if let Err(e) = self.retry_update_lease(Some(lease), shutdown) {
                log::error!("{e}, will retry after {:?}", self.renew_interval);
            }
        }
    }

    /// Ensures the lease exists, retrying with backoff. `None` when shutdown
    /// came first; else the lease (absent when it could not be built yet)
    /// and whether this call created it.
    fn backoff_ensure_lease(&self, shutdown: &Receiver<()>) -> Option<(Option<Lease>, bool)> {
        let mut backoff = Exponential::new(FIRST_BACKOFF, MAX_BACKOFF);
        loop {
            match self.ensure_lease() {
                Ok(r) => return Some(r),
                Err(e) => {
                    let sleep = backoff.next_delay();
                    log::error!("Failed to ensure lease exists, will retry in {sleep:?}: {e}");
                    if wait_for_shutdown(shutdown, sleep) {
                        return None;
                    }
                }
            }
        }
    }

    /// GETs the lease, creating it when missing.
    fn ensure_lease(&self) -> Result<(Option<Lease>, bool), ApiError> {
        match self
            .client
            .get::<Lease>(&paths::lease(NODE_LEASE_NAMESPACE, &self.node_name))
        {
            Ok(lease) => Ok((Some(lease), false)),
            Err(e) if e.is_not_found() => {
                let (lease, post) = self.new_lease(None);
                if let Err(e) = post {
                    // Without an owner it is not created now; the next sync retries.
                    log::error!("Not creating the node lease yet: {e}");
                    return Ok((None, false));
                }
                let created = self
                    .client
                    .create::<Lease>(&paths::leases(NODE_LEASE_NAMESPACE), &lease)?;
                *lock(&self.last_renew) = Some(Instant::now());
                Ok((Some(created), true))
            }
            Err(e) => Err(e),
        }
    }

    /// PUTs a renewed copy of `base`, up to five times; a conflict fetches
    /// a fresh copy first.
    fn retry_update_lease(
        &self,
        mut base: Option<Lease>,
        shutdown: &Receiver<()>,
    ) -> Result<(), String> {
        for _ in 0..MAX_UPDATE_RETRIES {
            // An owner that cannot be set yet does not block renewal.
            let (lease, _) = self.new_lease(base.as_ref());
            let path = paths::lease(NODE_LEASE_NAMESPACE, &self.node_name);
            match self.client.replace::<Lease>(&path, &lease) {
                Ok(updated) => {
                    *lock(&self.latest) = Some(updated);
                    *lock(&self.last_renew) = Some(Instant::now());
                    return Ok(());
                }
                Err(e) => {
                    log::error!("Failed to update lease: {e}");
                    if e.is_conflict() {
                        match self.backoff_ensure_lease(shutdown) {
                            Some((fresh, _)) => base = fresh,
                            None => return Err("shutting down".into()),
                        }
                    }
                }
            }
        }
        Err(format!(
            "failed {MAX_UPDATE_RETRIES} attempts to update lease"
        ))
    }

    /// A new lease, or a copy of `base`, renewed now, with the node as owner
    /// when known (the error says why the owner could not be set).
    fn new_lease(&self, base: Option<&Lease>) -> (Lease, Result<(), String>) {
        let mut lease = match base {
            Some(b) => b.clone(),
            None => Lease {
                metadata: ObjectMeta {
                    name: Some(self.node_name.clone()),
                    namespace: Some(NODE_LEASE_NAMESPACE.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.node_name.clone()),
                    lease_duration_seconds: Some(self.lease_duration_seconds),
                    ..Default::default()
                }),
            },
        };
        lease.spec.get_or_insert_with(Default::default).renew_time = Some(now_micro());
        let owned = lease
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|o| !o.is_empty());
        if owned {
            return (lease, Ok(()));
        }
        match (self.node_uid)() {
            Some(uid) if !uid.is_empty() => {
                lease.metadata.owner_references = Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: self.node_name.clone(),
                    uid,
                    ..Default::default()
                }]);
                (lease, Ok(()))
            }
            _ => {
                let e = format!(
                    "failed to get node {} to set owner ref to the node lease",
                    self.node_name
                );
                (lease, Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{json, Value};

    use super::*;
    use crate::client::testing::{client, Reply, TestServer};

    const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a";
    const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";

    /// A lease store: create sets rv 1, each update checks and bumps the rv.
    /// `conflicts` PUTs are refused with 409 after bumping the stored rv (a
    /// concurrent writer).
    fn lease_server(
        initial: Option<Value>,
        conflicts: usize,
    ) -> (TestServer, Arc<Mutex<Option<Value>>>) {
        let store = Arc::new(Mutex::new(initial));
        let left = Arc::new(AtomicUsize::new(conflicts));
        let s = store.clone();
        let server = TestServer::start(move |r| {
            let mut cur = s.lock().unwrap();
            match (r.method.as_str(), r.path_only()) {
                ("GET", PATH) => match cur.as_ref() {
                    Some(l) => Reply::json(200, l),
                    None => Reply::status(404, "NotFound", "leases \"node-a\" not found"),
                },
                ("POST", COLLECTION) => {
                    let mut l = r.json();
                    l["metadata"]["resourceVersion"] = json!("1");
                    *cur = Some(l.clone());
                    Reply::json(201, &l)
                }
                ("PUT", PATH) => {
                    let Some(stored) = cur.as_mut() else {
                        return Reply::status(404, "NotFound", "gone");
                    };
                    let rv: u64 = stored["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    if left.load(Ordering::SeqCst) > 0 {
                        left.fetch_sub(1, Ordering::SeqCst);
                        stored["metadata"]["resourceVersion"] = json!((rv + 4).to_string());
                        return Reply::status(409, "Conflict", "the object has been modified");
                    }
                    let body = r.json();
                    if body["metadata"]["resourceVersion"] != json!(rv.to_string()) {
                        return Reply::status(409, "Conflict", "the object has been modified");
                    }
                    let mut l = body;
                    l["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
                    *stored = l.clone();
                    Reply::json(200, &l)
                }
                _ => Reply::status(404, "NotFound", "no"),
            }
        });
        (server, store)
    }

    fn controller(server: &TestServer, uid: Arc<Mutex<Option<String>>>) -> Arc<LeaseController> {
        LeaseController::new(
            client(&server.url),
            "node-a".into(),
            40,
            Box::new(move || uid.lock().unwrap().clone()),
        )
    }

    fn known_uid() -> Arc<Mutex<Option<String>>> {
        Arc::new(Mutex::new(Some("uid-1".into())))
    }

    #[test]
    fn renew_interval_is_a_quarter() {
        let (server, _) = lease_server(None, 0);
        assert_eq!(
            controller(&server, known_uid()).renew_interval(),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn creates_with_owner_then_renews_by_put() {
        let (server, store) = lease_server(None, 0);
        let ctl = controller(&server, known_uid());
        let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
        assert!(ctl.last_renew().is_none());
        ctl.sync(&rx);
        assert_eq!(
            server.calls(),
            vec![format!("GET {PATH}"), format!("POST {COLLECTION}")]
        );
        let created = server.requests()[1].json();
        assert_eq!(created["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(created["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(created["spec"]["holderIdentity"], "node-a");
        assert_eq!(created["spec"]["leaseDurationSeconds"], 40);
        assert_eq!(
            created["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1"}])
        );
        let renew = created["spec"]["renewTime"].as_str().unwrap();
        assert_eq!(renew.len(), "2024-01-01T00:00:00.000000Z".len(), "{renew}");
        assert!(ctl.last_renew().is_some());

        let before = ctl.last_renew();
        std::thread::sleep(Duration::from_millis(5));
        ctl.sync(&rx);
        let reqs = server.requests();
        assert_eq!(reqs.len(), 3);
        assert_eq!(
            format!("{} {}", reqs[2].method, reqs[2].path_only()),
            format!("PUT {PATH}")
        );
        assert_eq!(reqs[2].json()["metadata"]["resourceVersion"], "1");
        assert!(ctl.last_renew() > before);
        ctl.sync(&rx);
        assert_eq!(
            server.requests()[3].json()["metadata"]["resourceVersion"],
            "2"
        );
        assert_eq!(
            store.lock().unwrap().as_ref().unwrap()["metadata"]["resourceVersion"],
            "3"
        );
    }

    #[test]
    fn conflict_on_renew_gets_a_fresh_copy_and_retries() {
        let (server, store) = lease_server(None, 0);
        let ctl = controller(&server, known_uid());
        let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
        ctl.sync(&rx); // GET 404, POST
                       // Someone else writes: our next PUT conflicts.
        *store.lock().unwrap() = {
            let mut l = store.lock().unwrap().clone().unwrap();
            l["metadata"]["resourceVersion"] = json!("5");
            Some(l)
        };
        ctl.sync(&rx);
        let calls = server.calls();
        assert_eq!(
            calls[2..].to_vec(),
            vec![
                format!("PUT {PATH}"),
                format!("GET {PATH}"),
                format!("PUT {PATH}")
            ]
        );
        let reqs = server.requests();
        assert_eq!(reqs[2].json()["metadata"]["resourceVersion"], "1");
        assert_eq!(reqs[4].json()["metadata"]["resourceVersion"], "5");
        assert_eq!(
            store.lock().unwrap().as_ref().unwrap()["metadata"]["resourceVersion"],
            "6"
        );
    }

    #[test]
    fn gives_up_after_five_conflicts_then_ensures_again() {
        let existing = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-a", "namespace": "kube-node-lease", "resourceVersion": "1",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1"}]},
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40}});
        // Seven PUTs in a row conflict.
        let (server, _) = lease_server(Some(existing.clone()), 7);
        let ctl = controller(&server, known_uid());
        *ctl.latest.lock().unwrap() = serde_json::from_value(existing).ok();
        let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
        ctl.sync(&rx);
        let calls = server.calls();
        let puts = calls.iter().filter(|c| c.starts_with("PUT")).count();
        // Five tries from the latest lease (each conflict re-GETs), then the
        // fallback ensure and three more tries, the last one succeeding.
        assert_eq!(puts, 8, "{calls:?}");
        assert_eq!(calls.last().unwrap(), &format!("PUT {PATH}"));
        assert!(ctl.last_renew().is_some());
    }

    #[test]
    fn no_create_until_the_node_uid_is_known() {
        let (server, _) = lease_server(None, 0);
        let uid = Arc::new(Mutex::new(None));
        let ctl = controller(&server, uid.clone());
        let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
        ctl.sync(&rx);
        assert_eq!(server.calls(), vec![format!("GET {PATH}")]);
        assert!(ctl.last_renew().is_none());
        *uid.lock().unwrap() = Some("uid-7".into());
        ctl.sync(&rx);
        assert_eq!(
            server.calls()[1..].to_vec(),
            vec![format!("GET {PATH}"), format!("POST {COLLECTION}")]
        );
        assert_eq!(
            server.requests()[2].json()["metadata"]["ownerReferences"][0]["uid"],
            "uid-7"
        );
    }

    #[test]
    fn the_lease_is_created_as_soon_as_the_node_registers() {
        let (server, _) = lease_server(None, 0);
        let uid = Arc::new(Mutex::new(None));
        // leaseDurationSeconds 40: renewals 10 s apart.
        let ctl = controller(&server, uid.clone());
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let handle = ctl.start(rx).unwrap();
        assert!(server.wait_for(Duration::from_secs(5), |r| !r.is_empty()));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            server.calls(),
            vec![format!("GET {PATH}")],
            "no polling of the API"
        );
        let registered = Instant::now();
        *uid.lock().unwrap() = Some("uid-9".into());
        assert!(server.wait_for(Duration::from_secs(2), |r| r
            .iter()
            .any(|r| r.method == "POST")));
        assert!(registered.elapsed() < Duration::from_secs(1));
        drop(tx);
        handle.join().unwrap();
    }

    #[test]
    fn an_existing_lease_gets_its_owner_on_renewal() {
        let existing = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "node-a", "namespace": "kube-node-lease", "resourceVersion": "9"},
            "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40}});
        let (server, _) = lease_server(Some(existing), 0);
        let ctl = controller(&server, known_uid());
        let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
        ctl.sync(&rx);
        assert_eq!(
            server.calls(),
            vec![format!("GET {PATH}"), format!("PUT {PATH}")]
        );
        let put = server.requests()[1].json();
        assert_eq!(put["metadata"]["resourceVersion"], "9");
        assert_eq!(put["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert!(put["spec"]["renewTime"].is_string());
    }

    #[test]
    fn thread_renews_and_stops_on_shutdown() {
        let (server, _) = lease_server(None, 0);
        let uid = known_uid();
        let ctl = LeaseController::new(
            client(&server.url),
            "node-a".into(),
            1,
            Box::new(move || uid.lock().unwrap().clone()),
        );
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let handle = ctl.start(rx).unwrap();
        assert_eq!(handle.thread().name(), Some("node-lease"));
        assert!(server.wait_for(Duration::from_secs(5), |r| r
            .iter()
            .filter(|r| r.method == "PUT")
            .count()
            >= 2));
        drop(tx);
        handle.join().unwrap();
    }

    #[test]
    fn shutdown_interrupts_the_ensure_backoff() {
        let server = TestServer::start(|_| Reply::status(500, "InternalError", "down"));
        let ctl = controller(&server, known_uid());
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let handle = ctl.start(rx).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        drop(tx);
        handle.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
