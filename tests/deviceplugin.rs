//! The device manager end to end: the real rkubelet in cluster mode (the
//! API server double, a private containerd) and the device plugin peer in
//! tests/plugins/deviceplugin.py, written to the v1beta1 api.proto text.
//!
//! Tests 46-48 (bridge, subnet and ports as in tests/cluster.rs).

mod common;

use std::ffi::OsString;
use std::fs;

use serde_json::{json, Value};

use common::cluster::*;
use common::peer::Peer;
use common::*;

const WIDGET: &str = "example.com/widget";

/// One run of the peer; killed when dropped.
struct Plugin(Peer);

impl Plugin {
    fn start(cl: &Cluster, name: &str, args: &[&str]) -> Plugin {
        let dir = cl.env.dir.join(format!("plugin-{name}"));
        let mut all: Vec<OsString> = vec![
            "--dir".into(),
            cl.env.root.join("device-plugins").into(),
            "--mount-dir".into(),
            dir.join("data").into(),
        ];
        all.extend(args.iter().map(OsString::from));
        Plugin(Peer::spawn(dir, "deviceplugin.py", &all))
    }

    /// Whole-state control: these devices unhealthy, the rest healthy.
    fn set_unhealthy(&self, ids: &[&str]) {
        self.0.set_control(json!({ "unhealthy": ids }));
    }

    /// The calls the plugin received, by RPC name.
    fn calls(&self, rpc: &str) -> Vec<Value> {
        self.0.calls(rpc)
    }

    fn registrations(&self) -> usize {
        self.calls("RegisterResult")
            .iter()
            .filter(|v| v["ok"] == true)
            .count()
    }
}

/// capacity and allocatable of `resource` in the node's status.
fn node_resource(node: &Value, resource: &str) -> (Option<String>, Option<String>) {
    let get = |what: &str| node["status"][what][resource].as_str().map(String::from);
    (get("capacity"), get("allocatable"))
}

fn wait_node_resource(cl: &mut Cluster, resource: &str, cap: &str, alloc: &str) -> Value {
    let want = (Some(cap.to_string()), Some(alloc.to_string()));
    cl.eventually(
        secs(30),
        &format!("node {resource} capacity {cap}, allocatable {alloc}"),
        |api| {
            let n = api.node()?;
            (node_resource(&n, resource) == want).then_some(n)
        },
    )
}

/// A pod asking for `n` of `resource`, whose container prints what its
/// devices gave it and sleeps.
fn device_pod(name: &str, resource: &str, n: u32) -> Value {
    let script = "echo \"ids=$WIDGET_IDS\"; echo \"file=$(cat /widget/ids)\"; \
                  for d in /dev/widget-*; do echo \"dev=$d\"; done; \
                  echo done; exec sleep 3600";
    let mut p = api_pod(name, script);
    p["spec"]["containers"][0]["resources"] = json!({ "limits": { resource: n.to_string() } });
    p
}

/// The device manager's checkpoint under the kubelet's root dir.
fn checkpoint(root: &std::path::Path) -> Value {
    let p = root.join("device-plugins/kubelet_internal_checkpoint");
    serde_json::from_str(&fs::read_to_string(&p).unwrap_or_default()).unwrap_or(Value::Null)
}

fn restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1)
}

// 46 ---------------------------------------------------------------------------------

