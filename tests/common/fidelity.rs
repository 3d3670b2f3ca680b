//! What the tests against the fidelity capture share (tests/fidelity.rs,
//! tests/fidelity_writes.rs, tests/fidelity_v134.rs): the capture's files,
//! the pods of its corpora (`statuses.yaml`, `v134.yaml`), the images they
//! name, a cluster that runs them as the capture did, and the field-for-field
//! comparison of a pod's status with upstream's.
//!
//! Fixtures: `<repo>/../shared/fidelity`, or `$RKUBELET_FIDELITY_DIR`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use super::cluster::{rfc3339_secs, uid, Cluster};
use super::*;

/// The capture's namespace, kept as it is.
pub const NS: &str = "fidelity";
/// The image `statuses.yaml` runs: the harness's busybox, tagged so.
pub const E2E_BUSYBOX: &str = "k8s.gcr.io/e2e-test-images/busybox:1.29-1";
/// The image that must stay absent (imagePullPolicy: Never).
pub const NEVER_PULLED: &str = "example.invalid/none:1";

/// `$RKUBELET_FIDELITY_DIR`, or `<repo>/../shared/fidelity`.
pub fn fidelity_dir() -> PathBuf {
    match std::env::var_os("RKUBELET_FIDELITY_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo_dir().join("../shared/fidelity"),
    }
}

/// A fixture file; a missing one fails the test, saying what it needs.
pub fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| {
        panic!(
            "the fidelity fixtures are missing: read {}: {e} (the capture of a real control \
             plane: statuses.yaml and upstream-v1.22/; set RKUBELET_FIDELITY_DIR to the \
             directory that holds them)",
            p.display()
        )
    })
}

pub fn json_file(p: &Path) -> Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", p.display()))
}

pub fn name_of(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap_or("").to_string()
}

pub fn spec_containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect()
}

/// The pods of statuses.yaml, in its order; each must be in namespace NS
/// and run only images this test can provide offline.
pub fn statuses_pods() -> Vec<Value> {
    corpus_pods("statuses.yaml")
}

/// The pods of the corpus `file` (its other objects, the namespace and
/// service account, are left out), in its order; each must be in namespace
/// NS and run only images this test can provide offline.
pub fn corpus_pods(file: &str) -> Vec<Value> {
    let yaml_path = fidelity_dir().join(file);
    let yaml = read(&yaml_path);
    let mut pods = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&yaml) {
        let v = Value::deserialize(doc)
            .unwrap_or_else(|e| panic!("{}: bad YAML: {e}", yaml_path.display()));
        if v["kind"] == "Pod" {
            pods.push(v);
        }
    }
    assert!(!pods.is_empty(), "{}: no pods", yaml_path.display());
    for p in &pods {
        let name = name_of(p);
        assert_eq!(
            p["metadata"]["namespace"], NS,
            "{file}: pod {name} is not in namespace {NS}"
        );
        for c in spec_containers(&p["spec"]) {
            let image = c["image"].as_str().unwrap_or("");
            assert!(
                image == E2E_BUSYBOX || image == NEVER_PULLED,
                "{file}: pod {name} runs image {image:?}, which this test cannot \
                 provide offline (only {E2E_BUSYBOX} and {NEVER_PULLED})"
            );
        }
    }
    pods
}

/// The harness imports its busybox offline; the capture's pods name the
/// e2e image, so it gets that name too. The never-pulled image must be absent.
pub fn provide_images(env: &Env) {
    let list = |env: &Env| -> Vec<String> {
        env.ctr(&["images", "ls", "-q"])
            .unwrap_or_else(|e| panic!("list containerd's images: {e}"))
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    };
    if !list(env).iter().any(|i| i == E2E_BUSYBOX) {
        env.ctr(&["images", "tag", BUSYBOX, E2E_BUSYBOX])
            .unwrap_or_else(|e| panic!("tag {BUSYBOX} as {E2E_BUSYBOX}: {e}"));
    }
    let have = list(env);
    let (tagged, never) = (
        have.contains(&E2E_BUSYBOX.into()),
        have.contains(&NEVER_PULLED.into()),
    );
    assert!(
        tagged,
        "{E2E_BUSYBOX} missing after tagging; containerd has {have:?}"
    );
    assert!(
        !never,
        "{NEVER_PULLED} must be absent (st-neverpull expects ErrImageNeverPull)"
    );
}

/// A cluster as in the capture: the double emulates its control plane,
/// v1.22 (it drops what a v1.22 server drops, and rkubelet adapts to it as
/// to the real one), the images are provided, and `pods` exist in
/// namespace NS, bound, before the kubelet starts. They were bound to the
/// capture's node; here the node is NODE. The kubelet is not started.
pub fn capture_cluster(name: &str, n: u32, pods: &[Value]) -> Cluster {
    capture_cluster_at(name, n, pods, "1.22")
}

