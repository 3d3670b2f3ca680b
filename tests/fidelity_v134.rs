//! The v1.34 corpus replayed: rkubelet against the capture of a real
//! v1.34.9 control plane and its upstream kubelet (`upstream-v1.34-v134/`),
//! in-place resize and a spec change made while the pods run.
//!
//! The pods of `v134.yaml` exist, bound, before rkubelet starts (as in the
//! capture; the API server double emulates 1.34, containerd is real). Once
//! the pods the actions change run as upstream's did just before them (the
//! last status of generation 1 in the capture's watch stream), the four
//! changes of `v134-actions.sh` are made as kubectl made them: the three
//! `kubectl patch --subresource resize -p` as strategic merge patches of
//! `pods/<name>/resize`, and `--type merge` of `activeDeadlineSeconds` as a
//! merge patch of the pod. Then, per pod, once it is where upstream's was:
//!
//! * the status equals the capture's `pods.json` field for field, with the
//!   masks of tests/fidelity.rs (times, IDs, IPs, `kube-api-access-*`
//!   names, the stand-in image names) and nothing else: restartCount,
//!   lastState, `resources`, `allocatedResources`, observedGeneration on
//!   the status and every condition, the `PodResizePending` condition's
//!   reason and message; `metadata.generation` too;
//! * the events equal the capture's `events.json`: each (type, reason,
//!   involvedObject.fieldPath, message) as many times as upstream posted it
//!   (`Killing: Container c resize requires restart` and `ResizeCompleted`
//!   once for `v-resize`, `ResizeCompleted` once for `v-guaranteed-resize`,
//!   no resize event for `v-resize-infeasible`), except that an event
//!   upstream repeated with time (a retried sandbox) is compared as present.
//!
//! Each changed pod must also get there promptly (within 10 s of the
//! changes; upstream's kubelet took under 3 s), and the spec the double
//! stored (volumes, mounts, resources, activeDeadlineSeconds, hostUsers)
//! must be the one the capture's server kept.
//!
//! Every pod of the corpus is compared; none is skipped. Where a pod needs
//! more than rkubelet or the double has, the test asserts upstream's
//! behaviour and fails until they have it:
//!
//! * `v-userns` (`hostUsers: false`): containerd 1.6 has no user
//!   namespaces; upstream and rkubelet both refuse the sandbox
//!   (`FailedCreatePodSandBox`, the same message) and leave the pod Pending
//!   in ContainerCreating, so it is compared like the others.
//! * `v-imagevolume`: ImageVolume is off by default on a v1.34 server, so
//!   the capture's server dropped the `image` volume and its mount and the
//!   pod ran without them. The double (as of 1e815eb) keeps both, and
//!   rkubelet, which has no image volumes, then cannot mount it (FailedMount,
//!   the pod stays Pending): the double must drop them as 1.34 does.
//! * `v-podlevel` (pod-level `resources`, PodLevelResources): upstream's
//!   QoS class comes from the pod's resources (Burstable); rkubelet's came
//!   from the containers alone (BestEffort) until it read them.
//!
//! The capture's Infeasible message names the node's CPU capacity (2): the
//! test needs a 2-CPU machine, and says so.
//!
//! Test number (bridge, subnet, ports): 38.
//!
//!     cargo test --release --features rkubelet/fault-injection -p rkubelet --test fidelity_v134 -- --nocapture

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};

use common::cluster::*;
use common::fidelity::*;
use common::*;

/// The capture's directory under the fixtures.
const CAPTURE: &str = "upstream-v1.34-v134";
/// The control-plane release the double emulates.
const VERSION: &str = "1.34";
const N: u32 = 38;

/// The pods whose statuses and events are compared.
const COMPARED: &[&str] = &[
    "v-resize",
    "v-resize-infeasible",
    "v-guaranteed-resize",
    "v-generation",
    "v-podlevel",
    "v-sidecar",
    "v-userns",
    "v-imagevolume",
];

/// How long the pods may take to run as upstream's did before the actions.
const BEFORE: Duration = Duration::from_secs(60);
/// How long after the actions the pods may take to reach upstream's end.
const AFTER: Duration = Duration::from_secs(60);
/// How long a pod in upstream's state may still differ before its
/// differences are final: a later status PATCH may complete it.
const SETTLE: Duration = Duration::from_secs(5);
/// How long the events may lag behind the statuses.
const EVENTS: Duration = Duration::from_secs(15);

