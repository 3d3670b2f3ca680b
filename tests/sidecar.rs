//! Sidecar containers (init containers with `restartPolicy: Always`,
//! KEP-753) end to end: the real rkubelet against the API server double and
//! a private containerd per test, as tests/status.rs.
//!
//! Test numbers (bridge, subnet, ports) 70..=74.
//!
//!     cargo test --release --test sidecar -- --test-threads=1

mod common;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

fn started(name: &str, n: u32) -> Cluster {
    let mut cl = Cluster::new(name, n);
    cl.start_kubelet();
    cl
}

fn busybox(name: &str, script: &str) -> Value {
    json!({
        "name": name,
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
        "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
    })
}

fn sidecar(name: &str, script: &str) -> Value {
    let mut c = busybox(name, script);
    c["restartPolicy"] = json!("Always");
    c
}

/// `api_pod` with a shared emptyDir at /shared in every container, the
/// given init containers and app script.
fn pod(name: &str, policy: &str, inits: Vec<Value>, app: &str) -> Value {
    let mut p = api_pod(name, app);
    p["spec"]["restartPolicy"] = json!(policy);
    p["spec"]["volumes"] = json!([{"name": "shared", "emptyDir": {}}]);
    p["spec"]["containers"] = json!([busybox("c", app)]);
    p["spec"]["initContainers"] = Value::Array(inits);
    p
}

fn init_status<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["status"]["initContainerStatuses"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The sidecar's startup probe holds back the next init container; the app
/// runs beside the sidecar, whose readiness counts for Ready; the sidecar
/// is restarted when it exits, without the pod going back to Pending or
/// the app container restarting.
#[test]
fn sidecar_runs_beside_app_and_restarts() {
    let mut cl = started("sidecar_runs_beside_app_and_restarts", 70);
    // Started after 2 s; the first instance exits 1 after 6 s, the second
    // stays.
    let mut proxy = sidecar(
        "proxy",
        &format!(
            "sleep 2; touch /shared/started; \
             if [ ! -e /shared/crashed ]; then sleep 6; touch /shared/crashed; exit 1; fi; {SLEEPER}"
        ),
    );
    proxy["startupProbe"] = json!({
        "exec": {"command": ["test", "-e", "/shared/started"]},
        "periodSeconds": 1, "failureThreshold": 30,
    });
    proxy["readinessProbe"] = json!({
        "exec": {"command": ["test", "-e", "/shared/started"]},
        "periodSeconds": 1,
    });
    // Fails (and would be restarted) if it ran before the sidecar started.
    let check = busybox("check", "test -e /shared/started");
    let p = pod(
        "with-sidecar",
        "Always",
        vec![proxy, check],
        &format!("test -e /shared/started || exit 1; {SLEEPER}"),
    );
    cl.api.create_pod(&p);

    let p = cl.wait_pod("with-sidecar", secs(60), "Running and Ready", running_ready);
    let proxy = init_status(&p, "proxy");
    assert!(proxy["state"]["running"].is_object(), "{proxy}");
    assert_eq!(
        (&proxy["started"], &proxy["ready"]),
        (&json!(true), &json!(true))
    );
    let check = init_status(&p, "check");
    assert_eq!(check["state"]["terminated"]["exitCode"], 0, "{check}");
    assert_eq!(
        check["restartCount"], 0,
        "the init container after the sidecar ran before it started: {check}"
    );
    assert!(condition_true(&p, "Initialized"), "{}", pretty_status(&p));

    // The sidecar crashes once and comes back after its back-off (10 s);
    // meanwhile the pod stays Running.
    let mut phases = Vec::new();
    let p = cl.wait_pod("with-sidecar", secs(60), "sidecar restarted", |p| {
        phases.push(phase(p).to_string());
        let proxy = init_status(p, "proxy");
        proxy["restartCount"] == 1 && proxy["ready"] == true && running_ready(p)
    });
    assert!(
        phases.iter().all(|ph| ph == "Running"),
        "phase left Running while the sidecar restarted: {phases:?}"
    );
    let proxy = init_status(&p, "proxy");
    assert_eq!(proxy["lastState"]["terminated"]["exitCode"], 1, "{proxy}");
    assert_eq!(
        p["status"]["containerStatuses"][0]["restartCount"],
        0,
        "{}",
        pretty_status(&p)
    );
}

/// A RestartNever pod whose app container exits 0 succeeds although its
/// sidecars still ran; the kubelet then stops them, the later-declared
/// sidecar first.
#[test]
fn never_pod_succeeds_and_sidecars_stop_in_reverse_order() {
    let mut cl = started("never_pod_succeeds_and_sidecars_stop_in_reverse_order", 71);
    // s2 takes 2 s to stop after SIGTERM; s1 stops at once. Stopped
    // together, s1 would finish first.
    let s1 = sidecar("s1", SLEEPER);
    let s2 = sidecar(
        "s2",
        "trap 'sleep 2; exit 0' TERM; while true; do sleep 1; done",
    );
    let p = pod("job", "Never", vec![s1, s2], "sleep 3; exit 0");
    cl.api.create_pod(&p);

    let p = cl.wait_pod("job", secs(60), "Succeeded", |p| phase(p) == "Succeeded");
    let c = &p["status"]["containerStatuses"][0];
    assert_eq!(c["state"]["terminated"]["exitCode"], 0, "{c}");
    for s in ["s1", "s2"] {
        let st = init_status(&p, s);
        assert!(st["state"]["terminated"].is_object(), "{s}: {st}");
        assert_eq!(st["restartCount"], 0, "{s} was restarted: {st}");
    }
    assert!(condition_true(&p, "Initialized"), "{}", pretty_status(&p));
    let ready = condition(&p, "Ready").cloned().unwrap_or_default();
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("PodCompleted"))
    );

    let snap = cl.env.snapshot();
    let finished = |name: &str| {
        let insts = snap.instances("job", name);
        assert_eq!(insts.len(), 1, "{name}: {}", snap.summary());
        assert!(!insts[0].running, "{name} still runs: {}", snap.summary());
        insts[0]
            .status
            .as_ref()
            .map(|s| s.finished_at)
            .unwrap_or_else(|| panic!("{name}: no CRI status: {}", snap.summary()))
    };
    let (c, s1, s2) = (finished("c"), finished("s1"), finished("s2"));
    assert!(
        c < s2 && s2 < s1,
        "stop order: c {c}, s2 {s2}, s1 {s1} (ns); want c, then s2, then s1"
    );
}
