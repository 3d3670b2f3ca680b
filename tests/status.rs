//! Pod status and lifecycle end to end, as upstream's kubelet writes them:
//! the real rkubelet with --kubeconfig against the API server double and a
//! private containerd per test, as tests/volumes.rs. Each test asserts the
//! status object in the API (volatile values — times, IDs, IPs — checked
//! for their form, then masked).
//!
//! Test numbers (bridge, subnet, ports) 51..=56.
//!
//!     cargo test --release --test status -- --test-threads=2

mod common;

use std::time::Instant;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// The shared cluster, with rkubelet started.
fn started(name: &str, n: u32) -> Cluster {
    let mut cl = Cluster::new(name, n);
    cl.start_kubelet();
    cl
}

/// What status tests add to the shared cluster.
trait StatusCluster {
    fn patch(&self, path: &str, body: Value) -> Value;
    fn set_condition(&self, name: &str, ty: &str, status: &str, at: &str) -> Value;
}

impl StatusCluster for Cluster {
    /// A merge patch (what `kubectl patch --type=merge` sends).
    fn patch(&self, path: &str, body: Value) -> Value {
        self.api.must("PATCH", path, Some(&body), &[200])
    }

    /// Sets one condition in the pod's status as a controller does: read,
    /// change, write back with the resourceVersion read (retried on 409).
    fn set_condition(&self, name: &str, ty: &str, status: &str, at: &str) -> Value {
        let path = format!("{}/status", pod_path(name));
        for _ in 0..20 {
            let Some(pod) = self.api.pod(name) else {
                panic!("pod {name} is gone")
            };
            let mut conds = pod["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            conds.retain(|c| c["type"] != ty);
            conds.push(json!({"type": ty, "status": status, "lastTransitionTime": at}));
            let body = json!({
                "metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
                "status": {"conditions": conds},
            });
            match self.api.call("PATCH", &path, Some(&body)) {
                Ok((200, v)) => return v,
                Ok((409, _)) => continue,
                Ok((c, v)) => panic!("PATCH {path}: {c}: {v}"),
                Err(e) => panic!("PATCH {path}: {e}"),
            }
        }
        panic!("PATCH {path}: conflicts for 20 tries")
    }
}

fn with_spec(mut p: Value, extra: Value) -> Value {
    if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    p
}

fn busybox(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    })
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_time(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|t| t.len() == 20 && t.ends_with('Z'))
}

/// `v` without its null fields: the real server serves a zero time as
/// null (`lastProbeTime: null`), the same value as absent in the API's Go
/// types.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Checks the form of every volatile value in a pod status and masks it,
/// so the rest compares exactly.
fn masked(status: &Value) -> Value {
    fn walk(k: &str, v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|_, v| !v.is_null()); // as without_nulls
                for (k, v) in m.iter_mut() {
                    walk(k, v);
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| walk(k, v)),
            _ => {}
        }
        match k {
            "lastTransitionTime" | "startTime" | "startedAt" | "finishedAt" => {
                assert!(is_time(v), "{k}: {v}");
                *v = json!("<time>");
            }
            "containerID" => {
                let id = v.as_str().unwrap_or("");
                let hex = id.strip_prefix("containerd://").unwrap_or(id);
                assert!(is_hex64(hex), "containerID {v}");
                *v = json!("<id>");
            }
            // Upstream's imageID is CRI's image_ref as is: containerd gives
            // the repo digest of a pulled image, and the image ID of one
            // imported without (as the test images are).
            "imageID" if v != "" => {
                let s = v.as_str().unwrap_or("");
                let digest = s
                    .strip_prefix("docker.io/library/busybox@sha256:")
                    .or_else(|| s.strip_prefix("sha256:"));
                assert!(digest.is_some_and(is_hex64), "imageID {v}");
                *v = json!("<digest>");
            }
            "hostIP" | "podIP" | "ip" => {
                let ip = v.as_str().unwrap_or("");
                assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{k}: {v}");
                *v = json!("<ip>");
            }
            _ => {}
        }
    }
    let mut s = status.clone();
    walk("", &mut s);
    s
}