/// Registration, health in allocatable, a pod that gets a device (its
/// env, mount and device node seen from inside, the plugin's preference
/// and PreStartContainer honoured), a pod refused for want of devices, and
/// the assignment kept across a kill -9 and restart.
#[test]
fn device_plugin_lifecycle() {
    let mut cl = Cluster::new("device_plugin_lifecycle", 46);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let plugin = Plugin::start(
        &cl,
        "widget",
        &[
            "--devices",
            "2",
            "--preferred-allocation",
            "--pre-start-required",
        ],
    );
    wait_node_resource(&mut cl, WIDGET, "2", "2");

    plugin.set_unhealthy(&["widget-0"]);
    wait_node_resource(&mut cl, WIDGET, "2", "1");
    plugin.set_unhealthy(&[]);
    wait_node_resource(&mut cl, WIDGET, "2", "2");

    cl.api.create_pod(&device_pod("gets-one", WIDGET, 1));
    let pod = cl.wait_pod_ready("gets-one", secs(60));
    let pod_logs = cl.env.pod_logs.clone();
    let log = cl.eventually(secs(20), "gets-one's container log", |_| {
        let l = container_log(&pod_logs, "gets-one", "c");
        l.contains("done").then_some(l)
    });
    // The plugin prefers the highest ID: its advice was taken.
    assert!(log.contains("ids=widget-1"), "env from Allocate: {log}");
    assert!(log.contains("file=widget-1"), "mount from Allocate: {log}");
    assert!(
        log.contains("dev=/dev/widget-1"),
        "device from Allocate: {log}"
    );
    let allocs = plugin.calls("Allocate");
    assert_eq!(allocs.len(), 1, "{allocs:?}");
    assert_eq!(
        allocs[0]["request"]["container_requests"][0]["devices_ids"],
        json!(["widget-1"])
    );
    let pre = plugin.calls("PreStartContainer");
    assert_eq!(pre.len(), 1, "{pre:?}");
    assert_eq!(pre[0]["request"]["devices_ids"], json!(["widget-1"]));

    // The pod resources API tells a monitoring agent the same.
    let list = pod_resources(&cl.env.root, &["list"]);
    assert_eq!(list["ok"], true, "{list}");
    let pods = list["response"]["pod_resources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let entry = pods
        .iter()
        .find(|p| p["name"] == "gets-one")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(entry["namespace"], "default");
    assert_eq!(
        entry["containers"],
        json!([{"name": "c", "devices": [{"resource_name": WIDGET, "device_ids": ["widget-1"]}]}])
    );
    let got = pod_resources(&cl.env.root, &["get", "default", "gets-one"]);
    assert_eq!(got["response"]["pod_resources"], *entry, "{got}");
    let missing = pod_resources(&cl.env.root, &["get", "default", "no-such-pod"]);
    assert_eq!(missing["ok"], false, "{missing}");
    assert_eq!(
        missing["details"],
        "pod no-such-pod in namespace default not found"
    );
    let alloc = pod_resources(&cl.env.root, &["allocatable"]);
    assert_eq!(
        alloc["response"]["devices"],
        json!([
            {"resource_name": WIDGET, "device_ids": ["widget-0"]},
            {"resource_name": WIDGET, "device_ids": ["widget-1"]},
        ]),
        "{alloc}"
    );

    // Two more than the one left: refused at admission, as upstream words it.
    cl.api.create_pod(&device_pod("wants-two", WIDGET, 2));
    let refused = cl.wait_pod("wants-two", secs(20), "Failed", |p| phase(p) == "Failed");
    assert_eq!(refused["status"]["reason"], "UnexpectedAdmissionError");
    assert_eq!(
        refused["status"]["message"],
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/widget. Requested: 2, Available: 1, which is unexpected"
    );

    let cl_root = cl.env.root.clone();
    // The checkpoint holds the assignment, in upstream's shape (the
    // device-manager thread writes it just after the answer).
    let cp = cl.eventually(secs(5), "the checkpoint with the assignment", |_| {
        let cp = checkpoint(&cl_root);
        cp["Data"]["PodDeviceEntries"].is_array().then_some(cp)
    });
    let entries = cp["Data"]["PodDeviceEntries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(entries.len(), 1, "{cp}");
    assert_eq!(entries[0]["PodUID"], uid(&pod));
    assert_eq!(entries[0]["ResourceName"], WIDGET);
    assert_eq!(entries[0]["DeviceIDs"], json!({"-1": ["widget-1"]}));
    assert!(cp["Checksum"].as_u64().is_some(), "{cp}");

    // kill -9 and start again: the plugin registers anew, the pod keeps
    // its container and its device.
    let before = plugin.registrations();
    cl.env.kill_kubelet();
    cl.start_kubelet();
    cl.eventually(secs(30), "the plugin registered again", |_| {
        (plugin.registrations() > before).then_some(())
    });
    wait_node_resource(&mut cl, WIDGET, "2", "2");
    cl.api.create_pod(&device_pod("after-restart", WIDGET, 2));
    let refused = cl.wait_pod("after-restart", secs(20), "Failed", |p| {
        phase(p) == "Failed"
    });
    assert!(
        refused["status"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Requested: 2, Available: 1"),
        "widget-1 is still held after the restart: {}",
        pretty_status(&refused)
    );
    let pod = cl.wait_pod_ready("gets-one", secs(20));
    assert_eq!(restarts(&pod), 0, "{}", pretty_status(&pod));
    assert_eq!(
        plugin.calls("Allocate").len(),
        1,
        "no second Allocate after the restart"
    );
}

// 47 ---------------------------------------------------------------------------------

/// Plugins that fail: an Allocate error, an Allocate that answers for no
/// container, and a plugin that dies mid-ListAndWatch. Each pod that uses
/// one waits with the plugin's reason and an event; the node says the dead
/// plugin's devices are unhealthy; a pod without devices runs throughout.
#[test]
fn device_plugin_failures_hold_only_their_pods() {
    let mut cl = Cluster::new("device_plugin_failures_hold_only_their_pods", 47);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let _broken = Plugin::start(
        &cl,
        "broken",
        &[
            "--resource",
            "example.com/broken",
            "--allocate-error",
            "UNAVAILABLE",
        ],
    );
    let _short = Plugin::start(
        &cl,
        "short",
        &["--resource", "example.com/short", "--allocate-short"],
    );
    let dying = Plugin::start(
        &cl,
        "dying",
        &[
            "--resource",
            "example.com/dying",
            "--die-after-updates",
            "2",
        ],
    );
    wait_node_resource(&mut cl, "example.com/broken", "2", "2");
    wait_node_resource(&mut cl, "example.com/short", "2", "2");
    wait_node_resource(&mut cl, "example.com/dying", "2", "2");

    cl.api
        .create_pod(&device_pod("uses-broken", "example.com/broken", 1));
    cl.api
        .create_pod(&device_pod("uses-short", "example.com/short", 1));
    cl.api.create_pod(&api_pod("plain", SLEEPER));

    let waiting = |p: &Value, needle: &str| {
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        w["reason"] == "CreateContainerConfigError"
            && w["message"].as_str().is_some_and(|m| m.contains(needle))
    };
    cl.wait_pod(
        "uses-broken",
        secs(30),
        "waiting on the plugin's error",
        |p| waiting(p, "widget allocation failed"),
    );
    cl.wait_pod("uses-short", secs(30), "waiting on the short answer", |p| {
        waiting(p, "no containers return in allocation response")
    });
    for pod in ["uses-broken", "uses-short"] {
        let events = cl.api.events_for("default", pod);
        assert!(
            events
                .iter()
                .any(|e| e["reason"] == "FailedAllocateDevices"),
            "{pod}: {events:?}"
        );
    }
    cl.wait_pod_ready("plain", secs(30));

    // One health change is the second ListAndWatch message; then it dies.
    dying.set_unhealthy(&["widget-0"]);
    wait_node_resource(&mut cl, "example.com/dying", "2", "0");
    // The event goes out through the recorder's own thread, after the
    // node status that carried the change.
    cl.eventually(secs(10), "the DevicePluginUnhealthy event", |api| {
        api.events_for("default", NODE)
            .iter()
            .any(|e| {
                e["reason"] == "DevicePluginUnhealthy"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("example.com/dying"))
            })
            .then_some(())
    });
    // The others are untouched.
    let node = cl.api.node().unwrap();
    assert_eq!(
        node_resource(&node, "example.com/broken"),
        (Some("2".into()), Some("2".into())),
        "the broken plugin's devices stay healthy"
    );
    let plain = cl.wait_pod_ready("plain", secs(5));
    assert_eq!(restarts(&plain), 0);
}

// 48 ---------------------------------------------------------------------------------

/// Device plugins that register through the plugin watcher
/// (`plugins_registry/`): one is registered and told so, then deregistered
/// when its socket goes; one that lies about its type and a socket that is
/// not a plugin at all are refused with a node event each, and hold the
/// good one back by no more than one registration deadline.
#[test]
fn plugin_watcher_registers_device_plugins() {
    let mut cl = Cluster::new("plugin_watcher_registers_device_plugins", 48);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let registry = cl.env.root.join("plugins_registry");
    cl.eventually(secs(10), "the plugin registry", |_| {
        registry.is_dir().then_some(())
    });
    // Accepts connections and never answers: GetInfo runs into its deadline.
    let _silent =
        std::os::unix::net::UnixListener::bind(registry.join("not-a-plugin.sock")).unwrap();
    let reg = registry.display().to_string();
    let liar = Plugin::start(
        &cl,
        "liar",
        &[
            "--resource",
            "example.com/liar",
            "--registry",
            &reg,
            "--lie-type",
            "Bogus",
        ],
    );
    let mut good = Plugin::start(
        &cl,
        "watched",
        &[
            "--resource",
            "example.com/watched",
            "--devices",
            "3",
            "--registry",
            &reg,
        ],
    );
    wait_node_resource(&mut cl, "example.com/watched", "3", "3");
    let told = good.calls("NotifyRegistrationStatus");
    assert!(
        told.iter().any(|c| c["plugin_registered"] == true),
        "{told:?}"
    );

    let told = cl.eventually(secs(20), "the liar told it was refused", |_| {
        let t = liar.calls("NotifyRegistrationStatus");
        (!t.is_empty()).then_some(t)
    });
    assert_eq!(told[0]["plugin_registered"], false, "{told:?}");
    assert!(
        told[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no handler registered for plugin type: Bogus")),
        "{told:?}"
    );
    let events = cl.eventually(secs(30), "events for both bad sockets", |api| {
        let events = api.events_for("default", NODE);
        let failed: Vec<String> = events
            .iter()
            .filter(|e| e["reason"] == "FailedPluginRegistration")
            .filter_map(|e| e["message"].as_str().map(String::from))
            .collect();
        let named = |s: &str| failed.iter().any(|m| m.contains(s));
        (named("liar-reg.sock") && named("not-a-plugin.sock")).then_some(failed)
    });
    assert!(
        events
            .iter()
            .any(|m| m.contains("not-a-plugin.sock") && m.contains("GetInfo")),
        "{events:?}"
    );

    // The plugin goes (SIGTERM: it removes its sockets): deregistered, its
    // devices unhealthy.
    good.0.terminate();
    wait_node_resource(&mut cl, "example.com/watched", "3", "0");
}
