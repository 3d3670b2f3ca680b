//! OOM kills on real containerd (cgroupfs, v1 here), in cluster mode
//! against the API server double: a container over its memory limit
//! reports `OOMKilled` (its state, and lastState once restarted) and gets
//! no SystemOOM event (its victim cgroup is not the root; upstream records
//! no event for a container OOM either); a system OOM report in the
//! kernel log becomes upstream's `SystemOOM` Warning on the node.
//!
//! Test numbers 86–88.
//!
//!     cargo test --release --test oom

mod common;

use std::fs::OpenOptions;
use std::io::Write;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// Reports the injection test writes to /dev/kmsg carry this, so a test
/// running beside it can tell them from a real misclassified kill.
const INJECTED: &str = "rk-inject-";

/// A pod whose container `c` runs `tail /dev/zero` (it buffers one
/// endless line) under a 32Mi limit.
fn hog(name: &str, restart_policy: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "c",
                "image": BUSYBOX,
                "imagePullPolicy": "IfNotPresent",
                "command": ["tail", "/dev/zero"],
                "resources": {"limits": {"memory": "32Mi"}},
            }],
        },
    })
}

fn started(name: &str, n: u32) -> Cluster {
    let mut cl = Cluster::new(name, n);
    cl.start_kubelet();
    cl.wait_node_ready(secs(60));
    cl
}

fn container_status(pod: &Value) -> Option<&Value> {
    pod["status"]["containerStatuses"].as_array()?.first()
}

/// SystemOOM events on the node that this process did not inject.
fn real_system_ooms(api: &Api) -> Vec<Value> {
    api.events_for("default", NODE)
        .into_iter()
        .filter(|e| e["reason"] == "SystemOOM")
        .filter(|e| !e["message"].as_str().unwrap_or("").contains(INJECTED))
        .collect()
}

#[test]
fn a_container_over_its_memory_limit_reports_oomkilled() {
    let mut cl = started("oom_killed", 86);
    cl.api.create_pod(&hog("once", "Never"));
    cl.api.create_pod(&hog("again", "Always"));

    let once = cl.eventually(secs(90), "pod once terminated OOMKilled", |api| {
        let p = api.pod("once")?;
        let t = &container_status(&p)?["state"]["terminated"];
        (t["reason"] == "OOMKilled").then(|| p.clone())
    });
    let t = &container_status(&once).unwrap()["state"]["terminated"];
    assert_eq!(t["exitCode"], 137, "SIGKILL: {t}");
    cl.eventually(secs(30), "pod once Failed", |api| {
        (phase(&api.pod("once")?) == "Failed").then_some(())
    });

    let again = cl.eventually(secs(90), "pod again restarted after OOMKilled", |api| {
        let p = api.pod("again")?;
        let s = container_status(&p)?;
        let last = &s["lastState"]["terminated"];
        (s["restartCount"].as_u64()? >= 1 && last["reason"] == "OOMKilled").then(|| p.clone())
    });
    assert_eq!(
        container_status(&again).unwrap()["lastState"]["terminated"]["exitCode"],
        137
    );

    // The kernel's report names the container's cgroup as oom_memcg: no
    // SystemOOM. Upstream posts no event of its own for a container OOM.
    let log = cl.env.log();
    assert!(
        log.contains("OOM watcher: reading /dev/kmsg"),
        "the watcher runs"
    );
    assert!(
        cl.env
            .log_lines_with("OOM kill in ")
            .iter()
            .any(|l| l.contains("/kubepods/")),
        "the container kill was seen in kmsg:\n{}",
        cl.env.log_tail(40)
    );
    let system = real_system_ooms(&cl.api);
    assert!(system.is_empty(), "no SystemOOM for a container OOM: {system:?}");
    for pod in ["once", "again"] {
        let oom_events: Vec<Value> = cl
            .api
            .events_for("default", pod)
            .into_iter()
            .filter(|e| e["reason"].as_str().unwrap_or("").contains("OOM"))
            .collect();
        assert!(oom_events.is_empty(), "{pod}: {oom_events:?}");
    }
}

/// Writes one record to the kernel log (root may; rate-limited to bursts
/// of 10 by printk_devkmsg).
fn kmsg_write(line: &str) {
    let mut f = OpenOptions::new()
        .write(true)
        .open("/dev/kmsg")
        .expect("open /dev/kmsg for writing");
    f.write_all(line.as_bytes()).expect("write /dev/kmsg");
}

#[test]
fn a_system_oom_in_the_kernel_log_is_a_node_event() {
    let mut cl = started("system_oom", 87);
    // A report from before the start is not replayed; the watcher has
    // sought to the end once it says so.
    wait_until(secs(30), "the OOM watcher started", || {
        cl.env.log().contains("OOM watcher: reading /dev/kmsg")
    });
    let name = format!("{INJECTED}87");
    let pid = 4_000_087;
    kmsg_write(&format!(
        "<4>{name} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"
    ));
    kmsg_write(&format!(
        "<6>oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/rk.service,task={name},pid={pid},uid=0"
    ));
    kmsg_write(&format!(
        "<3>Out of memory: Killed process {pid} ({name}) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB"
    ));
    let want = format!("System OOM encountered, victim process: {name}, pid: {pid}");
    let ev = cl.eventually(secs(30), "SystemOOM event on the node", |api| {
        api.events_for("default", NODE)
            .into_iter()
            .find(|e| e["reason"] == "SystemOOM" && e["message"] == want.as_str())
    });
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["involvedObject"]["kind"], "Node");
    assert_eq!(ev["source"]["component"], "kubelet");
}