fn cond(ty: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut c = json!({"type": ty, "status": status, "lastTransitionTime": "<time>", "observedGeneration": 1});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// A condition as a stale writer might leave it (only type and status).
fn cond_now(ty: &str, status: &str) -> Value {
    json!({"type": ty, "status": status, "lastTransitionTime": "2001-01-01T00:00:00Z"})
}

fn terminated(code: i32, reason: &str) -> Value {
    json!({"terminated": {
        "exitCode": code, "reason": reason, "startedAt": "<time>",
        "finishedAt": "<time>", "containerID": "<id>",
    }})
}

fn waiting(reason: &str) -> Value {
    json!({"waiting": {"reason": reason}})
}

fn image_name() -> Value {
    json!(BUSYBOX)
}

/// The volumeMounts a busybox container shows: the token volume the
/// double's ServiceAccount admission adds.
fn sa_mounts(pod: &Value, container: &str, init: bool) -> Value {
    let list = if init { "initContainers" } else { "containers" };
    let mounts = pod["spec"][list]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container))
        .map(|c| c["volumeMounts"].clone())
        .unwrap_or(Value::Null);
    let Some(ms) = mounts.as_array() else {
        return Value::Null;
    };
    Value::Array(
        ms.iter()
            .map(|m| {
                let mut s = json!({"name": m["name"], "mountPath": m["mountPath"]});
                if m["readOnly"] == true {
                    s["readOnly"] = json!(true);
                    s["recursiveReadOnly"] = json!("Disabled");
                }
                s
            })
            .collect(),
    )
}

fn container_status(
    pod: &Value,
    name: &str,
    init: bool,
    state: Value,
    ready: bool,
    started: bool,
) -> Value {
    let mut c = json!({
        "name": name, "image": image_name(), "imageID": "<digest>",
        "containerID": "<id>", "restartCount": 0, "ready": ready,
        "started": started, "state": state, "lastState": {},
        // v1.33+ (the double's default release): a container with an
        // instance reports its resources, `{}` when it sets none, as the
        // v1.34 capture's init and app containers do.
        "resources": {},
    });
    let mounts = sa_mounts(pod, name, init);
    if !mounts.is_null() {
        c["volumeMounts"] = mounts;
    }
    c
}

fn not_created(pod: &Value, name: &str, init: bool, reason: &str) -> Value {
    let mut c = json!({
        "name": name, "image": image_name(), "imageID": "", "restartCount": 0,
        "ready": false, "started": false, "state": waiting(reason), "lastState": {},
    });
    let mounts = sa_mounts(pod, name, init);
    if !mounts.is_null() {
        c["volumeMounts"] = mounts;
    }
    c
}

/// The fields every running pod's status has, masked.
fn base(phase: &str) -> Value {
    json!({
        "phase": phase, "qosClass": "BestEffort", "observedGeneration": 1,
        "hostIP": "<ip>", "hostIPs": [{"ip": "<ip>"}],
        "podIP": "<ip>", "podIPs": [{"ip": "<ip>"}], "startTime": "<time>",
    })
}

fn assert_status(pod: &Value, want: Value) {
    let got = masked(&pod["status"]);
    if got == want {
        return;
    }
    let (g, w) = (
        serde_json::to_string_pretty(&got).unwrap_or_default(),
        serde_json::to_string_pretty(&want).unwrap_or_default(),
    );
    let (gl, wl): (Vec<&str>, Vec<&str>) = (g.lines().collect(), w.lines().collect());
    let first = gl
        .iter()
        .zip(&wl)
        .position(|(a, b)| a != b)
        .unwrap_or(gl.len().min(wl.len()));
    let from = first.saturating_sub(8);
    panic!(
        "status differs at line {first}\ngot:\n{}\nwant:\n{}\nfull status got:\n{g}",
        gl[from..gl.len().min(first + 8)].join("\n"),
        wl[from..wl.len().min(first + 8)].join("\n"),
    );
}