/// As [`capture_cluster`], the double emulating control plane `version`.
pub fn capture_cluster_at(name: &str, n: u32, pods: &[Value], version: &str) -> Cluster {
    let cl = Cluster::with_version(name, n, version);
    provide_images(&cl.env);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    cl.api.must("POST", "/api/v1/namespaces", Some(&ns), &[201]);
    for p in pods {
        let mut p = p.clone();
        p["spec"]["nodeName"] = json!(NODE);
        let path = format!("/api/v1/namespaces/{NS}/pods");
        cl.api.must("POST", &path, Some(&p), &[201]);
    }
    cl
}

// --- the comparison --------------------------------------------------------------------

/// The prefix of the server-generated service account token volume.
pub const API_ACCESS: &str = "kube-api-access-";

pub const STATUS_LISTS: [&str; 3] = [
    "initContainerStatuses",
    "containerStatuses",
    "ephemeralContainerStatuses",
];

/// "back-off 20s restarting failed container=c pod=p_ns(UID)" with the
/// delay (which grows with time) and the pod's UID masked.
pub fn mask_backoff(msg: &str, uid: &str) -> String {
    let msg = if uid.is_empty() {
        msg.to_string()
    } else {
        msg.replace(uid, "<uid>")
    };
    match msg.split_once("back-off ") {
        Some((head, tail)) => {
            let rest = tail.split_once(' ').map(|(_, r)| r).unwrap_or("");
            format!("{head}back-off <delay> {rest}")
        }
        None => msg,
    }
}

/// null and absent are the same value in the API's Go types.
pub fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

pub fn show(v: Option<&Value>) -> String {
    present(v).map_or_else(|| "<absent>".to_string(), Value::to_string)
}

/// How a container that upstream restarted is compared.
#[derive(Clone, Copy)]
pub enum Restarts<'a> {
    /// A crash loop, whose progress depends on time: restartCount at least
    /// 1, and the state either upstream's or a CrashLoopBackOff wait with
    /// one of upstream's messages (these, masked by [`mask_backoff`]).
    CrashLoop(Option<&'a BTreeSet<String>>),
    /// Restarts that do not depend on time (a resize that restarts the
    /// container): restartCount and state compared as any field.
    Exact,
}

/// One pod's comparison: the differences.
struct Cmp<'a> {
    pod: String,
    restarts: Restarts<'a>,
    /// rkubelet's pod UID, to mask in its back-off message.
    uid: String,
    diffs: Vec<String>,
    /// The capture's release, for the report (`upstream-v1.22`).
    release: &'a str,
}

