//! End-to-end: container stops run off the pod workers (issue 9), so
//! deleting many pods whose containers ignore SIGTERM takes one grace
//! period, not one per four pods; preStop exec hooks still run first. The
//! real rkubelet against a real containerd and the API server double.
//!
//!     cargo test --release --test deletion

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::threads::*;
use common::*;
use serde_json::{json, Value};

const GRACE: u64 = 10;
const PODS: usize = 14;

/// The text of the pod's container log (CRI format, any uid).
fn container_log(env: &Env, pod: &str) -> String {
    let prefix = format!("default_{pod}_");
    fs::read_dir(&env.pod_logs)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|e| fs::read_to_string(e.path().join("c").join("0.log")).ok())
        .collect()
}

fn with_pre_stop(mut p: Value, cmd: &str) -> Value {
    p["spec"]["containers"][0]["lifecycle"] =
        json!({"preStop": {"exec": {"command": ["sh", "-c", cmd]}}});
    p
}

#[test]
fn graceful_deletes_overlap() {
    let mut cl = Cluster::new("graceful_deletes_overlap", 62);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    // PID 1 ignores TERM: only the KILL at the end of the grace period stops it.
    let script = "trap '' TERM; while true; do sleep 1; done";
    let mut names = vec![];
    for i in 0..PODS {
        let name = format!("slow{i}");
        let mut p = api_pod(&name, script);
        p["spec"]["terminationGracePeriodSeconds"] = json!(GRACE);
        // Two pods have preStop exec hooks: one writes to the container's
        // stdout (so its log shows it ran), one fails.
        if i == 0 {
            p = with_pre_stop(p, "echo prestop-ran > /proc/1/fd/1");
        } else if i == 1 {
            p = with_pre_stop(p, "exit 3");
        }
        cl.api.create_pod(&p);
        names.push(name);
    }
    for n in &names {
        cl.wait_pod_ready(n, secs(60));
    }
    let pid = cl.env.kubelet_pid().expect("rkubelet runs");
    let threads_before = own_threads(pid).len();

    let t0 = Instant::now();
    for n in &names {
        cl.api.must("DELETE", &pod_path(n), None, &[200]);
    }
    let mut threads_max = threads_before;
    let mut left = names.clone();
    let deadline = Duration::from_secs(GRACE + 20);
    // The log goes with the pod: look for the hook's line while it stops.
    let mut hook_ran = false;
    while !left.is_empty() && t0.elapsed() < deadline {
        cl.env.assert_kubelet_alive();
        hook_ran = hook_ran || container_log(&cl.env, "slow0").contains("prestop-ran");
        threads_max = threads_max.max(own_threads(pid).len());
        left.retain(|n| !matches!(cl.api.get_or_gone(&pod_path(n)), Ok(None)));
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = t0.elapsed();
    eprintln!("{PODS} pods (grace {GRACE} s) gone from the API {took:?} after DELETE; threads of ours {threads_before} -> max {threads_max}");
    assert!(left.is_empty(), "still in the API after {took:?}: {left:?}");
    assert!(
        took >= Duration::from_secs(GRACE) - Duration::from_millis(500),
        "gone after {took:?}: the {GRACE} s grace of containers that ignore TERM was not honoured"
    );
    // Four workers holding each stop would take ⌈14/4⌉ × 10 s = 40 s; the
    // sandbox teardowns after the grace still run on the workers, which
    // under a loaded CI machine may take several seconds.
    assert!(
        took <= Duration::from_secs(GRACE * 2),
        "{PODS} deletions took {took:?}: stops did not overlap"
    );
    // No thread per stop. A watch's new reader may start before the old
    // one has seen its socket shut (three watches): the only overlap.
    assert!(
        threads_max <= threads_before + 3,
        "our threads grew with the stops: {threads_before} -> {threads_max}"
    );
    wait_until(secs(10), "every sandbox to stop", || {
        cl.env.try_snapshot().is_ok_and(|s| {
            s.objs
                .iter()
                .all(|o| !o.running || !names.iter().any(|n| o.pod_name() == n.as_str()))
        })
    });

    assert!(hook_ran, "the preStop hook of slow0 did not run");
    let events = cl.api.events_for("default", "slow1");
    assert!(
        events.iter().any(|e| e["reason"] == "FailedPreStopHook"),
        "no FailedPreStopHook for slow1: {:?}",
        events.iter().map(|e| &e["reason"]).collect::<Vec<_>>()
    );
    for n in &names {
        let events = cl.api.events_for("default", n);
        // One Killing per container, however often the pod was looked at.
        let killing: u64 = events
            .iter()
            .filter(|e| e["reason"] == "Killing")
            .map(|e| e["count"].as_u64().unwrap_or(1))
            .sum();
        assert_eq!(killing, 1, "{n}: Killing events {events:?}");
    }
}

/// A listener on the host's loopback that accepts and never answers: an
/// httpGet hook aimed at it hangs until its timeout.
fn hanging_listener() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let port = l.local_addr().expect("listener address").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

/// Slow hooks of every kind, one per pod: an exec `sleep 60`, three
/// `sleep` actions of 60 s and an httpGet to a listener that never answers.
/// The four that are not exec would hold all four pod workers if they ran
/// there.
fn slow_hooks(hanging_port: u16) -> Vec<Value> {
    let exec = json!({"exec": {"command": ["sh", "-c", "sleep 60"]}});
    let sleep = json!({"sleep": {"seconds": 60}});
    let http = json!({"httpGet": {"host": "127.0.0.1", "port": hanging_port, "path": "/hook"}});
    vec![exec, sleep.clone(), sleep.clone(), sleep, http]
}

/// A pod of one container that exits at once on TERM; `lifecycle` as given.
fn hooked_pod(name: &str, grace: u64, lifecycle: Option<Value>) -> Value {
    let mut c = json!({
        "name": "c",
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
    });
    if let Some(l) = lifecycle {
        c["lifecycle"] = l;
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"terminationGracePeriodSeconds": grace, "containers": [c]},
    })
}

