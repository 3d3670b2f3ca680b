//! Dynamic resource allocation end to end: the real rkubelet in cluster
//! mode (the API server double at 1.34, and at 1.32 with
//! DynamicResourceAllocation on; a private containerd) and the DRA driver
//! peer in tests/plugins/draplugin.py, written to the kubelet's DRA API
//! text, registering through `plugins_registry/`.
//!
//! The claims are allocated and reserved by the test, as the scheduler
//! would, before it binds the pods. containerd 1.6 ignores CRI's CDI
//! devices; that they reach the runtime is checked in the VM
//! (tests/vm/checks/dra.sh), here through the pod resources API.
//!
//! Tests 38 and 77 (bridge, subnet and ports as in tests/cluster.rs).

mod common;

use std::ffi::OsString;
use std::fs;

use serde_json::{json, Value};

use common::cluster::*;
use common::peer::Peer;
use common::*;

const DRIVER: &str = "gpu.example.com";

/// The driver peer serving `services`; killed when dropped.
fn start_driver(cl: &Cluster, services: &str) -> Peer {
    let dir = cl.env.dir.join("dra");
    let args: Vec<OsString> = vec![
        "--registry".into(),
        cl.env.root.join("plugins_registry").into(),
        "--endpoint".into(),
        dir.join("drv.sock").into(),
        "--driver".into(),
        DRIVER.into(),
        "--services".into(),
        services.into(),
    ];
    Peer::spawn(dir, "draplugin.py", &args)
}

fn wait_registered(cl: &mut Cluster, driver: &Peer) {
    cl.eventually(secs(30), "the DRA driver registered", |_| {
        driver
            .calls("NotifyRegistrationStatus")
            .iter()
            .any(|c| c["plugin_registered"] == true)
            .then_some(())
    });
}

fn claims_path(version: &str) -> String {
    format!("/apis/resource.k8s.io/{version}/namespaces/default/resourceclaims")
}

/// A claim for one device of the driver's class, in `version`'s shape.
fn create_claim(api: &Api, version: &str, name: &str) -> Value {
    let request = match version {
        "v1" => json!({"name": "gpu", "exactly": {"deviceClassName": DRIVER}}),
        _ => json!({"name": "gpu", "deviceClassName": DRIVER}),
    };
    let claim = json!({
        "apiVersion": format!("resource.k8s.io/{version}"),
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    });
    api.must("POST", &claims_path(version), Some(&claim), &[201])
}

/// What the scheduler does: the claim allocated on this node's driver and
/// reserved for `pods`.
fn allocate(api: &Api, version: &str, claim: &Value, pods: &[&Value]) {
    let mut c = claim.clone();
    c["status"] = json!({
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "pool-0", "device": "dev-0"}]}},
        "reservedFor": pods.iter().map(|p| json!({
            "resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}))
            .collect::<Vec<_>>(),
    });
    let name = c["metadata"]["name"].as_str().unwrap_or("").to_string();
    let path = format!("{}/{name}/status", claims_path(version));
    api.must("PUT", &path, Some(&c), &[200]);
}

/// A pod using claim `claim` in its container, not bound yet.
fn create_claiming_pod(api: &Api, name: &str, claim: &str) -> Value {
    let mut p = api_pod(name, "echo running; exec sleep 3600");
    p["spec"].as_object_mut().map(|s| s.remove("nodeName"));
    p["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": claim}]);
    p["spec"]["containers"][0]["resources"] = json!({"claims": [{"name": "gpu"}]});
    api.create_pod(&p)
}

fn bind(api: &Api, name: &str) {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": "default"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE},
    });
    api.must(
        "POST",
        &format!("{}/binding", pod_path(name)),
        Some(&binding),
        &[201],
    );
}

/// The DRA manager's checkpoint's claims (upstream's `Data` JSON inside).
/// A ResourceSlice of the driver on `node` (as a driver would publish it).
fn create_slice(api: &Api, name: &str, node: &str) {
    let slice = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "dev"}]},
    });
    api.must("POST", SLICES, Some(&slice), &[201]);
}

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

fn slice_exists(api: &Api, name: &str) -> bool {
    api.get(&format!("{SLICES}/{name}")).is_some()
}

