//! A scripted plain-HTTP server on 127.0.0.1 for the node status and node
//! lease tests: records every request and answers from a handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::{Client, RestConfig};

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    /// Without the query, which is in `query`.
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: String,
}

impl Recorded {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("request body is JSON")
    }
}

pub type Handler = Box<dyn Fn(&Recorded) -> (u16, Value) + Send + Sync>;

pub struct FakeServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub fn start(handler: Handler) -> FakeServer {
        let server = tiny_http::Server::http("127.0.0.1:0").expect("bind");
        let addr = server.server_addr().to_ip().expect("ip address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (reqs, stopped) = (requests.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(20)) else {
                    continue;
                };
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let content_type = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Content-Type"))
                    .map(|h| h.value.to_string())
                    .unwrap_or_default();
                let (path, query) = req.url().split_once('?').unwrap_or((req.url(), ""));
                let rec = Recorded {
                    method: req.method().to_string(),
                    path: path.to_string(),
                    query: query.to_string(),
                    content_type,
                    body,
                };
                reqs.lock().unwrap().push(rec.clone());
                let (code, reply) = handler(&rec);
                let header =
                    tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let resp = tiny_http::Response::from_string(reply.to_string())
                    .with_status_code(code)
                    .with_header(header);
                let _ = req.respond(resp);
            }
        });
        FakeServer {
            url: format!("http://{addr}"),
            requests,
            stop,
            handle: Some(handle),
        }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// `"METHOD path"` of every request so far.
    pub fn calls(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// Waits until `pred` holds for the requests so far.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[Recorded]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if pred(&self.requests()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        pred(&self.requests())
    }

    pub fn client(&self) -> Client {
        let mut cfg = RestConfig::new(self.url.clone());
        cfg.qps = -1.0;
        cfg.timeout = Duration::from_secs(5);
        Client::new(cfg, std::sync::Arc::new(())).expect("client")
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A v1 Status error body.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "code": code, "reason": reason, "message": message})
}
