//! CSI raw block volumes end to end (`volumeMode: Block`, a container's
//! `volumeDevices`): the real rkubelet in cluster mode, a private
//! containerd and the CSI driver peer, which shows a block volume as a
//! loop device of its backing file (root and loop devices needed, as for
//! the other end-to-end suites).
//!
//! Test 51 (bridge, subnet and ports as in tests/cluster.rs).

mod common;
mod csipeer;

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;
use csipeer::*;

fn block_pv_and_claim(cl: &Cluster, pv: &str, claim: &str, handle: &str) {
    create(
        cl,
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
               "spec": {"capacity": {"storage": "64Mi"}, "accessModes": ["ReadWriteOnce"],
                        "volumeMode": "Block",
                        "csi": {"driver": DRIVER, "volumeHandle": handle}}}),
    );
    bound_claim(&cl.api, claim, pv, json!({}));
}

/// A pod whose container gets the claim as a device at /dev/xvda.
fn device_pod(name: &str, claim: &str, script: &str) -> Value {
    let mut p = api_pod(name, script);
    p["spec"]["volumes"] = json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    p["spec"]["containers"][0]["volumeDevices"] =
        json!([{"name": "data", "devicePath": "/dev/xvda"}]);
    p
}

fn backing_starts_with(data: &Path, handle: &str, text: &str) -> bool {
    fs::read(data.join(handle).join("block")).is_ok_and(|b| b.starts_with(text.as_bytes()))
}

// 51 ---------------------------------------------------------------------------------

