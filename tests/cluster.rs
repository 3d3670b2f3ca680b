//! Cluster-mode tests: the real rkubelet binary with --kubeconfig against the
//! kube-apiserver double (tests/apiserver, a separate process) and a real,
//! private containerd per test (tests/harness/containerd.sh).
//!
//! Needs what tests/e2e.rs needs (root, containerd, runc, CNI plugins) and
//! builds `apiserver-double` (`cargo build --release -p
//! rkubelet-apiserver-double`) when it is missing or older than its sources.
//! Each test has its own containerd, bridge rke<N>, subnet 10.88.<100+N>.0/24,
//! healthz port 20000+N and API server port 21000+N (N in 21..=30; e2e.rs
//! uses 1..=12), so tests can run in parallel:
//!
//!     cargo test --release --test cluster -- --test-threads=2
//!
//! The tests drive the API as an admin (the double's admin token) and look
//! at containerd with `ctr`, at the double's audit log and at its stats. On a
//! failure they print the tails of the audit log, of rkubelet's and of
//! containerd's logs.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// Named as their directory, so that `mod` finds the files in it.
mod cluster {
    use super::*;

    // The API server down, failing or faulty, and the kubelet down (tests 7-10).
    mod api_faults;
}

// --- one test's cluster (tests/common/cluster.rs), and what only these tests need ---

impl Cluster {
    fn audit(&self) -> Vec<Value> {
        self.double.audit()
    }
}

/// A running container/sandbox of pod `pod` in containerd?
fn pod_tasks_running(s: &Snapshot, pod: &str) -> Vec<String> {
    s.objs
        .iter()
        .filter(|o| o.pod_name() == pod && o.running)
        .map(|o| format!("{} {} {}", o.kind, o.container_name(), &o.id[..12]))
        .collect()
}

// 1 -------------------------------------------------------------------------------

#[test]
fn registers_ready_and_renews_lease() {
    let mut cl = Cluster::new("registers_ready_and_renews_lease", 21);
    let t0 = Instant::now();
    cl.start_kubelet();
    let node = cl.wait_node_ready(secs(20));
    eprintln!("node Ready after {:?}", t0.elapsed());

    let ready = condition(&node, "Ready").unwrap();
    assert_eq!(ready["reason"], "KubeletReady", "Ready condition: {ready}");
    for ty in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
        let c = condition(&node, ty).unwrap_or_else(|| panic!("no {ty} condition: {node}"));
        assert_eq!(c["status"], "False", "{ty}: {c}");
    }
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], NODE, "labels: {labels}");
    assert_eq!(labels["kubernetes.io/os"], "linux", "labels: {labels}");
    assert!(
        labels["kubernetes.io/arch"]
            .as_str()
            .is_some_and(|a| !a.is_empty()),
        "labels: {labels}"
    );
    for what in ["capacity", "allocatable"] {
        for r in ["cpu", "memory", "pods"] {
            assert!(
                node["status"][what][r].is_string(),
                "status.{what}.{r} missing: {}",
                node["status"][what]
            );
        }
    }
    let info = &node["status"]["nodeInfo"];
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("containerd://")),
        "nodeInfo: {info}"
    );
    assert!(
        info["kubeletVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with('v')),
        "nodeInfo: {info}"
    );
    let addrs = node["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        addrs
            .iter()
            .any(|a| a["type"] == "Hostname" && a["address"] == NODE),
        "addresses: {addrs:?}"
    );
    assert!(
        addrs.iter().any(|a| a["type"] == "InternalIP"),
        "addresses: {addrs:?}"
    );

    // The lease: created once the Node exists (upstream retries on its 10 s
    // renew interval), owned by the Node.
    let lease = cl.eventually(secs(25), "the node lease", |api| api.lease());
    eprintln!("lease exists after {:?}", t0.elapsed());
    assert_eq!(lease["spec"]["holderIdentity"], NODE, "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40, "{lease}");
    let owners = lease["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        owners.iter().any(|o| o["kind"] == "Node"
            && o["apiVersion"] == "v1"
            && o["name"] == NODE
            && o["uid"] == node["metadata"]["uid"]),
        "lease ownerReferences should name the Node {}: {owners:?}",
        uid(&node)
    );
    let r0 = lease["spec"]["renewTime"]
        .as_str()
        .expect("renewTime")
        .to_string();
    let t1 = Instant::now();
    let r1 = cl.wait_renewed_after(rfc3339_secs(&r0).expect("renewTime is RFC 3339"), secs(15));
    eprintln!("renewTime {r0} -> {r1} after {:?}", t1.elapsed());

    // The kubelet announced itself.
    let events = cl.api.events_for("default", NODE);
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "Starting" && e["involvedObject"]["kind"] == "Node"),
        "no Starting event for the node: {events:?}"
    );
    // And capped kubepods at node allocatable, as upstream reports it.
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "NodeAllocatableEnforced"
                && e["message"] == "Updated Node Allocatable limit across pods"),
        "no NodeAllocatableEnforced event for the node: {events:?}"
    );
    // Everything the kubelet did, it did as system:node:node1.
    let audit = cl.audit();
    let mine: Vec<&Value> = audit
        .iter()
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|u| u.starts_with("rkubelet"))
        })
        .collect();
    assert!(!mine.is_empty(), "no requests by rkubelet in the audit log");
    assert!(
        mine.iter()
            .all(|e| e["user"] == format!("system:node:{NODE}")),
        "rkubelet authenticated as someone else: {:?}",
        mine.iter().map(|e| audit_line(e)).collect::<Vec<_>>()
    );
    assert!(
        mine.iter()
            .any(|e| e["verb"] == "update" && e["resource"] == "leases.coordination.k8s.io"),
        "no lease update in the audit log"
    );
}

