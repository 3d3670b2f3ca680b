use std::path::Path;

use serde_json::json;

use super::driver::{DriverSpec, FsGroupPolicy};
use super::setup::CsiVolume;
use super::voldata::{LifecycleMode, VolData};
use super::*;

#[test]
fn names_follow_upstream() {
    // sha256("h1" + "drv" + "node-a") and sha256("uid-1" + "vol"), as
    // `printf %s h1drvnode-a | sha256sum` gives them.
    assert_eq!(
        attachment_name("h1", "drv", "node-a"),
        format!("csi-{}", sha256_hex(&["h1drvnode-a"]))
    );
    assert_eq!(
        sha256_hex(&["abc"]),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(
        inline_volume_handle("uid-1", "vol"),
        format!("csi-{}", sha256_hex(&["uid-1vol"]))
    );
    assert_eq!(
        unique_volume_name("hostpath.csi.k8s.io", "v-1"),
        "kubernetes.io/csi/hostpath.csi.k8s.io^v-1"
    );
}

#[test]
fn vol_data_keeps_upstream_keys_and_round_trips() {
    let dir = tempfile_dir("voldata");
    let data = VolData {
        driver: "d.example.com".into(),
        volume_handle: "h-1".into(),
        spec_vol_id: "pv-1".into(),
        node_name: "n1".into(),
        attachment_id: "csi-abc".into(),
        mode: LifecycleMode::Persistent,
    };
    data.save(&dir).unwrap();
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("vol_data.json")).unwrap()).unwrap();
    assert_eq!(
        raw,
        json!({"driverName": "d.example.com", "volumeHandle": "h-1", "specVolID": "pv-1",
               "nodeName": "n1", "attachmentID": "csi-abc", "volumeLifecycleMode": "Persistent"})
    );
    assert_eq!(VolData::load(&dir).unwrap(), data);
    // upstream's file for an inline volume
    std::fs::write(
        dir.join("vol_data.json"),
        r#"{"driverName":"x","volumeHandle":"csi-1","specVolID":"v","volumeLifecycleMode":"Ephemeral"}"#,
    )
    .unwrap();
    assert_eq!(VolData::load(&dir).unwrap().mode, LifecycleMode::Ephemeral);
    std::fs::write(dir.join("vol_data.json"), r#"{"specVolID":"v"}"#).unwrap();
    let e = VolData::load(&dir).unwrap_err();
    assert!(
        e.to_string().contains("no driverName or volumeHandle"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("rk-csi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_driver_without_object_gets_upstream_defaults() {
    let d = DriverSpec::default();
    assert!(d.attach_required && !d.pod_info_on_mount && !d.requires_republish);
    assert_eq!(d.fs_group_policy, FsGroupPolicy::ReadWriteOnceWithFsType);
    assert!(d.supports(LifecycleMode::Persistent) && !d.supports(LifecycleMode::Ephemeral));
}

#[test]
fn csidriver_fields_are_read() {
    let obj = json!({"metadata": {"name": "d"}, "spec": {
        "attachRequired": false, "podInfoOnMount": true, "fsGroupPolicy": "File",
        "requiresRepublish": true, "volumeLifecycleModes": ["Ephemeral"],
        "tokenRequests": [{"audience": "vault", "expirationSeconds": 600}, {"audience": ""}]}});
    let d = DriverSpec::from_object(&obj).unwrap();
    assert!(!d.attach_required && d.pod_info_on_mount && d.requires_republish);
    assert_eq!(d.fs_group_policy, FsGroupPolicy::File);
    assert!(d.supports(LifecycleMode::Ephemeral) && !d.supports(LifecycleMode::Persistent));
    assert_eq!(d.token_requests.len(), 2);
    assert_eq!(d.token_requests[0].expiration_seconds, 600);
    assert_eq!(d.token_requests[1].expiration_seconds, 3600);
    let bad = json!({"spec": {"fsGroupPolicy": "Sometimes"}});
    assert_eq!(
        DriverSpec::from_object(&bad).unwrap_err(),
        "spec.fsGroupPolicy: unknown value \"Sometimes\""
    );
}

#[test]
fn a_csi_pv_is_read_with_its_secrets_and_access_mode() {
    let pv = json!({"metadata": {"name": "pv-1"}, "spec": {
        "accessModes": ["ReadOnlyMany"], "mountOptions": ["noatime"],
        "csi": {"driver": "d", "volumeHandle": "h", "fsType": "ext4", "readOnly": false,
                "volumeAttributes": {"k": "v"},
                "nodeStageSecretRef": {"name": "s1", "namespace": "ns1"},
                "nodePublishSecretRef": {"name": "s2", "namespace": "ns2"}}}});
    let v = CsiVolume::persistent(&pv, true).unwrap();
    assert_eq!(
        (v.driver.as_str(), v.handle.as_str(), v.spec_name.as_str()),
        ("d", "h", "pv-1")
    );
    assert!(v.read_only, "the claim's readOnly wins");
    assert_eq!(v.access_mode, "ReadOnlyMany");
    assert_eq!(v.mount_flags, vec!["noatime".to_string()]);
    assert_eq!(v.stage_secret, Some(("ns1".into(), "s1".into())));
    assert_eq!(v.publish_secret, Some(("ns2".into(), "s2".into())));
    assert_eq!(v.attributes.get("k").map(String::as_str), Some("v"));
    let no_handle = json!({"metadata": {"name": "pv-2"}, "spec": {"csi": {"driver": "d"}}});
    assert!(CsiVolume::persistent(&no_handle, false).is_err());
}

#[test]
fn only_csi_1_x_drivers_are_accepted() {
    for ok in ["1.0.0", "v1.0.0", "1.5.0", "1"] {
        assert!(registration::is_supported_version(ok), "{ok}");
    }
    for bad in ["0.3.0", "2.0.0", "v0.1", "", "1.x"] {
        assert!(!registration::is_supported_version(bad), "{bad}");
    }
}

fn plugin(root: &Path) -> Arc<CsiPlugin> {
    let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
    let client = crate::client::Client::new(
        crate::client::RestConfig::new(String::from("http://127.0.0.1:1")),
        Arc::new(()),
    )
    .unwrap();
    CsiPlugin::new(
        root.to_path_buf(),
        "n1".into(),
        env,
        client,
        std::time::Duration::from_secs(60),
        Arc::default(),
    )
}

#[test]
fn a_drivers_usage_answer_reaches_the_summary_view_and_the_metrics() {
    use crate::cri::csi::v1::csi;
    let p = plugin(Path::new("/nonexistent"));
    let target = std::path::PathBuf::from("/r/pods/u1/volumes/kubernetes.io~csi/pv-1/mount");
    p.ops.lock().unwrap().push(Op {
        target: target.clone(),
        handle: "h1".into(),
        driver: "d".into(),
        state: OpState::Published { republish: false },
        in_use: None,
        work: Work::Mount(Mount {
            volume: "data".into(),
            pod_uid: "u1".into(),
            claim: Some(("ns1".into(), "claim-1".into())),
            read_only: false,
            resized: false,
            expandable: false,
            checked: std::time::Instant::now(),
            expanding: false,
        }),
    });
    let usage = |unit, total, available, used| csi::VolumeUsage {
        unit: protobuf::EnumOrUnknown::new(unit),
        total,
        available,
        used,
        ..Default::default()
    };
    let resp = csi::NodeGetVolumeStatsResponse {
        usage: vec![
            usage(csi::volume_usage::Unit::BYTES, 1000, 600, 400),
            usage(csi::volume_usage::Unit::INODES, 50, 40, 10),
        ],
        ..Default::default()
    };
    let published = |t: &std::path::Path| {
        stats::tests_published(t, "u1", "data", Some(("ns1", "claim-1")), "h1", "d")
    };
    p.record_usage(published(&target), &resp);
    let got = p.usage_of("u1");
    assert_eq!(got.len(), 1);
    let u = &got[0];
    assert_eq!(
        (u.capacity_bytes, u.available_bytes, u.used_bytes),
        (Some(1000), Some(600), Some(400))
    );
    assert_eq!(
        (u.inodes, u.inodes_free, u.inodes_used),
        (Some(50), Some(40), Some(10))
    );
    assert_eq!(u.claim, Some(("ns1".to_string(), "claim-1".to_string())));
    assert!(p.usage_of("u2").is_empty());
    let text = crate::metrics::render();
    assert!(
        text.contains("kubelet_volume_stats_used_bytes{namespace=\"ns1\",persistentvolumeclaim=\"claim-1\"} 400"),
        "{text}"
    );
    // an answer for a volume torn down meanwhile is dropped
    let gone = std::path::PathBuf::from("/r/pods/u2/volumes/kubernetes.io~csi/x/mount");
    p.record_usage(published(&gone), &resp);
    assert!(p.usage_of("u2").is_empty());
}

#[test]
fn a_target_path_without_vol_data_is_only_removed() {
    let root = tempfile_dir("teardown");
    let target = root.join("pods/u1/volumes/kubernetes.io~csi/v/mount");
    std::fs::create_dir_all(&target).unwrap();
    let plugin = plugin(&root);
    plugin.tear_down(&target).unwrap();
    assert!(!target.parent().unwrap().exists());
    assert!(Path::new(&root)
        .join("pods/u1/volumes/kubernetes.io~csi")
        .exists());
    std::fs::remove_dir_all(&root).unwrap();
}

/// Upstream GetVolumesInUse and verifyControllerAttachedVolume: a pod's
/// persistent volume is in use from its first set-up on, and is staged
/// only once the server has it in `volumesInUse` and `volumesAttached`.
#[test]
fn a_volume_is_in_use_before_it_is_attached_and_waits_for_the_report() {
    use k8s_openapi::api::core::v1::{AttachedVolume, Node, NodeStatus};
    let p = plugin(Path::new("/nonexistent"));
    let kicks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let k = Arc::clone(&kicks);
    p.set_status_kick(Box::new(move || {
        k.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    let unique = unique_volume_name("d", "h1");
    p.want_in_use("u1", &unique);
    p.want_in_use("u1", &unique);
    p.want_in_use("u2", &unique);
    assert_eq!(p.volumes_in_use(), vec![unique.clone()]);
    assert_eq!(kicks.load(std::sync::atomic::Ordering::SeqCst), 2);
    p.retain_wanted(|uid| uid == "u2");
    assert_eq!(p.volumes_in_use(), vec![unique.clone()]);
    p.retain_wanted(|_| false);
    assert!(p.volumes_in_use().is_empty());

    let vol = setup::CsiVolume::persistent(
        &serde_json::json!({"metadata": {"name": "pv-1"},
                            "spec": {"csi": {"driver": "d", "volumeHandle": "h1"}}}),
        false,
    )
    .unwrap();
    let err = |p: &CsiPlugin| p.attachment(&vol).unwrap_err().to_string();
    assert!(
        err(&p).contains("has not been added to the list of VolumesInUse"),
        "{}",
        err(&p)
    );
    let status = |in_use: Vec<String>, attached: Vec<AttachedVolume>| Node {
        status: Some(NodeStatus {
            volumes_in_use: Some(in_use),
            volumes_attached: Some(attached),
            ..Default::default()
        }),
        ..Default::default()
    };
    *p.node.write().unwrap() = Some(status(vec![unique.clone()], vec![]));
    assert!(
        err(&p).contains("not yet attached according to node status"),
        "{}",
        err(&p)
    );
    // attached but not reported in use: still waits
    *p.node.write().unwrap() = Some(status(
        vec![],
        vec![AttachedVolume {
            name: unique.clone(),
            device_path: String::new(),
        }],
    ));
    assert!(err(&p).contains("has not been added"), "{}", err(&p));
}

/// Upstream allowed the old `plugins/` directory to CSI 0.x drivers only.
#[test]
fn a_csi_1_driver_in_the_deprecated_directory_is_refused() {
    use crate::pluginmanager::PluginHandler;
    let h = registration::RegistrationHandler::new(plugin(Path::new("/nonexistent")));
    let versions = vec!["1.5.0".to_string()];
    let err = h
        .validate_plugin("d.example.com", "/r/plugins/d/csi.sock", &versions, true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "was found in a deprecated dir. Drivers implementing CSI 1.x+ must use the new dir"
        ),
        "{err}"
    );
    assert!(h
        .validate_plugin(
            "d.example.com",
            "/r/plugins_registry/d.sock",
            &versions,
            false
        )
        .is_ok());
}

/// Upstream v1.22's paths for a raw block volume, and the way back from
/// the key the volume manager holds to every path a tear-down needs.
#[test]
fn block_and_filesystem_layouts_follow_upstream() {
    let p = plugin(Path::new("/r"));
    let pod_dir = Path::new("/r/pods/u1");
    let b = p.block_layout(pod_dir, "pv-b");
    let dev = Path::new("/r/plugins/kubernetes.io/csi/volumeDevices");
    assert_eq!(b.key, pod_dir.join("volumeDevices/kubernetes.io~csi/pv-b"));
    assert_eq!(b.publish, dev.join("publish/pv-b/u1"));
    assert_eq!(b.staging, dev.join("staging/pv-b"));
    assert_eq!(b.pod_data, dev.join("pv-b/data"));
    assert!(b.block);
    assert_eq!(p.layout_of_key(&b.key), b);

    let vol_dir = pod_dir.join("volumes/kubernetes.io~csi/pv-f");
    let f = p.filesystem_layout(&vol_dir, "pv-f");
    assert_eq!(f.key, vol_dir.join("mount"));
    assert_eq!(f.publish, f.key);
    assert_eq!(
        f.staging,
        Path::new("/r/plugins/kubernetes.io/csi/pv/pv-f/globalmount")
    );
    let back = p.layout_of_key(&f.key);
    assert!(!back.block);
    assert_eq!((back.key, back.pod_data), (f.key, vol_dir));
}
