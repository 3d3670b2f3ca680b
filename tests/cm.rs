//! The container manager on real containerd (cgroupfs driver; the test
//! machine is cgroup v1, hybrid): pods of each QoS class run inside their
//! pod cgroup under the test's own cgroupRoot with upstream's limits,
//! kubepods is capped at node allocatable, pod cgroups go with their pods,
//! a restart adopts live pod cgroups and removes orphans, and a pod cgroup
//! that cannot be made holds back only its own pod; the CPU manager's
//! static policy pins a Guaranteed container to a CPU of its own and moves
//! the others off it, and back when it goes.
//!
//! Test numbers 39, 80–82, 85 and 86.

mod common;

use std::fs;
use std::path::PathBuf;

use common::cgroups::{proc_cgroup, read_v1 as read, task_pid};
use common::*;

const V1: &str = "/sys/fs/cgroup";

/// A static pod whose one container logs the CPUs it may run on (as the
/// kernel shows them to the process) and sleeps, with `resources` (YAML
/// lines indented for the container).
fn pod_yaml(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n\
         spec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: {BUSYBOX}\n\
         \x20   imagePullPolicy: IfNotPresent\n\
         \x20   command: [\"sh\", \"-c\", \"grep Cpus_allowed_list /proc/self/status; sleep 3600\"]\n{resources}"
    )
}

fn resources(req: &[(&str, &str)], lim: &[(&str, &str)]) -> String {
    let mut y = String::from("    resources:\n");
    for (key, list) in [("requests", req), ("limits", lim)] {
        if list.is_empty() {
            continue;
        }
        y.push_str(&format!("      {key}:\n"));
        for (k, v) in list {
            y.push_str(&format!("        {k}: {v}\n"));
        }
    }
    y
}

fn exists_anywhere(rel: &str) -> Vec<PathBuf> {
    cgroup_mounts()
        .into_iter()
        .map(|m| m.join(rel.trim_start_matches('/')))
        .filter(|p| p.exists())
        .collect()
}

/// The running container `c` of `pod`: (pod uid, container id).
fn running(env: &mut Env, pod: &str) -> (String, String) {
    let snap = env.wait_running(pod, &["c"], secs(60));
    let c = snap.running(pod, "c").expect("running");
    (c.pod_uid().to_string(), c.id.clone())
}

fn mem_total() -> u64 {
    let text = fs::read_to_string("/proc/meminfo").unwrap();
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    kb * 1024
}

