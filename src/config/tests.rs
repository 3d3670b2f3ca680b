//! Tests for the pod sources and the PodConfig merger.

use crate::podutil::PodExt;
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::common::*;
use super::file::{extract_from_dir, extract_from_file};
use super::*;
use crate::types::*;

const NODE: &str = "Node-1";

const GOOD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: nginx
    image: nginx:1.25
    ports:
    - containerPort: 80
";

fn manifest(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers:\n  - name: c\n    image: {image}\n"
    )
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!("rkubelet-config-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
    fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn decode_file(path: &str, data: &str, node: &str) -> anyhow::Result<Pod> {
    decode_single_pod(data.as_bytes(), ManifestOrigin::File(path), node)
}

fn spec(pod: &Pod) -> &PodSpec {
    pod.spec.as_ref().unwrap()
}

// ---------- naming, UID, defaults ----------

#[test]
fn static_pod_name_namespace_and_node() {
    let pod = decode_file("/etc/manifests/web.yaml", GOOD, NODE).unwrap();
    assert_eq!(pod.name(), "web-node-1");
    assert_eq!(pod.namespace(), "default");
    assert_eq!(spec(&pod).node_name.as_deref(), Some(NODE));
    let uid = pod.uid();
    assert_eq!(uid.len(), 32);
    assert!(uid.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(pod.annotation(CONFIG_HASH_ANNOTATION), Some(uid));
    assert_eq!(pod.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
    assert!(is_static_pod(&pod));
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Pending"));
}

#[test]
fn static_pod_uid_stability() {
    let path = "/etc/manifests/web.yaml";
    let a = decode_file(path, GOOD, NODE).unwrap();
    let b = decode_file(path, GOOD, NODE).unwrap();
    assert_eq!(a.uid(), b.uid(), "same content, same UID");

    let changed = GOOD.replace("nginx:1.25", "nginx:1.26");
    let c = decode_file(path, &changed, NODE).unwrap();
    assert_ne!(a.uid(), c.uid(), "changed content, new UID");

    let d = decode_file(path, GOOD, "node-2").unwrap();
    assert_ne!(a.uid(), d.uid(), "other node, other UID");

    let e = decode_file("/etc/manifests/other.yaml", GOOD, NODE).unwrap();
    assert_ne!(a.uid(), e.uid(), "other file, other UID");

    // The same pod as JSON, or spelling out a default, hashes the same.
    let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},
        "spec":{"restartPolicy":"Always","containers":[{"name":"nginx","image":"nginx:1.25",
        "ports":[{"containerPort":80,"protocol":"TCP"}]}]}}"#;
    let f = decode_file(path, json, NODE).unwrap();
    assert_eq!(a.uid(), f.uid());

    let g = decode_single_pod(GOOD.as_bytes(), ManifestOrigin::Url("http://x/pods"), NODE).unwrap();
    assert_ne!(a.uid(), g.uid());
    assert_eq!(g.annotation(CONFIG_SOURCE_ANNOTATION), Some("http"));
}

#[test]
fn explicit_uid_and_namespace_are_kept() {
    let yaml = GOOD.replace(
        "  name: web\n",
        "  name: web\n  namespace: kube-system\n  uid: abc\n",
    );
    let pod = decode_file("/m/web.yaml", &yaml, NODE).unwrap();
    assert_eq!(pod.uid(), "abc");
    assert_eq!(pod.namespace(), "kube-system");
}

#[test]
fn pull_policy_defaults() {
    let cases = [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "IfNotPresent"),
        ("busybox:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "Always"),
        ("host:5000/img", "Always"),
        ("host:5000/img:v2", "IfNotPresent"),
        ("registry.k8s.io/pause:3.10", "IfNotPresent"),
    ];
    for (image, want) in cases {
        assert_eq!(default_pull_policy(image), want, "{image}");
        let pod = decode_file("/m/p.yaml", &manifest("p", image), NODE).unwrap();
        let got = spec(&pod).containers[0].image_pull_policy.as_deref();
        assert_eq!(got, Some(want), "{image}");
    }
    let explicit = manifest("p", "busybox").replace(
        "    image: busybox\n",
        "    image: busybox\n    imagePullPolicy: Never\n",
    );
    let pod = decode_file("/m/p.yaml", &explicit, NODE).unwrap();
    assert_eq!(
        spec(&pod).containers[0].image_pull_policy.as_deref(),
        Some("Never")
    );
}

#[test]
fn api_defaults_applied() {
    let yaml = "apiVersion: v1
kind: Pod
metadata:
  name: full
spec:
  hostNetwork: true
  volumes:
  - name: scratch
  - name: cfg
    hostPath:
      path: /etc/cfg
  initContainers:
  - name: init
    image: busybox:1.36
  containers:
  - name: app
    image: app:v1
    ports:
    - containerPort: 8080
    resources:
      limits:
        cpu: 1
        memory: 64Mi
    livenessProbe:
      httpGet:
        port: 8080
    volumeMounts:
    - name: scratch
      mountPath: /scratch
";
    let pod = decode_file("/m/full.yaml", yaml, NODE).unwrap();
    let s = spec(&pod);
    assert_eq!(s.restart_policy.as_deref(), Some("Always"));
    assert_eq!(s.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(s.termination_grace_period_seconds, Some(30));
    assert_eq!(s.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(s.enable_service_links, Some(true));
    assert!(s.security_context.is_some());
    let tolerations = s.tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(tolerations[0].effect.as_deref(), Some("NoExecute"));
    assert!(tolerations[0].key.is_none());

    for c in s.init_containers.iter().flatten().chain(&s.containers) {
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    }
    let app = &s.containers[0];
    let port = &app.ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.host_port,
        Some(8080),
        "hostNetwork copies containerPort"
    );
    let requests = app.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("1"));
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("64Mi"));
    let probe = app.liveness_probe.as_ref().unwrap();
    assert_eq!(
        (
            probe.timeout_seconds,
            probe.period_seconds,
            probe.success_threshold,
            probe.failure_threshold
        ),
        (Some(1), Some(10), Some(1), Some(3))
    );
    let http = probe.http_get.as_ref().unwrap();
    assert_eq!(
        (http.path.as_deref(), http.scheme.as_deref()),
        (Some("/"), Some("HTTP"))
    );

    let volumes = s.volumes.as_ref().unwrap();
    assert!(
        volumes[0].empty_dir.is_some(),
        "a volume with no source is an emptyDir"
    );
    assert_eq!(
        volumes[1].host_path.as_ref().unwrap().type_.as_deref(),
        Some("")
    );
    assert!(volumes[1].empty_dir.is_none());
}

