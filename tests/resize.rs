//! In-place pod resize on real containerd (cgroup v1, cgroupfs driver)
//! against the double at v1.34: `kubectl patch --subresource resize`
//! changes a running pod's CPU in place and its memory by a restart
//! (resizePolicy), as the v1.34 capture `upstream-v1.34-v134` shows; the
//! new values reach the container's and the pod's cgroup files; a resize
//! the node can never hold is Infeasible, one that fits only without
//! another pod is Deferred and applied once that pod goes; a resize made
//! while rkubelet is down is applied once when it comes back.
//!
//! Test numbers 35 to 37.

mod common;

use serde_json::{json, Value};

use common::cgroups::{proc_cgroup, read_v1, task_pid};
use common::cluster::*;
use common::*;

const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// The capture's `v-resize`: Burstable, CPU resized in place, memory by a
/// restart.
fn resizable_pod(name: &str) -> Value {
    let mut pod = api_pod(name, SLEEPER);
    pod["spec"]["containers"][0]["resources"] = json!({
        "requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "64Mi"},
    });
    pod["spec"]["containers"][0]["resizePolicy"] = json!([
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "RestartContainer"},
    ]);
    pod
}

/// What `kubectl patch pod <name> --subresource resize -p <patch>` sends.
fn resize(cl: &Cluster, name: &str, resources: Value) -> Value {
    let body = json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
    let path = format!("{}/resize", pod_path(name));
    cl.api.strategic_patch(&path, &body)
}

fn container_status(pod: &Value) -> &Value {
    &pod["status"]["containerStatuses"][0]
}

fn container_id(pod: &Value) -> String {
    let id = container_status(pod)["containerID"].as_str().unwrap_or("");
    id.trim_start_matches("containerd://").to_string()
}

/// The container's v1 cgroup and its pod's (the parent), for `controller`.
fn cgroups(cl: &Cluster, pod: &Value, controller: &str) -> (String, String) {
    let pid = task_pid(&cl.env, &container_id(pod));
    let own = proc_cgroup(pid, controller);
    let parent = own
        .rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default();
    (own, parent)
}

fn cpu_quota(cl: &Cluster, pod: &Value) -> (String, String) {
    let (own, parent) = cgroups(cl, pod, "cpu");
    (
        read_v1("cpu", &own, "cpu.cfs_quota_us"),
        read_v1("cpu", &parent, "cpu.cfs_quota_us"),
    )
}

fn memory_limit(cl: &Cluster, pod: &Value) -> (String, String) {
    let (own, parent) = cgroups(cl, pod, "memory");
    (
        read_v1("memory", &own, "memory.limit_in_bytes"),
        read_v1("memory", &parent, "memory.limit_in_bytes"),
    )
}

fn has_condition(pod: &Value, ty: &str) -> bool {
    condition(pod, ty).is_some()
}

/// The pod once its generation is observed and no resize is in progress.
fn settled(cl: &mut Cluster, name: &str, what: &str, extra: impl Fn(&Value) -> bool) -> Value {
    cl.eventually(secs(60), what, |api| {
        let p = api.pod(name)?;
        let observed = p["status"]["observedGeneration"] == p["metadata"]["generation"];
        (observed && running_ready(&p) && !has_condition(&p, "PodResizeInProgress") && extra(&p))
            .then_some(p)
    })
}

/// The messages of the pod's `reason` events, one per occurrence (a
/// repeated event is one object with a count).
fn events(api: &Api, name: &str, reason: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in api.events_for("default", name) {
        if e["reason"] != reason {
            continue;
        }
        let message = e["message"].as_str().unwrap_or("").to_string();
        let count = e["count"].as_u64().unwrap_or(1).max(1);
        out.extend(std::iter::repeat_n(message, count as usize));
    }
    out
}

