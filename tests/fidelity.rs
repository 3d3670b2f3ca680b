//! rkubelet's pod statuses against the upstream kubelet's, field for field,
//! per control-plane release. Every pod of the fidelity capture's
//! `statuses.yaml` runs in one rkubelet (real containerd, the API server
//! double emulating the release); each pod's status is compared with the
//! same pod in that capture's `pods.json`, what the real control plane
//! served after its own upstream kubelet ran those pods: v1.22.3
//! (`upstream-v1.22/`), v1.32.13 (`upstream-v1.32/`) and v1.34.9
//! (`upstream-v1.34/`).
//!
//! Every field either side has is compared (null and absent are the same,
//! as in the API's Go types). Masked are only values that cannot match,
//! checked for presence and form instead: times, IDs (containerID after its
//! `containerd://`, imageID), IPs, the server-generated name of the
//! `kube-api-access-*` volume, and the image name of a container that ran
//! (the capture ran local stand-ins, as this test does). The crash loop
//! is compared by what does not depend on time. Nothing else is skipped:
//! what a release added (a condition, a reason, a field) must appear for
//! that release and not for an older one (`ServerVersion::adapt_pod_status`,
//! docs/compatibility.md).
//!
//! Fixtures: `<repo>/../shared/fidelity`, or `$RKUBELET_FIDELITY_DIR`.
//! Test numbers (bridge, subnet, ports): 58 (v1.22), 17 (v1.32), 18 (v1.34).
//!
//!     cargo test --release --features rkubelet/fault-injection --test fidelity -- --nocapture

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cluster::*;
use common::fidelity::*;
use common::*;

/// How long all pods together may take to reach upstream's states.
const DEADLINE: Duration = Duration::from_secs(75);
/// How long a pod that reached upstream's state (phase, container states,
/// readiness) may still differ before its differences are final: a later
/// status PATCH may complete it.
const SETTLE: Duration = Duration::from_secs(5);

// --- the fixtures ------------------------------------------------------------------

struct Fixtures {
    /// The capture's directory: `upstream-v1.22` or `upstream-v1.32`.
    release: &'static str,
    /// The pods of statuses.yaml, in its order.
    pods: Vec<Value>,
    /// Each of them as upstream left it (pods.json), by name.
    upstream: BTreeMap<String, Value>,
    /// Per pod, the CrashLoopBackOff messages upstream posted (watch
    /// stream), masked by `mask_backoff`.
    backoff: BTreeMap<String, BTreeSet<String>>,
}

impl Fixtures {
    fn load(release: &'static str) -> Fixtures {
        let dir = fidelity_dir().join(release);
        let pods = statuses_pods();

        let list = json_file(&dir.join("pods.json"));
        let upstream: BTreeMap<String, Value> = list["items"]
            .as_array()
            .unwrap_or_else(|| panic!("{release}/pods.json is a PodList"))
            .iter()
            .map(|p| (name_of(p), p.clone()))
            .collect();

        let mut backoff: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let watch = read(&dir.join("pods-watch.jsonl"));
        for line in watch.lines().filter(|l| !l.trim().is_empty()) {
            let ev: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("pods-watch.jsonl: bad line: {e}: {line}"));
            let pod = &ev["object"];
            let lists = STATUS_LISTS
                .iter()
                .filter_map(|k| pod["status"][*k].as_array());
            for c in lists.flatten() {
                let w = &c["state"]["waiting"];
                if w["reason"] == "CrashLoopBackOff" {
                    let msg = w["message"].as_str().unwrap_or("");
                    backoff
                        .entry(name_of(pod))
                        .or_default()
                        .insert(mask_backoff(msg, &uid(pod)));
                }
            }
        }

        for p in &pods {
            let name = name_of(p);
            assert!(
                upstream.contains_key(&name),
                "statuses.yaml's pod {name} is not in {release}/pods.json"
            );
        }
        Fixtures {
            release,
            pods,
            upstream,
            backoff,
        }
    }
}

/// The prefix of the server-generated service account token volume.
const API_ACCESS: &str = "kube-api-access-";

const STATUS_LISTS: [&str; 3] = [
    "initContainerStatuses",
    "containerStatuses",
    "ephemeralContainerStatuses",
];