#[test]
fn existing_toleration_not_duplicated() {
    let yaml = GOOD.replace(
        "spec:\n",
        "spec:\n  tolerations:\n  - operator: Exists\n    effect: NoExecute\n    tolerationSeconds: 300\n",
    );
    let pod = decode_file("/m/web.yaml", &yaml, NODE).unwrap();
    let tolerations = spec(&pod).tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].toleration_seconds, None);
}

// ---------- validation ----------

fn file_error(dir: &TempDir, name: &str, content: &str) -> String {
    let path = dir.write(name, content);
    let err = extract_from_file(&path, NODE).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains(&path.display().to_string()),
        "error should name the file: {message}"
    );
    message
}

#[test]
fn validation_errors_name_file_and_field() {
    let dir = TempDir::new();
    let m = file_error(&dir, "bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n");
    assert!(m.contains("couldn't parse as pod"), "{m}");

    let m = file_error(
        &dir,
        "deploy.yaml",
        &GOOD.replace("kind: Pod", "kind: Deployment"),
    );
    assert!(m.contains("Deployment"), "{m}");

    let m = file_error(
        &dir,
        "v2.yaml",
        &GOOD.replace("apiVersion: v1", "apiVersion: v2"),
    );
    assert!(m.contains("v2"), "{m}");

    let m = file_error(&dir, "nokind.yaml", &GOOD.replace("kind: Pod\n", ""));
    assert!(m.contains("Kind"), "{m}");

    let m = file_error(&dir, "empty.yaml", "");
    assert!(m.contains("empty"), "{m}");

    let m = file_error(
        &dir,
        "noname.yaml",
        &GOOD.replace("  name: web\n", "  labels: {a: b}\n"),
    );
    assert!(m.contains("name is needed"), "{m}");

    let m = file_error(
        &dir,
        "nocontainers.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n",
    );
    assert!(m.contains("spec.containers: Required value"), "{m}");

    let dup = "apiVersion: v1
kind: Pod
metadata:
  name: dup
spec:
  initContainers:
  - name: c
    image: busybox
  containers:
  - name: c
    image: busybox
";
    let m = file_error(&dir, "dup.yaml", dup);
    assert!(
        m.contains("spec.containers[0].name: Duplicate value: \"c\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "upper.yaml",
        &GOOD.replace("name: nginx", "name: Nginx_1"),
    );
    assert!(
        m.contains("spec.containers[0].name: Invalid value: \"Nginx_1\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "noimage.yaml",
        &GOOD.replace("    image: nginx:1.25\n", ""),
    );
    assert!(
        m.contains("spec.containers[0].image: Required value"),
        "{m}"
    );

    let m = file_error(
        &dir,
        "restart.yaml",
        &GOOD.replace("spec:\n", "spec:\n  restartPolicy: Sometimes\n"),
    );
    assert!(
        m.contains("spec.restartPolicy: Unsupported value: \"Sometimes\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "badname.yaml",
        &GOOD.replace("name: web", "name: Web_App"),
    );
    assert!(m.contains("metadata.name: Invalid value"), "{m}");

    let m = file_error(
        &dir,
        "mount.yaml",
        &GOOD.replace(
            "    ports:",
            "    volumeMounts:\n    - name: missing\n      mountPath: /x\n    ports:",
        ),
    );
    assert!(
        m.contains("volumeMounts[0].name: Not found: \"missing\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "port.yaml",
        &GOOD.replace("containerPort: 80", "containerPort: 70000"),
    );
    assert!(m.contains("ports[0].containerPort: Invalid value"), "{m}");
}

#[test]
fn directory_skips_bad_and_hidden_files() {
    let dir = TempDir::new();
    dir.write("a.yaml", &manifest("alpha", "busybox:1.36"));
    dir.write(
        "b-broken.yaml",
        "kind: Pod\napiVersion: v1\nmetadata: {name: broken}\nspec: {containers: []}\n",
    );
    dir.write("c.json", r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"gamma"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#);
    dir.write(".hidden.yaml", &manifest("hidden", "busybox"));
    dir.write(".a.yaml.swp", "garbage");
    fs::create_dir(dir.0.join("sub")).unwrap();
    dir.write("sub/nested.yaml", &manifest("nested", "busybox"));

    let (pods, errors) = extract_from_dir(&dir.0, NODE).unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p.name()).collect();
    assert_eq!(names, vec!["alpha-node-1", "gamma-node-1"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].0.ends_with("b-broken.yaml"));
    assert!(errors[0].1.contains("b-broken.yaml"), "{}", errors[0].1);
}

#[test]
fn directory_rejects_duplicate_pod_names() {
    let dir = TempDir::new();
    dir.write("a.yaml", &manifest("same", "busybox:1"));
    dir.write("b.yaml", &manifest("same", "busybox:2"));
    let (pods, errors) = extract_from_dir(&dir.0, NODE).unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].1.contains("duplicate pod name") && errors[0].1.contains("a.yaml"),
        "{:?}",
        errors
    );
}

// ---------- file source thread ----------

fn recv_within(rx: &Receiver<PodUpdate>, within: Duration) -> PodUpdate {
    rx.recv_timeout(within).expect("expected an update in time")
}

/// Receives until a snapshot satisfying `want`, or fails after `within`.
fn recv_until(
    rx: &Receiver<PodUpdate>,
    within: Duration,
    want: impl Fn(&PodUpdate) -> bool,
) -> PodUpdate {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let update = rx
            .recv_timeout(left)
            .expect("expected a matching update in time");
        if want(&update) {
            return update;
        }
    }
}

fn names(update: &PodUpdate) -> Vec<String> {
    let mut n: Vec<String> = update.pods.iter().map(|p| p.name().to_string()).collect();
    n.sort();
    n
}

struct Running {
    handle: JoinHandle<()>,
    stop: Sender<()>,
}

impl Running {
    fn stop(self) {
        self.stop.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.handle.is_finished() {
            assert!(Instant::now() < deadline, "source thread did not stop");
            thread::sleep(Duration::from_millis(10));
        }
        self.handle.join().unwrap();
    }
}

fn start_file(path: &Path, period: Duration) -> (Running, Receiver<PodUpdate>) {
    let (tx, rx) = bounded(16);
    let (stop, shutdown) = bounded(1);
    let handle = start_file_source(path, NODE, period, tx, shutdown).unwrap();
    (Running { handle, stop }, rx)
}

#[test]
fn file_source_empty_dir_then_inotify_add_and_delete() {
    let dir = TempDir::new();
    let (running, rx) = start_file(&dir.0, Duration::from_secs(60));

    let first = recv_within(&rx, Duration::from_secs(2));
    assert_eq!(first.op, PodOperation::Set);
    assert_eq!(first.source, FILE_SOURCE);
    assert!(
        first.pods.is_empty(),
        "an empty directory still yields a snapshot"
    );

    let started = Instant::now();
    dir.write("web.yaml", GOOD);
    let update = recv_until(&rx, Duration::from_millis(1500), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);
    assert!(started.elapsed() < Duration::from_millis(1500));

    // Hidden files do not trigger a re-read.
    dir.write(".scratch", "x");
    assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());

    fs::remove_file(dir.0.join("web.yaml")).unwrap();
    recv_until(&rx, Duration::from_millis(1500), |u| u.pods.is_empty());
    running.stop();
}