#[test]
fn resize_in_place_by_restart_and_infeasible() {
    let mut cl = Cluster::new("resize_in_place", 36);
    cl.start_kubelet();
    cl.wait_node_ready(secs(60));
    cl.api.create_pod(&resizable_pod("v-resize"));
    let before = settled(
        &mut cl,
        "v-resize",
        "v-resize running with resources",
        |p| container_status(p)["resources"]["limits"]["cpu"] == "200m",
    );
    assert_eq!(cpu_quota(&cl, &before), ("20000".into(), "20000".into()));
    let first_id = container_id(&before);

    // CPU alone (NotRequired): in place, the same container.
    resize(
        &cl,
        "v-resize",
        json!({
            "requests": {"cpu": "150m", "memory": "32Mi"},
            "limits": {"cpu": "300m", "memory": "64Mi"},
        }),
    );
    let after = settled(&mut cl, "v-resize", "the CPU resize in effect", |p| {
        container_status(p)["resources"]["limits"]["cpu"] == "300m"
    });
    assert_eq!(
        container_id(&after),
        first_id,
        "a CPU resize must not restart"
    );
    assert_eq!(container_status(&after)["restartCount"], 0);
    assert_eq!(
        container_status(&after)["allocatedResources"]["cpu"],
        "150m"
    );
    assert_eq!(cpu_quota(&cl, &after), ("30000".into(), "30000".into()));
    let (own, _) = cgroups(&cl, &after, "cpu");
    assert_eq!(read_v1("cpu", &own, "cpu.shares"), "153");
    assert_eq!(after["status"]["observedGeneration"], 2);
    let done = cl.eventually(secs(20), "ResizeCompleted", |api| {
        let e = events(api, "v-resize", "ResizeCompleted");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(
        done[0],
        r#"Pod resize completed: {"containers":[{"name":"c","resources":{"limits":{"cpu":"300m","memory":"64Mi"},"requests":{"cpu":"150m","memory":"32Mi"}}}]}"#
    );

    // Memory (RestartContainer): exactly that container, once.
    resize(
        &cl,
        "v-resize",
        json!({
            "requests": {"cpu": "150m", "memory": "48Mi"},
            "limits": {"cpu": "300m", "memory": "96Mi"},
        }),
    );
    let restarted = settled(&mut cl, "v-resize", "the memory resize in effect", |p| {
        container_status(p)["resources"]["limits"]["memory"] == "96Mi"
            && container_status(p)["restartCount"] == 1
    });
    assert_ne!(container_id(&restarted), first_id);
    let mib96 = (96u64 << 20).to_string();
    assert_eq!(
        memory_limit(&cl, &restarted),
        (mib96.clone(), mib96.clone())
    );
    // No swap (NodeSwap's NoSwap on cgroup v1): memory+swap is the limit.
    let (own, _) = cgroups(&cl, &restarted, "memory");
    assert_eq!(
        read_v1("memory", &own, "memory.memsw.limit_in_bytes"),
        mib96
    );
    assert_eq!(cpu_quota(&cl, &restarted), ("30000".into(), "30000".into()));
    assert_eq!(
        events(&cl.api, "v-resize", "Killing"),
        vec!["Container c resize requires restart".to_string()]
    );

    // More than the node has: Infeasible, with upstream's message, and
    // nothing changes.
    resize(
        &cl,
        "v-resize",
        json!({
            "requests": {"cpu": "500", "memory": "48Mi"},
            "limits": {"cpu": "500", "memory": "96Mi"},
        }),
    );
    let pending = cl.eventually(secs(30), "PodResizePending", |api| {
        let p = api.pod("v-resize")?;
        condition(&p, "PodResizePending").cloned().map(|c| (c, p))
    });
    let (cond, pod) = pending;
    assert_eq!(cond["reason"], "Infeasible");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) * 1000;
    assert_eq!(
        cond["message"],
        format!("Node didn't have enough capacity: cpu, requested: 500000, capacity: {cores}")
    );
    assert_eq!(cond["observedGeneration"], pod["metadata"]["generation"]);
    assert_eq!(container_status(&pod)["allocatedResources"]["cpu"], "150m");
    assert_eq!(container_status(&pod)["restartCount"], 1);
    assert_eq!(cpu_quota(&cl, &pod), ("30000".into(), "30000".into()));
}

#[test]
fn deferred_until_room_and_applied_once_after_a_restart() {
    let mut cl = Cluster::new("resize_deferred", 37);
    cl.start_kubelet();
    cl.wait_node_ready(secs(60));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64 * 1000;
    cl.api.create_pod(&resizable_pod("small"));
    let mut hog = api_pod("hog", SLEEPER);
    hog["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": format!("{}m", cores - 600)}});
    cl.api.create_pod(&hog);
    settled(&mut cl, "small", "small running", |_| true);
    settled(&mut cl, "hog", "hog running", |_| true);

    // 100m to 700m fits the node but not beside the hog.
    resize(
        &cl,
        "small",
        json!({
            "requests": {"cpu": "700m", "memory": "32Mi"},
            "limits": {"cpu": "700m", "memory": "64Mi"},
        }),
    );
    let deferred = cl.eventually(secs(30), "PodResizePending Deferred", |api| {
        let p = api.pod("small")?;
        condition(&p, "PodResizePending").cloned()
    });
    assert_eq!(deferred["reason"], "Deferred");
    assert!(
        deferred["message"]
            .as_str()
            .unwrap_or("")
            .starts_with("Node didn't have enough resource: cpu"),
        "{deferred}"
    );
    // The hog goes: the resize is taken, in place.
    let id = container_id(&cl.api.pod("small").unwrap_or_default());
    cl.api.must("DELETE", &pod_path("hog"), None, &[200]);
    let grown = settled(&mut cl, "small", "the deferred resize applied", |p| {
        container_status(p)["resources"]["limits"]["cpu"] == "700m"
            && !has_condition(p, "PodResizePending")
    });
    assert_eq!(container_id(&grown), id);
    assert_eq!(cpu_quota(&cl, &grown), ("70000".into(), "70000".into()));

    // A resize made while rkubelet is down is applied when it is back,
    // once: the container keeps running, one more ResizeCompleted.
    let completed = events(&cl.api, "small", "ResizeCompleted").len();
    cl.env.kill_kubelet();
    resize(
        &cl,
        "small",
        json!({
            "requests": {"cpu": "250m", "memory": "32Mi"},
            "limits": {"cpu": "250m", "memory": "64Mi"},
        }),
    );
    cl.start_kubelet();
    let shrunk = settled(
        &mut cl,
        "small",
        "the resize made while down applied",
        |p| container_status(p)["resources"]["limits"]["cpu"] == "250m",
    );
    assert_eq!(container_id(&shrunk), id);
    assert_eq!(container_status(&shrunk)["restartCount"], 0);
    assert_eq!(cpu_quota(&cl, &shrunk), ("25000".into(), "25000".into()));
    cl.eventually(secs(20), "one more ResizeCompleted", |api| {
        (events(api, "small", "ResizeCompleted").len() == completed + 1).then_some(())
    });
    // A second restart finds nothing left to apply.
    cl.env.kill_kubelet();
    cl.start_kubelet();
    settled(&mut cl, "small", "small after a second restart", |_| true);
    std::thread::sleep(secs(3));
    assert_eq!(
        events(&cl.api, "small", "ResizeCompleted").len(),
        completed + 1
    );
    assert_eq!(container_id(&cl.api.pod("small").unwrap_or_default()), id);
}