/// How long after the changes each changed pod may take to be where
/// upstream's ended: upstream's kubelet had all four there within 3 s of
/// the resizes (the capture's audit log: resized 10:39:34.1, v-resize's
/// restarted container reported 10:39:36.7, the others by 10:39:34.8).
const PROMPT: Duration = Duration::from_secs(10);

/// Events whose count grows with time (retries): compared as present.
const REPEATING: &[&str] = &["FailedCreatePodSandBox", "BackOff"];

const SMP: &str = "application/strategic-merge-patch+json";
const MERGE: &str = "application/merge-patch+json";

// --- the fixtures ------------------------------------------------------------------

/// One line of v134-actions.sh: `k patch pod <name> [--subresource
/// resize] [--type merge] -p '<patch>'`.
struct Action {
    pod: String,
    /// `resize`, or None for the pod itself.
    subresource: Option<String>,
    /// kubectl's `-p` without `--type` is a strategic merge patch.
    content_type: &'static str,
    body: Value,
}

fn actions() -> Vec<Action> {
    let script = read(&fidelity_dir().join("v134-actions.sh"));
    let mut out = Vec::new();
    for line in script.lines().filter(|l| l.starts_with("k patch ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.get(2), Some(&"pod"), "v134-actions.sh: {line}");
        let flag = |f: &str| {
            let at = words.iter().position(|w| *w == f)?;
            words.get(at + 1).map(|w| w.to_string())
        };
        let content_type = match flag("--type").as_deref() {
            None | Some("strategic") => SMP,
            Some("merge") => MERGE,
            Some(t) => panic!("v134-actions.sh: patch type {t} not replayed: {line}"),
        };
        let body = line
            .split('\'')
            .nth(1)
            .unwrap_or_else(|| panic!("v134-actions.sh: no '-p' patch: {line}"));
        out.push(Action {
            pod: words[3].to_string(),
            subresource: flag("--subresource"),
            content_type,
            body: serde_json::from_str(body)
                .unwrap_or_else(|e| panic!("v134-actions.sh: bad patch JSON: {e}: {line}")),
        });
    }
    let resizes = out.iter().filter(|a| a.subresource.is_some()).count();
    assert_eq!(
        (out.len(), resizes),
        (4, 3),
        "v134-actions.sh: three resizes and one spec change expected"
    );
    out
}

/// Each pod as upstream left it (pods.json), by name.
fn upstream_pods() -> BTreeMap<String, Value> {
    let list = json_file(&fidelity_dir().join(CAPTURE).join("pods.json"));
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{CAPTURE}/pods.json is a PodList"))
        .iter()
        .map(|p| (name_of(p), p.clone()))
        .collect()
}

/// Each of `names` as upstream had it just before the actions changed it:
/// its last watch event at generation 1.
fn upstream_before(names: &[String]) -> BTreeMap<String, Value> {
    let watch = read(&fidelity_dir().join(CAPTURE).join("pods-watch.jsonl"));
    let mut out = BTreeMap::new();
    for line in watch.lines().filter(|l| !l.trim().is_empty()) {
        let ev: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("pods-watch.jsonl: bad line: {e}: {line}"));
        let pod = &ev["object"];
        let name = name_of(pod);
        if names.contains(&name) && pod["metadata"]["generation"] == 1 {
            out.insert(name, pod.clone());
        }
    }
    for n in names {
        assert!(
            out.contains_key(n),
            "{CAPTURE}/pods-watch.jsonl: no {n} at generation 1"
        );
    }
    out
}

/// The capture's events about `pod`.
fn upstream_events(pod: &str) -> Vec<Value> {
    let list = json_file(&fidelity_dir().join(CAPTURE).join("events.json"));
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{CAPTURE}/events.json is an EventList"))
        .iter()
        .filter(|e| e["involvedObject"]["name"] == pod)
        .cloned()
        .collect()
}

// --- the comparison --------------------------------------------------------------------

/// The status field for field, and the pod's generation.
fn differences(up: &Value, rk: &Value) -> Vec<String> {
    let mut diffs = compare_status(CAPTURE, up, rk, Restarts::Exact);
    let (ug, rg) = (&up["metadata"]["generation"], &rk["metadata"]["generation"]);
    if ug != rg {
        diffs.push(format!(
            "pod {}: metadata.generation: differs\n      {CAPTURE}: {ug}\n      double:         {rg}",
            name_of(up)
        ));
    }
    diffs
}

