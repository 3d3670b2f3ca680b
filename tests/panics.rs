//! End-to-end: a panic in one pod's sync costs that pod a back-off and
//! nothing else (issue 9). The panic is injected through the test-only
//! `fault-injection` feature (src/util/fault.rs), which `make test`
//! enables and release builds leave out.
//!
//!     cargo test --release --features fault-injection --test panics

mod common;

use std::time::Instant;

use common::threads::*;
use common::*;
use serde_json::json;

/// The kubelet server and healthz have a thread per open connection (our
/// own /metrics read here, the harness's /healthz): not module threads.
const NOT_MODULES: &[&str] = &["kubelet-conn", "healthz-conn"];
/// rkubelet's module threads: its own threads (tests/common/threads.rs)
/// but the servers' per-connection ones.
fn module_threads(pid: u32) -> Vec<String> {
    own_threads(pid)
        .into_iter()
        .filter(|n| !NOT_MODULES.contains(&n.as_str()))
        .collect()
}

fn manifest(name: &str, panics: Option<u32>) -> String {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", SLEEPER],
            }],
        },
    });
    if let Some(n) = panics {
        p["metadata"]["annotations"] = json!({"rkubelet.test/panic-syncs": n.to_string()});
    }
    p.to_string()
}

/// `kubelet_module_panics_total{module="pod-worker"}` from /metrics.
fn pod_worker_panics(ro_port: u16) -> Option<f64> {
    let text = read_only_text(ro_port, "/metrics")?;
    text.lines()
        .find(|l| l.starts_with("kubelet_module_panics_total{module=\"pod-worker\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_panicking_sync_costs_only_its_pod_a_back_off() {
    let mut env = Env::new("a_panicking_sync_costs_only_its_pod_a_back_off", 65);
    let ro_port = env.open_read_only_port();
    env.write_manifest("warmup.yaml", &manifest("warmup", None));
    env.start_kubelet_healthy();
    env.wait_running("warmup-node1", &["c"], secs(30));
    let pid = env.kubelet_pid().expect("rkubelet runs");
    std::thread::sleep(secs(2));
    let threads_before = module_threads(pid);

    // Four pods whose first two syncs panic, as many as there are pod
    // workers, then a plain one.
    let t0 = Instant::now();
    for i in 0..4 {
        env.write_manifest(
            &format!("boom{i}.yaml"),
            &manifest(&format!("boom{i}"), Some(2)),
        );
    }
    env.write_manifest("calm.yaml", &manifest("calm", None));
    env.wait_running("calm-node1", &["c"], secs(20));
    let calm_took = t0.elapsed();
    // Each panic is logged with its pod and counted.
    wait_until(secs(10), "the first panics in the log", || {
        (0..4).all(|i| {
            env.log_lines_with(&format!("boom{i}-node1_default"))
                .iter()
                .any(|l| l.contains("step panicked") && l.contains("injected panic 1 of 2"))
        })
    });
    // The pods are retried after the worker back-off (10 s), twice, and run.
    for i in 0..4 {
        env.wait_running(&format!("boom{i}-node1"), &["c"], secs(60));
    }
    let boom_took = t0.elapsed();
    eprintln!("calm running after {calm_took:?}; the panicking pods after {boom_took:?}");
    env.assert_kubelet_alive();
    assert!(
        calm_took < secs(10),
        "a plain pod took {calm_took:?} beside four panicking ones"
    );
    assert!(
        boom_took >= secs(15),
        "the panicking pods ran after {boom_took:?}: two panics each should cost two back-offs"
    );
    let panics = pod_worker_panics(ro_port).expect("kubelet_module_panics_total on /metrics");
    assert_eq!(panics, 8.0, "four pods, two injected panics each");
    // The workers lived on: no thread of ours was lost or added, and a
    // later pod still runs.
    assert_eq!(module_threads(pid), threads_before, "the threads changed");
    env.write_manifest("late.yaml", &manifest("late", None));
    env.wait_running("late-node1", &["c"], secs(20));
}