/// Against v1.27 with its alpha InPlacePodVerticalScaling gate on, a plain
/// pod update changes resources (there is no `resize` subresource yet),
/// and the resize is reported as that release's kubelet reports it: in
/// `status.resize` (`Infeasible`; gone once a feasible one is in effect),
/// with no PodResizePending / PodResizeInProgress conditions.
#[test]
fn v1_27_resizes_through_a_pod_update_and_reports_status_resize() {
    let mut cl = Cluster::with_gates("resize_v1_27", 35, "1.27", "InPlacePodVerticalScaling=true");
    cl.start_kubelet();
    cl.wait_node_ready(secs(60));
    cl.api.create_pod(&resizable_pod("r27"));
    let before = cl.wait_pod_ready("r27", secs(60));
    assert_eq!(cpu_quota(&cl, &before), ("20000".into(), "20000".into()));
    assert!(
        before["status"].get("resize").is_none(),
        "{}",
        pretty_status(&before)
    );
    let id = container_id(&before);
    let update = |cl: &Cluster, resources: Value| {
        let body = json!({"spec": {"containers": [{"name": "c", "resources": resources}]}});
        cl.api.strategic_patch(&pod_path("r27"), &body);
    };

    update(
        &cl,
        json!({"requests": {"cpu": "500", "memory": "32Mi"},
        "limits": {"cpu": "500", "memory": "64Mi"}}),
    );
    let infeasible = cl.eventually(secs(20), "status.resize Infeasible", |api| {
        let p = api.pod("r27")?;
        (p["status"]["resize"] == "Infeasible").then_some(p)
    });
    let conditions = infeasible["status"]["conditions"].to_string();
    assert!(!conditions.contains("PodResize"), "{conditions}");

    update(
        &cl,
        json!({"requests": {"cpu": "150m", "memory": "32Mi"},
        "limits": {"cpu": "300m", "memory": "64Mi"}}),
    );
    let done = poll(secs(30), || {
        let p = cl.api.pod("r27")?;
        let (own, _) = cgroups(&cl, &p, "cpu");
        let applied = read_v1("cpu", &own, "cpu.cfs_quota_us") == "30000";
        (applied && p["status"].get("resize").is_none()).then_some(p)
    })
    .unwrap_or_else(|| panic!("the CPU resize never took effect: {:?}", cl.api.pod("r27")));
    assert_eq!(container_id(&done), id, "a CPU resize must not restart");
    assert_eq!(container_status(&done)["restartCount"], 0);
}
