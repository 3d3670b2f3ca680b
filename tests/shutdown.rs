//! SIGTERM: rkubelet stops every module thread, in the documented order
//! (sources, workers, status, servers), within its deadline, and exits 0,
//! leaving the pods running (upstream does not stop pods on SIGTERM).
//!
//! Test number 60.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn sigterm_stops_every_module_in_order() {
    let mut env = Env::new("sigterm_stops_every_module_in_order", 60);
    env.put_pod(&pod("web", vec![ctn("c", SLEEPER)]));
    env.start_kubelet_healthy();
    env.wait_running("web-node1", &["c"], secs(30));
    let pid = env.kubelet_pid().expect("rkubelet runs");
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = eventually(secs(15), "rkubelet exits after SIGTERM", || {
        env.kubelet_exit()
    });
    let took = t0.elapsed();
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        env.log_tail(40)
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let log = env.log();
    assert!(!log.contains("did not stop"), "{}", env.log_tail(40));
    let mut order = Vec::new();
    for module in [
        "file-source",
        "pleg",
        "pod-worker-0",
        "pod-worker-3",
        "volume-manager",
        "prober",
        "probe-worker-0",
        "runtime-status",
        "gc",
        "eviction-manager",
        "log-manager",
        "healthz",
    ] {
        let line = log
            .lines()
            .position(|l| l.contains(&format!("): {module} stopped")))
            .unwrap_or_else(|| panic!("{module} not logged as stopped:\n{}", env.log_tail(40)));
        order.push((module, line));
    }
    let at = |m: &str| order.iter().find(|(n, _)| *n == m).unwrap().1;
    assert!(
        at("file-source") < at("pleg"),
        "sources stop before workers"
    );
    assert!(at("log-manager") < at("healthz"), "servers stop last");
    // The pod keeps running: a kubelet restart is not a pod restart.
    let snap = env.snapshot();
    assert!(
        snap.running("web-node1", "c").is_some(),
        "{}",
        snap.summary()
    );
}