impl Cmp<'_> {
    fn differ(&mut self, path: &str, up: Option<&Value>, rk: Option<&Value>, why: &str) {
        self.diffs.push(format!(
            "pod {}: {path}: {why}\n      {}: {}\n      rkubelet:       {}",
            self.pod,
            self.release,
            show(up),
            show(rk)
        ));
    }

    /// Any value: objects key by key, arrays element by element, volatile
    /// values by their form only.
    fn value(&mut self, path: &str, key: &str, up: Option<&Value>, rk: Option<&Value>) {
        let (up, rk) = (present(up), present(rk));
        match key {
            "lastTransitionTime" | "lastProbeTime" | "startTime" | "startedAt" | "finishedAt" => {
                let is_time = |s: &str| rfc3339_secs(s).is_some();
                return self.form(path, up, rk, is_time, "an RFC 3339 time");
            }
            "containerID" => return self.container_id(path, up, rk),
            "imageID" => {
                // A digest: compared as empty or not (empty: never pulled/created).
                let empty = |v: Option<&Value>| v.map(|v| v.as_str().map(str::is_empty));
                if empty(up) != empty(rk) || empty(rk) == Some(None) {
                    self.differ(path, up, rk, "imageID set on one side only");
                }
                return;
            }
            // The service account token volume: the server names it
            // `kube-api-access-<5 random characters>` at create.
            "name"
                if up
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.starts_with(API_ACCESS)) =>
            {
                let generated = |s: &str| {
                    s.strip_prefix(API_ACCESS).is_some_and(|r| {
                        r.len() == 5 && r.bytes().all(|b| b.is_ascii_alphanumeric())
                    })
                };
                return self.form(
                    path,
                    up,
                    rk,
                    generated,
                    "a generated kube-api-access-* name",
                );
            }
            "hostIP" | "podIP" | "ip" => {
                let is_ip = |s: &str| s.parse::<std::net::IpAddr>().is_ok();
                return self.form(path, up, rk, is_ip, "an IP address");
            }
            _ => {}
        }
        match (up, rk) {
            (None, None) => {}
            (Some(Value::Object(u)), Some(Value::Object(r))) => {
                let keys: BTreeSet<&String> = u.keys().chain(r.keys()).collect();
                for k in keys {
                    self.value(&format!("{path}.{k}"), k, u.get(k), r.get(k));
                }
            }
            (Some(Value::Array(u)), Some(Value::Array(r))) if u.len() == r.len() => {
                for (i, (a, b)) in u.iter().zip(r).enumerate() {
                    self.value(&format!("{path}[{i}]"), key, Some(a), Some(b));
                }
            }
            (u, r) if u == r => {}
            (u, r) => self.differ(path, u, r, "differs"),
        }
    }

    /// A masked value: present on both sides or neither, of the right form.
    fn form(
        &mut self,
        path: &str,
        up: Option<&Value>,
        rk: Option<&Value>,
        ok: impl Fn(&str) -> bool,
        what: &str,
    ) {
        match (up, rk) {
            (None, None) => {}
            (Some(_), Some(r)) if r.as_str().is_some_and(ok) => {}
            (Some(_), Some(_)) => self.differ(path, up, rk, &format!("not {what}")),
            _ => self.differ(path, up, rk, "present on one side only"),
        }
    }

    /// `<runtime>://<64 hex>`: the runtime prefix is compared, the ID not.
    fn container_id(&mut self, path: &str, up: Option<&Value>, rk: Option<&Value>) {
        let split = |v: Option<&Value>| {
            let s = v?.as_str()?;
            let (scheme, id) = s.split_once("://").unwrap_or(("", s));
            Some((scheme.to_string(), id.to_string()))
        };
        match (split(up), split(rk)) {
            (None, None) if up.is_none() && rk.is_none() => {}
            (Some((us, _)), Some((rs, rid))) => {
                if us != rs {
                    self.differ(path, up, rk, "runtime prefix differs (`<type>://<id>`)");
                } else if rid.len() != 64 || !rid.bytes().all(|b| b.is_ascii_hexdigit()) {
                    self.differ(path, up, rk, "not a 64-hex container ID");
                }
            }
            _ => self.differ(path, up, rk, "present on one side only"),
        }
    }

    /// The whole status.
    fn status(&mut self, up: &Value, rk: &Value) {
        let mut up = up.clone();
        let mut rk = rk.clone();
        // On every condition.
        for c in rk["conditions"].as_array().into_iter().flatten() {
            if !c["lastTransitionTime"].is_string() {
                let ty = c["type"].as_str().unwrap_or("");
                let path = format!("status.conditions[type={ty}].lastTransitionTime");
                let why = "must be present (a string) on every condition";
                let ua = up["conditions"].as_array().into_iter().flatten();
                let u = ua.clone().find(|u| u["type"] == c["type"]);
                let u = u.map(|u| &u["lastTransitionTime"]);
                self.differ(&path, u, Some(&c["lastTransitionTime"]), why);
            }
        }
        let (uc, rc) = (take(&mut up, "conditions"), take(&mut rk, "conditions"));
        self.conditions(&uc, &rc);
        for list in STATUS_LISTS {
            let (u, r) = (take(&mut up, list), take(&mut rk, list));
            self.containers(list, &u, &r);
        }
        self.value("status", "", Some(&up), Some(&rk));
    }

    fn conditions(&mut self, up: &Value, rk: &Value) {
        let empty = Vec::new();
        let ua = up.as_array().unwrap_or(&empty);
        let ra = rk.as_array().unwrap_or(&empty);
        let types = |a: &[Value]| -> BTreeSet<String> {
            a.iter()
                .map(|c| c["type"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let (ut, rt) = (types(ua), types(ra));
        if ut != rt || ua.len() != ra.len() {
            self.differ(
                "status.conditions[*].type",
                Some(&json!(ut)),
                Some(&json!(rt)),
                "the set of condition types differs",
            );
        }
        for u in ua {
            let Some(r) = ra.iter().find(|r| r["type"] == u["type"]) else {
                continue;
            };
            let ty = u["type"].as_str().unwrap_or("");
            let path = format!("status.conditions[type={ty}]");
            let (mut u, mut r) = (u.clone(), r.clone());
            // lastTransitionTime: checked in `status`, on rkubelet's side.
            take(&mut u, "lastTransitionTime");
            take(&mut r, "lastTransitionTime");
            self.value(&path, "", Some(&u), Some(&r));
        }
    }

    fn containers(&mut self, list: &str, up: &Value, rk: &Value) {
        let path = format!("status.{list}");
        let (ua, ra) = match (up.as_array(), rk.as_array()) {
            (None, None) if up.is_null() && rk.is_null() => return,
            (Some(u), Some(r)) => (u, r),
            _ => return self.differ(&path, Some(up), Some(rk), "present on one side only"),
        };
        let names = |a: &[Value]| -> Vec<String> {
            let mut n: Vec<String> = a.iter().map(|c| c["name"].to_string()).collect();
            n.sort();
            n
        };
        let (un, rn) = (json!(names(ua)), json!(names(ra)));
        if un != rn {
            let p = format!("{path}[*].name");
            self.differ(&p, Some(&un), Some(&rn), "the containers differ");
        }
        for u in ua {
            if let Some(r) = ra.iter().find(|r| r["name"] == u["name"]) {
                let p = format!("{path}[name={}]", u["name"].as_str().unwrap_or(""));
                self.container(&p, u, r);
            }
        }
    }

    fn container(&mut self, path: &str, up: &Value, rk: &Value) {
        let (mut u, mut r) = (up.clone(), rk.clone());
        let (ui, ri) = (take(&mut u, "image"), take(&mut r, "image"));
        if up["imageID"] == "" {
            // Never created: the spec's image, as is.
            self.value(&format!("{path}.image"), "image", Some(&ui), Some(&ri));
        } else if ri.as_str().is_none_or(str::is_empty) {
            // Ran: the image is a local stand-in on both sides; its name differs.
            self.differ(&format!("{path}.image"), Some(&ui), Some(&ri), "no image");
        }
        let crash_loop = matches!(self.restarts, Restarts::CrashLoop(_));
        if crash_loop && up["restartCount"].as_i64().unwrap_or(0) > 0 {
            // The crash loop: how far it got depends on time.
            let (_, rc) = (take(&mut u, "restartCount"), take(&mut r, "restartCount"));
            if rc.as_i64().unwrap_or(0) < 1 {
                let (p, u) = (format!("{path}.restartCount"), &up["restartCount"]);
                self.differ(
                    &p,
                    Some(u),
                    Some(&rc),
                    "a crash loop restarts at least once",
                );
            }
            let (us, rs) = (take(&mut u, "state"), take(&mut r, "state"));
            self.crash_loop_state(&format!("{path}.state"), &us, &rs);
        }
        self.value(path, "", Some(&u), Some(&r));
    }

    /// Between restarts upstream shows the last termination or the
    /// CrashLoopBackOff wait; either must match upstream's.
    fn crash_loop_state(&mut self, path: &str, up: &Value, rk: &Value) {
        let w = &rk["waiting"];
        if w["reason"] != "CrashLoopBackOff" {
            return self.value(path, "state", Some(up), Some(rk));
        }
        let backoff = match self.restarts {
            Restarts::CrashLoop(b) => b,
            Restarts::Exact => None,
        };
        let msg = mask_backoff(w["message"].as_str().unwrap_or(""), &self.uid);
        let known = backoff.is_some_and(|b| b.contains(&msg));
        // Nothing but the wait, and nothing in it but reason and message.
        let fields_ok = rk.as_object().is_some_and(|m| m.len() == 1)
            && w.as_object()
                .is_some_and(|m| m.keys().all(|k| k == "reason" || k == "message"));
        if !known || !fields_ok {
            let want = backoff
                .map(|b| json!(b.iter().collect::<Vec<_>>()))
                .unwrap_or(Value::Null);
            let why = "a CrashLoopBackOff wait unlike upstream's (messages masked: delay, UID)";
            self.differ(
                path,
                Some(&json!({"waiting": {"reason": "CrashLoopBackOff", "message": want}})),
                Some(&json!({"waiting": {"reason": "CrashLoopBackOff", "message": msg}})),
                why,
            );
        }
    }
}

/// Removes and returns `obj[key]` (Null when absent).
pub fn take(obj: &mut Value, key: &str) -> Value {
    obj.as_object_mut()
        .and_then(|m| m.remove(key))
        .unwrap_or(Value::Null)
}

/// Compares a pod's status (`rk`, rkubelet's) with upstream's (`up`, from
/// the capture `release`) field for field: every difference, one line each.
pub fn compare_status(release: &str, up: &Value, rk: &Value, restarts: Restarts) -> Vec<String> {
    let mut c = Cmp {
        pod: name_of(up),
        restarts,
        uid: uid(rk),
        diffs: Vec::new(),
        release,
    };
    c.status(&up["status"], &rk["status"]);
    c.diffs
}

/// A container's state as (kind, reason).
pub fn state_key(c: &Value) -> (String, String) {
    let st = &c["state"];
    for kind in ["waiting", "running", "terminated"] {
        if st[kind].is_object() {
            let reason = st[kind]["reason"].as_str().unwrap_or("");
            return (kind.into(), reason.into());
        }
    }
    (String::new(), String::new())
}