/// A Block PV staged and published by the driver as a device, linked into
/// the pod and given to its container, written from inside; shared by two
/// pods, so the first pod's deletion unpublishes only; the second pod
/// deleted while the kubelet was killed, so its restart unpublishes and
/// unstages from what was on disk; and a Block PV named in volumeMounts
/// refused with upstream's message.
#[test]
fn csi_block_volumes() {
    let mut cl = Cluster::new("csi_block", 51);
    // The kubelet API on a port of this test's own (see tests/csi.rs).
    let config = fs::read_to_string(&cl.config).unwrap();
    fs::write(
        &cl.config,
        format!("{config}\naddress: 127.0.0.1\nport: 22051\n"),
    )
    .unwrap();
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let root = cl.env.root.clone();
    create(
        &cl,
        "/apis/storage.k8s.io/v1/csidrivers",
        csi_driver_object(DRIVER, json!({"attachRequired": false})),
    );
    let driver = Driver::start(&cl, DRIVER, &[]);
    cl.eventually(secs(30), "the driver registered", |api| {
        let cn = csinode(api)?;
        (cn["spec"]["drivers"][0]["name"] == DRIVER).then_some(())
    });

    block_pv_and_claim(&cl, "pv-b", "claim-b", "vol-b");
    let a = cl.api.create_pod(&device_pod(
        "dev-a",
        "claim-b",
        "printf hello-block > /dev/xvda; exec sleep 3600",
    ));
    cl.wait_pod_ready("dev-a", secs(60));
    let data = driver.data.clone();
    cl.eventually(
        secs(20),
        "the pod's write on the volume's backing file",
        |_| backing_starts_with(&data, "vol-b", "hello-block").then_some(()),
    );

    let devices = root.join("plugins/kubernetes.io/csi/volumeDevices");
    let staging = devices.join("staging/pv-b");
    let stage = driver.ok_calls("NodeStageVolume", "vol-b");
    assert_eq!(stage.len(), 1, "{:?}", driver.calls("NodeStageVolume"));
    assert_eq!(
        stage[0]["request"]["staging_target_path"],
        staging.display().to_string()
    );
    assert!(
        stage[0]["request"]["volume_capability"]["block"].is_object(),
        "a block capability: {}",
        stage[0]["request"]["volume_capability"]
    );
    let publish_a = devices.join("publish/pv-b").join(uid(&a));
    let publish = driver.ok_calls("NodePublishVolume", "vol-b");
    assert_eq!(
        publish[0]["request"]["target_path"],
        publish_a.display().to_string()
    );
    assert_eq!(
        publish[0]["request"]["staging_target_path"],
        staging.display().to_string()
    );
    let link_a = root
        .join("pods")
        .join(uid(&a))
        .join("volumeDevices/kubernetes.io~csi/pv-b");
    assert_eq!(fs::read_link(&link_a).unwrap(), publish_a);
    let vol_data = devices.join("pv-b/data/vol_data.json");
    let recorded: Value = serde_json::from_str(&fs::read_to_string(&vol_data).unwrap()).unwrap();
    assert_eq!(recorded["volumeHandle"], "vol-b", "{recorded}");
    assert!(
        driver.calls("NodeGetVolumeStats").is_empty(),
        "a device's usage is not asked for as a filesystem's"
    );

    // A second pod on the same volume: published again, not staged again.
    let b = cl.api.create_pod(&device_pod(
        "dev-b",
        "claim-b",
        "head -c 11 /dev/xvda > /dev/termination-log; exec sleep 3600",
    ));
    cl.wait_pod_ready("dev-b", secs(60));
    assert_eq!(driver.ok_calls("NodeStageVolume", "vol-b").len(), 1);
    let seen = cl.eventually(
        secs(20),
        "the second pod read the first one's write",
        |_| {
            let log = root.join("pods").join(uid(&b)).join("containers/c");
            fs::read_dir(log)
                .ok()?
                .flatten()
                .find_map(|f| fs::read_to_string(f.path()).ok().filter(|t| !t.is_empty()))
        },
    );
    assert_eq!(seen, "hello-block");

    // The first pod goes: unpublished, its link removed, still staged.
    delete_now(&cl, "dev-a");
    cl.eventually(
        secs(60),
        "NodeUnpublishVolume of the first pod's device",
        |_| {
            driver
                .ok_calls("NodeUnpublishVolume", "vol-b")
                .into_iter()
                .find(|c| c["request"]["target_path"] == publish_a.display().to_string())
        },
    );
    cl.eventually(secs(30), "the first pod's link removed", |_| {
        (!link_a.exists() && fs::symlink_metadata(&link_a).is_err()).then_some(())
    });
    assert!(
        driver.ok_calls("NodeUnstageVolume", "vol-b").is_empty(),
        "another pod still uses the volume"
    );

    // kill -9, the second pod deleted meanwhile: after the restart its
    // device is unpublished and the volume unstaged from what was on disk.
    cl.env.kill_kubelet();
    delete_now(&cl, "dev-b");
    cl.start_kubelet();
    cl.eventually(
        secs(60),
        "NodeUnstageVolume of vol-b after the restart",
        |_| {
            driver
                .ok_calls("NodeUnstageVolume", "vol-b")
                .first()
                .cloned()
        },
    );
    let unstage = driver.ok_calls("NodeUnstageVolume", "vol-b");
    assert_eq!(
        unstage[0]["request"]["staging_target_path"],
        staging.display().to_string()
    );
    assert_eq!(driver.ok_calls("NodeUnpublishVolume", "vol-b").len(), 2);
    cl.eventually(secs(30), "the volume's directories removed", |_| {
        (!staging.exists()
            && !devices.join("pv-b").exists()
            && !devices.join("publish/pv-b").exists())
        .then_some(())
    });
    let pod_dir = root.join("pods").join(uid(&b));
    cl.eventually(secs(30), "the deleted pod's directory removed", |_| {
        (!pod_dir.exists()).then_some(())
    });

    // A Block PV named in volumeMounts is refused, as upstream words it.
    block_pv_and_claim(&cl, "pv-m", "claim-m", "vol-m");
    cl.api.create_pod(&pod_with(
        "mounts-block",
        "exec sleep 3600",
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim-m"}}]),
    ));
    event_with(
        &mut cl,
        "mounts-block",
        "FailedMount",
        "volume data has volumeMode Block, but is specified in volumeMounts",
    );
    assert!(driver.ok_calls("NodeStageVolume", "vol-m").is_empty());
}