#[test]
fn file_source_single_file_and_missing_path() {
    let dir = TempDir::new();
    let path = dir.0.join("only.yaml");
    let (running, rx) = start_file(&path, Duration::from_secs(60));
    let first = recv_within(&rx, Duration::from_secs(2));
    assert!(first.pods.is_empty(), "missing path reads as no pods");

    // Created later: the parent directory watch notices it.
    fs::write(&path, GOOD).unwrap();
    let update = recv_until(&rx, Duration::from_millis(1500), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);

    // Replaced by rename, as editors and config tools do.
    let tmp = dir.write(".only.yaml.tmp", &GOOD.replace("nginx:1.25", "nginx:1.26"));
    fs::rename(&tmp, &path).unwrap();
    let update = recv_until(&rx, Duration::from_millis(1500), |u| {
        u.pods
            .first()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.containers[0].image.as_deref())
            == Some("nginx:1.26")
    });
    assert_eq!(update.pods.len(), 1);

    // A broken edit of a single manifest keeps the last good state.
    fs::write(&path, "kind: Pod\nmetadata: [").unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(600)).is_err());
    fs::write(&path, GOOD).unwrap();
    let update = recv_until(&rx, Duration::from_millis(1500), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);
    running.stop();
}

#[test]
fn file_source_periodic_reread_and_directory_created_later() {
    let parent = TempDir::new();
    let dir = parent.0.join("manifests");
    let (running, rx) = start_file(&dir, Duration::from_millis(300));
    assert!(recv_within(&rx, Duration::from_secs(2)).pods.is_empty());
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("web.yaml"), GOOD).unwrap();
    let update = recv_until(&rx, Duration::from_secs(2), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);
    // Periodic snapshots keep coming even without changes.
    let again = recv_within(&rx, Duration::from_secs(2));
    assert_eq!(names(&again), vec!["web-node-1"]);
    running.stop();
}