/// "back-off 20s restarting failed container=c pod=p_ns(UID)" with the
/// delay (which grows with time) and the pod's UID masked.
fn mask_backoff(msg: &str, uid: &str) -> String {
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

// --- the comparison --------------------------------------------------------------------

/// null and absent are the same value in the API's Go types.
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn show(v: Option<&Value>) -> String {
    present(v).map_or_else(|| "<absent>".to_string(), Value::to_string)
}

/// One pod's comparison: the differences, and the fields skipped because
/// rkubelet follows a newer upstream there on purpose.
struct Cmp<'a> {
    pod: String,
    /// Upstream's CrashLoopBackOff messages for this pod, masked.
    backoff: Option<&'a BTreeSet<String>>,
    /// rkubelet's pod UID, to mask in its back-off message.
    uid: String,
    diffs: Vec<String>,
    /// The capture's release, for the report (`upstream-v1.22`).
    release: &'static str,
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
        if up["restartCount"].as_i64().unwrap_or(0) > 0 {
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
        let msg = mask_backoff(w["message"].as_str().unwrap_or(""), &self.uid);
        let known = self.backoff.is_some_and(|b| b.contains(&msg));
        // Nothing but the wait, and nothing in it but reason and message.
        let fields_ok = rk.as_object().is_some_and(|m| m.len() == 1)
            && w.as_object()
                .is_some_and(|m| m.keys().all(|k| k == "reason" || k == "message"));
        if !known || !fields_ok {
            let want = self
                .backoff
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
fn take(obj: &mut Value, key: &str) -> Value {
    obj.as_object_mut()
        .and_then(|m| m.remove(key))
        .unwrap_or(Value::Null)
}

/// Compares one pod's status with upstream's: (differences, skipped fields).
fn compare(fx: &Fixtures, up: &Value, rk: &Value) -> Vec<String> {
    let name = name_of(up);
    let mut c = Cmp {
        backoff: fx.backoff.get(&name),
        pod: name,
        uid: uid(rk),
        diffs: Vec::new(),
        release: fx.release,
    };
    c.status(&up["status"], &rk["status"]);
    c.diffs
}

// --- reaching upstream's state --------------------------------------------------------

/// A container's state as (kind, reason).
fn state_key(c: &Value) -> (String, String) {
    let st = &c["state"];
    for kind in ["waiting", "running", "terminated"] {
        if st[kind].is_object() {
            let reason = st[kind]["reason"].as_str().unwrap_or("");
            return (kind.into(), reason.into());
        }
    }
    (String::new(), String::new())
}

/// Whether the pod got where upstream's did: the phase, and each
/// container's state and readiness (a crash loop: restarted at least once,
/// and terminated or backing off).
fn reached(up: &Value, rk: &Value) -> bool {
    if up["status"]["phase"] != rk["status"]["phase"] {
        return false;
    }
    STATUS_LISTS.iter().all(|list| {
        let ua = up["status"][*list].as_array().cloned().unwrap_or_default();
        let ra = rk["status"][*list].as_array().cloned().unwrap_or_default();
        ua.iter().all(|u| {
            let Some(r) = ra.iter().find(|r| r["name"] == u["name"]) else {
                return false;
            };
            let state_ok = if u["restartCount"].as_i64().unwrap_or(0) > 0 {
                r["restartCount"].as_i64().unwrap_or(0) >= 1
                    && (state_key(r) == state_key(u)
                        || state_key(r) == ("waiting".into(), "CrashLoopBackOff".into()))
            } else {
                state_key(r) == state_key(u)
            };
            state_ok && r["ready"] == u["ready"]
        })
    })
}

/// Per pod: Ok, or its differences (final).
type Verdicts = BTreeMap<String, Result<(), Vec<String>>>;

/// Polls every pod until its status matches upstream's, or it has been in
/// upstream's state for SETTLE and still differs, or DEADLINE passes.
/// Returns the verdicts and the last copy of each pod.
fn wait_and_compare(cl: &mut Cluster, fx: &Fixtures) -> (Verdicts, BTreeMap<String, Value>) {
    let start = Instant::now();
    let mut verdicts: Verdicts = BTreeMap::new();
    let mut since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    loop {
        cl.env.assert_kubelet_alive();
        let list = cl.api.get(&format!("/api/v1/namespaces/{NS}/pods"));
        for p in list
            .as_ref()
            .and_then(|l| l["items"].as_array())
            .into_iter()
            .flatten()
        {
            last.insert(name_of(p), p.clone());
        }
        let timed_out = start.elapsed() >= DEADLINE;
        for pod in &fx.pods {
            let name = name_of(pod);
            if verdicts.contains_key(&name) {
                continue;
            }
            let up = &fx.upstream[&name];
            let rk = last.get(&name).cloned().unwrap_or(Value::Null);
            let diffs = compare(fx, up, &rk);
            let verdict = if diffs.is_empty() {
                Some(Ok(()))
            } else if reached(up, &rk) {
                let t = *since.entry(name.clone()).or_insert_with(Instant::now);
                (t.elapsed() >= SETTLE || timed_out).then_some(Err(diffs))
            } else {
                since.remove(&name);
                let never = format!(
                    "pod {name}: never reached upstream's state (phase, container states, \
                     readiness) within {DEADLINE:?}"
                );
                timed_out.then(|| Err([vec![never], diffs].concat()))
            };
            if let Some(v) = verdict {
                let what = v.as_ref().map_or_else(
                    |d| format!("{} differences", d.len()),
                    |_| "same as upstream".into(),
                );
                eprintln!("[fidelity] {name}: {what} after {:?}", start.elapsed());
                verdicts.insert(name, v);
            }
        }
        if verdicts.len() == fx.pods.len() {
            return (verdicts, last);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

// --- the test ------------------------------------------------------------------------

/// Runs statuses.yaml as in the capture `release`: the double emulates
/// `version`, and the pods exist, bound, before the kubelet starts. Every
/// pod's status must be that release's kubelet's, field for field.
fn statuses_match(release: &'static str, version: &str, n: u32) {
    require_prerequisites();
    let fx = Fixtures::load(release);
    let mut cl = capture_cluster_at(&format!("fidelity_statuses_{n}"), n, &fx.pods, version);
    cl.start_kubelet();
    let (verdicts, last) = wait_and_compare(&mut cl, &fx);
    let mut report = String::new();
    for (name, v) in &verdicts {
        let Err(diffs) = v else { continue };
        report.push_str(&format!(
            "\n===== {name}: {} differences =====\n",
            diffs.len()
        ));
        for d in diffs {
            report.push_str(&format!("  {d}\n"));
        }
        let up = &fx.upstream[name]["status"];
        let rk = last.get(name).map(|p| &p["status"]).unwrap_or(&Value::Null);
        report.push_str(&format!(
            "--- {release} status:\n{}\n--- rkubelet status (API server double at {version}):\n{}\n",
            serde_json::to_string_pretty(up).unwrap_or_default(),
            serde_json::to_string_pretty(rk).unwrap_or_default()
        ));
    }
    let failed: Vec<&String> = verdicts
        .iter()
        .filter(|v| v.1.is_err())
        .map(|v| v.0)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} pods differ from {release} ({failed:?}):{report}",
        failed.len(),
        verdicts.len()
    );
}

#[test]
fn statuses_match_upstream_v1_22_field_for_field() {
    statuses_match("upstream-v1.22", "1.22", 58);
}

/// The same pods on a v1.32 control plane: the statuses of that release's
/// kubelet (PodReadyToStartContainers, PodFailed, `started` on init
/// containers, `Pod was rejected: `, volumeMounts with recursiveReadOnly).
#[test]
fn statuses_match_upstream_v1_32_field_for_field() {
    statuses_match("upstream-v1.32", "1.32", 17);
}

/// And on a v1.34 control plane: observedGeneration on the status and its
/// conditions, `resources` and `allocatedResources` in the statuses of
/// containers the runtime has.
#[test]
fn statuses_match_upstream_v1_34_field_for_field() {
    statuses_match("upstream-v1.34", "1.34", 18);
}

/// The comparison can fail: the capture of an earlier rkubelet
/// (`rkubelet/pods.json`, served by the same real v1.22 control plane) has
/// the differences its README names, those of a newer release's statuses
/// sent to v1.22 among them. Needs neither root nor containerd.
#[test]
fn comparison_finds_the_differences_of_the_rkubelet_capture() {
    let fx = Fixtures::load("upstream-v1.22");
    let list = json_file(&fidelity_dir().join("rkubelet/pods.json"));
    let mut diffs = Vec::new();
    for p in list["items"]
        .as_array()
        .expect("rkubelet/pods.json is a PodList")
    {
        if fx.pods.iter().any(|s| name_of(s) == name_of(p)) {
            diffs.extend(compare(&fx, &fx.upstream[&name_of(p)], p));
        }
    }
    let all = diffs.join("\n");
    for want in [
        "pod st-running-ready: status.conditions[type=Ready].lastTransitionTime: must be present",
        "pod st-env-divisor: status.phase: differs",
        "the set of condition types differs",
        "status.conditions[type=Ready].reason: differs",
        "[name=i].started",
    ] {
        assert!(all.contains(want), "no difference {want:?} in:\n{all}");
    }
}
