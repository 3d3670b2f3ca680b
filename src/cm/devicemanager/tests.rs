use super::checkpoint::{self, Data, Entry};
use super::pod_devices::{self, Request};
use super::spew;
use crate::cri::deviceplugin::v1beta1::api as pluginapi;

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// Checkpoints upstream kubelets wrote (from public write-ups): our
/// checksum must be theirs, or an upstream kubelet would throw ours away
/// and we theirs.
#[test]
fn checksum_matches_upstream_kubelets_checkpoints() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/devicemanager");
    for (file, sum) in [
        ("checkpoint-numa-unknown.json", 3660592824u64),
        ("checkpoint-numa-1.json", 2530956716),
        ("checkpoint-no-pods.json", 3952659280),
    ] {
        let bytes = std::fs::read(format!("{dir}/{file}")).unwrap();
        let data = checkpoint::decode(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(u64::from(checkpoint::checksum(&data)), sum, "{file}");
    }
}

#[test]
fn a_checkpoint_whose_data_changed_is_refused() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/devicemanager");
    let text = std::fs::read_to_string(format!("{dir}/checkpoint-numa-unknown.json")).unwrap();
    let tampered = text.replace("\"check\"", "\"other\"");
    let err = checkpoint::decode(tampered.as_bytes()).unwrap_err();
    assert!(err.contains("checkpoint is corrupted"), "{err}");
}

/// The dump upstream hashes, byte for byte, for the first write (no pods)
/// and for one allocation.
#[test]
fn dump_is_go_spews() {
    let empty = Data {
        entries: None,
        registered: Some(Vec::new()),
    };
    assert_eq!(
        spew::dump(&empty),
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)<nil> RegisteredDevices:(map[string][]string)map[]}"
    );
    assert_eq!(spew::checksum(&empty), 3467439661);
    let one = Data {
        entries: Some(vec![Entry {
            pod_uid: "uid1".into(),
            container_name: "c".into(),
            resource_name: "example.com/widget".into(),
            device_ids: Some(vec![(0, Some(strings(&["widget-0"])))]),
            alloc_resp: Some(vec![0x0a, 0x01]),
        }]),
        registered: Some(vec![(
            "example.com/widget".to_string(),
            Some(strings(&["widget-0", "widget-1"])),
        )]),
    };
    assert_eq!(
        spew::dump(&one),
        "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)uid1 ContainerName:(string)c ResourceName:(string)example.com/widget DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:[widget-0]] AllocResp:([]uint8)[10 1]}] RegisteredDevices:(map[string][]string)map[example.com/widget:[widget-0 widget-1]]}"
    );
    assert_eq!(spew::checksum(&one), 1418418530);
}

#[test]
fn checkpoint_round_trips_allocations_and_answers() {
    let mut resp = pluginapi::ContainerAllocateResponse::new();
    resp.envs.insert("WIDGET".into(), "widget-1".into());
    let data = Data {
        entries: Some(vec![Entry {
            pod_uid: "u".into(),
            container_name: "c".into(),
            resource_name: "example.com/widget".into(),
            device_ids: Some(vec![(-1, Some(strings(&["widget-1"])))]),
            alloc_resp: Some(protobuf::Message::write_to_bytes(&resp).unwrap()),
        }]),
        registered: Some(vec![(
            "example.com/widget".to_string(),
            Some(strings(&["widget-0"])),
        )]),
    };
    let bytes = checkpoint::encode(&data).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(
        text.contains("\"DeviceIDs\":{\"-1\":[\"widget-1\"]}"),
        "{text}"
    );
    let state = checkpoint::into_state(
        checkpoint::decode(&bytes).unwrap(),
        std::time::Instant::now(),
    );
    let d = state.pods.get("u", "c", "example.com/widget").unwrap();
    assert_eq!(d.ids, strings(&["widget-1"]));
    assert_eq!(d.allocation, pod_devices::Allocation::Allocated(resp));
    // A registered resource waits, stopped, for its plugin.
    let r = state.resource("example.com/widget").unwrap();
    assert!(r.endpoint.is_none() && r.stopped.is_some() && r.devices.is_empty());
    // Written back, it is what it was.
    assert_eq!(checkpoint::from_state(&state).entries.unwrap().len(), 1);
}

#[test]
fn choose_takes_free_healthy_devices_lowest_first() {
    let req = Request {
        resource: "example.com/widget",
        needed: 2,
        healthy: &["d0", "d1", "d2", "d3"],
        in_use: &["d0"],
        reusable: &[],
    };
    assert_eq!(pod_devices::choose(&req).unwrap(), strings(&["d1", "d2"]));
}

#[test]
fn choose_reuses_an_init_containers_devices_first() {
    let reusable = strings(&["d2"]);
    let req = Request {
        resource: "example.com/widget",
        needed: 2,
        healthy: &["d0", "d1", "d2"],
        in_use: &["d2", "d0"],
        reusable: &reusable,
    };
    assert_eq!(pod_devices::choose(&req).unwrap(), strings(&["d1", "d2"]));
}

