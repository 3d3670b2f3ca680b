//! Defaulting golden test: every pod of the fidelity fixtures' pods.yaml
//! and statuses.yaml, created in the double as the real kube-apiserver
//! v1.22.3 had them created, must come back as that server stored them.
//!
//! What the real server stored: `upstream-v1.22/objects-as-stored.json`
//! (the pods of pods.yaml) and, for the pods of statuses.yaml, the first
//! LIST of pods in `upstream-v1.22/audit-node.jsonl` (the upstream kubelet's
//! initial list, before it wrote any status).
//!
//! The double runs in-process, emulating 1.22 (the fields 1.22 did not know,
//! e.g. a sidecar's `restartPolicy`, are dropped as its decoder did).

mod golden;
mod support;

use apiserver_double::version::Version;
use apiserver_double::{start, Config};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use support::Client;

const NS: &str = "fidelity";

/// Paths left out of the comparison, each with why the double cannot or
/// need not match. `metadata.uid`, `resourceVersion`, `creationTimestamp`
/// and `managedFields` are not compared at all (assigned per server and
/// run; the double keeps no managedFields), and generated names are
/// normalised (`kube-api-access-*`).
const IGNORED: &[(&[&str], &str)] = &[
    (
        &[
            "metadata",
            "annotations",
            "kubectl.kubernetes.io/last-applied-configuration",
        ],
        "kubectl apply writes it on the client side; the test POSTs the manifest",
    ),
    (
        &["metadata", "generation"],
        "the double sets a pod's generation as 1.33+ servers do (kubernetes#130181), at \
         every emulated release; 1.22 did not",
    ),
];

/// A double of its own per test (tests run in parallel), with its
/// directory, which must outlive it.
fn start_double(name: &str) -> (Client, tempfile::TempDir) {
    let tmp = support::tmpdir(name);
    let dir = tmp.path();
    let mut cfg = Config::new(dir);
    cfg.persist = false;
    cfg.version = Version::new(22);
    let h = start(cfg).unwrap_or_else(|e| panic!("start the double: {}", e));
    let client = Client {
        agent: ureq::AgentBuilder::new()
            .tls_config(support::tls(dir, Some("admin")))
            .timeout(Duration::from_secs(20))
            .build(),
        base: h.url.clone(),
        token: None,
    };
    (client, tmp)
}

fn path_for(doc: &Value) -> String {
    let plural = match doc["kind"].as_str() {
        Some("Namespace") => return "/api/v1/namespaces".into(),
        Some("ConfigMap") => "configmaps",
        Some("Secret") => "secrets",
        Some("Pod") => "pods",
        other => panic!("the fixtures hold a {:?}: extend the test", other),
    };
    format!("/api/v1/namespaces/{}/{}", NS, plural)
}

/// Creates every document in the double; the created pods by name.
fn create_all(c: &Client, docs: &[Value]) -> BTreeMap<String, Value> {
    let mut pods = BTreeMap::new();
    for doc in docs {
        let (code, got) = c.post(&path_for(doc), doc.clone());
        assert_eq!(code, 201, "create {}: {}", doc["metadata"]["name"], got);
        if doc["kind"] == "Pod" {
            pods.insert(
                got["metadata"]["name"].as_str().unwrap_or("").to_string(),
                got,
            );
        }
    }
    pods
}

/// The real server's pods right after creation, by name.
fn as_stored() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let first_list = golden::audit("upstream-v1.22/audit-node.jsonl")
        .into_iter()
        .find(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "pods")
        .expect("the kubelet's first LIST of pods");
    let stored = golden::json("upstream-v1.22/objects-as-stored.json");
    // objects-as-stored.json wins where it has the pod: it is the reference.
    for list in [&first_list["responseObject"], &stored] {
        for p in list["items"].as_array().into_iter().flatten() {
            out.insert(
                p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                p.clone(),
            );
        }
    }
    out
}

/// The compared part of a pod: metadata (without what IGNORED and the
/// per-run fields exclude), spec and status.
fn comparable(pod: &Value) -> Value {
    let mut v = strip_assigned(
        &json!({"metadata": pod["metadata"], "spec": pod["spec"], "status": pod["status"]}),
    );
    for (path, _) in IGNORED {
        golden::remove_path(&mut v, path);
    }
    if v["metadata"]["annotations"]
        .as_object()
        .is_some_and(|a| a.is_empty())
    {
        golden::remove_path(&mut v, &["metadata", "annotations"]);
    }
    golden::normalise_generated_names(&mut v);
    v
}

