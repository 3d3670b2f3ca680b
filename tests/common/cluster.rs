//! The kube-apiserver double (tests/apiserver) as a process and a tiny admin
//! client of it, shared by tests/cluster.rs, tests/kubelet_api.rs and
//! tests/probes.rs, with the pod JSON helpers they have in common.

#![allow(dead_code)] // each test binary compiles this shared module and uses only part of it

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};

use super::*;

// --- the API server double --------------------------------------------------------

/// target/<profile>/apiserver-double, next to the rkubelet binary cargo
/// built (not `$RKUBELET_TEST_BIN`, which may live anywhere).
pub fn double_bin_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rkubelet"))
        .parent()
        .expect("rkubelet binary has a directory")
        .join("apiserver-double")
}

pub fn newest_mtime(p: &Path) -> SystemTime {
    let Ok(meta) = fs::metadata(p) else {
        return SystemTime::UNIX_EPOCH;
    };
    let mut t = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    if meta.is_dir() {
        for e in fs::read_dir(p).into_iter().flatten().flatten() {
            t = t.max(newest_mtime(&e.path()));
        }
    }
    t
}

/// The double's binary, built once per test run when missing or stale
/// (`cargo test` builds only this package's binaries for its tests).
pub fn double_bin() -> PathBuf {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = double_bin_path();
        let src = repo_dir().join("tests/apiserver");
        let newest = newest_mtime(&src.join("src")).max(newest_mtime(&src.join("Cargo.toml")));
        let built = fs::metadata(&bin).and_then(|m| m.modified()).ok();
        if built.is_some_and(|b| b >= newest) {
            return Ok(bin);
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        eprintln!(
            "building the apiserver double ({} is missing or older than tests/apiserver)",
            bin.display()
        );
        let out = Command::new(&cargo)
            .args(["build", "--release", "-p", "rkubelet-apiserver-double"])
            .current_dir(repo_dir())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {cargo}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build --release -p rkubelet-apiserver-double failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if !bin.is_file() {
            return Err(format!("{} still missing after the build", bin.display()));
        }
        Ok(bin)
    })
    .clone()
    .unwrap_or_else(|e| panic!("the apiserver double is needed: {e}"))
}

/// The API server double as a process; killing it is a real API outage, and
/// starting it again with the same dir and port keeps every object.
pub struct Double {
    pub dir: PathBuf,
    pub port: u16,
    child: Option<Child>,
    /// Called (before the kill) when the double is dropped during a panic.
    dump: Option<fn(&Double)>,
    /// The control-plane release the double emulates (`--emulate-version`);
    /// None: its default, the newest.
    pub version: Option<String>,
    /// Its `--feature-gates`, e.g. `InPlacePodVerticalScaling=true`.
    pub feature_gates: Option<String>,
}

impl Double {
    /// Emulates the release in `RKUBELET_DOUBLE_VERSION` (e.g. `1.22`) when
    /// set, so a whole run can be pointed at an older control plane.
    pub fn new(dir: PathBuf, port: u16) -> Double {
        let version = std::env::var("RKUBELET_DOUBLE_VERSION").ok();
        Double::with_version(dir, port, version.as_deref().filter(|v| !v.is_empty()))
    }

    /// A double emulating control-plane release `version` (`1.22` … `1.34`).
    pub fn with_version(dir: PathBuf, port: u16, version: Option<&str>) -> Double {
        let mut d = Double {
            dir,
            port,
            child: None,
            dump: None,
            version: version.map(String::from),
            feature_gates: None,
        };
        d.start();
        d
    }

    /// A double emulating `version` with `--feature-gates gates`.
    pub fn with_gates(dir: PathBuf, port: u16, version: &str, gates: &str) -> Double {
        let mut d = Double {
            dir,
            port,
            child: None,
            dump: None,
            version: Some(version.to_string()),
            feature_gates: Some(gates.to_string()),
        };
        d.start();
        d
    }