// 2 -------------------------------------------------------------------------------

#[test]
fn bound_pod_runs_and_reports_status() {
    let mut cl = Cluster::new("bound_pod_runs_and_reports_status", 22);
    // Upstream's default resync: Ready must follow the running container at
    // once, not at the pod's next periodic sync a minute later.
    let config = std::fs::read_to_string(&cl.config).unwrap();
    std::fs::write(
        &cl.config,
        config.replace("syncFrequency: 10s", "syncFrequency: 1m"),
    )
    .unwrap();
    cl.start_kubelet();
    let node = cl.wait_node_ready(secs(20));

    let t0 = Instant::now();
    let created = cl.api.create_pod(&api_pod("web", SLEEPER));
    let p = cl.wait_pod_ready("web", secs(20));
    eprintln!("pod Running+Ready in the API after {:?}", t0.elapsed());

    let st = &p["status"];
    let cs = &st["containerStatuses"][0];
    assert_eq!(cs["name"], "c", "{}", pretty_status(&p));
    assert_eq!(cs["restartCount"], 0, "{}", pretty_status(&p));
    assert!(
        cs["state"]["running"]["startedAt"].is_string(),
        "{}",
        pretty_status(&p)
    );
    assert!(
        cs["containerID"]
            .as_str()
            .is_some_and(|c| c.starts_with("containerd://")),
        "{}",
        pretty_status(&p)
    );
    assert_eq!(cs["image"], BUSYBOX, "{}", pretty_status(&p));
    // (PodScheduled is the scheduler's; the double has none.)
    for ty in [
        "Initialized",
        "ContainersReady",
        "PodReadyToStartContainers",
    ] {
        assert!(
            condition_true(&p, ty),
            "{ty} not True: {}",
            pretty_status(&p)
        );
    }
    assert!(
        st["startTime"].is_string(),
        "no startTime: {}",
        pretty_status(&p)
    );
    let subnet = format!("10.88.{}.", 100 + cl.env.n);
    let pod_ip = st["podIP"].as_str().unwrap_or("");
    assert!(
        pod_ip.starts_with(&subnet),
        "podIP {pod_ip:?} not in the pod subnet {subnet}0/24: {}",
        pretty_status(&p)
    );
    assert_eq!(st["podIPs"][0]["ip"], pod_ip, "{}", pretty_status(&p));

    // The container the status describes is the one containerd runs.
    let snap = cl.env.wait_running("web", &["c"], secs(5));
    let ctr = snap.running("web", "c").unwrap();
    assert_eq!(
        ctr.pod_uid(),
        uid(&created),
        "containerd's pod uid label is the API uid"
    );
    assert_eq!(
        cs["containerID"].as_str().unwrap(),
        format!("containerd://{}", ctr.id)
    );

    // The remaining checks report every problem at once.
    let mut problems: Vec<String> = Vec::new();

    // Events, as the kubelet records them for a pod's container.
    let events = cl.eventually(
        secs(10),
        "Pulled, Created and Started events for web",
        |api| {
            let ev = api.events_for("default", "web");
            ["Pulled", "Created", "Started"]
                .iter()
                .all(|r| ev.iter().any(|e| e["reason"] == *r))
                .then_some(ev)
        },
    );
    for e in &events {
        let io = &e["involvedObject"];
        let reason = e["reason"].as_str().unwrap_or("");
        assert_eq!(io["kind"], "Pod", "{e}");
        assert_eq!(io["uid"], created["metadata"]["uid"], "{e}");
        assert_eq!(e["source"]["component"], "kubelet", "{e}");
        assert_eq!(e["source"]["host"], NODE, "{e}");
        if ["Pulled", "Created", "Started"].contains(&reason) {
            assert_eq!(e["type"], "Normal", "{e}");
            // Upstream passes the container's reference (GenerateContainerRef)
            // to the image manager and to the container start.
            if io["fieldPath"] != "spec.containers{c}" {
                problems.push(format!(
                    "event {reason}: involvedObject.fieldPath should be \"spec.containers{{c}}\", got {}: {e}",
                    io["fieldPath"]
                ));
            }
        }
    }

    // Last, because it is what a Service's endpoints and the downward API use.
    let node_ip = node["status"]["addresses"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
        .and_then(|a| a["address"].as_str())
        .unwrap_or("")
        .to_string();
    if st["hostIP"].as_str().unwrap_or("") != node_ip || st["hostIPs"][0]["ip"] != node_ip.as_str()
    {
        problems.push(format!(
            "status.hostIP/hostIPs should be the node's InternalIP {node_ip:?} (upstream: \
             from the Node's addresses), got hostIP {} hostIPs {}",
            st["hostIP"], st["hostIPs"]
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\nstatus:\n{}",
        problems.len(),
        problems.join("\n"),
        pretty_status(&p)
    );

    // A burst: every pod is Ready well before a minute's resync would
    // make it so (the prober must know a container runs before the status
    // that reads its readiness is made).
    let t1 = Instant::now();
    let burst: Vec<String> = (0..12).map(|i| format!("burst-{i}")).collect();
    for name in &burst {
        cl.api.create_pod(&api_pod(name, SLEEPER));
    }
    for name in &burst {
        cl.wait_pod_ready(name, secs(30));
    }
    eprintln!(
        "{} pods Running+Ready after {:?}",
        burst.len(),
        t1.elapsed()
    );
}

// 3 -------------------------------------------------------------------------------

#[test]
fn crashing_pod_shows_restarts_and_crashloop() {
    let mut cl = Cluster::new("crashing_pod_shows_restarts_and_crashloop", 23);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&api_pod("crash", "exit 1"));

    let t0 = Instant::now();
    let mut max_restarts = 0;
    let mut crashloop: Option<Value> = None;
    let mut last_exit_1 = false;
    let mut last = Value::Null;
    while t0.elapsed() < secs(45) {
        cl.env.assert_kubelet_alive();
        if let Some(p) = cl.api.pod("crash") {
            let cs = &p["status"]["containerStatuses"][0];
            max_restarts = max_restarts.max(cs["restartCount"].as_u64().unwrap_or(0));
            last_exit_1 |= cs["lastState"]["terminated"]["exitCode"] == 1;
            if cs["state"]["waiting"]["reason"] == "CrashLoopBackOff" && crashloop.is_none() {
                crashloop = Some(p.clone());
            }
            last = p;
        }
        if max_restarts >= 2 && crashloop.is_some() && last_exit_1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!(
        "after {:?}: restartCount {max_restarts}, CrashLoopBackOff seen: {}",
        t0.elapsed(),
        crashloop.is_some()
    );
    let cl_pod = crashloop.unwrap_or_else(|| {
        panic!(
            "never saw state.waiting.reason CrashLoopBackOff in 45 s; last status:\n{}",
            pretty_status(&last)
        )
    });
    assert!(
        max_restarts >= 2,
        "restartCount only reached {max_restarts} in 45 s; last status:\n{}",
        pretty_status(&last)
    );
    assert!(
        last_exit_1,
        "lastState.terminated.exitCode never 1; last status:\n{}",
        pretty_status(&last)
    );
    let cs = &cl_pod["status"]["containerStatuses"][0];
    assert_eq!(cs["ready"], false, "{}", pretty_status(&cl_pod));
    assert!(
        cs["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("back-off")),
        "CrashLoopBackOff message: {}",
        pretty_status(&cl_pod)
    );
    // restartPolicy Always: the pod stays Running while its container restarts.
    assert_eq!(phase(&cl_pod), "Running", "{}", pretty_status(&cl_pod));
    assert!(
        !condition_true(&cl_pod, "Ready"),
        "{}",
        pretty_status(&cl_pod)
    );
    let events = cl.api.events_for("default", "crash");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "BackOff" && e["type"] == "Warning"),
        "no Warning BackOff event: {:?}",
        events.iter().map(|e| &e["reason"]).collect::<Vec<_>>()
    );
}

// 4 -------------------------------------------------------------------------------

#[test]
fn graceful_delete_removes_pod() {
    let mut cl = Cluster::new("graceful_delete_removes_pod", 24);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    // PID 1 ignores TERM: only the KILL at the end of the grace period stops it.
    let mut p = api_pod("slow", "trap '' TERM; while true; do sleep 1; done");
    p["spec"]["terminationGracePeriodSeconds"] = json!(3);
    let created = cl.api.create_pod(&p);
    cl.wait_pod_ready("slow", secs(20));
    let before = cl.env.wait_running("slow", &["c"], secs(5));
    let ctr_id = before.running("slow", "c").unwrap().id.clone();

    let t0 = Instant::now();
    let del = cl.api.must("DELETE", &pod_path("slow"), None, &[200]);
    assert_eq!(del["metadata"]["deletionGracePeriodSeconds"], 3, "{del}");
    let mut last = Value::Null;
    let gone = poll(secs(15), || {
        cl.env.assert_kubelet_alive();
        match cl.api.get_or_gone(&pod_path("slow")) {
            Ok(None) => Some(()),
            Ok(Some(v)) => {
                last = v;
                None
            }
            Err(_) => None,
        }
    });
    let took = t0.elapsed();
    let snap = cl.env.snapshot();
    assert!(
        gone.is_some(),
        "pod still in the API 15 s after a graceful delete; last:\n{}",
        serde_json::to_string_pretty(&last).unwrap_or_default()
    );
    eprintln!("pod gone from the API {took:?} after DELETE");
    let running = pod_tasks_running(&snap, "slow");
    assert!(
        !snap.objs.iter().any(|o| o.id == ctr_id && o.running),
        "the pod left the API while its container still ran: {running:?}\n{}",
        snap.summary()
    );
    assert!(
        took >= Duration::from_millis(2500),
        "the pod was gone {took:?} after DELETE: the 3 s grace period of a container that ignores TERM was not honoured"
    );
    cl.env.assert_kubelet_alive();
    wait_until(secs(5), "the pod's sandbox to stop too", || {
        cl.env
            .try_snapshot()
            .is_ok_and(|s| pod_tasks_running(&s, "slow").is_empty())
    });

    // The kubelet's final DELETE, as the node, after the admin's graceful one.
    let audit = cl.audit();
    let deletes: Vec<&Value> = audit
        .iter()
        .filter(|e| e["verb"] == "delete" && e["resource"] == "pods" && e["name"] == "slow")
        .collect();
    assert!(
        deletes
            .iter()
            .any(|e| e["user"] == format!("system:node:{NODE}") && e["code"] == 200),
        "no successful DELETE of the pod by system:node:{NODE} in the audit log: {:?}",
        deletes.iter().map(|e| audit_line(e)).collect::<Vec<_>>()
    );
    let events = cl.api.events_for("default", "slow");
    assert!(
        events.iter().any(|e| e["reason"] == "Killing"
            && e["involvedObject"]["uid"] == created["metadata"]["uid"]),
        "no Killing event: {:?}",
        events.iter().map(|e| &e["reason"]).collect::<Vec<_>>()
    );
}

// 5 -------------------------------------------------------------------------------

#[test]
fn static_pod_gets_mirror_pod() {
    let mut cl = Cluster::new("static_pod_gets_mirror_pod", 25);
    let st = pod("stat", vec![ctn("c", SLEEPER)]);
    cl.env.put_pod(&st);
    cl.start_kubelet();
    let node = cl.wait_node_ready(secs(20));
    let mirror_name = st.full_name();

    let mirror = cl.eventually(secs(30), "the mirror pod Running in the API", |api| {
        let p = api.pod(&mirror_name)?;
        (phase(&p) == "Running").then_some(p)
    });
    let ann = &mirror["metadata"]["annotations"];
    assert!(
        ann["kubernetes.io/config.mirror"].is_string(),
        "no mirror annotation: {ann}"
    );
    assert_eq!(ann["kubernetes.io/config.source"], "file", "{ann}");
    assert_eq!(mirror["spec"]["nodeName"], NODE);
    let owners = mirror["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        owners.iter().any(|o| o["kind"] == "Node"
            && o["apiVersion"] == "v1"
            && o["name"] == NODE
            && o["uid"] == node["metadata"]["uid"]
            && o["controller"] == true),
        "mirror pod ownerReferences should name the Node (controller): {owners:?}"
    );
    let snap = cl.env.wait_running(&mirror_name, &["c"], secs(5));
    let ctr_id = snap.running(&mirror_name, "c").unwrap().id.clone();
    // The static pod's uid (a hash of the manifest), not the mirror's own.
    assert_eq!(
        ann["kubernetes.io/config.mirror"].as_str(),
        Some(snap.running(&mirror_name, "c").unwrap().pod_uid()),
        "the mirror annotation carries the static pod's uid"
    );

    // Deleting the mirror pod (as kubectl would: gracefully) brings back a
    // fresh one; the static pod itself keeps running untouched.
    let old_uid = uid(&mirror);
    cl.api.must("DELETE", &pod_path(&mirror_name), None, &[200]);
    let t0 = Instant::now();
    let again = cl.eventually(secs(20), "a recreated mirror pod", |api| {
        let p = api.pod(&mirror_name)?;
        (uid(&p) != old_uid && p["metadata"]["deletionTimestamp"].is_null()).then_some(p)
    });
    eprintln!("mirror pod recreated after {:?}", t0.elapsed());
    assert!(again["metadata"]["annotations"]["kubernetes.io/config.mirror"].is_string());
    let snap = cl.env.snapshot();
    let c = snap
        .running(&mirror_name, "c")
        .expect("the static pod still runs after its mirror pod was deleted");
    assert_eq!(
        c.id, ctr_id,
        "deleting the mirror pod restarted the static pod"
    );
    cl.eventually(
        secs(20),
        "the recreated mirror pod to report Running",
        |api| (phase(&api.pod(&mirror_name)?) == "Running").then_some(()),
    );

    // Removing the manifest removes the static pod and its mirror pod.
    cl.env.remove_manifest("stat.yaml");
    let t0 = Instant::now();
    cl.eventually(secs(20), "the mirror pod deleted from the API", |api| {
        api.get_or_gone(&pod_path(&mirror_name))
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    });
    eprintln!("mirror pod deleted after {:?}", t0.elapsed());
    wait_until(secs(15), "the static pod's containers to stop", || {
        cl.env
            .try_snapshot()
            .is_ok_and(|s| pod_tasks_running(&s, &mirror_name).is_empty())
    });
}

// 6 -------------------------------------------------------------------------------

#[test]
fn admission_rejects_unfit_pod() {
    let mut cl = Cluster::new("admission_rejects_unfit_pod", 26);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));

    let mut hog = api_pod("hog", SLEEPER);
    hog["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1000"}});
    cl.api.create_pod(&hog);
    let rejected = cl.eventually(secs(15), "the unfit pod to be Failed", |api| {
        let p = api.pod("hog")?;
        (phase(&p) == "Failed").then_some(p)
    });
    let st = &rejected["status"];
    assert_eq!(st["reason"], "OutOfcpu", "{}", pretty_status(&rejected));
    assert!(
        st["message"].as_str().is_some_and(|m| m.contains("cpu")),
        "{}",
        pretty_status(&rejected)
    );

    // A pod that fits still runs (and the rejected one was not counted).
    cl.api.create_pod(&api_pod("fits", SLEEPER));
    cl.wait_pod_ready("fits", secs(20));

    let snap = cl.env.snapshot();
    assert!(
        snap.objs.iter().all(|o| o.pod_name() != "hog"),
        "containerd has objects of the rejected pod:\n{}",
        snap.summary()
    );
    // Rejected for good: it stays Failed.
    let p = cl
        .api
        .pod("hog")
        .expect("the rejected pod stays in the API");
    assert_eq!(phase(&p), "Failed");
    // Upstream rejectPod records a Warning event with the reason and message.
    let mut events = Vec::new();
    let found = poll(secs(10), || {
        events = cl.api.events_for("default", "hog");
        events
            .iter()
            .any(|e| e["reason"] == "OutOfcpu" && e["type"] == "Warning")
            .then_some(())
    });
    assert!(
        found.is_some(),
        "no Warning OutOfcpu event for the rejected pod within 10 s: {events:?}"
    );
}