#[test]
fn file_source_stops_when_shutdown_sender_dropped() {
    let dir = TempDir::new();
    let (tx, rx) = bounded(4);
    let (stop, shutdown) = bounded::<()>(1);
    let handle = start_file_source(&dir.0, NODE, Duration::from_secs(60), tx, shutdown).unwrap();
    recv_within(&rx, Duration::from_secs(2));
    drop(stop);
    let deadline = Instant::now() + Duration::from_secs(2);
    while !handle.is_finished() {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(10));
    }
}

// ---------- merger ----------

fn api_pod(uid: &str, name: &str, image: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn storage() -> (PodStorage, Arc<Mutex<HashSet<String>>>) {
    let seen = Arc::new(Mutex::new(HashSet::new()));
    (PodStorage::new(Arc::clone(&seen)), seen)
}

fn ops(out: &[PodUpdate]) -> Vec<(PodOperation, Vec<String>)> {
    out.iter()
        .map(|u| (u.op, u.pods.iter().map(|p| p.uid().to_string()).collect()))
        .collect()
}

#[test]
fn merge_add_update_remove_and_noop() {
    let (mut s, seen) = storage();
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("1", "a", "img:1")]),
    );
    assert_eq!(ops(&out), vec![(PodOperation::Add, vec!["1".into()])]);
    assert!(seen.lock().unwrap().contains("file"));
    let added = &out[0].pods[0];
    assert_eq!(added.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
    let first_seen = added
        .annotation(CONFIG_FIRST_SEEN_ANNOTATION)
        .unwrap()
        .to_string();

    // Identical snapshot: nothing.
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("1", "a", "img:1")]),
    );
    assert!(out.is_empty(), "{out:?}");

    // Spec change: UPDATE, keeping the first-seen time.
    thread::sleep(Duration::from_millis(2));
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("1", "a", "img:2")]),
    );
    assert_eq!(ops(&out), vec![(PodOperation::Update, vec!["1".into()])]);
    let updated = &out[0].pods[0];
    assert_eq!(
        updated.annotation(CONFIG_FIRST_SEEN_ANNOTATION),
        Some(first_seen.as_str())
    );
    assert_eq!(spec(updated).containers[0].image.as_deref(), Some("img:2"));

    // Label change is an update; a kubelet-local annotation is not.
    let mut labelled = api_pod("1", "a", "img:2");
    labelled.metadata.labels = Some(BTreeMap::from([("k".into(), "v".into())]));
    let out = s.merge("file", PodUpdate::set("file", vec![labelled.clone()]));
    assert_eq!(ops(&out), vec![(PodOperation::Update, vec!["1".into()])]);
    labelled.metadata.annotations = Some(BTreeMap::from([(
        CONFIG_MIRROR_ANNOTATION.into(),
        "x".into(),
    )]));
    assert!(s
        .merge("file", PodUpdate::set("file", vec![labelled.clone()]))
        .is_empty());

    // Pod 1 replaced by pod 2: REMOVE before ADD.
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("2", "b", "img:1")]),
    );
    assert_eq!(
        ops(&out),
        vec![
            (PodOperation::Remove, vec!["1".into()]),
            (PodOperation::Add, vec!["2".into()])
        ]
    );
    assert_eq!(s.merged_state().len(), 1);
}