fn checkpointed(root: &std::path::Path) -> Vec<Value> {
    let outer: Value = fs::read_to_string(root.join("dra_manager_state"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let data: Value = outer["Data"]
        .as_str()
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or(Value::Null);
    data["Entries"].as_array().cloned().unwrap_or_default()
}

fn prepares(driver: &Peer) -> Vec<Value> {
    driver.calls("NodePrepareResources")
}

// 38 ---------------------------------------------------------------------------------

/// v1.34: one claim shared by two pods is prepared once over the v1
/// service, its CDI device listed for both in the pod resources API and
/// kept in the checkpoint across a kubelet restart; it is given back only
/// when the last pod using it is gone.
#[test]
fn a_shared_claim_is_prepared_once_and_given_back_by_the_last_pod() {
    let mut cl = Cluster::new("a_shared_claim_is_prepared_once", 38);
    // Slices left from before the start: this node's go, as upstream
    // wipes them once the Node exists; another node's stay.
    create_slice(&cl.api, "stale", NODE);
    create_slice(&cl.api, "elsewhere", "other-node");
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.eventually(secs(30), "this node's stale slice wiped", |api| {
        (!slice_exists(api, "stale")).then_some(())
    });
    assert!(slice_exists(&cl.api, "elsewhere"));
    let wipes: Vec<String> = cl
        .double
        .audit()
        .iter()
        .filter(|e| e["verb"] == "deletecollection")
        .map(|e| format!("{} {} -> {}", e["user"], e["path"], e["code"]))
        .collect();
    let want =
        format!("\"system:node:{NODE}\" \"{SLICES}?fieldSelector=spec.nodeName%3D{NODE}\" -> 200");
    assert_eq!(wipes, [want], "the node's one deletecollection at start");
    let driver = start_driver(&cl, "v1.DRAPlugin,v1beta1.DRAPlugin");
    wait_registered(&mut cl, &driver);

    let claim = create_claim(&cl.api, "v1", "shared");
    let a = create_claiming_pod(&cl.api, "dra-a", "shared");
    let b = create_claiming_pod(&cl.api, "dra-b", "shared");
    allocate(&cl.api, "v1", &claim, &[&a, &b]);
    bind(&cl.api, "dra-a");
    bind(&cl.api, "dra-b");
    cl.wait_pod_ready("dra-a", secs(90));
    cl.wait_pod_ready("dra-b", secs(90));

    let calls = prepares(&driver);
    assert_eq!(calls.len(), 1, "prepared once for both pods: {calls:?}");
    assert_eq!(calls[0]["service"], "v1.DRAPlugin", "{calls:?}");
    assert_eq!(
        calls[0]["request"]["claims"][0]["uid"],
        claim["metadata"]["uid"]
    );
    assert_eq!(calls[0]["request"]["claims"][0]["name"], "shared");

    let cdi = format!("example.com/gpu={}", uid(&claim));
    for pod in ["dra-a", "dra-b"] {
        let got = pod_resources(&cl.env.root, &["get", "default", pod]);
        let dynamic = &got["response"]["pod_resources"]["containers"][0]["dynamic_resources"][0];
        assert_eq!(dynamic["claim_name"], "shared", "{got}");
        let res = &dynamic["claim_resources"][0];
        assert_eq!(res["driver_name"], DRIVER, "{got}");
        assert_eq!(res["device_name"], "dev-shared", "{got}");
        assert_eq!(res["cdi_devices"][0]["name"], cdi.as_str(), "{got}");
    }
    let entries = checkpointed(&cl.env.root);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let users = entries[0]["PodUIDs"].as_object().map(|m| m.len());
    assert_eq!(users, Some(2), "{entries:?}");

    // A restart: the pods keep running, nothing is prepared again.
    cl.env.kill_kubelet();
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    wait_registered(&mut cl, &driver);
    std::thread::sleep(secs(5));
    assert_eq!(prepares(&driver).len(), 1);
    assert!(running_ready(&cl.api.pod("dra-b").unwrap_or_default()));

    // dra-b still uses the claim when dra-a goes.
    cl.api.must("DELETE", &pod_path("dra-a"), None, &[200]);
    cl.eventually(secs(60), "dra-a gone", |api| {
        api.pod("dra-a").is_none().then_some(())
    });
    std::thread::sleep(secs(3));
    assert!(driver.calls("NodeUnprepareResources").is_empty());
    cl.api.must("DELETE", &pod_path("dra-b"), None, &[200]);
    let undone = cl.eventually(secs(60), "the claim unprepared", |_| {
        let u = driver.calls("NodeUnprepareResources");
        (!u.is_empty()).then_some(u)
    });
    assert_eq!(undone.len(), 1, "{undone:?}");
    assert_eq!(
        undone[0]["request"]["claims"][0]["uid"],
        claim["metadata"]["uid"]
    );
    let root = cl.env.root.clone();
    cl.eventually(secs(10), "the checkpoint emptied", |_| {
        checkpointed(&root).is_empty().then_some(())
    });

    // The driver goes: its slices stay for upstream's 30 s, then go.
    create_slice(&cl.api, "published", NODE);
    let mut driver = driver;
    driver.terminate();
    let gone = std::time::Instant::now();
    cl.eventually(secs(75), "the departed driver's slice wiped", |api| {
        (!slice_exists(api, "published")).then_some(())
    });
    assert!(
        gone.elapsed() >= secs(29),
        "wiped after {:?}",
        gone.elapsed()
    );
    assert!(slice_exists(&cl.api, "elsewhere"));
}

// 77 ---------------------------------------------------------------------------------

/// v1.32 with DRA on: the claim is read as v1beta1 and the driver, which
/// speaks only v1beta1, is called so. A driver that fails holds the pod in
/// `ContainerCreating` with upstream's event, and a kubelet killed while
/// the driver prepares starts the pod once it is back.
#[test]
fn a_failing_driver_holds_its_pod_and_a_restart_mid_prepare_recovers() {
    let mut cl = Cluster::with_gates(
        "a_failing_driver_holds_its_pod",
        77,
        "1.32",
        "DynamicResourceAllocation=true",
    );
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let driver = start_driver(&cl, "v1beta1.DRAPlugin");
    wait_registered(&mut cl, &driver);
    driver.set_control(json!({"fail": "no GPU left"}));

    let claim = create_claim(&cl.api, "v1beta1", "gpu-claim");
    let pod = create_claiming_pod(&cl.api, "dra-waits", "gpu-claim");
    allocate(&cl.api, "v1beta1", &claim, &[&pod]);
    bind(&cl.api, "dra-waits");
    let want = "Failed to prepare dynamic resources: \
                NodePrepareResources failed for ResourceClaim gpu-claim: no GPU left";
    cl.eventually(secs(60), "the FailedPrepareDynamicResources event", |api| {
        api.events_for("default", "dra-waits")
            .iter()
            .any(|e| e["reason"] == "FailedPrepareDynamicResources" && e["message"] == want)
            .then_some(())
    });
    let p = cl.api.pod("dra-waits").unwrap_or_default();
    assert_eq!(phase(&p), "Pending", "{}", pretty_status(&p));
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ContainerCreating",
        "{}",
        pretty_status(&p)
    );
    let calls = prepares(&driver);
    assert_eq!(calls[0]["service"], "v1beta1.DRAPlugin", "{calls:?}");
    let reads: Vec<String> = cl
        .double
        .audit()
        .iter()
        .filter(|e| {
            e["path"]
                .as_str()
                .is_some_and(|p| p.contains("resourceclaims"))
        })
        .map(audit_line)
        .collect();
    let node_read = reads.iter().any(|l| {
        l.contains(&format!(
            "system:node:{NODE} get resourceclaims.resource.k8s.io default/gpu-claim "
        ))
    });
    assert!(node_read, "the node read the claim: {reads:#?}");
    let v1beta1 = cl.double.audit().iter().any(|e| {
        e["method"] == "GET"
            && e["path"]
                == "/apis/resource.k8s.io/v1beta1/namespaces/default/resourceclaims/gpu-claim"
    });
    assert!(v1beta1, "read as v1beta1: {reads:#?}");

    // The driver answers slowly now; the kubelet is killed meanwhile.
    driver.set_control(json!({"delay": 4}));
    let answered = prepares(&driver).len();
    cl.eventually(secs(30), "a prepare under way", |_| {
        let started = driver.calls("NodePrepareResourcesStarted").len();
        (started > answered && prepares(&driver).len() == answered).then_some(())
    });
    cl.env.kill_kubelet();
    cl.start_kubelet();
    cl.wait_pod_ready("dra-waits", secs(90));
    let entries = checkpointed(&cl.env.root);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        entries[0]["ClaimUID"], claim["metadata"]["uid"],
        "{entries:?}"
    );
    assert_eq!(
        entries[0]["DriverState"][DRIVER]["Devices"][0]["CDIDeviceIDs"][0],
        format!("example.com/gpu={}", uid(&claim)).as_str(),
        "{entries:?}"
    );

    cl.api.must("DELETE", &pod_path("dra-waits"), None, &[200]);
    cl.eventually(secs(60), "the claim unprepared", |_| {
        (!driver.calls("NodeUnprepareResources").is_empty()).then_some(())
    });
}