/// A pod bound before the kubelet starts arrives before the Node exists
/// (DaemonSets, static pods, any pod after a node restart); it is still
/// checked against the machine (upstream getNodeAnyWay), never run unfit.
#[test]
fn admission_before_the_node_exists_still_fits_resources() {
    let mut cl = Cluster::new("admission_before_the_node_exists", 14);
    assert!(cl.api.node().is_none(), "the double starts without a Node");
    let mut hog = api_pod("early-hog", SLEEPER);
    hog["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "500"}});
    cl.api.create_pod(&hog);
    cl.api.create_pod(&api_pod("early-fits", SLEEPER));
    // The corpus's sched-bits: a critical pod asking for huge pages the
    // node lacks, which no preemption could free.
    let mut critical = api_pod("early-critical", SLEEPER);
    critical["spec"]["priorityClassName"] = json!("system-node-critical");
    critical["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "1e3", "hugepages-2Mi": "2Mi"},
        "limits": {"memory": "1e3", "hugepages-2Mi": "2Mi"},
    });
    cl.api.create_pod(&critical);
    cl.start_kubelet();

    let rejected = cl.eventually(secs(20), "the unfit pod to be Failed", |api| {
        let p = api.pod("early-hog")?;
        (phase(&p) == "Failed").then_some(p)
    });
    let st = &rejected["status"];
    assert_eq!(st["reason"], "OutOfcpu", "{}", pretty_status(&rejected));
    let message = st["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 500000, used: "
        ) && message.contains(", capacity: "),
        "{}",
        pretty_status(&rejected)
    );
    let critical = cl.eventually(secs(20), "the critical pod to be Failed", |api| {
        let p = api.pod("early-critical")?;
        (phase(&p) == "Failed").then_some(p)
    });
    assert_eq!(
        critical["status"]["reason"],
        "UnexpectedAdmissionError",
        "{}",
        pretty_status(&critical)
    );
    assert_eq!(
        critical["status"]["message"],
        "Pod was rejected: Unexpected error while attempting to recover from admission failure: \
         preemption: error finding a set of pods to preempt: no set of running pods found to \
         reclaim resources: [(res: hugepages-2Mi, q: 2097152), ]",
        "{}",
        pretty_status(&critical)
    );
    cl.wait_pod_ready("early-fits", secs(30));
    let snap = cl.env.snapshot();
    assert!(
        snap.objs
            .iter()
            .all(|o| o.pod_name() != "early-hog" && o.pod_name() != "early-critical"),
        "containerd has objects of the rejected pod:\n{}",
        snap.summary()
    );
}