#[test]
fn merge_first_empty_set_signals_ready() {
    let (mut s, _) = storage();
    let out = s.merge("file", PodUpdate::set("file", vec![]));
    assert_eq!(ops(&out), vec![(PodOperation::Add, vec![])]);
    assert!(s.merge("file", PodUpdate::set("file", vec![])).is_empty());
}

#[test]
fn merge_status_only_reconciles_and_deletion_deletes() {
    let (mut s, _) = storage();
    s.merge("api", PodUpdate::set("api", vec![api_pod("1", "a", "img")]));

    let mut with_status = api_pod("1", "a", "img");
    with_status.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    let out = s.merge("api", PodUpdate::set("api", vec![with_status.clone()]));
    assert_eq!(ops(&out), vec![(PodOperation::Reconcile, vec!["1".into()])]);

    let mut deleting = with_status.clone();
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    deleting.metadata.deletion_grace_period_seconds = Some(30);
    let update = PodUpdate {
        pods: vec![Arc::new(deleting)],
        op: PodOperation::Update,
        source: "api".into(),
    };
    let out = s.merge("api", update);
    assert_eq!(ops(&out), vec![(PodOperation::Delete, vec!["1".into()])]);

    // Incremental ADD of another pod leaves the first one alone; REMOVE drops it.
    let add = PodUpdate {
        pods: vec![Arc::new(api_pod("2", "b", "img"))],
        op: PodOperation::Add,
        source: "api".into(),
    };
    assert_eq!(
        ops(&s.merge("api", add)),
        vec![(PodOperation::Add, vec!["2".into()])]
    );
    let remove = PodUpdate {
        pods: vec![Arc::new(api_pod("1", "a", "img"))],
        op: PodOperation::Remove,
        source: "api".into(),
    };
    assert_eq!(
        ops(&s.merge("api", remove)),
        vec![(PodOperation::Remove, vec!["1".into()])]
    );
    assert_eq!(s.merged_state().len(), 1);
}