    /// What to print about the double when a test fails.
    pub fn with_dump(mut self, dump: fn(&Double)) -> Double {
        self.dump = Some(dump);
        self
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn start(&mut self) {
        assert!(self.child.is_none(), "the double already runs");
        fs::create_dir_all(&self.dir).unwrap();
        let banner = self.dir.join("double.stdout");
        let _ = fs::remove_file(&banner);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("double.log"))
            .unwrap();
        let child = Command::new(double_bin())
            .arg("--dir")
            .arg(&self.dir)
            .args(["--port", &self.port.to_string(), "--node-name", NODE])
            .args(
                self.version
                    .iter()
                    .flat_map(|v| ["--emulate-version", v.as_str()]),
            )
            .args(
                self.feature_gates
                    .iter()
                    .flat_map(|g| ["--feature-gates", g.as_str()]),
            )
            .stdin(Stdio::null())
            .stdout(fs::File::create(&banner).unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn apiserver-double");
        self.child = Some(child);
        let want = format!("LISTENING {}", self.url());
        let ok = poll(secs(15), || {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "apiserver-double exited at start ({st}):\n{}",
                    fs::read_to_string(self.dir.join("double.log")).unwrap_or_default()
                );
            }
            fs::read_to_string(&banner)
                .unwrap_or_default()
                .contains(&want)
                .then_some(())
        });
        assert!(
            ok.is_some(),
            "apiserver-double did not print {want:?} within 15 s"
        );
    }

    /// SIGKILL: an abrupt outage.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn audit(&self) -> Vec<Value> {
        fs::read_to_string(self.dir.join("audit.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Double {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(dump) = self.dump {
                dump(self);
            }
        }
        self.kill();
    }
}

// --- a tiny admin client -------------------------------------------------------------

pub struct Api {
    agent: ureq::Agent,
    base: String,
    token: String,
}

impl Api {
    pub fn new(dir: &Path, port: u16) -> Api {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(dir.join("ca.crt")).expect("read ca.crt"))
            .unwrap();
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        Api {
            agent: ureq::AgentBuilder::new()
                .tls_config(Arc::new(tls))
                .timeout_connect(Duration::from_secs(2))
                .timeout(Duration::from_secs(10))
                .build(),
            base: format!("https://127.0.0.1:{port}"),
            token: fs::read_to_string(dir.join("admin-token"))
                .expect("read admin-token")
                .trim()
                .to_string(),
        }
    }

    /// One request: (status, body as JSON or as a string), or the transport error.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value), String> {
        let r = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set("User-Agent", "rk-cluster-test/1")
            .set("Authorization", &format!("Bearer {}", self.token));
        let (code, text) = send(r, method, path, body)?;
        Ok((
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// A strategic merge patch (what `kubectl patch` sends by default),
    /// which must answer 200.
    pub fn strategic_patch(&self, path: &str, body: &Value) -> Value {
        let r = self
            .agent
            .request("PATCH", &format!("{}{path}", self.base))
            .set("User-Agent", "rk-cluster-test/1")
            .set("Authorization", &format!("Bearer {}", self.token));
        let ct = "application/strategic-merge-patch+json";
        match send_typed(r, "PATCH", path, Some(body), ct) {
            Ok((200, text)) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            other => panic!("PATCH {path}: {other:?}"),
        }
    }

    /// A request that must answer one of `want` (retried for up to 20 s on
    /// transport errors and 5xx, as any client would).
    pub fn must(&self, method: &str, path: &str, body: Option<&Value>, want: &[u16]) -> Value {
        let mut last = String::new();
        let got = poll(secs(20), || match self.call(method, path, body) {
            Ok((c, v)) if want.contains(&c) => Some(v),
            Ok((c, v)) if c >= 500 => {
                last = format!("{c}: {v}");
                None
            }
            Ok((c, v)) => panic!("{method} {path}: {c} (wanted {want:?}): {v}"),
            Err(e) => {
                last = e;
                None
            }
        });
        got.unwrap_or_else(|| {
            panic!("{method} {path}: no answer in {want:?} within 20 s; last: {last}")
        })
    }

    /// GET: Some(object) on 200, None on 404 or any error.
    pub fn get(&self, path: &str) -> Option<Value> {
        match self.call("GET", path, None) {
            Ok((200, v)) => Some(v),
            _ => None,
        }
    }

    /// GET that tells 404 apart from errors: Ok(None) when the object is gone.
    pub fn get_or_gone(&self, path: &str) -> Result<Option<Value>, String> {
        match self.call("GET", path, None)? {
            (200, v) => Ok(Some(v)),
            (404, _) => Ok(None),
            (c, v) => Err(format!("GET {path}: {c}: {v}")),
        }
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        self.get(&pod_path(name))
    }

    pub fn node(&self) -> Option<Value> {
        self.get(&format!("/api/v1/nodes/{NODE}"))
    }

    pub fn lease(&self) -> Option<Value> {
        self.get(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
        ))
    }

    pub fn create_pod(&self, pod: &Value) -> Value {
        self.must("POST", "/api/v1/namespaces/default/pods", Some(pod), &[201])
    }

    /// core/v1 events about the object named `name` in `ns`.
    pub fn events_for(&self, ns: &str, name: &str) -> Vec<Value> {
        self.get(&format!("/api/v1/namespaces/{ns}/events"))
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["involvedObject"]["name"] == name)
            .collect()
    }

    pub fn fault(&self, v: Value) {
        self.must("POST", "/__double/faults", Some(&v), &[200]);
    }

    pub fn pending_faults(&self) -> usize {
        self.get("/__double/faults")
            .and_then(|v| v["faults"].as_array().map(Vec::len))
            .unwrap_or(usize::MAX)
    }
}

