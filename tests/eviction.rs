//! The eviction manager on real containerd, in cluster mode against the
//! API server double: a hard memory.available threshold set below the
//! node's measured available memory, a BestEffort pod that takes 1.5 GB,
//! and a Guaranteed pod. The BestEffort pod is evicted (Failed, Evicted,
//! upstream's message, a Warning event), the Guaranteed one keeps running,
//! the node reports MemoryPressure, and a new BestEffort pod is refused
//! while the condition holds (evictionPressureTransitionPeriod), and
//! admitted again once it clears.
//!
//! The threshold sits 1500 MiB below what was available at the start and
//! the hog takes ~2900 MiB, so other processes on the machine may move by
//! over a GB either way without changing the outcome.
//!
//! A second test fills an emptyDir past its `sizeLimit`: that pod alone is
//! evicted, whatever the node's thresholds (localStorageCapacityIsolation).
//!
//! Test numbers 83–85.

mod common;

use std::fs;

use serde_json::json;

use common::cluster::*;
use common::*;

/// How far below the available memory at start the threshold sits.
const MARGIN_MIB: u64 = 1500;
/// What the hog holds: two awk strings of this many bytes each (touched,
/// so resident), then it sleeps. No limit: the pod stays BestEffort.
const HOG_BYTES: u64 = 1_500_000_000;

/// memory.available as the kubelet computes it: MemTotal − (MemTotal −
/// MemFree − Inactive(file)), i.e. MemFree + Inactive(file), in MiB.
fn available_mib() -> u64 {
    let text = fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    let field = |k: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {k} in /proc/meminfo"))
    };
    (field("MemFree:") + field("Inactive(file):")) / 1024
}

#[test]
fn memory_pressure_evicts_best_effort_first_and_refuses_new_ones() {
    require_prerequisites();
    let mut cl = Cluster::new("eviction_memory", 83);
    let mut threshold = available_mib().saturating_sub(MARGIN_MIB);
    // A whole number of GiB would print as "NGi" in the message.
    if threshold.is_multiple_of(1024) {
        threshold -= 1;
    }
    eprintln!("memory.available threshold: {threshold}Mi");
    let extra = format!(
        "evictionHard:\n\
         \x20 memory.available: {threshold}Mi\n\
         evictionPressureTransitionPeriod: 60s\n\
         nodeStatusUpdateFrequency: 2s\n"
    );
    fs::write(&cl.config, kubelet_config(&cl.env, &extra)).expect("kubelet config");
    cl.start_kubelet();
    let node = cl.wait_node_ready(secs(60));
    assert!(
        !condition_true(&node, "MemoryPressure"),
        "pressure before the hog: {}",
        pretty_status(&node)
    );

    let mut guaranteed = api_pod("guaranteed", SLEEPER);
    guaranteed["spec"]["containers"][0]["resources"] = json!({
        "limits": {"cpu": "100m", "memory": "64Mi"},
        "requests": {"cpu": "100m", "memory": "64Mi"},
    });
    cl.api.create_pod(&guaranteed);
    cl.wait_pod_ready("guaranteed", secs(90));

    let hog = format!(
        "awk 'BEGIN {{ s = sprintf(\"%{HOG_BYTES}s\", \"\"); t = sprintf(\"%{HOG_BYTES}s\", \"\"); print length(s) + length(t); system(\"sleep 3600\") }}'"
    );
    cl.api.create_pod(&api_pod("hog", &hog));
    let evicted = cl.wait_pod("hog", secs(120), "evicted", |p| phase(p) == "Failed");
    assert_eq!(
        evicted["status"]["reason"],
        "Evicted",
        "{}",
        pretty_status(&evicted)
    );
    let message = evicted["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(&format!(
            "The node was low on resource: memory. Threshold quantity: {threshold}Mi, available: "
        )) && message.contains("Container c was using ")
            && message.ends_with("request is 0, has larger consumption of memory. "),
        "message: {message}"
    );
    let target = condition(&evicted, "DisruptionTarget").expect("DisruptionTarget condition");
    assert_eq!(
        (&target["status"], &target["reason"], &target["message"]),
        (
            &json!("True"),
            &json!("TerminationByKubelet"),
            &json!(message)
        ),
        "{}",
        pretty_status(&evicted)
    );
    let events = cl.api.events_for("default", "hog");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "Evicted" && e["type"] == "Warning"),
        "no Evicted event: {events:?}"
    );
    let env = &mut cl.env;
    eventually(secs(30), "the hog's container stopped", || {
        env.snapshot().running("hog", "c").is_none().then_some(())
    });

    // The node reports MemoryPressure through the transition period.
    cl.eventually(secs(30), "MemoryPressure on the node", |api| {
        let n = api.node()?;
        condition_true(&n, "MemoryPressure").then_some(())
    });

    // A new BestEffort pod is refused meanwhile; a Guaranteed one would not be.
    cl.api.create_pod(&api_pod("late", SLEEPER));
    let refused = cl.wait_pod("late", secs(120), "refused", |p| phase(p) == "Failed");
    assert_eq!(
        refused["status"]["reason"],
        "Evicted",
        "{}",
        pretty_status(&refused)
    );
    assert_eq!(
        refused["status"]["message"],
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );
    assert!(
        cl.env.snapshot().containers("late").is_empty(),
        "a refused pod runs nothing"
    );

    // The Guaranteed pod was never touched.
    let g = cl.api.pod("guaranteed").expect("guaranteed pod");
    assert!(running_ready(&g), "{}", pretty_status(&g));
    assert_eq!(
        g["status"]["containerStatuses"][0]["restartCount"],
        0,
        "{}",
        pretty_status(&g)
    );
    assert!(cl.env.snapshot().running("guaranteed", "c").is_some());
    assert_eq!(
        cl.env.log_lines_with("is evicted successfully").len(),
        1,
        "exactly one eviction"
    );

    // With the hog gone, MemoryPressure clears once the transition period
    // passes, and BestEffort pods are admitted again.
    cl.eventually(secs(180), "MemoryPressure cleared", |api| {
        let n = api.node()?;
        (condition(&n, "MemoryPressure")?["status"] == "False").then_some(())
    });
    cl.api.create_pod(&api_pod("after", SLEEPER));
    cl.wait_pod_ready("after", secs(90));
}

