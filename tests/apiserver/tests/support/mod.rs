//! Shared by the integration tests: spawns the double as a process and
//! drives it with a minimal synchronous client (ureq + rustls).
#![allow(dead_code)] // each test binary compiles this shared module and uses only part of it

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

pub struct Double {
    pub child: Child,
    pub dir: PathBuf,
    pub url: String,
    /// The directory `spawn` made for it, removed after the child is gone.
    _tmp: Option<tempfile::TempDir>,
}

impl Drop for Double {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh directory for a double; `name` begins its name.
pub fn tmpdir(name: &str) -> tempfile::TempDir {
    tempfile::TempDir::with_prefix(format!("apid-{name}-")).unwrap()
}

pub fn spawn_in(dir: &Path, extra: &[&str]) -> Double {
    let mut child = Command::new(env!("CARGO_BIN_EXE_apiserver-double"))
        .arg("--dir")
        .arg(dir)
        .args(["--node-name", "node-a", "--node-name", "node-b"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn apiserver-double");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("bad banner {:?}", line))
        .to_string();
    Double {
        child,
        dir: dir.to_path_buf(),
        url,
        _tmp: None,
    }
}

pub fn spawn(name: &str, extra: &[&str]) -> Double {
    let tmp = tmpdir(name);
    let mut d = spawn_in(tmp.path(), extra);
    d._tmp = Some(tmp);
    d
}

pub fn tls(dir: &Path, client: Option<&str>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.crt")).unwrap())
        .unwrap();
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match client {
        Some(base) => {
            let certs =
                vec![CertificateDer::from_pem_file(dir.join(format!("{}.crt", base))).unwrap()];
            let key = PrivateKeyDer::from_pem_file(dir.join(format!("{}.key", base))).unwrap();
            b.with_client_auth_cert(certs, key).unwrap()
        }
        None => b.with_no_client_auth(),
    })
}

pub struct Client {
    pub agent: ureq::Agent,
    pub base: String,
    pub token: Option<String>,
}

impl Client {
    pub fn cert(d: &Double, base: &str) -> Client {
        Client {
            agent: ureq::AgentBuilder::new()
                .tls_config(tls(&d.dir, Some(base)))
                .timeout(Duration::from_secs(20))
                .build(),
            base: d.url.clone(),
            token: None,
        }
    }
    pub fn kubelet(d: &Double) -> Client {
        Self::cert(d, "kubelet-node-a")
    }
    pub fn admin(d: &Double) -> Client {
        Self::cert(d, "admin")
    }
    pub fn anonymous(d: &Double) -> Client {
        Client {
            agent: ureq::AgentBuilder::new()
                .tls_config(tls(&d.dir, None))
                .build(),
            base: d.url.clone(),
            token: None,
        }
    }
    pub fn token(d: &Double, file: &str) -> Client {
        let mut c = Self::anonymous(d);
        c.token = Some(
            std::fs::read_to_string(d.dir.join(file))
                .unwrap()
                .trim()
                .to_string(),
        );
        c
    }

    pub fn req(
        &self,
        method: &str,
        path: &str,
        ct: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value, Option<String>) {
        let mut r = self
            .agent
            .request(method, &format!("{}{}", self.base, path))
            .set("User-Agent", "apid-test/1.0");
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {}", t));
        }
        if let Some(ct) = ct {
            r = r.set("Content-Type", ct);
        }
        let res = match body {
            Some(b) => r.send_string(&b.to_string()),
            None => r.call(),
        };
        let resp = match res {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(e) => panic!("{} {}: {}", method, path, e),
        };
        let code = resp.status();
        let retry = resp.header("Retry-After").map(String::from);
        let text = resp.into_string().unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
            retry,
        )
    }
    pub fn get(&self, p: &str) -> (u16, Value) {
        let (c, v, _) = self.req("GET", p, None, None);
        (c, v)
    }
    pub fn post(&self, p: &str, b: Value) -> (u16, Value) {
        let (c, v, _) = self.req("POST", p, Some("application/json"), Some(&b));
        (c, v)
    }
    pub fn put(&self, p: &str, b: Value) -> (u16, Value) {
        let (c, v, _) = self.req("PUT", p, Some("application/json"), Some(&b));
        (c, v)
    }
    pub fn patch(&self, p: &str, ct: &str, b: Value) -> (u16, Value) {
        let (c, v, _) = self.req("PATCH", p, Some(ct), Some(&b));
        (c, v)
    }
    pub fn delete(&self, p: &str, b: Option<Value>) -> (u16, Value) {
        let (c, v, _) = self.req("DELETE", p, Some("application/json"), b.as_ref());
        (c, v)
    }

    /// Collects watch events until `n` arrived, the stream ended, or 10s passed.
    pub fn watch(&self, path: &str, n: usize) -> Vec<Value> {
        let resp = self
            .agent
            .get(&format!("{}{}", self.base, path))
            .timeout(Duration::from_secs(10))
            .call()
            .unwrap();
        let mut out = vec![];
        let mut lines = BufReader::new(resp.into_reader()).lines();
        while out.len() < n {
            match lines.next() {
                Some(Ok(l)) if !l.is_empty() => out.push(serde_json::from_str(&l).unwrap()),
                Some(Ok(_)) => {}
                _ => break,
            }
        }
        out
    }
}

pub fn pod(name: &str, node: Option<&str>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}, {"name": "d", "image": "nginx"}]}});
    if let Some(n) = node {
        p["spec"]["nodeName"] = json!(n);
    }
    p
}

pub fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}