/// What the server kept of a pod's spec that the kubelet acts on here: the
/// volumes (name and kind), each container's mounts and resources, the
/// pod-level resources, activeDeadlineSeconds and hostUsers, with the
/// generated `kube-api-access-*` name masked.
fn spec_summary(pod: &Value) -> Value {
    let masked = |n: &Value| {
        let n = n.as_str().unwrap_or("");
        let api = "kube-api-access-";
        Value::from(if n.starts_with(api) {
            "kube-api-access-*"
        } else {
            n
        })
    };
    let spec = &pod["spec"];
    let volumes: Vec<Value> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let kind: Vec<&String> = v
                .as_object()
                .into_iter()
                .flat_map(|m| m.keys())
                .filter(|k| *k != "name")
                .collect();
            json!({"name": masked(&v["name"]), "kind": kind})
        })
        .collect();
    let containers: Vec<Value> = spec_containers(spec)
        .into_iter()
        .map(|c| {
            let mounts: Vec<Value> = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| json!([masked(&m["name"]), m["mountPath"]]))
                .collect();
            json!({"name": c["name"], "volumeMounts": mounts,
                               "resources": c["resources"], "resizePolicy": c["resizePolicy"]})
        })
        .collect();
    json!({
        "volumes": volumes,
        "containers": containers,
        "resources": spec["resources"],
        "activeDeadlineSeconds": spec["activeDeadlineSeconds"],
        "hostUsers": spec["hostUsers"],
    })
}

/// Whether the pod got where upstream's did: phase, generation and
/// observedGeneration, the condition types, and each container's state,
/// readiness and restartCount.
fn reached(up: &Value, rk: &Value) -> bool {
    let same = |p: &[&str]| {
        let get = |v: &Value| p.iter().fold(v.clone(), |v, k| v[*k].clone());
        get(up) == get(rk)
    };
    let types = |p: &Value| {
        let mut t: Vec<String> = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["type"].to_string())
            .collect();
        t.sort();
        t
    };
    if !same(&["status", "phase"])
        || !same(&["metadata", "generation"])
        || !same(&["status", "observedGeneration"])
        || types(up) != types(rk)
    {
        return false;
    }
    STATUS_LISTS.iter().all(|list| {
        let ua = up["status"][*list].as_array().cloned().unwrap_or_default();
        let ra = rk["status"][*list].as_array().cloned().unwrap_or_default();
        ua.iter().all(|u| {
            ra.iter().find(|r| r["name"] == u["name"]).is_some_and(|r| {
                state_key(r) == state_key(u)
                    && r["ready"] == u["ready"]
                    && r["restartCount"] == u["restartCount"]
            })
        })
    })
}

/// What [`settle`] found.
struct Settled {
    /// Per pod, its final differences (empty: the same as upstream's).
    verdicts: BTreeMap<String, Vec<String>>,
    /// Per pod, when it was first where upstream's was (since the start).
    reached: BTreeMap<String, Duration>,
    /// Each pod's last copy.
    last: BTreeMap<String, Value>,
}

