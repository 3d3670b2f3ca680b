//! A stateful fake apiserver for Secrets and ConfigMaps, on [`TestServer`]:
//! GET, LIST and WATCH by `metadata.name` field selector, with events pushed
//! to open watches as objects change; optional TLS with client certificates.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rkubelet_util::lock;
use serde_json::{json, Value};

use super::server::{Recorded, Reply, TestServer};

/// (resource, namespace, name).
type Key = (String, String, String);

#[derive(Default)]
struct State {
    objects: HashMap<Key, Value>,
    rv: u64,
    watchers: Vec<(Key, Sender<Option<Vec<u8>>>)>,
    /// Answer this many upcoming watches with an ERROR 410 event.
    gone: usize,
    list_delay: Duration,
    /// Watch streams being served, by object name.
    open: HashMap<String, usize>,
}

pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<State>>,
    server: TestServer,
}

impl FakeApi {
    pub fn start() -> FakeApi {
        let state = Arc::<Mutex<State>>::default();
        let st = state.clone();
        FakeApi::new(state, TestServer::start(move |r| answer(&st, r)))
    }

    pub fn start_tls(cfg: Arc<rustls::ServerConfig>) -> FakeApi {
        let state = Arc::<Mutex<State>>::default();
        let st = state.clone();
        FakeApi::new(state, TestServer::start_tls(cfg, move |r| answer(&st, r)))
    }

    fn new(state: Arc<Mutex<State>>, server: TestServer) -> FakeApi {
        FakeApi {
            url: server.url.clone(),
            state,
            server,
        }
    }

    /// Creates or replaces an object (`extra` merged into it) and tells watchers.
    pub fn put(&self, resource: &str, ns: &str, name: &str, extra: Value) {
        let mut st = lock(&self.state);
        st.rv += 1;
        let mut obj = json!({
            "metadata": {"name": name, "namespace": ns, "resourceVersion": st.rv.to_string()},
        });
        if let (Some(o), Some(e)) = (obj.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                o.insert(k.clone(), v.clone());
            }
        }
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        let kind = if st.objects.insert(key.clone(), obj.clone()).is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        notify(&mut st, &key, &json!({"type": kind, "object": obj}));
    }

    pub fn delete(&self, resource: &str, ns: &str, name: &str) {
        let mut st = lock(&self.state);
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        if let Some(mut obj) = st.objects.remove(&key) {
            st.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
            notify(&mut st, &key, &json!({"type": "DELETED", "object": obj}));
        }
    }

    /// Ends every open watch: cleanly (terminating chunk) or by dropping the connection.
    pub fn close_watches(&self, abrupt: bool) {
        let mut st = lock(&self.state);
        for (_, tx) in st.watchers.drain(..) {
            if abrupt {
                let _ = tx.send(None);
            }
        }
    }

    pub fn fail_next_watches_gone(&self, n: usize) {
        lock(&self.state).gone = n;
    }

    pub fn set_list_delay(&self, d: Duration) {
        lock(&self.state).list_delay = d;
    }

    /// Open watch streams (for `name` when given).
    pub fn open_watches(&self, name: Option<&str>) -> usize {
        let st = lock(&self.state);
        st.open
            .iter()
            .filter(|(k, _)| name.is_none_or(|n| k.as_str() == n))
            .map(|(_, n)| n)
            .sum()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.server.requests()
    }

    /// Requests whose path and query contain every one of `parts`.
    pub fn count(&self, parts: &[&str]) -> usize {
        self.server
            .count(|r| parts.iter().all(|s| r.path.contains(s)))
    }

    /// Waits up to 5 s for `cond`.
    pub fn wait(&self, what: &str, cond: impl Fn(&FakeApi) -> bool) {
        let until = Instant::now() + Duration::from_secs(5);
        while !cond(self) {
            assert!(Instant::now() < until, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        // The server stops as its field drops, after this.
        self.close_watches(true);
    }
}

fn notify(st: &mut State, key: &Key, event: &Value) {
    let line = format!("{event}\n").into_bytes();
    st.watchers
        .retain(|(k, tx)| k != key || tx.send(Some(line.clone())).is_ok());
}

/// Paths are `api/v1/namespaces/<ns>/<resource>[/<name>]`.
fn answer(state: &Arc<Mutex<State>>, req: &Recorded) -> Reply {
    let (p, _) = req.path.split_once('?').unwrap_or((&req.path, ""));
    let segs: Vec<&str> = p.trim_matches('/').split('/').collect();
    let (ns, resource) = match segs.as_slice() {
        ["api", "v1", "namespaces", ns, res, ..] => (ns.to_string(), res.to_string()),
        _ => return Reply::json(404, &status(404, "NotFound", "no such path")),
    };
    let name = match (segs.get(5), req.query("fieldSelector")) {
        (Some(n), _) => n.to_string(),
        (None, Some(fs)) => fs.trim_start_matches("metadata.name%3D").to_string(),
        (None, None) => return Reply::json(400, &status(400, "BadRequest", "selector")),
    };
    let key = (resource.clone(), ns, name.clone());
    if segs.len() > 5 {
        return match lock(state).objects.get(&key) {
            Some(o) => Reply::json(200, o),
            None => Reply::json(
                404,
                &status(404, "NotFound", &format!("{resource} {name:?} not found")),
            ),
        };
    }
    if req.query("watch") != Some("1") {
        let delay = lock(state).list_delay;
        thread::sleep(delay);
        let st = lock(state);
        let items: Vec<Value> = st.objects.get(&key).cloned().into_iter().collect();
        return Reply::json(
            200,
            &json!({"metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
        );
    }
    let mut st = lock(state);
    if st.gone > 0 {
        st.gone -= 1;
        let ev =
            json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
        return Reply::events(&[ev]);
    }
    let (tx, rx) = crossbeam_channel::bounded(64);
    st.watchers.push((key, tx));
    *st.open.entry(name.clone()).or_default() += 1;
    let state = state.clone();
    Reply::Stream {
        chunks: rx,
        on_end: Box::new(move || {
            if let Some(n) = lock(&state).open.get_mut(&name) {
                *n -= 1;
            }
        }),
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "reason": reason, "message": message, "code": code})
}