/// Sends `r` (with `body` as JSON): (status, body text), or the transport error.
pub fn send(
    r: ureq::Request,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, String), String> {
    // PATCH bodies are merge patches, as `kubectl patch --type=merge` sends.
    let content_type = if method == "PATCH" {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    send_typed(r, method, path, body, content_type)
}

/// As [`send`], with the body's `content_type`.
pub fn send_typed(
    r: ureq::Request,
    method: &str,
    path: &str,
    body: Option<&Value>,
    content_type: &str,
) -> Result<(u16, String), String> {
    let res = match body {
        Some(b) => r
            .set("Content-Type", content_type)
            .send_string(&b.to_string()),
        None => r.call(),
    };
    let resp = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(format!("{method} {path}: {e}")),
    };
    let code = resp.status();
    let text = resp
        .into_string()
        .map_err(|e| format!("{method} {path}: {e}"))?;
    Ok((code, text))
}

/// A KubeletConfiguration for `env` (its logs, healthz port, manifests and
/// containerd) with `extra` lines appended.
/// The flags of a cluster-mode kubelet: `config`, the double's kubeconfig
/// for NODE, the env's root dir, --v 2, then `extra`.
pub fn cluster_kubelet_args(
    double: &Double,
    env: &Env,
    config: &Path,
    extra: &[&str],
) -> Vec<String> {
    let kubeconfig = double.dir.join(format!("kubelet-{NODE}.kubeconfig"));
    let mut args: Vec<String> = vec![
        "--config".into(),
        config.display().to_string(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--root-dir".into(),
        env.root.display().to_string(),
        "--hostname-override".into(),
        NODE.into(),
        "--v".into(),
        "2".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub fn kubelet_config(env: &Env, extra: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         podLogsDir: {}\n\
         healthzPort: {}\n\
         staticPodPath: {}\n\
         containerRuntimeEndpoint: unix://{}\n\
         fileCheckFrequency: 1s\n\
         syncFrequency: 10s\n\
         failSwapOn: false\n\
         cgroupRoot: {}\n\
         {IMAGE_GC_OFF}\
         {extra}",
        env.pod_logs.display(),
        env.port,
        env.manifests.display(),
        env.sock,
        env.cgroup_root()
    )
}

/// A claim in `default` that asks for 1Gi of `pv` (ReadWriteOnce), made
/// Bound as the PV controller would.
pub fn bound_claim(api: &Api, claim: &str, pv: &str, extra_meta: Value) {
    let mut meta = json!({"name": claim});
    if let (Some(m), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
        m.extend(extra.clone());
    }
    api.must(
        "POST",
        "/api/v1/namespaces/default/persistentvolumeclaims",
        Some(
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
                     "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv,
                              "resources": {"requests": {"storage": "1Gi"}}}}),
        ),
        &[201],
    );
    api.must(
        "PATCH",
        &format!("/api/v1/namespaces/default/persistentvolumeclaims/{claim}/status"),
        Some(&json!({"status": {"phase": "Bound"}})),
        &[200],
    );
}

pub fn pod_path(name: &str) -> String {
    format!("/api/v1/namespaces/default/pods/{name}")
}

/// A pod bound to the node, one busybox container "c" running `script`.
pub fn api_pod(name: &str, script: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "c",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
            }],
        },
    })
}

pub fn condition<'a>(obj: &'a Value, ty: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