#[test]
fn merge_drops_duplicate_names_in_one_snapshot() {
    let (mut s, _) = storage();
    let out = s.merge(
        "http",
        PodUpdate::set("http", vec![api_pod("1", "a", "x"), api_pod("2", "a", "y")]),
    );
    assert_eq!(ops(&out), vec![(PodOperation::Add, vec!["1".into()])]);
}

#[test]
fn pod_config_keeps_sources_apart_and_tracks_seen() {
    let config = PodConfig::new();
    let updates = config.updates();
    let file = config.channel(FILE_SOURCE);
    let http = config.channel(HTTP_SOURCE);
    let all = vec![FILE_SOURCE.to_string(), HTTP_SOURCE.to_string()];
    assert!(!config.seen_all_sources(&all));

    // The update's own source field is ignored: the channel decides.
    file.send(PodUpdate::set("bogus", vec![api_pod("f1", "a", "img")]))
        .unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!((u.op, u.source.as_str()), (PodOperation::Add, FILE_SOURCE));
    assert!(!config.seen_all_sources(&all), "http has not delivered yet");

    http.send(PodUpdate::set(HTTP_SOURCE, vec![api_pod("h1", "a", "img")]))
        .unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!((u.op, u.source.as_str()), (PodOperation::Add, HTTP_SOURCE));
    assert_eq!(u.pods[0].uid(), "h1");
    assert!(config.seen_all_sources(&all));
    assert!(
        !config.seen_all_sources(&all[..1]),
        "caller has not seen http yet"
    );

    // An empty file snapshot removes only the file pod.
    file.send(PodUpdate::set(FILE_SOURCE, vec![])).unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!(
        (u.op, u.source.as_str()),
        (PodOperation::Remove, FILE_SOURCE)
    );
    assert_eq!(u.pods[0].uid(), "f1");
    assert!(updates.recv_timeout(Duration::from_millis(200)).is_err());

    // Asking for a source again returns the same channel.
    config
        .channel(FILE_SOURCE)
        .send(PodUpdate::set(FILE_SOURCE, vec![]))
        .unwrap();
    assert!(updates.recv_timeout(Duration::from_millis(200)).is_err());
    assert_eq!(
        config.sources(),
        vec!["file".to_string(), "http".to_string()]
    );
}

#[test]
fn pod_config_with_file_source_end_to_end() {
    let dir = TempDir::new();
    dir.write("web.yaml", GOOD);
    let config = PodConfig::new();
    let updates = config.updates();
    let (stop, shutdown) = bounded(1);
    let handle = start_file_source(
        &dir.0,
        NODE,
        Duration::from_millis(200),
        config.channel(FILE_SOURCE),
        shutdown,
    )
    .unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!(u.op, PodOperation::Add);
    assert_eq!(names(&u), vec!["web-node-1"]);
    // Periodic identical snapshots produce nothing further.
    assert!(updates.recv_timeout(Duration::from_millis(700)).is_err());
    assert!(config.seen_all_sources(&[FILE_SOURCE.to_string()]));
    Running { handle, stop }.stop();
}

// ---------- http source ----------

