//! Cluster mode when things fail: the API server stopped, answering errors
//! or garbage, unreachable at start, and a pod deleted while the kubelet
//! was down (part of tests/cluster.rs).

use std::time::{Duration, Instant};

use serde_json::json;

use super::common::cluster::*;
use super::common::*;
use super::pod_tasks_running;

// 7 -------------------------------------------------------------------------------

#[test]
fn api_outage_keeps_pods_and_recovers() {
    let mut cl = Cluster::new("api_outage_keeps_pods_and_recovers", 27);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&api_pod("a", SLEEPER));
    cl.api.create_pod(&api_pod("b", SLEEPER));
    cl.wait_pod_ready("a", secs(20));
    cl.wait_pod_ready("b", secs(20));
    cl.eventually(secs(25), "the node lease", |api| api.lease());
    let before = cl.env.snapshot();
    let running_before = before
        .objs
        .iter()
        .filter(|o| o.running)
        .map(|o| o.id.clone())
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(running_before.len(), 4, "{}", before.summary());

    let renew_before = cl.renew_time();
    cl.double.kill();
    eprintln!("API down; last renewTime {renew_before:?}");
    let t0 = Instant::now();
    while t0.elapsed() < secs(15) {
        cl.env.assert_kubelet_alive();
        std::thread::sleep(Duration::from_millis(500));
    }
    let during = cl.env.snapshot();
    let running_during = during
        .objs
        .iter()
        .filter(|o| o.running)
        .map(|o| o.id.clone())
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(
        running_during,
        running_before,
        "containers changed during the API outage:\nbefore:\n{}during:\n{}",
        before.summary(),
        during.summary()
    );
    assert_eq!(during.ids(), before.ids(), "{}", during.summary());
    cl.env.wait_healthy(secs(5));

    let t_restart = Instant::now();
    cl.double.start();
    // Lease renewals resume (the renewTime is the kubelet's clock, so any
    // value after the restart is a renewal after the outage).
    let r = cl.wait_renewed_after(now_secs(), secs(30));
    eprintln!(
        "lease renewed at {r}, {:?} after the API came back",
        t_restart.elapsed()
    );
    let t1 = Instant::now();
    cl.api.create_pod(&api_pod("after", SLEEPER));
    // The pod reflector re-watches with client-go's backoff (800 ms doubling
    // to 30 s, jitter), which grew during the outage: allow for it.
    cl.wait_pod_ready("after", secs(45));
    eprintln!("a pod created after the outage Ready in {:?}", t1.elapsed());

    let after = cl.env.snapshot();
    for id in &running_before {
        assert!(
            after.objs.iter().any(|o| &o.id == id && o.running),
            "container {id} no longer runs after the outage:\n{}",
            after.summary()
        );
    }
    for n in ["a", "b"] {
        let p = cl.api.pod(n).unwrap();
        assert!(
            running_ready(&p),
            "pod {n} after the outage: {}",
            pretty_status(&p)
        );
        assert_eq!(p["status"]["containerStatuses"][0]["restartCount"], 0);
    }
}

// 8 -------------------------------------------------------------------------------

#[test]
fn api_faults_are_survived() {
    let mut cl = Cluster::new("api_faults_are_survived", 28);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&api_pod("before", SLEEPER));
    cl.wait_pod_ready("before", secs(20));
    let ctr_id = cl
        .env
        .wait_running("before", &["c"], secs(5))
        .running("before", "c")
        .unwrap()
        .id
        .clone();

    // 20 Internal Errors for whatever comes next, and every watch cut so
    // that the reflectors run into them.
    cl.api.fault(json!({"status": 500, "count": 20}));
    cl.api.fault(json!({"closeWatches": true}));
    let consumed = cl.wait_faults_consumed("500s", secs(60));
    if consumed.is_none() {
        cl.api.must("DELETE", "/__double/faults", None, &[200]);
    }
    // Then a watch that sends a malformed line and is cut.
    cl.api.fault(json!({"truncateWatch": true}));
    cl.api.fault(json!({"closeWatches": true}));
    let truncated = cl.wait_faults_consumed("truncated watch", secs(30));
    assert!(
        truncated.is_some(),
        "rkubelet did not watch again within 30 s after its watches were closed"
    );

    let t2 = Instant::now();
    cl.api.create_pod(&api_pod("after", SLEEPER));
    cl.wait_pod_ready("after", secs(30));
    eprintln!("a pod created after the faults Ready in {:?}", t2.elapsed());
    cl.env.assert_kubelet_alive();
    let snap = cl.env.snapshot();
    assert_eq!(
        snap.running("before", "c").map(|o| o.id.clone()),
        Some(ctr_id),
        "the earlier pod's container changed:\n{}",
        snap.summary()
    );
    let p = cl.api.pod("before").unwrap();
    assert!(running_ready(&p), "{}", pretty_status(&p));
    // Deleting still works through the re-established watch.
    cl.api.must("DELETE", &pod_path("after"), None, &[200]);
    cl.eventually(secs(20), "the deleted pod gone from the API", |api| {
        api.get_or_gone(&pod_path("after"))
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    });
}