/// Two init containers complete, the app container runs: while init runs
/// the app waits PodInitializing; then the completed init containers are
/// ready and not started, as upstream.
#[test]
fn init_containers_succeed() {
    let mut cl = started("init_containers_succeed", 51);
    let pod = with_spec(
        api_pod("init-ok", SLEEPER),
        json!({"initContainers": [
            busybox("i1", "sleep 4"),
            busybox("i2", "true"),
        ]}),
    );
    let created = cl.api.create_pod(&pod);
    let p = cl.wait_pod("init-ok", secs(60), "i1 running, app waiting", |p| {
        p["status"]["initContainerStatuses"][0]["state"]["running"].is_object()
    });
    let mut want = base("Pending");
    want["conditions"] = json!([
        cond("PodReadyToStartContainers", "True", None, None),
        cond(
            "Initialized",
            "False",
            Some("ContainersNotInitialized"),
            Some("containers with incomplete status: [i1 i2]")
        ),
        cond(
            "Ready",
            "False",
            Some("ContainersNotReady"),
            Some("containers with unready status: [c]")
        ),
        cond(
            "ContainersReady",
            "False",
            Some("ContainersNotReady"),
            Some("containers with unready status: [c]")
        ),
        cond("PodScheduled", "True", None, None),
    ]);
    let i1 = container_status(
        &created,
        "i1",
        true,
        json!({"running": {"startedAt": "<time>"}}),
        false,
        true,
    );
    let i2 = not_created(&created, "i2", true, "PodInitializing");
    want["initContainerStatuses"] = json!([i1, i2]);
    want["containerStatuses"] = json!([not_created(&created, "c", false, "PodInitializing")]);
    assert_status(&p, want);

    let p = cl.wait_pod("init-ok", secs(60), "Running and Ready", running_ready);
    let mut want = base("Running");
    want["conditions"] = json!([
        cond("PodReadyToStartContainers", "True", None, None),
        cond("Initialized", "True", None, None),
        cond("Ready", "True", None, None),
        cond("ContainersReady", "True", None, None),
        cond("PodScheduled", "True", None, None),
    ]);
    want["initContainerStatuses"] = json!([
        container_status(
            &created,
            "i1",
            true,
            terminated(0, "Completed"),
            true,
            false
        ),
        container_status(
            &created,
            "i2",
            true,
            terminated(0, "Completed"),
            true,
            false
        ),
    ]);
    want["containerStatuses"] = json!([container_status(
        &created,
        "c",
        false,
        json!({"running": {"startedAt": "<time>"}}),
        true,
        true
    )]);
    assert_status(&p, want);
}

/// An init container fails under RestartNever: the pod fails, no app
/// container is ever created, and Initialized says which one.
#[test]
fn init_container_fails_under_restart_never() {
    let mut cl = started("init_container_fails_under_restart_never", 52);
    let pod = with_spec(
        api_pod("init-fail", SLEEPER),
        json!({"restartPolicy": "Never", "initContainers": [busybox("init1", "exit 3")]}),
    );
    let created = cl.api.create_pod(&pod);
    cl.wait_pod("init-fail", secs(60), "Failed", |p| phase(p) == "Failed");
    // The first Failed status can be written before the sandbox is stopped
    // (PodReadyToStartContainers still True), as upstream's can: wait for
    // the status after termination, then give the kubelet a few more syncs.
    cl.wait_pod("init-fail", secs(60), "sandbox stopped", |p| {
        condition(p, "PodReadyToStartContainers").is_some_and(|c| c["status"] == "False")
    });
    std::thread::sleep(secs(3));
    let p2 = cl.api.pod("init-fail").expect("the pod stays");
    let mut want = base("Failed");
    want["conditions"] = json!([
        cond("PodReadyToStartContainers", "False", None, None),
        cond(
            "Initialized",
            "False",
            Some("ContainersNotInitialized"),
            Some("containers with incomplete status: [init1]")
        ),
        cond("Ready", "False", Some("PodFailed"), None),
        cond("ContainersReady", "False", Some("PodFailed"), None),
        cond("PodScheduled", "True", None, None),
    ]);
    want["initContainerStatuses"] = json!([container_status(
        &created,
        "init1",
        true,
        terminated(3, "Error"),
        false,
        false
    )]);
    want["containerStatuses"] = json!([not_created(&created, "c", false, "PodInitializing")]);
    assert_status(&p2, want);
    let snap = cl.env.snapshot();
    assert!(
        snap.instances("init-fail", "c").is_empty(),
        "an app container was created: {}",
        snap.summary()
    );
}

