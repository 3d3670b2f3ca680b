//! A stateful fake apiserver on 127.0.0.1 for Secrets and ConfigMaps:
//! GET, LIST and WATCH by `metadata.name` field selector, with events pushed
//! to open watches as objects change; optional TLS with client certificates.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rkubelet_util::lock;
use serde_json::{json, Value};

/// (resource, namespace, name).
type Key = (String, String, String);

#[derive(Default)]
struct State {
    objects: HashMap<Key, Value>,
    rv: u64,
    watchers: Vec<(Key, Sender<Option<Vec<u8>>>)>,
    /// Path and query of every request, with its Authorization header.
    requests: Vec<(String, Option<String>)>,
    /// Answer this many upcoming watches with an ERROR 410 event.
    gone: usize,
    list_delay: Duration,
    /// Watch streams being served, by object name.
    open: HashMap<String, usize>,
}

pub struct FakeApi {
    pub url: String,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
}

impl FakeApi {
    pub fn start() -> FakeApi {
        Self::start_inner(None)
    }

    pub fn start_tls(cfg: Arc<rustls::ServerConfig>) -> FakeApi {
        Self::start_inner(Some(cfg))
    }

    fn start_inner(tls: Option<Arc<rustls::ServerConfig>>) -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let api = FakeApi {
            url: format!("{scheme}://{addr}"),
            state: Arc::default(),
            stop: Arc::default(),
            addr,
        };
        let (state, stop) = (api.state.clone(), api.stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (state, tls) = (state.clone(), tls.clone());
                thread::spawn(move || serve(conn, tls, &state));
            }
        });
        api
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

    pub fn requests(&self) -> Vec<(String, Option<String>)> {
        lock(&self.state).requests.clone()
    }

    /// Requests whose path and query contain every one of `parts`.
    pub fn count(&self, parts: &[&str]) -> usize {
        self.requests()
            .iter()
            .filter(|(p, _)| parts.iter().all(|s| p.contains(s)))
            .count()
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
        self.stop.store(true, Ordering::SeqCst);
        self.close_watches(true);
        let _ = TcpStream::connect(self.addr);
    }
}

fn notify(st: &mut State, key: &Key, event: &Value) {
    let line = format!("{event}\n").into_bytes();
    st.watchers
        .retain(|(k, tx)| k != key || tx.send(Some(line.clone())).is_ok());
}

fn serve(tcp: TcpStream, tls: Option<Arc<rustls::ServerConfig>>, state: &Mutex<State>) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
    match tls {
        None => handle(tcp, state),
        Some(cfg) => {
            let Ok(mut conn) = rustls::ServerConnection::new(cfg) else {
                return;
            };
            let mut tcp = tcp;
            while conn.is_handshaking() {
                if conn.complete_io(&mut tcp).is_err() {
                    return;
                }
            }
            handle(rustls::StreamOwned::new(conn, tcp), state);
        }
    }
}

/// One request per connection, as the client sends `Connection: close`.
fn handle<S: Read + Write>(stream: S, state: &Mutex<State>) {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut auth = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("authorization") {
                auth = Some(v.trim().to_string());
            }
        }
    }
    lock(state).requests.push((path.clone(), auth));
    let (p, q) = path.split_once('?').unwrap_or((&path, ""));
    let query = |k: &str| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(key, _)| *key == k)
            .map(|(_, v)| v.to_string())
    };
    let segs: Vec<&str> = p.trim_matches('/').split('/').collect();
    let w = r.get_mut();
    // api/v1/namespaces/<ns>/<resource>[/<name>]
    let (ns, resource) = match segs.as_slice() {
        ["api", "v1", "namespaces", ns, res, ..] => (ns.to_string(), res.to_string()),
        _ => return write_json(w, 404, &status(404, "NotFound", "no such path")),
    };
    let name = match (segs.get(5), query("fieldSelector")) {
        (Some(n), _) => n.to_string(),
        (None, Some(fs)) => fs.trim_start_matches("metadata.name%3D").to_string(),
        (None, None) => return write_json(w, 400, &status(400, "BadRequest", "selector")),
    };
    let key = (resource.clone(), ns, name.clone());
    if segs.len() > 5 {
        let obj = lock(state).objects.get(&key).cloned();
        return match obj {
            Some(o) => write_json(w, 200, &o),
            None => write_json(
                w,
                404,
                &status(404, "NotFound", &format!("{resource} {name:?} not found")),
            ),
        };
    }
    if query("watch").as_deref() != Some("1") {
        let delay = lock(state).list_delay;
        thread::sleep(delay);
        let st = lock(state);
        let items: Vec<Value> = st.objects.get(&key).cloned().into_iter().collect();
        let list = json!({"metadata": {"resourceVersion": st.rv.to_string()}, "items": items});
        drop(st);
        return write_json(w, 200, &list);
    }
    let (tx, rx) = crossbeam_channel::bounded(64);
    let gone = {
        let mut st = lock(state);
        if st.gone > 0 {
            st.gone -= 1;
            true
        } else {
            st.watchers.push((key, tx));
            *st.open.entry(name.clone()).or_default() += 1;
            false
        }
    };
    let head =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
    let head_ok = w.write_all(head.as_bytes()).and_then(|_| w.flush()).is_ok();
    if gone {
        let ev =
            json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")});
        if head_ok {
            let _ = write_chunk(w, format!("{ev}\n").as_bytes());
            let _ = w.write_all(b"0\r\n\r\n");
        }
        return;
    }
    if head_ok {
        stream_events(w, &rx);
    }
    if let Some(n) = lock(state).open.get_mut(&name) {
        *n -= 1;
    }
}

fn stream_events<W: Write>(w: &mut W, rx: &Receiver<Option<Vec<u8>>>) {
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(line)) => {
                if write_chunk(w, &line).is_err() {
                    return;
                }
            }
            Ok(None) => return, // abrupt close
            // A blank line (skipped by watch readers) notices a departed client.
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                if write_chunk(w, b"\n").is_err() {
                    return;
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                let _ = w.write_all(b"0\r\n\r\n").and_then(|_| w.flush());
                return;
            }
        }
    }
}

fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> std::io::Result<()> {
    let mut chunk = format!("{:x}\r\n", data.len()).into_bytes();
    chunk.extend_from_slice(data);
    chunk.extend_from_slice(b"\r\n");
    w.write_all(&chunk)?;
    w.flush()
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "reason": reason, "message": message, "code": code})
}

fn write_json<W: Write>(w: &mut W, code: u16, body: &Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let _ = w
        .write_all(head.as_bytes())
        .and_then(|_| w.write_all(body.as_bytes()))
        .and_then(|_| w.flush());
}