/// Slow postStart hooks cost their own pods only: with every pod worker's
/// worth of pods inside a long hook of each kind (exec, sleep, httpGet), another
/// pod still starts at once (synchronous hooks would hold all four workers
/// for a minute).
#[test]
fn slow_post_start_hooks_hold_only_their_pods() {
    let mut env = Env::new("slow_post_start_hooks_hold_only_their_pods", 63);
    let hooks = slow_hooks(hanging_listener());
    for (i, hook) in hooks.iter().enumerate() {
        let name = format!("hook{i}");
        let pod = hooked_pod(&name, 1, Some(json!({"postStart": hook})));
        env.write_manifest(&format!("{name}.yaml"), &pod.to_string());
    }
    env.start_kubelet();
    for i in 0..hooks.len() {
        env.wait_running(&format!("hook{i}-node1"), &["c"], secs(30));
    }
    // Every hook is now under way. A plain pod arrives.
    let t0 = Instant::now();
    env.write_manifest("plain.yaml", &hooked_pod("plain", 1, None).to_string());
    env.wait_running("plain-node1", &["c"], secs(20));
    let took = t0.elapsed();
    eprintln!("plain pod running {took:?} after its manifest, with 5 postStart hooks under way");
    env.assert_kubelet_alive();
    assert!(
        took < secs(6),
        "a plain pod took {took:?} to run beside 5 slow postStart hooks: hooks hold workers"
    );
}

/// Slow preStop hooks of every kind hold back their own containers' stops
/// (the hook runs first, within the grace period) and nothing else: with
/// five pods stopping behind minute-long hooks, a new pod starts at once.
#[test]
fn slow_pre_stop_hooks_hold_only_their_pods() {
    let mut env = Env::new("slow_pre_stop_hooks_hold_only_their_pods", 64);
    let hooks = slow_hooks(hanging_listener());
    for (i, hook) in hooks.iter().enumerate() {
        let name = format!("stop{i}");
        let pod = hooked_pod(&name, 90, Some(json!({"preStop": hook})));
        env.write_manifest(&format!("{name}.yaml"), &pod.to_string());
    }
    env.start_kubelet();
    for i in 0..hooks.len() {
        env.wait_running(&format!("stop{i}-node1"), &["c"], secs(30));
    }
    for i in 0..hooks.len() {
        env.remove_manifest(&format!("stop{i}.yaml"));
    }
    wait_until(secs(20), "a Killing event for each pod", || {
        env.log().matches("Stopping container c").count() >= hooks.len()
    });
    let t0 = Instant::now();
    env.write_manifest("plain.yaml", &hooked_pod("plain", 1, None).to_string());
    env.wait_running("plain-node1", &["c"], secs(20));
    let took = t0.elapsed();
    eprintln!("plain pod running {took:?} after its manifest, with 5 preStop hooks under way");
    env.assert_kubelet_alive();
    assert!(
        took < secs(6),
        "a plain pod took {took:?} to run beside 5 slow preStop hooks: hooks hold workers"
    );
    // The hooks are honoured: the containers, which exit on TERM at once,
    // are still running, since no TERM comes before their hooks end.
    let snap = env.snapshot();
    for i in 0..hooks.len() {
        assert!(
            snap.running(&format!("stop{i}-node1"), "c").is_some(),
            "stop{i} was stopped before its preStop hook ended:\n{}",
            snap.summary()
        );
    }
}