/// Polls the pods until each matches `want` (by name), or has been in its
/// state for SETTLE and still differs, or `deadline` passes.
fn settle(
    cl: &mut Cluster,
    want: &BTreeMap<String, Value>,
    deadline: Duration,
    phase: &str,
) -> Settled {
    let start = Instant::now();
    let mut verdicts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut reached_at: BTreeMap<String, Duration> = BTreeMap::new();
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
        let timed_out = start.elapsed() >= deadline;
        for (name, up) in want {
            if verdicts.contains_key(name) {
                continue;
            }
            let rk = last.get(name).cloned().unwrap_or(Value::Null);
            let diffs = differences(up, &rk);
            let there = diffs.is_empty() || reached(up, &rk);
            if there && !reached_at.contains_key(name) {
                reached_at.insert(name.clone(), start.elapsed());
            }
            let verdict = if diffs.is_empty() {
                Some(diffs)
            } else if reached(up, &rk) {
                let t = *since.entry(name.clone()).or_insert_with(Instant::now);
                (t.elapsed() >= SETTLE || timed_out).then_some(diffs)
            } else {
                since.remove(name);
                let never = format!(
                    "pod {name}: never reached upstream's state {phase} (phase, generations, \
                     condition types, container states, readiness, restarts) within {deadline:?}"
                );
                timed_out.then(|| [vec![never], diffs].concat())
            };
            if let Some(d) = verdict {
                let what = match d.len() {
                    0 => "same as upstream".to_string(),
                    n => format!("{n} differences"),
                };
                eprintln!("[v134] {phase}: {name}: {what} after {:?}", start.elapsed());
                verdicts.insert(name.clone(), d);
            }
        }
        if verdicts.len() == want.len() {
            return Settled {
                verdicts,
                reached: reached_at,
                last,
            };
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// (type, reason, involvedObject.fieldPath, message).
type EventKey = (String, String, String, String);

/// How often each event occurred (a repeated event is one object with a
/// count); a REPEATING one counts once, however often it came.
fn occurrences(events: &[Value]) -> BTreeMap<EventKey, u64> {
    let mut out = BTreeMap::new();
    for e in events {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let reason = s(&e["reason"]);
        let repeating = REPEATING.contains(&reason.as_str());
        let count = e["count"].as_u64().unwrap_or(1).max(1);
        let key = (
            s(&e["type"]),
            reason,
            s(&e["involvedObject"]["fieldPath"]),
            s(&e["message"]),
        );
        let n = out.entry(key).or_insert(0);
        *n = if repeating { 1 } else { *n + count };
    }
    out
}

/// The differences between upstream's events about `pod` and rkubelet's.
fn event_differences(pod: &str, up: &[Value], rk: &[Value]) -> Vec<String> {
    let (u, r) = (occurrences(up), occurrences(rk));
    let mut keys: Vec<&EventKey> = u.keys().chain(r.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (un, rn) = (
                u.get(k).copied().unwrap_or(0),
                r.get(k).copied().unwrap_or(0),
            );
            (un != rn).then(|| {
                let (ty, reason, field, msg) = k;
                let field = if field.is_empty() { "-" } else { field };
                format!(
                    "pod {pod}: event {ty} {reason} ({field}) {msg:?}: {CAPTURE}: {un} times, \
                     rkubelet: {rn}"
                )
            })
        })
        .collect()
}

// --- the changes ------------------------------------------------------------------

/// What kubectl sends for `a`: a PATCH as the admin with its content type.
/// Returns the code and the answer.
fn apply(cl: &Cluster, a: &Action) -> (u16, Value) {
    let mut roots = rustls::RootCertStore::empty();
    let ca = CertificateDer::from_pem_file(cl.double.dir.join("ca.crt")).expect("read ca.crt");
    roots.add(ca).expect("the double's CA");
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let agent = ureq::AgentBuilder::new()
        .tls_config(Arc::new(tls))
        .timeout(Duration::from_secs(10))
        .build();
    let token = fs::read_to_string(cl.double.dir.join("admin-token")).expect("read admin-token");
    let sub = a
        .subresource
        .as_ref()
        .map_or(String::new(), |s| format!("/{s}"));
    let path = format!("/api/v1/namespaces/{NS}/pods/{}{sub}", a.pod);
    let res = agent
        .request("PATCH", &format!("{}{path}", cl.double.url()))
        .set("User-Agent", "kubectl/v1.34.9 (rk-fidelity-v134)")
        .set("Authorization", &format!("Bearer {}", token.trim()))
        .set("Content-Type", a.content_type)
        .send_string(&a.body.to_string());
    let resp = match res {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("PATCH {path}: {e}"),
    };
    let code = resp.status();
    let text = resp.into_string().unwrap_or_default();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

// --- the test ------------------------------------------------------------------------

fn report_statuses(out: &mut String, what: &str, s: &Settled, want: &BTreeMap<String, Value>) {
    for (name, diffs) in s.verdicts.iter().filter(|v| !v.1.is_empty()) {
        out.push_str(&format!(
            "\n===== {what}: {name}: {} differences =====\n",
            diffs.len()
        ));
        for d in diffs {
            out.push_str(&format!("  {d}\n"));
        }
        let rk = s
            .last
            .get(name)
            .map(|p| &p["status"])
            .unwrap_or(&Value::Null);
        out.push_str(&format!(
            "--- {CAPTURE} status:\n{}\n--- rkubelet status (API server double at {VERSION}):\n{}\n",
            serde_json::to_string_pretty(&want[name]["status"]).unwrap_or_default(),
            serde_json::to_string_pretty(rk).unwrap_or_default()
        ));
    }
}

#[test]
fn v134_corpus_with_resizes_matches_upstream_v1_34() {
    require_prerequisites();
    let pods = corpus_pods("v134.yaml");
    let actions = actions();
    let upstream = upstream_pods();
    let capture_node = json_file(&fidelity_dir().join(CAPTURE).join("node.json"));
    for name in COMPARED {
        assert!(
            pods.iter().any(|p| name_of(p) == *name) && upstream.contains_key(*name),
            "{name} is not in both v134.yaml and {CAPTURE}/pods.json"
        );
    }
    let changed: Vec<String> = actions.iter().map(|a| a.pod.clone()).collect();
    let before = upstream_before(&changed);

    let mut cl = capture_cluster_at("fidelity_v134", N, &pods, VERSION);
    cl.start_kubelet();
    let node = cl.wait_node_ready(secs(60));
    let cpus = &node["status"]["capacity"]["cpu"];
    let want_cpus = &capture_node["status"]["capacity"]["cpu"];
    assert_eq!(
        cpus, want_cpus,
        "this node has {cpus} CPUs, the capture's {want_cpus}: the capture's Infeasible message \
         (`capacity: 2000`) names the node's capacity, so the test needs a machine like the capture's"
    );

    // Before the changes: as upstream's pods were just before them.
    let t0 = Instant::now();
    let pre = settle(&mut cl, &before, BEFORE, "before the changes");
    eprintln!("[v134] before the changes after {:?}", t0.elapsed());
    let mut report = String::new();
    report_statuses(&mut report, "before the changes", &pre, &before);

    // The changes, as v134-actions.sh made them; the server took each.
    for a in &actions {
        let (code, answer) = apply(&cl, a);
        let sub = a.subresource.as_deref().unwrap_or("-");
        eprintln!("[v134] PATCH {} ({sub}, {}): {code}", a.pod, a.content_type);
        assert_eq!(
            code,
            200,
            "PATCH pod {} (subresource {sub}, {}): the capture's server answered `pod/{} patched`; \
             the double: {answer}",
            a.pod,
            a.content_type,
            a.pod
        );
    }

    // After: each pod as pods.json has it.
    let t1 = Instant::now();
    let want: BTreeMap<String, Value> = COMPARED
        .iter()
        .map(|n| (n.to_string(), upstream[*n].clone()))
        .collect();
    let post = settle(&mut cl, &want, AFTER, "after the changes");
    eprintln!("[v134] after the changes after {:?}", t1.elapsed());
    report_statuses(&mut report, "after the changes", &post, &want);

    // Promptly, as upstream's kubelet.
    let mut slow = Vec::new();
    for name in &changed {
        let took = post.reached.get(name);
        if took.is_none_or(|t| *t > PROMPT) {
            slow.push(format!(
                "pod {name}: where upstream's ended {} after the changes; upstream's kubelet \
                 within 3 s, allowed {PROMPT:?}",
                took.map_or("never".to_string(), |t| format!("{t:.1?}"))
            ));
        }
    }
    if !slow.is_empty() {
        report.push_str("\n===== promptness =====\n");
        for d in &slow {
            report.push_str(&format!("  {d}\n"));
        }
    }

    // The spec the server kept (what the kubelet was given).
    let mut spec_diffs = Vec::new();
    for name in COMPARED {
        let (u, r) = (
            spec_summary(&upstream[*name]),
            spec_summary(post.last.get(*name).unwrap_or(&Value::Null)),
        );
        if u != r {
            spec_diffs.push(format!(
                "pod {name}: the stored spec differs (volumes, mounts, resources, \
                 activeDeadlineSeconds, hostUsers)\n      {CAPTURE}: {u}\n      double:         {r}"
            ));
        }
    }
    if !spec_diffs.is_empty() {
        report.push_str("\n===== specs as the server stored them =====\n");
        for d in &spec_diffs {
            report.push_str(&format!("  {d}\n"));
        }
    }

    // The events, which may lag.
    let mut event_diffs = Vec::new();
    let _ = poll(EVENTS, || {
        event_diffs = COMPARED
            .iter()
            .flat_map(|n| event_differences(n, &upstream_events(n), &cl.api.events_for(NS, n)))
            .collect();
        event_diffs.is_empty().then_some(())
    });
    if !event_diffs.is_empty() {
        report.push_str("\n===== events =====\n");
        for d in &event_diffs {
            report.push_str(&format!("  {d}\n"));
        }
    }

    let mut failed: Vec<String> = pre
        .verdicts
        .iter()
        .chain(&post.verdicts)
        .filter(|v| !v.1.is_empty())
        .map(|v| v.0.clone())
        .collect();
    for (what, diffs) in [
        ("events", &event_diffs),
        ("promptness", &slow),
        ("specs", &spec_diffs),
    ] {
        if !diffs.is_empty() {
            failed.push(what.into());
        }
    }
    assert!(
        failed.is_empty(),
        "rkubelet differs from {CAPTURE} ({failed:?}):{report}"
    );
}