/// v1.30's NodeConformance spec "should write entries to /etc/hosts when
/// hostNetwork is enabled": a host-network pod's /etc/hosts is the node's,
/// managed by the kubelet, with its hostAliases; any other pod's has them
/// too, under upstream's header.
#[test]
fn host_aliases_reach_etc_hosts_with_and_without_host_network() {
    let mut cl = Cluster::new("host_aliases_reach_etc_hosts", 15);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let aliases = json!([{"ip": "123.45.67.89", "hostnames": ["foo.example", "bar.example"]}]);
    for (name, host_network) in [("aliases-hostnet", true), ("aliases-podnet", false)] {
        let mut p = api_pod(name, &format!("cat /etc/hosts; {SLEEPER}"));
        p["spec"]["hostNetwork"] = json!(host_network);
        p["spec"]["hostAliases"] = aliases.clone();
        cl.api.create_pod(&p);
    }
    for name in ["aliases-hostnet", "aliases-podnet"] {
        cl.wait_pod_ready(name, secs(30));
    }
    let hosts = |pod| {
        let pod_logs = cl.env.pod_logs.clone();
        eventually(secs(10), "the container's /etc/hosts in its log", || {
            // CRI log lines: "<time> stdout F <text>".
            let log: String = container_log(&pod_logs, pod, "c")
                .lines()
                .map(|l| l.splitn(4, ' ').nth(3).unwrap_or_default().to_string() + "\n")
                .collect();
            log.contains("Entries added by HostAliases").then_some(log)
        })
    };
    let host = hosts("aliases-hostnet");
    assert!(
        host.contains("# Kubernetes-managed hosts file (host network).")
            && host.contains("# Entries added by HostAliases.")
            && host.contains("123.45.67.89\tfoo.example\tbar.example"),
        "host network /etc/hosts:\n{host}"
    );
    let node = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let first = node
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    assert!(
        host.contains(first),
        "the node's own entries are missing:\n{host}"
    );
    let pod = hosts("aliases-podnet");
    assert!(
        pod.contains("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost")
            && pod.contains(
                "\n# Entries added by HostAliases.\n123.45.67.89\tfoo.example\tbar.example"
            ),
        "pod network /etc/hosts:\n{pod}"
    );
}

