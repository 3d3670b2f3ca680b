//! Fault suite (issue 12): the real rkubelet against a real containerd and
//! the API server double, with faults injected from outside: SIGKILL in
//! the middle of a burst, and containerd killed under running pods.
//!
//!     cargo test --release --test faults

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::cluster::*;
use common::*;

const BURST: usize = 20;

/// The running app containers by pod name: (pod, container) -> ID.
fn running_containers(snap: &Snapshot) -> HashMap<(String, String), String> {
    snap.objs
        .iter()
        .filter(|o| o.is_container() && o.running)
        .map(|o| {
            (
                (o.pod_name().to_string(), o.container_name().to_string()),
                o.id.clone(),
            )
        })
        .collect()
}

/// kill -9 while a 20-pod burst is half started, then start again: every
/// pod becomes Ready and no container that was running is restarted. (A
/// start the kill itself cut short may be retried; such a container was
/// not running when the kill came, so it is not among those checked.)
#[test]
fn kill_9_mid_burst_restarts_no_running_container() {
    let mut cl = Cluster::new("kill_9_mid_burst_restarts_no_running_container", 66);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let names: Vec<String> = (0..BURST).map(|i| format!("burst{i}")).collect();
    for n in &names {
        cl.api.create_pod(&api_pod(n, SLEEPER));
    }
    // Kill once some containers run and some pods are still starting.
    wait_until(secs(60), "a quarter of the burst running", || {
        cl.env.try_snapshot().is_ok_and(|snap| {
            let running = running_containers(&snap).len();
            (BURST / 4..BURST).contains(&running)
        })
    });
    cl.env.kill_kubelet();
    // What runs once the kubelet is gone and containerd has settled: a
    // StartContainer the kill cut short may have started the task and then
    // been failed by containerd (StartError), which may be retried; a start
    // that completed must be adopted. Nothing else changes the containers
    // while no kubelet runs.
    std::thread::sleep(secs(3));
    let at_kill = cl.env.snapshot();
    let before = running_containers(&at_kill);
    let sandboxes_before: HashMap<&str, String> = at_kill
        .objs
        .iter()
        .filter(|o| o.is_sandbox() && o.running)
        .map(|o| (o.pod_name(), o.id.clone()))
        .collect();
    eprintln!("killed with {} of {BURST} containers running", before.len());

    cl.start_kubelet();
    for n in &names {
        cl.wait_pod_ready(n, secs(90));
    }
    let after = cl.env.snapshot();
    let now = running_containers(&after);
    for ((pod, ctn), id) in &before {
        assert_eq!(
            now.get(&(pod.clone(), ctn.clone())),
            Some(id),
            "{pod}/{ctn} was running at the kill and was replaced:\n{}",
            after.summary()
        );
        let inst = after.instances(pod, ctn);
        assert_eq!(inst.len(), 1, "{pod}/{ctn} restarted:\n{}", after.summary());
    }
    // Each pod runs one sandbox, and a sandbox that ran at the kill is
    // the one still running (a RunPodSandbox the kill cut short may leave
    // a stopped one behind, for the GC).
    for n in &names {
        let running: Vec<&str> = after
            .sandboxes(n)
            .iter()
            .filter(|s| s.running)
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(running.len(), 1, "{n}: sandboxes:\n{}", after.summary());
        if let Some(old) = sandboxes_before.get(n.as_str()) {
            assert_eq!(running[0], old, "{n}: its sandbox was replaced");
        }
    }
}

/// containerd killed under running pods, then started again: the node goes
/// NotReady, then Ready soon after the runtime is back, and no pod or
/// container is lost or replaced.
#[test]
fn containerd_killed_and_restarted_loses_no_pod() {
    let mut cl = Cluster::new("containerd_killed_and_restarted_loses_no_pod", 67);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let names = ["steady0", "steady1", "steady2"];
    for n in names {
        cl.api.create_pod(&api_pod(n, SLEEPER));
    }
    for n in names {
        cl.wait_pod_ready(n, secs(60));
    }
    let before = running_containers(&cl.env.snapshot());

    cl.env.harness_ok("kill-runtime");
    let t0 = Instant::now();
    cl.eventually(secs(40), "the node NotReady", |api| {
        let n = api.node()?;
        (!condition_true(&n, "Ready")).then_some(())
    });
    eprintln!("node NotReady {:?} after containerd died", t0.elapsed());

    cl.env.harness_ok("start");
    let back = Instant::now();
    let node = cl.wait_node_ready(secs(60));
    let took = back.elapsed();
    eprintln!("node Ready {took:?} after containerd was back");
    let ready = condition(&node, "Ready").expect("a Ready condition");
    assert_eq!(ready["reason"], "KubeletReady", "{ready}");
    assert!(
        took <= Duration::from_secs(10),
        "the node took {took:?} to turn Ready after the runtime came back"
    );
    for n in names {
        cl.wait_pod_ready(n, secs(30));
    }
    let after = cl.env.snapshot();
    assert_eq!(
        running_containers(&after),
        before,
        "containers were lost or replaced:\n{}",
        after.summary()
    );
}