pub fn condition_true(obj: &Value, ty: &str) -> bool {
    condition(obj, ty).is_some_and(|c| c["status"] == "True")
}

pub fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

pub fn uid(obj: &Value) -> String {
    obj["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

pub fn pretty_status(pod: &Value) -> String {
    serde_json::to_string_pretty(&pod["status"]).unwrap_or_default()
}

/// A pod that runs and is Ready (the kubelet's own status).
pub fn running_ready(pod: &Value) -> bool {
    phase(pod) == "Running"
        && condition_true(pod, "Ready")
        && pod["status"]["containerStatuses"][0]["ready"] == true
}

// --- one test's cluster ----------------------------------------------------------------

pub fn audit_line(e: &Value) -> String {
    format!(
        "{} {} {} {} {}/{} {} -> {} ({})",
        e["ts"].as_str().unwrap_or(""),
        e["user"].as_str().unwrap_or(""),
        e["verb"].as_str().unwrap_or(""),
        e["resource"].as_str().unwrap_or(""),
        e["namespace"].as_str().unwrap_or(""),
        e["name"].as_str().unwrap_or(""),
        e["subresource"].as_str().unwrap_or(""),
        e["code"],
        e["userAgent"].as_str().unwrap_or("")
    )
}

/// On failure: the tail of the double's audit log (without admin reads) and of its log.
pub fn dump_double(d: &Double) {
    // The test's own polling (admin reads) would drown the rest.
    let audit: Vec<Value> = d
        .audit()
        .into_iter()
        .filter(|e| !(e["user"] == "admin" && (e["verb"] == "get" || e["verb"] == "list")))
        .collect();
    let from = audit.len().saturating_sub(60);
    eprintln!("\n===== last lines of the double's audit log (without admin reads) =====");
    for e in &audit[from..] {
        eprintln!("{}", audit_line(e));
    }
    let log = fs::read_to_string(d.dir.join("double.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    if !lines.is_empty() {
        eprintln!(
            "===== last lines of the double's log =====\n{}",
            lines[lines.len().saturating_sub(20)..].join("\n")
        );
    }
}

// --- one test's cluster -------------------------------------------------------------

/// One test's world: the double (dropped first: it prints the audit tail on
/// failure), the admin client, and the Env (containerd, rkubelet, dirs).
pub struct Cluster {
    pub double: Double,
    pub api: Api,
    pub env: Env,
    pub config: PathBuf,
}

impl Cluster {
    /// Test number `n` picks the bridge, subnet and ports (unique per test).
    pub fn new(name: &str, n: u32) -> Cluster {
        Cluster::with_double(name, n, Double::new)
    }

    /// As [`Cluster::new`], the double emulating control plane `version`
    /// (`1.22` … `1.34`).
    pub fn with_version(name: &str, n: u32, version: &str) -> Cluster {
        Cluster::with_double(name, n, |dir, port| {
            Double::with_version(dir, port, Some(version))
        })
    }

    /// As [`Cluster::with_version`], with the double's `--feature-gates`.
    pub fn with_gates(name: &str, n: u32, version: &str, gates: &str) -> Cluster {
        Cluster::with_double(name, n, |dir, port| {
            Double::with_gates(dir, port, version, gates)
        })
    }

    fn with_double(name: &str, n: u32, double: impl FnOnce(PathBuf, u16) -> Double) -> Cluster {
        let env = Env::new(name, n);
        let double = double(env.dir.join("api"), 21000 + n as u16).with_dump(dump_double);
        let api = Api::new(&double.dir, double.port);
        let config = env.dir.join("cluster-config.yaml");
        fs::write(&config, kubelet_config(&env, "")).unwrap();
        Cluster {
            double,
            api,
            env,
            config,
        }
    }

    pub fn kubelet_args(&self) -> Vec<String> {
        cluster_kubelet_args(&self.double, &self.env, &self.config, &[])
    }

    pub fn start_kubelet(&mut self) {
        let args = self.kubelet_args();
        self.env.start_kubelet_with_args(&args);
    }

    /// Polls `f` while checking that rkubelet is alive.
    pub fn eventually<T>(
        &mut self,
        timeout: Duration,
        what: &str,
        mut f: impl FnMut(&Api) -> Option<T>,
    ) -> T {
        let (env, api) = (&mut self.env, &self.api);
        eventually(timeout, what, || {
            env.assert_kubelet_alive();
            f(api)
        })
    }

    pub fn wait_node_ready(&mut self, timeout: Duration) -> Value {
        let mut last = Value::Null;
        let got = poll(timeout, || {
            self.env.assert_kubelet_alive();
            let n = self.api.node()?;
            last = n.clone();
            condition_true(&n, "Ready").then_some(n)
        });
        got.unwrap_or_else(|| panic!("node {NODE} not Ready within {timeout:?}; last seen: {last}"))
    }

    /// Waits until the pod runs and is Ready in the API; returns it.
    pub fn wait_pod_ready(&mut self, name: &str, timeout: Duration) -> Value {
        self.wait_pod(name, timeout, "Running+Ready", running_ready)
    }

    /// Waits until the API's copy of the pod satisfies `pred`; returns it.
    /// On timeout, panics with `what`, the last status and rkubelet's log.
    pub fn wait_pod(
        &mut self,
        name: &str,
        timeout: Duration,
        what: &str,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        let got = poll(timeout, || {
            self.env.assert_kubelet_alive();
            let p = self.api.pod(name)?;
            last = p.clone();
            pred(&p).then_some(p)
        });
        got.unwrap_or_else(|| {
            panic!(
                "pod {name}: not {what} in the API within {timeout:?}; last status:\n{}\nrkubelet log tail:\n{}",
                pretty_status(&last),
                self.env.log_tail(60)
            )
        })
    }

    /// Waits until the double has no pending faults left (rkubelet ran into
    /// them all) and says how long that took.
    pub fn wait_faults_consumed(&mut self, what: &str, timeout: Duration) -> Option<()> {
        let t0 = std::time::Instant::now();
        let done = poll(timeout, || {
            self.env.assert_kubelet_alive();
            (self.api.pending_faults() == 0).then_some(())
        });
        eprintln!(
            "{what} consumed: {} after {:?}",
            done.is_some(),
            t0.elapsed()
        );
        done
    }

    /// The node lease's renewTime.
    pub fn renew_time(&self) -> Option<String> {
        self.api.lease()?["spec"]["renewTime"]
            .as_str()
            .map(String::from)
    }

    /// Waits for a lease renewTime later than `after` (seconds since the epoch).
    pub fn wait_renewed_after(&mut self, after: f64, timeout: Duration) -> String {
        self.eventually(
            timeout,
            &format!("the lease renewed after {after:.6}"),
            |api| {
                let t = api.lease()?["spec"]["renewTime"].as_str()?.to_string();
                (rfc3339_secs(&t)? > after).then_some(t)
            },
        )
    }
}

/// Now, in seconds since the epoch.
pub fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// "2026-11-22T18:45:34.393398Z" (or without the fraction) as seconds since the epoch.
pub fn rfc3339_secs(s: &str) -> Option<f64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if d.len() != 3 || t.len() != 3 {
        return None;
    }
    // Days from the civil date (H. Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let frac: f64 = if frac.is_empty() {
        0.0
    } else {
        format!("0.{frac}").parse().ok()?
    };
    Some((days * 86400 + t[0] * 3600 + t[1] * 60 + t[2]) as f64 + frac)
}

/// The certificatesigningrequests collection.
pub const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// The cluster flags with `--kubeconfig` moved to a file that does not exist
/// yet, plus the bootstrap kubeconfig and a cert dir under the test's dir.
pub fn bootstrap_args(cl: &Cluster) -> (Vec<String>, PathBuf, PathBuf) {
    let kubeconfig = cl.env.dir.join("kubelet.conf");
    let cert_dir = cl.env.dir.join("pki");
    let boot = cl.double.dir.join("bootstrap-kubelet.kubeconfig");
    let mut args = cluster_kubelet_args(&cl.double, &cl.env, &cl.config, &[]);
    let at = args
        .iter()
        .position(|a| a == "--kubeconfig")
        .expect("--kubeconfig");
    args[at + 1] = kubeconfig.display().to_string();
    args.extend([
        "--bootstrap-kubeconfig".to_string(),
        boot.display().to_string(),
        "--cert-dir".to_string(),
        cert_dir.display().to_string(),
    ]);
    (args, kubeconfig, cert_dir)
}

/// Every CSR in the double.
pub fn csrs(api: &Api) -> Vec<Value> {
    api.get(CSRS)
        .and_then(|l| l["items"].as_array().cloned())
        .unwrap_or_default()
}