/// A readiness gate another writer flips: Ready follows it, and the
/// kubelet's own status updates never drop the gate's condition.
#[test]
fn readiness_gate_flipped_by_another_writer() {
    let mut cl = started("readiness_gate_flipped_by_another_writer", 53);
    const GATE: &str = "example.com/ready";
    let pod = with_spec(
        api_pod("gated", SLEEPER),
        json!({"readinessGates": [{"conditionType": GATE}]}),
    );
    let created = cl.api.create_pod(&pod);
    let running = json!({"running": {"startedAt": "<time>"}});
    let p = cl.wait_pod("gated", secs(60), "Running, containers ready", |p| {
        phase(p) == "Running" && condition_true(p, "ContainersReady")
    });
    let mut want = base("Running");
    let kubelet_conds = |ready: Value| {
        json!([
            cond("PodReadyToStartContainers", "True", None, None),
            cond("Initialized", "True", None, None),
            ready,
            cond("ContainersReady", "True", None, None),
            cond("PodScheduled", "True", None, None),
        ])
    };
    want["conditions"] = kubelet_conds(cond(
        "Ready",
        "False",
        Some("ReadinessGatesNotReady"),
        Some("corresponding condition of pod readiness gate \"example.com/ready\" does not exist."),
    ));
    want["containerStatuses"] = json!([container_status(
        &created,
        "c",
        false,
        running.clone(),
        true,
        true
    )]);
    assert_status(&p, want.clone());

    // The gate appears, False.
    let at = "2001-02-03T04:05:06Z";
    cl.set_condition("gated", GATE, "False", at);
    let msg = "the status of pod readiness gate \"example.com/ready\" is not \"True\", but False";
    let p = cl.wait_pod("gated", secs(60), "Ready says the gate is False", |p| {
        condition(p, "Ready").is_some_and(|c| c["message"] == msg)
    });
    let gate = |status: &str| json!({"type": GATE, "status": status, "lastTransitionTime": at});
    let mut conds = vec![gate("False")];
    conds.extend(
        kubelet_conds(cond(
            "Ready",
            "False",
            Some("ReadinessGatesNotReady"),
            Some(msg),
        ))
        .as_array()
        .cloned()
        .unwrap_or_default(),
    );
    want["conditions"] = Value::Array(conds);
    let mut masked_want = want.clone();
    // The gate's time is the writer's own, kept as written.
    masked_want["conditions"][0]["lastTransitionTime"] = json!("<time>");
    assert_status(&p, masked_want.clone());
    assert_eq!(
        condition(&p, GATE).map(|c| c["lastTransitionTime"].clone()),
        Some(json!(at))
    );

    // Flipped True: Ready turns True.
    cl.set_condition("gated", GATE, "True", at);
    let p = cl.wait_pod("gated", secs(60), "Ready", |p| condition_true(p, "Ready"));
    let mut conds = vec![gate("True")];
    conds.extend(
        kubelet_conds(cond("Ready", "True", None, None))
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    masked_want["conditions"] = Value::Array(conds);
    masked_want["conditions"][0]["lastTransitionTime"] = json!("<time>");
    assert_status(&p, masked_want.clone());

    // A restarted kubelet starts its status afresh and writes it again: the
    // gate condition stays as the writer left it, and so does Ready.
    cl.env.kill_kubelet();
    cl.patch(
        &format!("{}/status", pod_path("gated")),
        json!({"status": {"conditions": [gate("True"), cond_now("Ready", "False")]}}),
    );
    cl.start_kubelet();
    let p = cl.wait_pod("gated", secs(60), "Ready again", |p| {
        condition_true(p, "Ready")
    });
    assert_eq!(
        condition(&p, GATE).map(without_nulls),
        Some(gate("True")),
        "{}",
        pretty_status(&p)
    );
    assert!(condition_true(&p, "Ready"), "{}", pretty_status(&p));
}

/// activeDeadlineSeconds: 5 s after the pod started, it fails with
/// DeadlineExceeded and its container is stopped.
#[test]
fn active_deadline_fails_the_pod() {
    let mut cl = started("active_deadline_fails_the_pod", 54);
    let pod = with_spec(
        api_pod("deadline", SLEEPER),
        json!({"activeDeadlineSeconds": 5}),
    );
    let created = cl.api.create_pod(&pod);
    cl.wait_pod("deadline", secs(60), "Running", |p| phase(p) == "Running");
    let t0 = Instant::now();
    let p = cl.wait_pod("deadline", secs(60), "Failed", |p| phase(p) == "Failed");
    let start = p["status"]["startTime"].as_str().unwrap_or("").to_string();
    assert!(
        t0.elapsed() <= secs(20),
        "failed only after {:?}",
        t0.elapsed()
    );
    assert_eq!(
        p["status"]["reason"],
        "DeadlineExceeded",
        "{}",
        pretty_status(&p)
    );
    assert_eq!(
        p["status"]["message"],
        "Pod was active on the node longer than the specified deadline"
    );
    let env = &mut cl.env;
    eventually(secs(30), "the container stopped", || {
        env.snapshot()
            .running("deadline", "c")
            .is_none()
            .then_some(())
    });
    let p = cl.wait_pod("deadline", secs(60), "container terminated", |p| {
        p["status"]["containerStatuses"][0]["state"]["terminated"].is_object()
    });
    let mut want = base("Failed");
    want["reason"] = json!("DeadlineExceeded");
    want["message"] = json!("Pod was active on the node longer than the specified deadline");
    want["conditions"] = json!([
        cond("PodReadyToStartContainers", "False", None, None),
        cond("Initialized", "True", None, None),
        cond("Ready", "False", Some("PodFailed"), None),
        cond("ContainersReady", "False", Some("PodFailed"), None),
        cond("PodScheduled", "True", None, None),
    ]);
    // SLEEPER exits 0 on SIGTERM.
    want["containerStatuses"] = json!([container_status(
        &created,
        "c",
        false,
        terminated(0, "Completed"),
        false,
        false
    )]);
    assert_status(&p, want);
    assert_eq!(p["status"]["startTime"], json!(start));
    let events = cl.api.events_for("default", "deadline");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "DeadlineExceeded" && e["type"] == "Normal"),
        "no DeadlineExceeded event: {events:?}"
    );
}

