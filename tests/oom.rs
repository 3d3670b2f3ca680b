//! OOM kills on real containerd (cgroupfs, v1 here), in cluster mode
//! against the API server double: a container over its memory limit
//! reports `OOMKilled` (its state, and lastState once restarted) and gets
//! no SystemOOM event (its victim cgroup is not the root; upstream records
//! no event for a container OOM either); a system OOM report in the
//! kernel log becomes upstream's `SystemOOM` Warning on the node (and
//! one written before the start is not replayed). Standalone, the pod's
//! /stats/summary figures and /metrics/cadvisor series agree with its pod
//! cgroup's files.
//!
//! Test numbers 86–88. Test 87 writes system OOM reports, tagged
//! `rk-inject-`, to the host's /dev/kmsg: any rkubelet running meanwhile
//! records them as SystemOOM too.
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
    assert!(
        system.is_empty(),
        "no SystemOOM for a container OOM: {system:?}"
    );
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

/// A global OOM report for process `name`, as the kernel words it.
fn inject_system_oom(name: &str, pid: u32) {
    kmsg_write(&format!(
        "<4>{name} invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"
    ));
    kmsg_write(&format!(
        "<6>oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/rk.service,task={name},pid={pid},uid=0"
    ));
    kmsg_write(&format!(
        "<3>Out of memory: Killed process {pid} ({name}) total-vm:1000kB, anon-rss:900kB, file-rss:0kB, shmem-rss:0kB"
    ));
}

#[test]
fn a_system_oom_in_the_kernel_log_is_a_node_event() {
    let mut cl = Cluster::new("system_oom", 87);
    // A report from before the start is not replayed.
    let old = format!("{INJECTED}87-old");
    inject_system_oom(&old, 4_000_086);
    cl.start_kubelet();
    cl.wait_node_ready(secs(60));
    wait_until(secs(30), "the OOM watcher started", || {
        cl.env.log().contains("OOM watcher: reading /dev/kmsg")
    });
    let name = format!("{INJECTED}87");
    let pid = 4_000_087;
    inject_system_oom(&name, pid);
    let want = format!("System OOM encountered, victim process: {name}, pid: {pid}");
    let ev = cl.eventually(secs(30), "SystemOOM event on the node", |api| {
        api.events_for("default", NODE)
            .into_iter()
            .find(|e| e["reason"] == "SystemOOM" && e["message"] == want.as_str())
    });
    assert_eq!(ev["type"], "Warning");
    assert_eq!(ev["involvedObject"]["kind"], "Node");
    assert_eq!(ev["source"]["component"], "kubelet");
    // Reports are read in order: the old one would have come first.
    let replayed: Vec<Value> = cl
        .api
        .events_for("default", NODE)
        .into_iter()
        .filter(|e| e["message"].as_str().unwrap_or("").contains(&old))
        .collect();
    assert!(
        replayed.is_empty(),
        "an OOM from before the start: {replayed:?}"
    );
}

// --- /stats/summary and /metrics/cadvisor from the pod cgroup (standalone) ---

fn cgroup_file(controller: &str, rel: &str, file: &str) -> String {
    let p = format!("/sys/fs/cgroup/{controller}{rel}/{file}");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {p}: {e}"))
}

fn cgroup_u64(controller: &str, rel: &str, file: &str) -> u64 {
    cgroup_file(controller, rel, file).trim().parse().unwrap()
}

/// usage_in_bytes − total_inactive_file, as cadvisor computes it.
fn v1_working_set(rel: &str) -> u64 {
    let usage = cgroup_u64("memory", rel, "memory.usage_in_bytes");
    let stat = cgroup_file("memory", rel, "memory.stat");
    let inactive: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    usage.saturating_sub(inactive)
}