/// Serves `bodies` in turn (the last one repeatedly) on 127.0.0.1, answering
/// 403 unless the request carries `X-Token: secret`. Stops after `max` requests.
fn serve(bodies: Vec<(u16, String)>, max: usize) -> (String, JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/pods", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let handle = thread::spawn(move || {
        let mut seen_headers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut i = 0;
        while i < max && Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                thread::sleep(Duration::from_millis(10));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorized = false;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("x-token:") {
                    authorized = line.trim_end().ends_with("secret");
                    seen_headers.push(line.trim_end().to_string());
                }
            }
            let (status, body) = if authorized {
                bodies[i.min(bodies.len() - 1)].clone()
            } else {
                (403, String::new())
            };
            let response = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
            i += 1;
        }
        seen_headers
    });
    (url, handle)
}

fn start_http(url: &str, token: &str, period: Duration) -> (Running, Receiver<PodUpdate>) {
    let (tx, rx) = bounded(16);
    let (stop, shutdown) = bounded(1);
    let headers = vec![("X-Token".to_string(), token.to_string())];
    let handle = start_http_source(url, headers, NODE, period, tx, shutdown).unwrap();
    (Running { handle, stop }, rx)
}

const POD_LIST: &str = r#"{"apiVersion":"v1","kind":"PodList","items":[
  {"metadata":{"name":"one"},"spec":{"containers":[{"name":"c","image":"busybox"}]}},
  {"metadata":{"name":"two"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}"#;

#[test]
fn http_source_pod_then_list_with_header() {
    let bodies = vec![
        (200, GOOD.to_string()),
        (500, "oops".to_string()),
        (200, POD_LIST.to_string()),
    ];
    let (url, server) = serve(bodies, 4);
    let (running, rx) = start_http(&url, "secret", Duration::from_millis(150));

    let first = recv_within(&rx, Duration::from_secs(3));
    assert_eq!(
        (first.op, first.source.as_str()),
        (PodOperation::Set, HTTP_SOURCE)
    );
    assert_eq!(names(&first), vec!["web-node-1"]);
    let pod = &first.pods[0];
    assert_eq!(pod.annotation(CONFIG_SOURCE_ANNOTATION), Some("http"));
    assert!(
        spec(pod).tolerations.is_none(),
        "the NoExecute toleration is for file pods"
    );

    // The 500 in between sends nothing; the list arrives next.
    let second = recv_within(&rx, Duration::from_secs(3));
    assert_eq!(names(&second), vec!["one-node-1", "two-node-1"]);
    assert_ne!(second.pods[0].uid(), second.pods[1].uid());

    // The same body again is not re-sent.
    assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());
    running.stop();
    let headers = server.join().unwrap();
    assert!(headers.iter().all(|h| h.ends_with("secret")), "{headers:?}");
}

#[test]
fn http_source_list_kind_and_empty_body() {
    let list = r#"{"apiVersion":"v1","kind":"List","items":[
      {"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}"#;
    let bodies = vec![(200, list.to_string()), (200, String::new())];
    let (url, server) = serve(bodies, 2);
    let (running, rx) = start_http(&url, "secret", Duration::from_millis(100));
    assert_eq!(
        names(&recv_within(&rx, Duration::from_secs(3))),
        vec!["x-node-1"]
    );
    assert!(
        recv_within(&rx, Duration::from_secs(3)).pods.is_empty(),
        "empty body means no pods"
    );
    running.stop();
    server.join().unwrap();
}

#[test]
fn http_source_failures_send_nothing() {
    // Wrong token: 403 every time. Then an invalid list (one bad pod).
    let (url, server) = serve(vec![(200, GOOD.to_string())], 2);
    let (running, rx) = start_http(&url, "wrong", Duration::from_millis(100));
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    running.stop();
    server.join().unwrap();

    let bad_list = POD_LIST.replace(r#""name":"two""#, r#""name":"Two!""#);
    let err = decode_pods(bad_list.as_bytes(), ManifestOrigin::Url("http://x"), NODE).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("items[1]") && message.contains("metadata.name"),
        "{message}"
    );
}

#[test]
fn decode_pods_accepts_single_pod_yaml() {
    let pods = decode_pods(GOOD.as_bytes(), ManifestOrigin::Url("http://x"), NODE).unwrap();
    assert_eq!(pods.len(), 1);
    let err = decode_pods(
        b"apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
        ManifestOrigin::Url("http://x"),
        NODE,
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("Service"));
}