/// Raising and lowering activeDeadlineSeconds on a running pod takes
/// effect: raised past its first deadline it keeps running; lowered below
/// its age it fails at once.
#[test]
fn active_deadline_update_takes_effect() {
    let mut cl = started("active_deadline_update_takes_effect", 55);
    let pod = with_spec(
        api_pod("deadline-upd", SLEEPER),
        json!({"activeDeadlineSeconds": 8}),
    );
    cl.api.create_pod(&pod);
    cl.wait_pod("deadline-upd", secs(60), "Running", |p| {
        phase(p) == "Running"
    });
    cl.patch(
        &pod_path("deadline-upd"),
        json!({"spec": {"activeDeadlineSeconds": 3600}}),
    );
    // Well past the first deadline: still running.
    std::thread::sleep(secs(12));
    let p = cl.api.pod("deadline-upd").expect("pod");
    assert_eq!(phase(&p), "Running", "{}", pretty_status(&p));
    assert!(cl.env.snapshot().running("deadline-upd", "c").is_some());
    // Lowered below its age: fails at the next sync.
    let t0 = Instant::now();
    cl.patch(
        &pod_path("deadline-upd"),
        json!({"spec": {"activeDeadlineSeconds": 5}}),
    );
    let p = cl.wait_pod("deadline-upd", secs(60), "Failed", |p| phase(p) == "Failed");
    assert!(t0.elapsed() < secs(10), "took {:?}", t0.elapsed());
    assert_eq!(p["status"]["reason"], "DeadlineExceeded");
    let env = &mut cl.env;
    eventually(secs(30), "the container stopped", || {
        env.snapshot()
            .running("deadline-upd", "c")
            .is_none()
            .then_some(())
    });
}