#[test]
fn choose_refuses_with_upstreams_message() {
    let req = Request {
        resource: "example.com/widget",
        needed: 3,
        healthy: &["d0", "d1"],
        in_use: &["d1"],
        reusable: &[],
    };
    assert_eq!(
        pod_devices::choose(&req).unwrap_err(),
        "requested number of devices unavailable for example.com/widget. Requested: 3, Available: 1"
    );
}

fn register(version: &str, resource: &str, endpoint: &str) -> pluginapi::RegisterRequest {
    pluginapi::RegisterRequest {
        version: version.into(),
        resource_name: resource.into(),
        endpoint: endpoint.into(),
        ..Default::default()
    }
}

#[test]
fn registration_is_validated_as_upstream_does() {
    assert!(super::server::validate(&register("v1beta1", "example.com/widget", "w.sock")).is_ok());
    let e =
        super::server::validate(&register("v1alpha", "example.com/widget", "w.sock")).unwrap_err();
    assert!(
        e.contains("requested API version \"v1alpha\" is not supported by kubelet"),
        "{e}"
    );
    for bad in ["widget", "kubernetes.io/widget", "cpu"] {
        let e = super::server::validate(&register("v1beta1", bad, "w.sock")).unwrap_err();
        assert_eq!(e, format!("the ResourceName {bad:?} is invalid"));
    }
    for bad in ["", "../kubelet.sock", "/tmp/w.sock", "a/b.sock"] {
        assert!(
            super::server::validate(&register("v1beta1", "example.com/widget", bad)).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn responses_merge_in_order_without_duplicate_paths() {
    let mut a = pluginapi::ContainerAllocateResponse::new();
    a.envs.insert("B".into(), "2".into());
    a.envs.insert("A".into(), "1".into());
    a.mounts.push(pluginapi::Mount {
        container_path: "/data".into(),
        host_path: "/srv/a".into(),
        read_only: true,
        ..Default::default()
    });
    a.annotations.insert("k".into(), "a".into());
    let mut b = pluginapi::ContainerAllocateResponse::new();
    b.mounts.push(pluginapi::Mount {
        container_path: "/data".into(),
        host_path: "/srv/b".into(),
        ..Default::default()
    });
    b.devices.push(pluginapi::DeviceSpec {
        container_path: "/dev/w0".into(),
        host_path: "/dev/null".into(),
        permissions: "rw".into(),
        ..Default::default()
    });
    b.annotations.insert("k".into(), "b".into());
    let opts = super::merge_responses([&a, &b].into_iter());
    assert_eq!(
        opts.envs,
        vec![
            ("A".to_string(), "1".to_string()),
            ("B".to_string(), "2".to_string())
        ]
    );
    assert_eq!(opts.mounts.len(), 1);
    assert_eq!(opts.mounts[0].host_path, "/srv/a");
    assert!(opts.mounts[0].readonly);
    assert_eq!(opts.devices.len(), 1);
    assert_eq!(opts.devices[0].permissions, "rw");
    assert_eq!(opts.annotations, vec![("k".to_string(), "a".to_string())]);
}

#[test]
fn devices_of_keeps_the_first_of_a_repeated_id_and_drops_empty_ids() {
    let dev = |id: &str, health: &str| pluginapi::Device {
        ID: id.into(),
        health: health.into(),
        ..Default::default()
    };
    let got = super::devices_of(
        "example.com/widget",
        vec![
            dev("a", "Healthy"),
            dev("", "Healthy"),
            dev("a", "Unhealthy"),
            dev("b", "Unhealthy"),
        ],
    );
    assert_eq!(got.len(), 2);
    assert!(got[0].id == "a" && got[0].healthy);
    assert!(got[1].id == "b" && !got[1].healthy);
}

/// The machine's NUMA nodes, which device hints range over, survive the
/// checkpoint's restore at start.
#[test]
fn the_machines_numa_nodes_outlive_the_checkpoints_restore() {
    use std::sync::Arc;
    let root = tempfile::TempDir::with_prefix("rkubelet-root-").unwrap();
    let dir = root.path().join(super::DEVICE_PLUGINS_DIR);
    std::fs::create_dir_all(&dir).unwrap();
    let golden = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/testdata/devicemanager/checkpoint-numa-1.json"
    );
    std::fs::copy(golden, dir.join(checkpoint::CHECKPOINT)).unwrap();
    let dm = super::DeviceManager::new(
        root.path(),
        super::DeviceManagerDeps {
            grpc_env: Arc::new(grpcio::EnvBuilder::new().cq_count(1).build()),
            recorder: Arc::new(crate::events::LogRecorder),
            numa_nodes: vec![0, 1, 2],
            on_allocated: Arc::new(|_| {}),
            on_capacity_changed: Box::new(|| {}),
        },
    );
    let s = rkubelet_util::lock(&dm.inner.state);
    assert!(!s.pods.is_empty(), "the checkpoint was read");
    assert_eq!(s.numa_nodes, [0, 1, 2]);
}