/// The container's memory cgroup, from its task's /proc/PID/cgroup.
fn container_memory_cgroup(env: &Env, id: &str) -> String {
    let out = env.ctr(&["tasks", "ls"]).expect("ctr tasks ls");
    let pid: u32 = out
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&id))
                .then(|| f.get(1)?.parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no task {id} in:\n{out}"));
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            ctrls
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_string())
        })
        .expect("memory line")
}

#[test]
fn pod_stats_and_cadvisor_metrics_come_from_the_pod_cgroup() {
    let mut env = Env::new("pod_cgroup_stats", 88);
    let port = env.open_read_only_port();
    let root = env.cgroup_root();
    env.write_manifest(
        "mem.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: mem\n  namespace: default\n\
             spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n\
             \x20   imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", \"{SLEEPER}\"]\n\
             \x20   resources:\n      requests:\n        cpu: 100m\n      limits:\n        memory: 64Mi\n"
        ),
    );
    env.start_kubelet();
    // A static pod's name carries the node's.
    let pod = format!("mem-{NODE}");
    let snap = env.wait_running(&pod, &["c"], secs(60));
    let c = snap.running(&pod, "c").expect("running");
    let (uid, cid) = (c.pod_uid().to_string(), c.id.clone());
    let pod_cg = format!("{root}/kubepods/burstable/pod{uid}");

    let cpu_before = cgroup_u64("cpuacct", &pod_cg, "cpuacct.usage");
    let ws_before = v1_working_set(&pod_cg);
    let summary = eventually(secs(30), "summary with pod mem", || {
        let s = read_only_get(port, "/stats/summary")?;
        let pods = s["pods"].as_array()?.clone();
        pods.into_iter()
            .find(|p| p["podRef"]["name"] == pod.as_str())
    });
    let ws_after = v1_working_set(&pod_cg);
    let cpu_after = cgroup_u64("cpuacct", &pod_cg, "cpuacct.usage");
    let mem = &summary["memory"];
    let ws = mem["workingSetBytes"].as_u64().expect("workingSetBytes");
    let slack = 256 << 10;
    assert!(
        ws + slack >= ws_before.min(ws_after) && ws <= ws_before.max(ws_after) + slack,
        "pod working set {ws} is the pod cgroup's ({ws_before}..{ws_after}): {mem}"
    );
    assert_eq!(
        mem["availableBytes"].as_u64(),
        Some((64 << 20) - ws),
        "limit − working set: {mem}"
    );
    let cpu = summary["cpu"]["usageCoreNanoSeconds"]
        .as_u64()
        .expect("cpu");
    assert!(
        (cpu_before..=cpu_after).contains(&cpu),
        "pod cpu {cpu} is cpuacct.usage ({cpu_before}..{cpu_after})"
    );

    let metrics = eventually(secs(30), "/metrics/cadvisor", || {
        read_only_text(port, "/metrics/cadvisor")
    });
    let id = container_memory_cgroup(&env, &cid);
    assert_eq!(
        id,
        format!("{pod_cg}/{cid}"),
        "containerd's cgroup is the id label"
    );
    let labels = format!(
        r#"container="c",id="{id}",image="{BUSYBOX}",name="{cid}",namespace="default",pod="{pod}""#
    );
    for family in [
        "container_memory_working_set_bytes",
        "container_memory_usage_bytes",
        "container_memory_rss",
        "container_start_time_seconds",
    ] {
        let want = format!("{family}{{{labels}}} ");
        assert!(metrics.contains(&want), "no {want} in:\n{metrics}");
    }
    assert!(metrics.contains(&format!("container_oom_events_total{{{labels}}} 0 ")));
    assert!(metrics.contains(r#"container_cpu_usage_seconds_total{container="c",cpu="total","#));
    let pod_row = format!(
        r#"container_memory_working_set_bytes{{container="",id="{pod_cg}",image="",name="",namespace="default",pod="{pod}"}} "#
    );
    assert!(metrics.contains(&pod_row), "no {pod_row} in:\n{metrics}");
}