fn max_pids() -> u64 {
    let r = |p: &str| {
        fs::read_to_string(p)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    r("/proc/sys/kernel/pid_max").min(r("/proc/sys/kernel/threads-max"))
}

fn cores() -> u64 {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap();
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count() as u64
}

#[test]
fn pods_run_in_their_qos_cgroups_with_upstream_limits() {
    let mut env = Env::new("pods_run_in_their_qos_cgroups", 80);
    env.set_config("podPidsLimit", "256");
    env.set_config("systemReserved", "{memory: 1Gi}");
    env.set_config("kubeReserved", "{cpu: 500m}");
    // Upstream's --reserved-cpus: one CPU for the system, which replaces
    // kubeReserved's 500m.
    env.set_config("reservedSystemCPUs", "'0'");
    let root = env.cgroup_root();
    env.write_manifest(
        "g.yaml",
        &pod_yaml("g", &resources(&[], &[("cpu", "200m"), ("memory", "64Mi")])),
    );
    env.write_manifest(
        "b.yaml",
        &pod_yaml("b", &resources(&[("cpu", "100m")], &[("memory", "96Mi")])),
    );
    env.write_manifest("e.yaml", &pod_yaml("e", ""));
    env.start_kubelet_healthy();
    // The CPU manager's state, as an upstream kubelet with the none policy
    // writes it.
    assert_eq!(
        fs::read_to_string(env.root.join("cpu_manager_state")).unwrap(),
        r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
    );

    // kubepods: capacity less the reservations; eviction is not taken
    // from it (upstream getNodeAllocatableAbsolute).
    let kubepods = format!("{root}/kubepods");
    let want_mem = (mem_total() - (1 << 30)) / 4096 * 4096;
    assert_eq!(
        read("memory", &kubepods, "memory.limit_in_bytes"),
        want_mem.to_string()
    );
    let want_shares = (cores() * 1000 - 1000) * 1024 / 1000;
    assert_eq!(
        read("cpu", &kubepods, "cpu.shares"),
        want_shares.to_string()
    );
    assert_eq!(read("pids", &kubepods, "pids.max"), max_pids().to_string());
    assert_eq!(
        read("cpu", &format!("{kubepods}/besteffort"), "cpu.shares"),
        "2"
    );

    let cases = [
        ("g-node1", format!("{kubepods}/pod")),
        ("b-node1", format!("{kubepods}/burstable/pod")),
        ("e-node1", format!("{kubepods}/besteffort/pod")),
    ];
    let mut dirs = Vec::new();
    for (pod, prefix) in &cases {
        let (uid, id) = running(&mut env, pod);
        let dir = format!("{prefix}{uid}");
        let pid = task_pid(&env, &id);
        for controller in ["memory", "cpu", "pids"] {
            let got = proc_cgroup(pid, controller);
            assert_eq!(
                got,
                format!("{dir}/{id}"),
                "{pod}: {controller} cgroup of pid {pid}"
            );
        }
        assert_eq!(read("pids", &dir, "pids.max"), "256", "{pod}: podPidsLimit");
        dirs.push(dir);
    }
    // Guaranteed: shares from requests (= limits), quota from limits, memory.
    assert_eq!(read("cpu", &dirs[0], "cpu.shares"), "204");
    assert_eq!(read("cpu", &dirs[0], "cpu.cfs_quota_us"), "20000");
    assert_eq!(read("cpu", &dirs[0], "cpu.cfs_period_us"), "100000");
    assert_eq!(
        read("memory", &dirs[0], "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
    // Burstable: memory limited (its one container has a limit), cpu not.
    assert_eq!(read("cpu", &dirs[1], "cpu.shares"), "102");
    assert_eq!(read("cpu", &dirs[1], "cpu.cfs_quota_us"), "-1");
    assert_eq!(
        read("memory", &dirs[1], "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    // BestEffort: the minimum shares, no memory limit.
    assert_eq!(read("cpu", &dirs[2], "cpu.shares"), "2");
    assert!(
        read("memory", &dirs[2], "memory.limit_in_bytes")
            .parse::<u64>()
            .unwrap()
            > 1 << 60
    );
    // The burstable tier carries its pods' requests.
    assert_eq!(
        read("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
        "102"
    );

    // Removing the pod removes its cgroup from every hierarchy, and the
    // tier follows.
    env.remove_manifest("b.yaml");
    wait_until(secs(30), "burstable pod cgroup removed", || {
        exists_anywhere(&dirs[1]).is_empty()
    });
    wait_until(secs(10), "burstable tier back to 2 shares", || {
        read("cpu", &format!("{kubepods}/burstable"), "cpu.shares") == "2"
    });
    env.assert_kubelet_alive();
}

#[test]
fn restart_adopts_live_pod_cgroups_and_removes_orphans() {
    let mut env = Env::new("restart_adopts_pod_cgroups", 81);
    let root = env.cgroup_root();
    env.write_manifest("e.yaml", &pod_yaml("e", ""));
    env.start_kubelet_healthy();
    let (uid, id) = running(&mut env, "e-node1");
    let dir = format!("{root}/kubepods/besteffort/pod{uid}");
    env.kill_kubelet();

    // A pod cgroup nobody knows (a pod removed while rkubelet was down).
    let orphan = format!("{root}/kubepods/burstable/pod00000000-dead-beef-0000-000000000000");
    create_cgroup_root(&orphan);
    // Outside kubepods: never rkubelet's to remove.
    let foreign = format!("{root}/not-kubepods");
    create_cgroup_root(&foreign);

    env.start_kubelet_healthy();
    wait_until(secs(30), "orphaned pod cgroup removed", || {
        exists_anywhere(&orphan).is_empty()
    });
    let snap = env.snapshot();
    let c = snap.running("e-node1", "c").expect("still running");
    assert_eq!(c.id, id, "the container was not recreated");
    assert_eq!(
        proc_cgroup(task_pid(&env, &id), "memory"),
        format!("{dir}/{id}")
    );
    assert!(!exists_anywhere(&dir).is_empty());
    assert!(!exists_anywhere(&foreign).is_empty());
}

#[test]
fn a_pod_cgroup_that_cannot_be_made_holds_back_only_its_pod() {
    let mut env = Env::new("pod_cgroup_failure", 82);
    let root = env.cgroup_root();
    env.start_kubelet_healthy();
    // Cap kubepods' CFS quota below what the Guaranteed pod asks: the
    // kernel refuses a child quota above its parent's with EINVAL.
    let quota = PathBuf::from(V1)
        .join("cpu")
        .join(format!("{}/kubepods/cpu.cfs_quota_us", &root[1..]));
    fs::write(&quota, "10000").unwrap();
    env.write_manifest(
        "g.yaml",
        &pod_yaml("g", &resources(&[], &[("cpu", "1"), ("memory", "32Mi")])),
    );
    env.write_manifest("e.yaml", &pod_yaml("e", ""));
    env.wait_running("e-node1", &["c"], secs(60));
    let lines = eventually(secs(30), "FailedCreatePodContainer event", || {
        let l = env.log_lines_with("FailedCreatePodContainer");
        (!l.is_empty()).then_some(l)
    });
    let line = &lines[0];
    assert!(
        line.contains("cpu.cfs_quota_us") && line.contains("EINVAL"),
        "{line}"
    );
    assert!(line.contains(&format!("{root}/kubepods/pod")), "{line}");
    assert!(env.snapshot().sandboxes("g-node1").is_empty());
    // Once the cap goes the pod starts.
    fs::write(&quota, "-1").unwrap();
    env.wait_running("g-node1", &["c"], secs(60));
}

/// The CPUs a process may run on, as /proc shows them to it.
fn cpus_allowed(pid: u32) -> String {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
        .expect("Cpus_allowed_list")
}

/// A container's CPUs three ways: what it logged at start (from inside),
/// what its process may run on now, and its cpuset cgroup.
struct Pinning {
    logged: String,
    process: String,
    cgroup: String,
}

fn pinning(env: &Env, pod: &str, id: &str) -> Pinning {
    let pid = task_pid(env, id);
    let log = container_log(&env.pod_logs, pod, "c");
    Pinning {
        logged: log
            .lines()
            .find_map(|l| l.split("Cpus_allowed_list:").nth(1))
            .map(|v| v.trim().to_string())
            .unwrap_or_default(),
        process: cpus_allowed(pid),
        cgroup: read("cpuset", &proc_cgroup(pid, "cpuset"), "cpuset.cpus"),
    }
}

/// The issue's scenario on this 2-CPU machine, `reservedSystemCPUs: "0"`:
/// a Guaranteed pod with `cpu: 1` gets CPU 1 alone; a BestEffort pod runs
/// on CPU 0 only; a second such Guaranteed pod is refused; both keep their
/// CPUs across a restart; deleting the Guaranteed pod gives CPU 1 back to
/// the BestEffort pod within the reconcile period.
#[test]
fn the_static_cpu_policy_pins_guaranteed_containers() {
    assert_eq!(
        cores(),
        2,
        "this test is written for the 2-CPU test machine"
    );
    let mut env = Env::new("cpu_manager_static", 85);
    env.set_config("cpuManagerPolicy", "static");
    env.set_config("cpuManagerReconcilePeriod", "5s");
    env.set_config("reservedSystemCPUs", "'0'");
    let guaranteed = resources(&[], &[("cpu", "1"), ("memory", "64Mi")]);
    env.write_manifest("g.yaml", &pod_yaml("g", &guaranteed));
    env.start_kubelet_healthy();
    let (g_uid, g_id) = running(&mut env, "g-node1");
    env.write_manifest("e.yaml", &pod_yaml("e", ""));
    let (_, e_id) = running(&mut env, "e-node1");

    let g = eventually(secs(10), "g's log", || {
        let p = pinning(&env, "g-node1", &g_id);
        (!p.logged.is_empty()).then_some(p)
    });
    assert_eq!(
        (g.logged.as_str(), g.process.as_str(), g.cgroup.as_str()),
        ("1", "1", "1")
    );
    let e = eventually(secs(10), "e's log", || {
        let p = pinning(&env, "e-node1", &e_id);
        (!p.logged.is_empty()).then_some(p)
    });
    assert_eq!(
        (e.logged.as_str(), e.process.as_str(), e.cgroup.as_str()),
        ("0", "0", "0")
    );
    let state = fs::read_to_string(env.root.join("cpu_manager_state")).unwrap();
    assert!(
        state.starts_with(&format!(
            r#"{{"policyName":"static","defaultCpuSet":"0","entries":{{"{g_uid}":{{"c":"1"}}}},"checksum":"#
        )),
        "{state}"
    );

    // The pod resources API names the exclusive CPU, and what can be
    // given: every CPU but the reserved one.
    let list = pod_resources(&env.root, &["list"]);
    let pods = list["response"]["pod_resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let cpus_of = |name: &str| {
        let pod = pods.iter().find(|p| p["name"] == name);
        let pod = pod.unwrap_or_else(|| panic!("no {name} in {list}"));
        pod["containers"][0]["cpu_ids"].clone()
    };
    assert_eq!(cpus_of("g-node1"), serde_json::json!(["1"]), "{list}");
    assert_eq!(cpus_of("e-node1"), serde_json::Value::Null, "{list}");
    let alloc = pod_resources(&env.root, &["allocatable"]);
    assert_eq!(
        alloc["response"]["cpu_ids"],
        serde_json::json!(["1"]),
        "{alloc}"
    );

    // No CPU is left to give: refused at admission, nothing started.
    env.write_manifest("h.yaml", &pod_yaml("h", &guaranteed));
    let line = eventually(secs(30), "h rejected", || {
        env.log_lines_with("h-node1_default rejected")
            .into_iter()
            .next()
    });
    assert!(
        line.contains("UnexpectedAdmissionError: Allocate failed due to not enough cpus available to satisfy request, which is unexpected"),
        "{line}"
    );
    assert!(env.snapshot().sandboxes("h-node1").is_empty());
    env.remove_manifest("h.yaml");

    // A restart keeps every container where it was.
    env.kill_kubelet();
    env.start_kubelet_healthy();
    std::thread::sleep(secs(7)); // past a reconcile round
    let snap = env.snapshot();
    assert_eq!(
        snap.running("g-node1", "c").map(|c| c.id.clone()),
        Some(g_id.clone())
    );
    assert_eq!(pinning(&env, "g-node1", &g_id).cgroup, "1");
    assert_eq!(pinning(&env, "e-node1", &e_id).cgroup, "0");
    assert_eq!(
        fs::read_to_string(env.root.join("cpu_manager_state")).unwrap(),
        state
    );

    // The Guaranteed pod goes: CPU 1 is shared again within the period.
    env.remove_manifest("g.yaml");
    let gone = std::time::Instant::now();
    wait_until(secs(30), "g gone", || {
        env.snapshot().sandboxes("g-node1").is_empty()
    });
    wait_until(secs(5), "e moved to CPUs 0-1", || {
        let p = pinning(&env, "e-node1", &e_id);
        p.cgroup == "0-1" && p.process == "0-1"
    });
    eprintln!(
        "CPU 1 back in the shared pool {:?} after the manifest went",
        gone.elapsed()
    );
    let state = fs::read_to_string(env.root.join("cpu_manager_state")).unwrap();
    assert!(
        state.starts_with(r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":"#),
        "{state}"
    );
}

/// The topology manager's `single-numa-node` policy, pod scope, with the
/// CPU and memory managers' static policies, on this one-node machine: a
/// Guaranteed pod whose CPU and memory fit on node 0 is placed there (its
/// memory recorded as upstream's memory manager records it, `cpuset.mems`
/// set); one for which no node has a CPU left is refused with upstream's
/// TopologyAffinityError, as the CPU manager's hints name no node.
#[test]
fn single_numa_node_admits_what_fits_on_a_node_and_refuses_the_rest() {
    let mut env = Env::new("topology_single_numa_node", 86);
    env.set_config("cpuManagerPolicy", "static");
    env.set_config("reservedSystemCPUs", "'0'");
    env.set_config("memoryManagerPolicy", "Static");
    env.set_config("systemReserved", "{memory: 256Mi}");
    // systemReserved and evictionHard's default memory.available (100Mi)
    env.set_config("reservedMemory", "[{numaNode: 0, limits: {memory: 356Mi}}]");
    env.set_config("topologyManagerPolicy", "single-numa-node");
    env.set_config("topologyManagerScope", "pod");
    let guaranteed = resources(&[], &[("cpu", "1"), ("memory", "64Mi")]);
    env.write_manifest("g.yaml", &pod_yaml("g", &guaranteed));
    env.start_kubelet_healthy();
    let (g_uid, g_id) = running(&mut env, "g-node1");
    assert_eq!(pinning(&env, "g-node1", &g_id).cgroup, "1");
    let pid = task_pid(&env, &g_id);
    assert_eq!(
        read("cpuset", &proc_cgroup(pid, "cpuset"), "cpuset.mems"),
        "0"
    );
    let state = fs::read_to_string(env.root.join("memory_manager_state")).unwrap();
    let block = format!(
        r#""entries":{{"{g_uid}":{{"c":[{{"numaAffinity":[0],"type":"memory","size":67108864}}]}}}}"#
    );
    assert!(
        state
            .starts_with(r#"{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"#),
        "{state}"
    );
    assert!(state.contains(&block), "{state}");
    // The pod resources API lists the block with its node.
    let list = pod_resources(&env.root, &["list"]);
    let pods = list["response"]["pod_resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let g = pods
        .iter()
        .find(|p| p["name"] == "g-node1")
        .expect("g listed");
    assert_eq!(
        g["containers"][0]["memory"],
        serde_json::json!([{"memory_type": "memory", "size": "67108864", "topology": {"nodes": [{}]}}]),
        "{list}"
    );
    let line = eventually(secs(10), "the topology manager's hint", || {
        env.log_lines_with("topology manager: pod g-node1_default (pod scope)")
            .into_iter()
            .next()
    });
    assert!(line.contains("best hint None (preferred)"), "{line}");

    env.write_manifest("h.yaml", &pod_yaml("h", &guaranteed));
    let line = eventually(secs(30), "h rejected", || {
        env.log_lines_with("h-node1_default rejected")
            .into_iter()
            .next()
    });
    assert!(
        line.contains(
            "TopologyAffinityError: Resources cannot be allocated with Topology locality"
        ),
        "{line}"
    );
    assert!(env.snapshot().sandboxes("h-node1").is_empty());
    env.assert_kubelet_alive();
}

/// Pod-level `resources` (PodLevelResources, on in v1.34), as the v1.34
/// capture's `v-podlevel`: two containers without their own share the
/// pod's limits, which the pod cgroup carries; each container's cgroup
/// takes the pod-level limit it lacks (upstream getCPULimit and
/// getMemoryLimit); the pod is Burstable by its pod-level values.
#[test]
fn pod_level_resources_set_the_pod_cgroup() {
    let mut env = Env::new("pod_level_resources", 39);
    let root = env.cgroup_root();
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: pl\n  namespace: default\n\
         spec:\n  terminationGracePeriodSeconds: 1\n\
         \x20 resources:\n    requests: {{cpu: 100m, memory: 64Mi}}\n    limits: {{cpu: 300m, memory: 128Mi}}\n\
         \x20 containers:\n\
         \x20 - {{name: a, image: {BUSYBOX}, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}}\n\
         \x20 - {{name: b, image: {BUSYBOX}, imagePullPolicy: IfNotPresent, command: [sleep, '3600']}}\n"
    );
    env.write_manifest("pl.yaml", &manifest);
    env.start_kubelet_healthy();
    let snap = env.wait_running("pl-node1", &["a", "b"], secs(60));
    let a = snap.running("pl-node1", "a").expect("a running");
    let dir = format!("{root}/kubepods/burstable/pod{}", a.pod_uid());
    assert_eq!(read("cpu", &dir, "cpu.shares"), "102");
    assert_eq!(read("cpu", &dir, "cpu.cfs_quota_us"), "30000");
    assert_eq!(
        read("memory", &dir, "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    for name in ["a", "b"] {
        let c = snap.running("pl-node1", name).expect("running");
        let own = format!("{dir}/{}", c.id);
        assert_eq!(read("cpu", &own, "cpu.cfs_quota_us"), "30000", "{name}");
        assert_eq!(
            read("memory", &own, "memory.limit_in_bytes"),
            (128u64 << 20).to_string(),
            "{name}"
        );
        // No request of its own: shares from its limit, the pod's
        // (upstream calculateLinuxResources with getCPULimit).
        assert_eq!(read("cpu", &own, "cpu.shares"), "307", "{name}");
    }
}
