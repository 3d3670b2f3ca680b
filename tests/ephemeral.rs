//! Ephemeral containers end to end, as `kubectl debug` uses them: the real
//! rkubelet with --kubeconfig against the API server double and a private
//! containerd. A debug container is added to a running pod through the
//! `pods/<name>/ephemeralcontainers` subresource with `targetContainerName`;
//! it runs once in the pod, sees the target's processes (CRI PID namespace
//! TARGET), is reported in `ephemeralContainerStatuses`, its log is served
//! by /containerLogs, and after it exits it is not restarted.
//!
//! Test number (bridge, subnet, ports) 57.
//!
//!     cargo test --release --test ephemeral

mod common;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// What only the target container runs: the debugger's `ps` must show it.
const MARKER: &str = "sleep 31536000";

fn ephemeral_status(pod: &Value) -> Option<&Value> {
    pod["status"]["ephemeralContainerStatuses"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == "debugger")
}

#[test]
fn debug_container_shares_the_targets_processes_and_runs_once() {
    require_prerequisites();
    let mut cl = Cluster::new("ephemeral", 57);
    // The kubelet API as kubectl reaches it through the API server: x509
    // client certificates of the double's CA, webhook authorization.
    let extra = format!(
        "address: 127.0.0.1\n\
         port: {}\n\
         readOnlyPort: 0\n\
         authentication:\n\
         \x20 anonymous:\n\
         \x20   enabled: false\n\
         \x20 webhook:\n\
         \x20   enabled: true\n\
         \x20 x509:\n\
         \x20   clientCAFile: {}\n\
         authorization:\n\
         \x20 mode: Webhook\n",
        22057,
        cl.double.dir.join("ca.crt").display(),
    );
    std::fs::write(&cl.config, kubelet_config(&cl.env, &extra)).expect("kubelet config");
    let cert_dir = cl.env.dir.join("pki").display().to_string();
    let args = cluster_kubelet_args(
        &cl.double,
        &cl.env,
        &cl.config,
        &["--cert-dir", &cert_dir, "--node-ip", "127.0.0.1"],
    );
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(60));
    cl.api
        .create_pod(&api_pod("dbg", &format!("exec {MARKER}")));
    let pod = cl.wait_pod_ready("dbg", secs(90));
    let target_id = pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // kubectl debug -it dbg --image=busybox --target=c, with a command that
    // records what it sees and stays a while.
    let sub = format!("{}/ephemeralcontainers", pod_path("dbg"));
    let patched = cl.api.must(
        "PATCH",
        &sub,
        Some(&json!({"spec": {"ephemeralContainers": [{
            "name": "debugger",
            "image": BUSYBOX,
            "imagePullPolicy": "IfNotPresent",
            "targetContainerName": "c",
            "command": ["sh", "-c", "ps > /dev/termination-log; ps; sleep 6"],
        }]}})),
        &[200],
    );
    assert_eq!(
        patched["spec"]["ephemeralContainers"][0]["name"],
        "debugger"
    );

    // Running, as upstream reports it.
    let running = cl.eventually(secs(60), "debugger Running", |api| {
        let p = api.pod("dbg")?;
        let s = ephemeral_status(&p)?;
        s["state"]["running"].is_object().then(|| p.clone())
    });
    let s = ephemeral_status(&running).cloned().unwrap_or_default();
    let id = s["containerID"].as_str().unwrap_or_default();
    assert!(id.starts_with("containerd://") && id != target_id, "{s}");
    assert_eq!(s["image"], BUSYBOX, "{s}");
    // The same image as the target's, reported in the same form.
    assert_eq!(
        s["imageID"], running["status"]["containerStatuses"][0]["imageID"],
        "{s}"
    );
    assert_eq!(
        (&s["ready"], &s["restartCount"]),
        (&json!(false), &json!(0))
    );
    assert!(s.get("started").is_none(), "{s}");
    assert_eq!(s["lastState"], json!({}), "{s}");
    // The pod itself is unchanged: still Running and Ready, one app status.
    assert!(running_ready(&running), "{}", pretty_status(&running));
    assert_eq!(
        running["status"]["containerStatuses"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    // kubectl logs dbg -c debugger: through the double to /containerLogs.
    let log_path = format!("{}/log?container=debugger", pod_path("dbg"));
    let mut last = String::new();
    let log = poll(secs(20), || match cl.api.call("GET", &log_path, None) {
        Ok((200, Value::String(t))) if t.contains(MARKER) => Some(t),
        other => {
            last = format!("{other:?}");
            None
        }
    })
    .unwrap_or_else(|| panic!("debugger log without {MARKER:?}: {last}"));
    assert!(log.contains(MARKER), "{log}");

    // It exits 0 and stays exited: its `ps` saw the target's process.
    let done = cl.eventually(secs(60), "debugger terminated", |api| {
        let p = api.pod("dbg")?;
        let s = ephemeral_status(&p)?;
        s["state"]["terminated"].is_object().then(|| p.clone())
    });
    let s = ephemeral_status(&done).cloned().unwrap_or_default();
    let t = &s["state"]["terminated"];
    assert_eq!(
        (&t["exitCode"], &t["reason"]),
        (&json!(0), &json!("Completed")),
        "{s}"
    );
    let msg = t["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains(MARKER),
        "ps in the debugger did not see the target: {msg}"
    );

    // Several syncs later (syncFrequency 10 s): not restarted, the target
    // untouched, one instance in the runtime.
    std::thread::sleep(secs(15));
    let later = cl.api.pod("dbg").unwrap_or_default();
    let s = ephemeral_status(&later).cloned().unwrap_or_default();
    assert!(s["state"]["terminated"].is_object(), "{s}");
    assert_eq!(s["restartCount"], 0, "{s}");
    assert_eq!(s["containerID"], id, "{s}");
    assert!(running_ready(&later), "{}", pretty_status(&later));
    assert_eq!(
        later["status"]["containerStatuses"][0]["containerID"],
        target_id
    );
    assert_eq!(later["status"]["containerStatuses"][0]["restartCount"], 0);
    let snap = cl.env.snapshot();
    assert_eq!(
        snap.instances("dbg", "debugger").len(),
        1,
        "{}",
        snap.summary()
    );

    // A second debugger that stays: a merge patch carries the whole list,
    // the first entry unchanged. It dies with the pod.
    let first = later["spec"]["ephemeralContainers"][0].clone();
    let second = json!({"name": "sleeper", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"]});
    cl.api.must(
        "PATCH",
        &sub,
        Some(&json!({"spec": {"ephemeralContainers": [first, second]}})),
        &[200],
    );
    cl.eventually(secs(60), "sleeper Running", |api| {
        let p = api.pod("dbg")?;
        let s = p["status"]["ephemeralContainerStatuses"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == "sleeper")?
            .clone();
        s["state"]["running"].is_object().then_some(())
    });
    cl.api.must("DELETE", &pod_path("dbg"), None, &[200]);
    cl.eventually(secs(60), "pod gone", |api| {
        api.get_or_gone(&pod_path("dbg"))
            .ok()?
            .is_none()
            .then_some(())
    });
    let snap = cl.env.snapshot();
    assert!(
        snap.running("dbg", "sleeper").is_none() && snap.running("dbg", "c").is_none(),
        "{}",
        snap.summary()
    );
}
