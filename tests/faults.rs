//! Fault suite (issue 12): the real rkubelet against a real containerd and
//! the API server double, with faults injected from outside: SIGKILL in
//! the middle of a burst, containerd killed under running pods, an API
//! server that throttles, answers garbage and then goes away for a minute,
//! and a full disk under --root-dir.
//!
//!     cargo test --release --test faults

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;

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

/// The kubelet's resident set, in KiB.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The API server throttles (429 with Retry-After), answers bodies that are
/// not JSON, cuts every watch, and then is gone for a minute: rkubelet
/// stays up with its pods running and its memory bounded, and status, lease
/// and new pods resume once the API is back.
#[test]
fn api_throttling_garbage_and_a_minute_down_are_survived() {
    let mut cl = Cluster::new("api_throttling_garbage_and_a_minute_down", 68);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    for n in ["a", "b"] {
        cl.api.create_pod(&api_pod(n, SLEEPER));
    }
    for n in ["a", "b"] {
        cl.wait_pod_ready(n, secs(30));
    }
    let before = running_containers(&cl.env.snapshot());
    assert_eq!(before.len(), 2, "{before:?}");

    cl.api
        .fault(json!({"status": 429, "retryAfterSeconds": 1, "count": 30}));
    cl.api.fault(json!({"garbageBody": true, "count": 10}));
    cl.api.fault(json!({"closeWatches": true}));
    let consumed = cl.wait_faults_consumed("30 throttled and 10 garbage answers", secs(120));
    assert!(
        consumed.is_some(),
        "rkubelet did not run into the faults within 120 s"
    );
    cl.wait_renewed_after(now_secs(), secs(30));

    let pid = cl.env.kubelet_pid().expect("rkubelet runs");
    let rss_before = rss_kb(pid);
    cl.double.kill();
    let t0 = Instant::now();
    let mut rss_max = rss_before;
    while t0.elapsed() < secs(60) {
        cl.env.assert_kubelet_alive();
        rss_max = rss_max.max(rss_kb(pid));
        std::thread::sleep(secs(1));
    }
    eprintln!("a minute without the API: RSS {rss_before} KiB before, {rss_max} KiB at most");
    assert_eq!(
        running_containers(&cl.env.snapshot()),
        before,
        "containers changed while the API was down"
    );
    cl.env.wait_healthy(secs(5));
    // Bounded: retries and backoff hold no growing backlog.
    assert!(
        rss_max < rss_before + 4096,
        "RSS grew from {rss_before} KiB to {rss_max} KiB while the API was down"
    );

    let t_back = Instant::now();
    cl.double.start();
    cl.wait_renewed_after(now_secs(), secs(30));
    eprintln!(
        "lease renewed {:?} after the API came back",
        t_back.elapsed()
    );
    cl.api.create_pod(&api_pod("after", SLEEPER));
    // As client-go's, the pod reflector waits its backoff (grown to 30 s,
    // up to 100 % jitter, during the outage) before watching again, and
    // again before relisting when that watch finds its resourceVersion
    // expired: a new pod may take two minutes to be seen, as upstream.
    cl.wait_pod_ready("after", secs(150));
    eprintln!(
        "a pod created after the outage Ready {:?} after the API came back",
        t_back.elapsed()
    );
    for n in ["a", "b"] {
        cl.wait_pod_ready(n, secs(10));
    }
    let after = running_containers(&cl.env.snapshot());
    for (k, id) in &before {
        assert_eq!(after.get(k), Some(id), "{k:?} was restarted");
    }
}

/// Fills the filesystem under `dir` to the last byte; returns the filler.
fn fill_up(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("create the filler");
    for chunk in [1 << 20, 4096, 1] {
        let buf = vec![0x5au8; chunk];
        while f.write_all(&buf).is_ok() {}
    }
    let _ = f.sync_all();
    path
}

/// --root-dir on a small tmpfs filled to the last byte: a pod whose
/// configMap volume cannot be written waits with an event naming the error,
/// a running pod is untouched, and once space returns the pod starts with
/// complete files and no leftovers of the failed writes.
#[test]
fn full_root_dir_is_reported_and_recovered() {
    let mut cl = Cluster::new("full_root_dir_is_reported_and_recovered", 69);
    let root = cl.env.root.clone();
    nix::mount::mount(
        Some("tmpfs"),
        &root,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=16m,mode=0755"),
    )
    .expect("mount a tmpfs on the root dir");
    let big = "x".repeat(200_000);
    cl.api.must(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
                     "data": {"big": big, "small": "hello"}}),
        ),
        &[201],
    );
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&api_pod("early", SLEEPER));
    cl.wait_pod_ready("early", secs(30));
    let early = running_containers(&cl.env.snapshot());

    let filler = fill_up(&root);
    let mut late = api_pod(
        "late",
        "[ \"$(cat /cfg/small)\" = hello ] && [ $(wc -c < /cfg/big) -eq 200000 ] && exec sleep 3600; exit 1",
    );
    late["spec"]["volumes"] = json!([{"name": "cfg", "configMap": {"name": "app"}}]);
    late["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "cfg", "mountPath": "/cfg"}]);
    cl.api.create_pod(&late);
    let event = cl.eventually(secs(30), "an event naming the full disk", |api| {
        api.events_for("default", "late").into_iter().find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("No space left on device"))
        })
    });
    eprintln!(
        "with the disk full: {} {}",
        event["reason"], event["message"]
    );
    assert_eq!(event["type"], "Warning", "{event}");
    let p = cl.api.pod("late").expect("the pod");
    assert!(!running_ready(&p), "{}", pretty_status(&p));
    cl.env.assert_kubelet_alive();
    assert_eq!(running_containers(&cl.env.snapshot()), early);

    std::fs::remove_file(&filler).expect("remove the filler");
    let t0 = Instant::now();
    let p = cl.wait_pod_ready("late", secs(60));
    eprintln!("Ready {:?} after space returned", t0.elapsed());
    let uid = p["metadata"]["uid"].as_str().expect("uid").to_string();
    let vol = root.join(format!("pods/{uid}/volumes/kubernetes.io~configmap/cfg"));
    assert_eq!(
        std::fs::read_to_string(vol.join("small")).ok().as_deref(),
        Some("hello")
    );
    assert_eq!(
        std::fs::metadata(vol.join("big")).map(|m| m.len()).ok(),
        Some(200_000)
    );
    // The atomic writer's layout: one timestamped directory, `..data`
    // pointing at it, and the user-visible links; nothing half-written.
    let mut names: Vec<String> = std::fs::read_dir(&vol)
        .expect("read the volume")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let stamped: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("..") && *n != "..data")
        .collect();
    assert_eq!(stamped.len(), 1, "leftovers in the volume: {names:?}");
    assert!(names.contains(&"..data".to_string()), "{names:?}");
    assert_eq!(
        p["status"]["containerStatuses"][0]["restartCount"],
        0,
        "{}",
        pretty_status(&p)
    );
}