/// The manifest as kubectl sent it: its last-applied-configuration
/// annotation. Checks that the test reads the YAML as kubectl did, so that
/// the double got the same request as the real server.
fn assert_sent_as_kubectl(doc: &Value, stored: &Value) {
    let Some(applied) = stored["metadata"]["annotations"]
        ["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
    else {
        return;
    };
    let mut applied: Value = serde_json::from_str(applied).expect("last-applied JSON");
    if applied["metadata"]["annotations"]
        .as_object()
        .is_some_and(|a| a.is_empty())
    {
        golden::remove_path(&mut applied, &["metadata", "annotations"]);
    }
    assert_eq!(&applied, doc, "the YAML reading differs from kubectl's");
}

#[test]
fn created_pods_are_defaulted_as_the_real_server_did() {
    let mut docs = golden::yaml_docs("pods.yaml");
    docs.extend(golden::yaml_docs("statuses.yaml"));
    let want = as_stored();
    let (c, _dir) = start_double("fidelity-pods");
    let got = create_all(&c, &docs);
    let mut failures = vec![];
    let mut needed = [false; IGNORED.len()];
    for doc in docs.iter().filter(|d| d["kind"] == "Pod") {
        let name = doc["metadata"]["name"].as_str().unwrap_or("");
        let w = want
            .get(name)
            .unwrap_or_else(|| panic!("the fixtures do not show {} as stored", name));
        assert_sent_as_kubectl(doc, w);
        let d = golden::diff(&comparable(w), &comparable(&got[name]));
        if !d.is_empty() {
            failures.push(format!("{}:\n  {}", name, d.join("\n  ")));
        }
        for (i, (path, _)) in IGNORED.iter().enumerate() {
            needed[i] |= at(w, path) != at(&got[name], path);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(got.len(), 15, "pods.yaml and statuses.yaml hold 15 pods");
    // Each ignored path does differ somewhere: the list hides no more
    // than it names.
    for (i, (path, why)) in IGNORED.iter().enumerate() {
        assert!(needed[i], "{:?} ({}) no longer differs: drop it", path, why);
    }
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// Fields the server assigns per object and run.
fn strip_assigned(v: &Value) -> Value {
    let mut v = v.clone();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        golden::remove_path(&mut v, &["metadata", k]);
    }
    v
}

/// What a kubelet creates besides pods (its Node, Lease, CSINode, Events),
/// sent to the double as the kubelet sent it to the real server: the
/// answer must be the real server's.
fn replay_creates(log: &str) -> usize {
    let (c, _dir) = start_double(&format!(
        "fidelity-creates-{}",
        log.split('/').next().unwrap_or(log)
    ));
    let (code, ns) = c.post("/api/v1/namespaces", json!({"metadata": {"name": NS}}));
    assert_eq!(code, 201, "{}", ns);
    let mut failures = vec![];
    let mut n = 0;
    for ev in golden::audit(log) {
        let resource = ev["objectRef"]["resource"].as_str().unwrap_or("");
        let kubelet_object = ["nodes", "leases", "csinodes", "events"].contains(&resource);
        if ev["verb"] != "create" || ev["responseStatus"]["code"] != 201 || !kubelet_object {
            continue;
        }
        let uri = ev["requestURI"].as_str().unwrap_or("");
        let path = uri.split('?').next().unwrap_or(uri);
        let (code, got) = c.post(path, ev["requestObject"].clone());
        let mut want = strip_assigned(&ev["responseObject"]);
        // NodeTaint admission: see README "Deviations" (the double models
        // neither it nor the node-lifecycle controller that lifts it).
        if resource == "nodes" {
            assert!(golden::remove_path(&mut want, &["spec", "taints"]));
        }
        let d = golden::diff(&want, &strip_assigned(&got));
        if code != 201 || !d.is_empty() {
            failures.push(format!(
                "{} {} ({}):\n  {}",
                log,
                path,
                code,
                d.join("\n  ")
            ));
        }
        n += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    n
}

#[test]
fn kubelet_creates_answer_as_recorded() {
    assert!(replay_creates("upstream-v1.22/audit-node.jsonl") > 60);
    assert!(replay_creates("rkubelet/audit-node.jsonl") > 50);
}