/// v1.34's NodeConformance spec "PodOSRejection: should reject pod when
/// the node OS doesn't match pod's OS".
#[test]
fn a_pod_for_another_os_is_rejected() {
    let mut cl = Cluster::new("a_pod_for_another_os_is_rejected", 16);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let mut p = api_pod("windows-only", SLEEPER);
    p["spec"]["os"] = json!({"name": "windows"});
    cl.api.create_pod(&p);
    let rejected = cl.eventually(secs(15), "the pod to be Failed", |api| {
        let p = api.pod("windows-only")?;
        (phase(&p) == "Failed").then_some(p)
    });
    let st = &rejected["status"];
    assert_eq!(
        st["reason"],
        "PodOSNotSupported",
        "{}",
        pretty_status(&rejected)
    );
    assert_eq!(
        st["message"],
        "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS",
        "{}",
        pretty_status(&rejected)
    );
}

/// A pod that asks for its own user namespace (`hostUsers: false`) never
/// runs in the host's: containerd 1.6 reports no runtime handler with
/// user namespaces, so, as upstream v1.34 on the same containerd, no
/// sandbox is created and the event says why.
#[test]
fn host_users_false_is_refused_when_the_runtime_cannot() {
    let mut cl = Cluster::new("host_users_false_is_refused", 19);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let mut p = api_pod("userns", SLEEPER);
    p["spec"]["hostUsers"] = json!(false);
    cl.api.create_pod(&p);
    cl.api.create_pod(&api_pod("plain", SLEEPER));
    cl.wait_pod_ready("plain", secs(30));
    let want = "Failed to create pod sandbox: can't set `spec.hostUsers: false`, \
                runtime does not support user namespaces";
    let mut events = Vec::new();
    let found = poll(secs(20), || {
        events = cl.api.events_for("default", "userns");
        events
            .iter()
            .any(|e| e["reason"] == "FailedCreatePodSandBox" && e["message"] == want)
            .then_some(())
    });
    assert!(
        found.is_some(),
        "no FailedCreatePodSandBox {want:?}: {events:?}"
    );
    let pod = cl.api.pod("userns").expect("the pod stays in the API");
    assert_eq!(phase(&pod), "Pending", "{}", pretty_status(&pod));
    let snap = cl.env.snapshot();
    assert!(
        snap.objs.iter().all(|o| o.pod_name() != "userns"),
        "containerd has objects of the pod that asked for a user namespace:\n{}",
        snap.summary()
    );
}
