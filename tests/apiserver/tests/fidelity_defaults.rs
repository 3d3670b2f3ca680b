//! Defaulting golden test: every pod of the fidelity fixtures' pods.yaml
//! and statuses.yaml, created in the double as a real kube-apiserver had
//! them created, must come back as that server stored them; and what a
//! kubelet creates besides pods must be answered as that server did.
//!
//! What the real server stored:
//! * v1.22.3: `upstream-v1.22/objects-as-stored.json` (the pods of
//!   pods.yaml) and, for the pods of statuses.yaml, the first LIST of pods
//!   in `upstream-v1.22/audit-node.jsonl` (the upstream kubelet's initial
//!   list, before it wrote any status).
//! * v1.32.13: the capture has no objects-as-stored.json. Compared: the
//!   first LIST of pods in `upstream-v1.32/audit-node.jsonl`, which holds
//!   all 15 pods before the kubelet wrote any status (metadata, spec and
//!   the status `{phase: Pending, qosClass}`), and the Node, Lease, CSINode
//!   and Event creates of the same log with their answers. Checked, not
//!   compared with the double: `upstream-v1.32/pods.json` (the pods after
//!   60 s) agrees with that LIST on metadata and spec, which a kubelet
//!   never writes; its status is the kubelet's (the status PATCHes are
//!   replayed in fidelity_patches.rs). Not compared, as for v1.22: the
//!   paths of IGNORED, the per-run metadata, the Node's NodeTaint taint.
//!   The server is OpenShift's fork: its extra `kube-api-access-*`
//!   projected source is taken out of the recorded pods
//!   (golden::without_openshift_service_ca), and nothing else is masked
//!   for the fork.
//!
//! The double runs in-process, emulating the capture's release (the
//! fields 1.22 did not know, e.g. a sidecar's `restartPolicy`, are dropped
//! as its decoder did).

mod golden;
mod support;

use apiserver_double::version::Version;
use apiserver_double::{start, Config};
use golden::{Capture, RKUBELET_V1_22, UPSTREAM_V1_22, UPSTREAM_V1_32};
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
const IGNORED: &[(&[&str], &str)] = &[(
    &[
        "metadata",
        "annotations",
        "kubectl.kubernetes.io/last-applied-configuration",
    ],
    "kubectl apply writes it on the client side; the test POSTs the manifest",
)];

/// A double of its own per test (tests run in parallel), emulating
/// `release`, with its directory, which must outlive it.
fn start_double(name: &str, release: Version) -> (Client, tempfile::TempDir) {
    let tmp = support::tmpdir(name);
    let dir = tmp.path();
    let mut cfg = Config::new(dir);
    cfg.persist = false;
    cfg.version = release;
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

fn by_name(list: &Value) -> BTreeMap<String, Value> {
    let items = list["items"].as_array().into_iter().flatten();
    items
        .map(|p| {
            let name = p["metadata"]["name"].as_str().unwrap_or("");
            (name.to_string(), p.clone())
        })
        .collect()
}

/// The real server's pods right after creation, by name: the kubelet's
/// first LIST of pods, overridden by `objects-as-stored.json` where the
/// capture has it (the reference, taken before any kubelet ran).
fn as_stored(capture: Capture, objects_as_stored: bool) -> BTreeMap<String, Value> {
    let first_list = capture
        .audit()
        .into_iter()
        .find(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "pods")
        .expect("the kubelet's first LIST of pods");
    let mut out = by_name(&first_list["responseObject"]);
    if objects_as_stored {
        out.extend(by_name(&golden::json(
            &capture.file("objects-as-stored.json"),
        )));
    }
    out
}

/// Takes the OpenShift fork's extra projected source (see
/// golden::without_openshift_service_ca) out of every recorded pod: one
/// per `kube-api-access-*` volume, which every pod here has.
fn mask_openshift(pods: &mut BTreeMap<String, Value>) {
    for (name, p) in pods.iter_mut() {
        assert_eq!(
            golden::without_openshift_service_ca(p),
            1,
            "{name}: not one openshift-service-ca.crt source"
        );
    }
}

/// The metadata and spec of `pod` without the fields assigned per write
/// (`resourceVersion`, `managedFields`), which a kubelet's status writes
/// change.
fn metadata_and_spec(pod: &Value) -> Value {
    let mut v = json!({"metadata": pod["metadata"], "spec": pod["spec"]});
    for k in ["resourceVersion", "managedFields"] {
        golden::remove_path(&mut v, &["metadata", k]);
    }
    v
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

/// Creates the pods of pods.yaml and statuses.yaml in a double emulating
/// the capture's release and compares each with `want`.
fn assert_defaulted_as(capture: Capture, want: &BTreeMap<String, Value>) {
    let mut docs = golden::yaml_docs("pods.yaml");
    docs.extend(golden::yaml_docs("statuses.yaml"));
    let (c, _dir) = start_double(&format!("fidelity-pods-{}", capture.dir), capture.release);
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
            failures.push(format!("{} {}:\n  {}", capture.dir, name, d.join("\n  ")));
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

#[test]
fn created_pods_are_defaulted_as_the_real_server_did() {
    assert_defaulted_as(UPSTREAM_V1_22, &as_stored(UPSTREAM_V1_22, true));
}

/// v1.32.13: compared with the first LIST (metadata, spec, status), which
/// pods.json confirms for metadata and spec. See the file's comment.
#[test]
fn created_pods_are_defaulted_as_the_v1_32_server_did() {
    let mut want = as_stored(UPSTREAM_V1_32, false);
    let mut after = by_name(&golden::json(&UPSTREAM_V1_32.file("pods.json")));
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    // Only the OpenShift fork's projected source is masked (both witnesses).
    mask_openshift(&mut want);
    mask_openshift(&mut after);
    for (name, w) in &want {
        let d = golden::diff(&metadata_and_spec(w), &metadata_and_spec(&after[name]));
        assert!(
            d.is_empty(),
            "{name}: pods.json and the LIST differ:\n  {}",
            d.join("\n  ")
        );
    }
    assert_defaulted_as(UPSTREAM_V1_32, &want);
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
/// sent to a double emulating the capture's release as the kubelet sent it
/// to the real server: the answer must be the real server's.
fn replay_creates(capture: Capture) -> usize {
    let log = capture.file("audit-node.jsonl");
    let (c, _dir) = start_double(
        &format!("fidelity-creates-{}", capture.dir),
        capture.release,
    );
    let (code, ns) = c.post("/api/v1/namespaces", json!({"metadata": {"name": NS}}));
    assert_eq!(code, 201, "{}", ns);
    let mut failures = vec![];
    let mut n = 0;
    for ev in capture.audit() {
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
    assert!(replay_creates(UPSTREAM_V1_22) > 60);
    assert!(replay_creates(RKUBELET_V1_22) > 50);
}

/// v1.32.13: its Node, Lease, CSINode and 66 Events (the 5 event creates
/// the server refused, in the namespace being deleted at the end, are not
/// replayed, as for v1.22).
#[test]
fn v1_32_kubelet_creates_answer_as_recorded() {
    assert_eq!(replay_creates(UPSTREAM_V1_32), 69);
}