/// A pod writing 20 MiB into an emptyDir limited to 10Mi is evicted with
/// upstream's message; a pod within its limit keeps running.
#[test]
fn empty_dir_over_its_size_limit_is_evicted() {
    require_prerequisites();
    let mut cl = Cluster::new("eviction_empty_dir", 84);
    cl.start_kubelet();
    cl.wait_node_ready(secs(60));
    let with_scratch = |name: &str, mib: u32| {
        let script = format!("dd if=/dev/zero of=/scratch/f bs=1M count={mib} && sync; {SLEEPER}");
        let mut p = api_pod(name, &script);
        p["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {"sizeLimit": "10Mi"}}]);
        p["spec"]["containers"][0]["volumeMounts"] =
            json!([{"name": "scratch", "mountPath": "/scratch"}]);
        p
    };
    cl.api.create_pod(&with_scratch("within", 2));
    cl.api.create_pod(&with_scratch("filler", 20));
    let evicted = cl.wait_pod("filler", secs(120), "evicted", |p| phase(p) == "Failed");
    assert_eq!(
        evicted["status"]["reason"],
        "Evicted",
        "{}",
        pretty_status(&evicted)
    );
    assert_eq!(
        evicted["status"]["message"],
        "Usage of EmptyDir volume \"scratch\" exceeds the limit \"10Mi\". "
    );
    let events = cl.api.events_for("default", "filler");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "Evicted" && e["type"] == "Warning"),
        "no Evicted event: {events:?}"
    );
    let env = &mut cl.env;
    eventually(secs(30), "the filler's container stopped", || {
        env.snapshot()
            .running("filler", "c")
            .is_none()
            .then_some(())
    });
    let w = cl.wait_pod_ready("within", secs(30));
    assert_eq!(phase(&w), "Running", "{}", pretty_status(&w));
    assert_eq!(cl.env.log_lines_with("is evicted successfully").len(), 1);
}