// 9 -------------------------------------------------------------------------------

#[test]
fn pod_deleted_while_kubelet_down_is_cleaned_up() {
    let mut cl = Cluster::new("pod_deleted_while_kubelet_down_is_cleaned_up", 29);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&api_pod("doomed", SLEEPER));
    cl.api.create_pod(&api_pod("keep", SLEEPER));
    cl.wait_pod_ready("doomed", secs(20));
    cl.wait_pod_ready("keep", secs(20));
    let before = cl.env.snapshot();
    let keep_id = before.running("keep", "c").expect("keep runs").id.clone();
    assert!(before.running("doomed", "c").is_some());

    cl.env.kill_kubelet();
    cl.api.must(
        "DELETE",
        &format!("{}?gracePeriodSeconds=0", pod_path("doomed")),
        None,
        &[200],
    );
    assert!(
        cl.api.get_or_gone(&pod_path("doomed")).unwrap().is_none(),
        "a grace-0 delete removes the pod at once"
    );
    let s = cl.env.snapshot();
    assert!(
        s.running("doomed", "c").is_some(),
        "nothing should stop the container while rkubelet is down:\n{}",
        s.summary()
    );

    let t0 = Instant::now();
    cl.start_kubelet();
    let mut last = Snapshot::default();
    let stopped = poll(secs(20), || {
        cl.env.assert_kubelet_alive();
        let s = cl.env.try_snapshot().ok()?;
        let none = pod_tasks_running(&s, "doomed").is_empty();
        last = s;
        none.then_some(())
    });
    assert!(
        stopped.is_some(),
        "the deleted pod still runs 20 s after rkubelet restarted: {:?}\n{}",
        pod_tasks_running(&last, "doomed"),
        last.summary()
    );
    eprintln!("orphaned pod stopped {:?} after the restart", t0.elapsed());
    let removed = poll(secs(20), || {
        let s = cl.env.try_snapshot().ok()?;
        let none = s.objs.iter().all(|o| o.pod_name() != "doomed");
        last = s;
        none.then_some(())
    });
    assert!(
        removed.is_some(),
        "containerd still has objects of the deleted pod {:?} after the restart:\n{}",
        t0.elapsed(),
        last.summary()
    );
    eprintln!("orphaned pod removed {:?} after the restart", t0.elapsed());

    let s = cl.env.snapshot();
    assert_eq!(
        s.running("keep", "c").map(|o| o.id.clone()),
        Some(keep_id),
        "the other pod's container changed across the restart:\n{}",
        s.summary()
    );
    let p = cl.api.pod("keep").unwrap();
    assert!(running_ready(&p), "{}", pretty_status(&p));
}

// 10 ------------------------------------------------------------------------------

#[test]
fn unreachable_api_at_start_still_runs_static_pods() {
    let mut cl = Cluster::new("unreachable_api_at_start_still_runs_static_pods", 30);
    // The double ran once to issue the kubeconfig; now nothing listens there.
    cl.double.kill();
    let st = pod("boot", vec![ctn("c", SLEEPER)]);
    cl.env.put_pod(&st);
    let t0 = Instant::now();
    cl.start_kubelet();
    let name = st.full_name();
    cl.env.wait_running(&name, &["c"], secs(30));
    eprintln!("static pod runs {:?} after start, API down", t0.elapsed());
    cl.env.wait_healthy(secs(10));
    std::thread::sleep(secs(3));
    cl.env.assert_kubelet_alive();

    let t1 = Instant::now();
    cl.double.start();
    let node = cl.wait_node_ready(secs(30));
    eprintln!("node registered {:?} after the API came up", t1.elapsed());
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    let mirror = cl.eventually(secs(30), "the static pod's mirror pod Running", |api| {
        let p = api.pod(&name)?;
        (phase(&p) == "Running").then_some(p)
    });
    assert!(mirror["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
    cl.eventually(secs(25), "the node lease", |api| api.lease());
    // The static pod was not restarted when the API appeared.
    let s = cl.env.snapshot();
    assert_eq!(s.instances(&name, "c").len(), 1, "{}", s.summary());
    assert_eq!(
        s.running(&name, "c").and_then(|o| o.restart_count()),
        Some(0)
    );
}
