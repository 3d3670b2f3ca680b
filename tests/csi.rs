//! The CSI volume plugin end to end: the real rkubelet in cluster mode
//! (the API server double, a private containerd) and the CSI driver peer in
//! tests/plugins/csidriver.py, written to the CSI spec's text and
//! registering through the plugin watcher as node-driver-registrar does.
//! The tests play the attach-detach controller: they make the
//! VolumeAttachment and mark it attached.
//!
//! Tests 49-50 (bridge, subnet and ports as in tests/cluster.rs).

mod common;
mod csipeer;

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;
use csipeer::*;

/// Waits for the claim's status to say `size`, with no
/// FileSystemResizePending condition left (upstream MarkFSResizeFinished).
fn claim_resized(cl: &mut Cluster, claim: &str, size: &str) {
    let path = format!("/api/v1/namespaces/default/persistentvolumeclaims/{claim}");
    let c = cl.eventually(secs(30), &format!("{claim}'s status at {size}"), |api| {
        let c = api.get(&path)?;
        (c["status"]["capacity"]["storage"] == size).then_some(c)
    });
    let pending = c["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "FileSystemResizePending");
    assert!(!pending, "{}", c["status"]);
}

// 49 ---------------------------------------------------------------------------------

/// Registration (CSINode, annotation, labels), a CSI PV staged and
/// published once attached, an inline ephemeral volume, a generic
/// ephemeral volume, volumesInUse, and tear-down of a pod deleted while
/// the kubelet was killed.
#[test]
fn csi_driver_lifecycle() {
    let mut cl = Cluster::new("csi_lifecycle", 49);
    // Volume usage every 2 s, read on the (unauthenticated) read-only port.
    // The read-only port is served beside the kubelet API, which gets a
    // port of this test's own (as Env::open_read_only_port gives
    // standalone tests): on the default 10250 it would lose to a cluster
    // test running alongside, and neither server would start.
    let ro_port = 23049;
    let config = fs::read_to_string(&cl.config).unwrap();
    fs::write(
        &cl.config,
        format!(
            "{config}\nvolumeStatsAggPeriod: 2s\naddress: 127.0.0.1\nport: 22049\nreadOnlyPort: {ro_port}\n"
        ),
    )
    .unwrap();
    cl.start_kubelet();
    let node = cl.wait_node_ready(secs(20));

    // As upstream v1.22 at start: a CSINode owned by the Node.
    let cn = cl.eventually(secs(30), "the CSINode", csinode);
    assert_eq!(cn["metadata"]["ownerReferences"][0]["kind"], "Node");
    assert_eq!(
        cn["metadata"]["ownerReferences"][0]["uid"],
        node["metadata"]["uid"]
    );
    assert_eq!(
        cn["metadata"]["annotations"]["storage.alpha.kubernetes.io/migrated-plugins"],
        "kubernetes.io/cinder"
    );

    create(
        &cl,
        "/apis/storage.k8s.io/v1/csidrivers",
        csi_driver_object(
            DRIVER,
            json!({"attachRequired": true, "podInfoOnMount": true,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"], "fsGroupPolicy": "File"}),
        ),
    );
    let driver = Driver::start(
        &cl,
        DRIVER,
        &[
            "--node-id",
            "node-1-id",
            "--topology",
            "topology.csi.example.com/zone=z1",
            "--max-volumes",
            "10",
        ],
    );
    let cn = cl.eventually(secs(30), "the driver in the CSINode", |api| {
        csinode(api).filter(|c| {
            c["spec"]["drivers"]
                .as_array()
                .is_some_and(|d| !d.is_empty())
        })
    });
    assert_eq!(
        cn["spec"]["drivers"],
        json!([{"name": DRIVER, "nodeID": "node-1-id", "topologyKeys": ["topology.csi.example.com/zone"],
                "allocatable": {"count": 10}}])
    );
    let n = cl.api.node().unwrap();
    assert_eq!(
        n["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"],
        json!({DRIVER: "node-1-id"}).to_string()
    );
    assert_eq!(
        n["metadata"]["labels"]["topology.csi.example.com/zone"],
        "z1"
    );
    let reg = driver.calls("NotifyRegistrationStatus");
    assert_eq!(
        reg.last().map(|r| r["plugin_registered"].clone()),
        Some(json!(true)),
        "{reg:?}"
    );

    // A CSI PV: waits for its attachment, then is staged and published.
    csi_pv_and_claim(&cl, "pv-a", "claim-a", DRIVER, "vol-a", None);
    let pod = cl.api.create_pod(&pod_with(
        "csi-pv",
        &writer("csi-pv"),
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim-a"}}]),
    ));
    let msg = event_with(
        &mut cl,
        "csi-pv",
        "FailedMount",
        "not yet attached according to node status",
    );
    assert!(msg.contains("vol-a"), "{msg}");
    // In use before it is staged: the attach-detach controller must not
    // detach what the kubelet is about to stage.
    let in_use = format!("kubernetes.io/csi/{DRIVER}^vol-a");
    cl.eventually(
        secs(20),
        "vol-a in volumesInUse before it is attached",
        |api| {
            let n = api.node()?;
            n["status"]["volumesInUse"]
                .as_array()?
                .contains(&json!(in_use))
                .then_some(())
        },
    );
    assert!(
        driver.calls("NodeStageVolume").is_empty(),
        "nothing staged before the attachment"
    );
    attach(
        &cl,
        DRIVER,
        "vol-a",
        "pv-a",
        json!({"attached": true, "attachmentMetadata": {"devicePath": "/dev/fake-a"}}),
    );
    cl.wait_pod_ready("csi-pv", secs(60));
    let data = driver.data.clone();
    cl.eventually(
        secs(20),
        "the file the pod wrote, in the driver's volume",
        |_| {
            fs::read_to_string(data.join("vol-a/csi-pv"))
                .ok()
                .filter(|s| s == "csi-pv\n")
        },
    );
    let root = cl.env.root.clone();
    let staging = root.join("plugins/kubernetes.io/csi/pv/pv-a/globalmount");
    let target = root.join(format!(
        "pods/{}/volumes/kubernetes.io~csi/pv-a/mount",
        uid(&pod)
    ));
    let stage = driver.ok_calls("NodeStageVolume", "vol-a");
    assert_eq!(stage.len(), 1, "{stage:?}");
    let req = &stage[0]["request"];
    assert_eq!(req["staging_target_path"], staging.display().to_string());
    assert_eq!(req["publish_context"], json!({"devicePath": "/dev/fake-a"}));
    assert_eq!(req["volume_context"], json!({"tier": "gold"}));
    assert_eq!(req["volume_capability"]["mount"]["fs_type"], "ext4");
    assert_eq!(
        req["volume_capability"]["access_mode"]["mode"],
        "SINGLE_NODE_WRITER"
    );
    let publish = driver.ok_calls("NodePublishVolume", "vol-a");
    let req = &publish[0]["request"];
    assert_eq!(req["target_path"], target.display().to_string());
    assert_eq!(req["staging_target_path"], staging.display().to_string());
    let ctx = &req["volume_context"];
    assert_eq!(ctx["csi.storage.k8s.io/pod.name"], "csi-pv");
    assert_eq!(ctx["csi.storage.k8s.io/pod.namespace"], "default");
    assert_eq!(ctx["csi.storage.k8s.io/pod.uid"], uid(&pod));
    assert_eq!(ctx["csi.storage.k8s.io/serviceAccount.name"], "default");
    assert_eq!(ctx["csi.storage.k8s.io/ephemeral"], "false");
    let vol_data: Value = serde_json::from_str(
        &fs::read_to_string(target.parent().unwrap().join("vol_data.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(vol_data["driverName"], DRIVER);
    assert_eq!(vol_data["volumeHandle"], "vol-a");
    assert_eq!(vol_data["specVolID"], "pv-a");
    assert_eq!(vol_data["volumeLifecycleMode"], "Persistent");
    // NodeGetVolumeStats on the target path feeds /stats/summary and the
    // claim's kubelet_volume_stats_* series.
    let summary_volume = cl.eventually(secs(30), "the volume in /stats/summary", |_| {
        let s = read_only_get(ro_port, "/stats/summary")?;
        let p = s["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == "csi-pv")?
            .clone();
        p["volume"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == "data")
            .cloned()
    });
    assert_eq!(
        summary_volume["pvcRef"],
        json!({"name": "claim-a", "namespace": "default"})
    );
    assert!(
        summary_volume["capacityBytes"].as_u64().unwrap_or(0) > 0,
        "{summary_volume}"
    );
    assert!(
        summary_volume["usedBytes"].is_u64() && summary_volume["inodes"].is_u64(),
        "{summary_volume}"
    );
    let stats = driver.ok_calls("NodeGetVolumeStats", "vol-a");
    assert_eq!(
        stats[0]["request"]["volume_path"],
        target.display().to_string()
    );
    let metrics = read_only_text(ro_port, "/metrics").unwrap_or_default();
    assert!(
        metrics.contains(
            "kubelet_volume_stats_capacity_bytes{namespace=\"default\",persistentvolumeclaim=\"claim-a\"}"
        ),
        "{}",
        metrics.lines().filter(|l| l.contains("volume_stats")).collect::<Vec<_>>().join("\n")
    );

    cl.eventually(secs(30), "volumesInUse", |api| {
        let n = api.node()?;
        n["status"]["volumesInUse"]
            .as_array()?
            .contains(&json!(in_use))
            .then_some(())
    });

    // An inline ephemeral volume: published only, with ephemeral=true.
    let inline = cl.api.create_pod(&pod_with(
        "csi-inline",
        &writer("csi-inline"),
        json!([{"name": "data", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "small"}}}]),
    ));
    cl.wait_pod_ready("csi-inline", secs(60));
    let handle = format!("csi-{}", sha256_hex(&format!("{}data", uid(&inline))));
    let publish = driver.ok_calls("NodePublishVolume", &handle);
    assert_eq!(publish.len(), 1, "{:?}", driver.calls("NodePublishVolume"));
    assert_eq!(
        publish[0]["request"]["volume_context"]["csi.storage.k8s.io/ephemeral"],
        "true"
    );
    assert_eq!(publish[0]["request"]["volume_context"]["size"], "small");
    assert!(
        driver.ok_calls("NodeStageVolume", &handle).is_empty(),
        "an inline volume is not staged"
    );

    // A generic ephemeral volume: the claim the pod owns, bound to a CSI PV.
    let eph = cl.api.create_pod(&pod_with(
        "csi-eph",
        &writer("csi-eph"),
        json!([{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]),
    ));
    let owner = json!([{"apiVersion": "v1", "kind": "Pod", "name": "csi-eph", "uid": uid(&eph),
                        "controller": true, "blockOwnerDeletion": true}]);
    csi_pv_and_claim(
        &cl,
        "pv-eph",
        "csi-eph-data",
        DRIVER,
        "vol-eph",
        Some(owner),
    );
    attach(&cl, DRIVER, "vol-eph", "pv-eph", json!({"attached": true}));
    cl.wait_pod_ready("csi-eph", secs(60));
    cl.eventually(secs(20), "the generic ephemeral volume's file", |_| {
        fs::read_to_string(data.join("vol-eph/csi-eph")).ok()
    });

    // A PV grown past its claim's status is expanded at mount, and the
    // claim's status says so afterwards (upstream's resize at mount).
    create(
        &cl,
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-r"},
               "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                        "csi": {"driver": DRIVER, "volumeHandle": "vol-r"}}}),
    );
    create(
        &cl,
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "claim-r"},
               "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-r",
                        "resources": {"requests": {"storage": "2Gi"}}}}),
    );
    cl.api.must(
        "PATCH",
        "/api/v1/namespaces/default/persistentvolumeclaims/claim-r/status",
        Some(
            &json!({"status": {"phase": "Bound", "capacity": {"storage": "1Gi"},
                     "conditions": [{"type": "FileSystemResizePending", "status": "True"}]}}),
        ),
        &[200],
    );
    attach(&cl, DRIVER, "vol-r", "pv-r", json!({"attached": true}));
    cl.api.create_pod(&pod_with(
        "csi-resize",
        &writer("csi-resize"),
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim-r"}}]),
    ));
    cl.wait_pod_ready("csi-resize", secs(60));
    let expand = driver.ok_calls("NodeExpandVolume", "vol-r");
    assert_eq!(expand.len(), 1, "{:?}", driver.calls("NodeExpandVolume"));
    assert_eq!(
        expand[0]["request"]["capacity_range"]["required_bytes"],
        "2147483648"
    );
    claim_resized(&mut cl, "claim-r", "2Gi");
    assert!(
        driver.ok_calls("NodeExpandVolume", "vol-a").is_empty(),
        "no expansion without growth"
    );

    // Grown again while in use (the external resizer's part, played
    // here): expanded online, the pod running throughout.
    cl.api.must(
        "PATCH",
        "/api/v1/persistentvolumes/pv-r",
        Some(&json!({"spec": {"capacity": {"storage": "3Gi"}}})),
        &[200],
    );
    cl.api.must(
        "PATCH",
        "/api/v1/namespaces/default/persistentvolumeclaims/claim-r/status",
        Some(&json!({"status": {"conditions": [{"type": "FileSystemResizePending", "status": "True"}]}})),
        &[200],
    );
    let grown = cl.eventually(secs(60), "NodeExpandVolume of the mounted vol-r", |_| {
        driver
            .ok_calls("NodeExpandVolume", "vol-r")
            .into_iter()
            .find(|c| c["request"]["capacity_range"]["required_bytes"] == "3221225472")
    });
    assert_eq!(
        grown["request"]["volume_path"], expand[0]["request"]["volume_path"],
        "expanded where it is published"
    );
    claim_resized(&mut cl, "claim-r", "3Gi");
    assert_eq!(
        driver.ok_calls("NodeExpandVolume", "vol-r").len(),
        2,
        "one expansion per growth"
    );
    let resized = cl.api.pod("csi-resize").unwrap_or_default();
    assert_eq!(
        resized["status"]["containerStatuses"][0]["restartCount"], 0,
        "{}",
        resized["status"]
    );

    // kill -9; the PV's pod is deleted meanwhile: after the restart it is
    // unpublished and unstaged from what vol_data.json recorded.
    cl.env.kill_kubelet();
    delete_now(&cl, "csi-pv");
    cl.start_kubelet();
    cl.eventually(
        secs(60),
        "NodeUnpublishVolume and NodeUnstageVolume of vol-a",
        |_| {
            let unpub = driver.ok_calls("NodeUnpublishVolume", "vol-a");
            let unstage = driver.ok_calls("NodeUnstageVolume", "vol-a");
            (!unpub.is_empty() && !unstage.is_empty()).then_some(())
        },
    );
    let unpub = driver.ok_calls("NodeUnpublishVolume", "vol-a");
    assert_eq!(
        unpub[0]["request"]["target_path"],
        target.display().to_string()
    );
    let unstage = driver.ok_calls("NodeUnstageVolume", "vol-a");
    assert_eq!(
        unstage[0]["request"]["staging_target_path"],
        staging.display().to_string()
    );
    let pod_dir = root.join("pods").join(uid(&pod));
    cl.eventually(secs(30), "the deleted pod's directory removed", |_| {
        (!pod_dir.exists()).then_some(())
    });
    assert!(
        !staging.parent().unwrap().exists(),
        "the staged volume's directory is removed"
    );
    cl.eventually(secs(30), "vol-a out of volumesInUse", |api| {
        let n = api.node()?;
        let list = n["status"]["volumesInUse"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        (!list.contains(&json!(in_use))).then_some(())
    });
    // The other pods kept running through the restart.
    cl.wait_pod_ready("csi-inline", secs(30));
    cl.wait_pod_ready("csi-eph", secs(30));

    // A deleted pod's inline volume is unpublished.
    delete_now(&cl, "csi-inline");
    cl.eventually(secs(30), "NodeUnpublishVolume of the inline volume", |_| {
        (!driver.ok_calls("NodeUnpublishVolume", &handle).is_empty()).then_some(())
    });
    assert!(mounts_under(&root.join("pods").join(uid(&inline))).is_empty());
}

/// Mount points under `dir`, from /proc/self/mountinfo.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&prefix))
        .collect()
}

// 50 ---------------------------------------------------------------------------------

/// Drivers that fail: publish errors (healed later), a hung publish, an
/// attachment that never comes, and a CSINode conflict at registration. Each
/// holds only its own pods; a pod on a good driver and a plain pod run.
#[test]
fn csi_driver_failures_hold_only_their_pods() {
    let mut cl = Cluster::new("csi_failures", 50);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.eventually(secs(30), "the CSINode", csinode);
    for name in ["bad.example.com", "hung.example.com", "good.example.com"] {
        create(
            &cl,
            "/apis/storage.k8s.io/v1/csidrivers",
            csi_driver_object(
                name,
                json!({"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Ephemeral", "Persistent"]}),
            ),
        );
    }
    create(
        &cl,
        "/apis/storage.k8s.io/v1/csidrivers",
        csi_driver_object("attach.example.com", json!({})),
    );
    // One conflict on the CSINode update: registration reads it again.
    cl.api
        .fault(json!({"status": 409, "count": 1, "pathContains": "/csinodes/", "verb": "update"}));
    let bad = Driver::start(
        &cl,
        "bad.example.com",
        &["--fail", "NodePublishVolume=INTERNAL"],
    );
    let _hung = Driver::start(
        &cl,
        "hung.example.com",
        &["--delay", "NodePublishVolume=3600"],
    );
    let good = Driver::start(&cl, "good.example.com", &[]);
    let attach_driver = Driver::start(&cl, "attach.example.com", &[]);
    cl.eventually(secs(40), "four drivers in the CSINode", |api| {
        let n = csinode(api)?["spec"]["drivers"].as_array()?.len();
        (n == 4).then_some(())
    });
    assert_eq!(cl.api.pending_faults(), 0, "the conflict was met");

    let inline = |driver: &str| json!([{"name": "data", "csi": {"driver": driver}}]);
    cl.api.create_pod(&pod_with(
        "on-bad",
        &writer("on-bad"),
        inline("bad.example.com"),
    ));
    cl.api.create_pod(&pod_with(
        "on-hung",
        &writer("on-hung"),
        inline("hung.example.com"),
    ));
    csi_pv_and_claim(&cl, "pv-x", "claim-x", "attach.example.com", "vol-x", None);
    attach(
        &cl,
        "attach.example.com",
        "vol-x",
        "pv-x",
        json!({"attached": false, "attachError": {"message": "no such disk"}}),
    );
    cl.api.create_pod(&pod_with(
        "on-attach",
        &writer("on-attach"),
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim-x"}}]),
    ));
    cl.api.create_pod(&pod_with(
        "on-good",
        &writer("on-good"),
        inline("good.example.com"),
    ));
    cl.api.create_pod(&api_pod("plain", SLEEPER));

    cl.wait_pod_ready("on-good", secs(60));
    cl.wait_pod_ready("plain", secs(30));
    let msg = event_with(&mut cl, "on-bad", "FailedMount", "NodePublishVolume");
    assert!(msg.contains("injected failure"), "{msg}");
    // The attachment failed: node status never lists the volume, and the
    // pod waits saying so (the attach error is the controller's to report).
    let msg = event_with(
        &mut cl,
        "on-attach",
        "FailedMount",
        "not yet attached according to node status",
    );
    assert!(msg.contains("attach.example.com^vol-x"), "{msg}");
    assert!(
        attach_driver.calls("NodeStageVolume").is_empty(),
        "nothing staged before attach"
    );
    for name in ["on-bad", "on-hung", "on-attach"] {
        let p = cl.api.pod(name).unwrap();
        assert_eq!(phase(&p), "Pending", "{name}: {}", pretty_status(&p));
    }
    assert!(
        !good.calls("NodePublishVolume").is_empty(),
        "the good driver was served while the hung one held its call"
    );

    // A CSI 1.x driver registering in the old directory (`plugins/`,
    // before upstream 1.13) is refused, told why, and leaves the node's
    // other drivers as they were.
    let plugins = cl.env.root.join("plugins");
    let old = Driver::start(
        &cl,
        "old.example.com",
        &["--registry", plugins.to_str().unwrap()],
    );
    let refused = cl.eventually(secs(30), "the old-layout driver refused", |_| {
        old.calls("NotifyRegistrationStatus")
            .into_iter()
            .find(|c| c["plugin_registered"] == false)
    });
    assert!(
        refused
            .to_string()
            .contains("was found in a deprecated dir"),
        "{refused}"
    );
    assert!(
        old.calls("NodeGetInfo").is_empty(),
        "a refused driver is not asked about the node"
    );
    let node_event = cl.eventually(secs(30), "a node event about the refusal", |api| {
        api.events_for("default", NODE).into_iter().find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("old.example.com"))
        })
    });
    assert_eq!(node_event["type"], "Warning", "{node_event}");
    let cn = csinode(&cl.api).unwrap();
    let drivers: Vec<&str> = cn["spec"]["drivers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert!(!drivers.contains(&"old.example.com"), "{drivers:?}");
    assert!(drivers.contains(&"good.example.com"), "{drivers:?}");

    // Healed: the failed pod starts at its next retry.
    bad.heal();
    cl.wait_pod_ready("on-bad", secs(150));
}
