//! Machine info, capacity and allocatable.

use super::*;

#[test]
fn quantity_formatting_is_canonical() {
    assert_eq!(quantity::decimal_si(4000), "4");
    assert_eq!(quantity::decimal_si(3500), "3500m");
    assert_eq!(quantity::decimal_si(110_000), "110");
    assert_eq!(quantity::decimal_si(10_000_000), "10k");
    assert_eq!(quantity::decimal_si(0), "0");
    assert_eq!(quantity::binary_si(16318936 * 1024 * 1000), "16318936Ki");
    assert_eq!(quantity::binary_si((2 << 20) * 1000), "2Mi");
    assert_eq!(quantity::binary_si((1 << 30) * 1000), "1Gi");
    assert_eq!(quantity::binary_si(96636764000 * 1000), "96636764000");
    assert_eq!(quantity::binary_si(1000 * 1000), "1k");
    assert_eq!(quantity::binary_si(0), "0");
    assert_eq!(setters::hugepage_resource_name(2 << 20), "hugepages-2Mi");
    assert_eq!(setters::hugepage_resource_name(1 << 30), "hugepages-1Gi");
}

#[test]
fn capacity_and_allocatable_math() {
    let reservation = Reservation {
        system_reserved: BTreeMap::from([
            ("cpu".into(), "500m".into()),
            ("memory".into(), "1Gi".into()),
        ]),
        kube_reserved: BTreeMap::from([("memory".into(), "512Mi".into())]),
        eviction_hard: BTreeMap::from([
            ("memory.available".into(), "100Mi".into()),
            ("nodefs.available".into(), "10%".into()),
            ("imagefs.available".into(), "15%".into()),
        ]),
    };
    let rootfs = FsInfo {
        capacity: 100 << 30,
        available: 50 << 30,
        used: 50 << 30,
        inodes: 1000,
        inodes_free: 500,
    };
    let mut node = named("n");
    let mut events = Vec::new();
    let info = machine_info();
    setters::set_machine_info(
        &mut node,
        110,
        Ok(&info),
        Some(rootfs),
        &reservation,
        &mut events,
    );
    let st = node.status.clone().unwrap();
    let cap = st.capacity.unwrap();
    let alloc = st.allocatable.unwrap();
    assert_eq!(cap["cpu"], q("4"));
    assert_eq!(cap["memory"], q("16318936Ki"));
    // No swap: no nodeInfo.swap, and swap never counts as capacity.
    assert_eq!(st.node_info.as_ref().and_then(|i| i.swap.clone()), None);
    assert!(!cap.contains_key("swap"));
    let with_swap = MachineInfo {
        swap_capacity: 2 << 30,
        ..info.clone()
    };
    let mut swapping = named("n");
    setters::set_machine_info(
        &mut swapping,
        110,
        Ok(&with_swap),
        None,
        &reservation,
        &mut Vec::new(),
    );
    let swap = swapping
        .status
        .and_then(|s| s.node_info)
        .and_then(|i| i.swap);
    assert_eq!(swap.and_then(|s| s.capacity), Some(2 << 30));
    assert_eq!(cap["pods"], q("110"));
    assert_eq!(cap["ephemeral-storage"], q("100Gi"));
    assert_eq!(cap["hugepages-2Mi"], q("1Gi"));
    assert_eq!(cap["hugepages-1Gi"], q("0"));
    assert_eq!(alloc["cpu"], q("3500m"));
    // 16318936Ki − 1Gi − 512Mi − 100Mi − 1Gi of huge pages.
    assert_eq!(alloc["memory"], q("13595096Ki"));
    assert_eq!(alloc["pods"], q("110"));
    // 10% in float32 of 100Gi is 10737418400 bytes, as upstream computes it.
    assert_eq!(alloc["ephemeral-storage"], q("96636764000"));
    assert_eq!(alloc["hugepages-2Mi"], q("1Gi"));
    let ni = st.node_info.unwrap();
    assert_eq!(
        (
            ni.machine_id.as_str(),
            ni.system_uuid.as_str(),
            ni.boot_id.as_str()
        ),
        ("mid", "uuid", "boot-1")
    );
    assert!(events.is_empty());

    // A new boot ID is a reboot.
    let mut info2 = info.clone();
    info2.boot_id = "boot-2".into();
    setters::set_machine_info(
        &mut node,
        110,
        Ok(&info2),
        Some(rootfs),
        &reservation,
        &mut events,
    );
    assert_eq!(
        events,
        vec![NodeEvent {
            event_type: crate::events::EventType::Warning,
            reason: "Rebooted".into(),
            message: "Node n has been rebooted, boot id: boot-2".into()
        }]
    );
}

#[test]
fn allocatable_never_negative_and_stale_extended_resources_dropped() {
    let reservation = Reservation {
        system_reserved: BTreeMap::from([("cpu".into(), "8".into())]),
        ..Default::default()
    };
    let mut node = named("n");
    node.status = Some(NodeStatus {
        allocatable: Some(BTreeMap::from([
            ("example.com/gpu".to_string(), q("2")),
            ("pods".to_string(), q("5")),
        ])),
        ..Default::default()
    });
    let mut info = machine_info();
    info.hugepages.clear();
    setters::set_machine_info(
        &mut node,
        110,
        Ok(&info),
        None,
        &reservation,
        &mut Vec::new(),
    );
    let alloc = node.status.unwrap().allocatable.unwrap();
    assert_eq!(alloc["cpu"], q("0"));
    assert!(!alloc.contains_key("example.com/gpu"));
    assert!(!alloc.contains_key("ephemeral-storage"));
    assert_eq!(alloc["memory"], q("16318936Ki"));
}

#[test]
fn machine_info_error_reports_zero_capacity() {
    let mut node = named("n");
    setters::set_machine_info(
        &mut node,
        30,
        Err("boom".into()),
        None,
        &Reservation::default(),
        &mut Vec::new(),
    );
    let cap = node.status.unwrap().capacity.unwrap();
    assert_eq!(
        (
            cap["cpu"].0.as_str(),
            cap["memory"].0.as_str(),
            cap["pods"].0.as_str()
        ),
        ("0", "0", "30")
    );
}

#[test]
fn threshold_parsing() {
    use setters::Threshold;
    assert_eq!(
        Threshold::parse("100Mi").ok(),
        Some(Threshold::Quantity(104857600 * 1000))
    );
    assert_eq!(Threshold::parse("10%").unwrap().value(1000), 100);
    assert!(Threshold::parse("abc").is_err());
    assert!(Threshold::parse("120%").is_err());
}

#[test]
fn proc_parsers() {
    let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\n\nprocessor\t: 1\nmodel name : x\n\nprocessor : 2\n";
    assert_eq!(machine::parse_cpuinfo_processors(cpuinfo), 3);
    assert_eq!(machine::parse_cpuinfo_processors("garbage\n\n"), 0);
    assert_eq!(machine::parse_cpu_list("0-3,8,10-11\n"), 7);
    assert_eq!(machine::parse_cpu_list("x-y,"), 0);
    let meminfo = "MemTotal:       16318936 kB\nMemFree:         1000 kB\nMemAvailable:   8000000 kB\nHugePages_Total:       0\nbogus line\n";
    let m = crate::stats::node::parse_meminfo(meminfo);
    assert_eq!(m["MemTotal"], 16318936 * 1024);
    assert_eq!(m["MemAvailable"], 8000000 * 1024);
    assert_eq!(m["HugePages_Total"], 0);
    assert_eq!(
        crate::stats::node::parse_loadavg_tasks("1.36 3.49 4.53 2/3518 3715089\n"),
        Some(3518)
    );
    assert_eq!(crate::stats::node::parse_loadavg_tasks("1.0 2.0"), None);
    let os =
        "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n";
    assert_eq!(
        machine::parse_os_release_pretty_name(os).as_deref(),
        Some("Debian GNU/Linux 12 (bookworm)")
    );
    assert_eq!(machine::parse_os_release_pretty_name("ID=x\n"), None);
    assert_eq!(
        machine::parse_hugepage_dir_name("hugepages-2048kB"),
        Some(2 << 20)
    );
    assert_eq!(
        machine::parse_hugepage_dir_name("hugepages-1048576kB"),
        Some(1 << 30)
    );
    assert_eq!(machine::parse_hugepage_dir_name("other"), None);
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn machine_info_from_sample_tree() {
    let root = std::env::temp_dir().join(format!("rkubelet-nodestatus-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let paths = HostPaths {
        proc_dir: root.join("proc"),
        sys_dir: root.join("sys"),
        etc_dir: root.join("etc"),
    };
    write(
        &paths.proc_dir.join("cpuinfo"),
        "processor : 0\nprocessor : 1\n",
    );
    write(
        &paths.proc_dir.join("meminfo"),
        "MemTotal: 2048 kB\nMemFree: 512 kB\nMemAvailable: 1024 kB\nInactive(file): 512 kB\n\
         SwapTotal: 4096 kB\nSwapFree: 4096 kB\n",
    );
    write(&paths.proc_dir.join("sys/kernel/random/boot_id"), "b00t\n");
    write(&paths.proc_dir.join("sys/kernel/osrelease"), "6.1.0-test\n");
    write(&paths.proc_dir.join("sys/kernel/pid_max"), "4194304\n");
    write(&paths.proc_dir.join("sys/kernel/threads-max"), "100000\n");
    write(&paths.proc_dir.join("loadavg"), "0.1 0.2 0.3 1/250 999\n");
    write(&paths.sys_dir.join("class/dmi/id/product_uuid"), "UUID-1\n");
    write(
        &paths
            .sys_dir
            .join("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        "4\n",
    );
    write(&paths.etc_dir.join("machine-id"), "abc123\n");
    write(
        &paths.etc_dir.join("os-release"),
        "PRETTY_NAME=\"Test OS 1\"\n",
    );
    let info = machine::read_machine_info(&paths).unwrap();
    assert_eq!(
        info,
        MachineInfo {
            num_cores: 2,
            memory_capacity: 2048 * 1024,
            swap_capacity: 4096 * 1024,
            hugepages: vec![HugePages {
                page_size: 2 << 20,
                num_pages: 4
            }],
            machine_id: "abc123".into(),
            system_uuid: "UUID-1".into(),
            boot_id: "b00t".into(),
        }
    );
    assert_eq!(machine::kernel_version(&paths), "6.1.0-test");
    assert_eq!(machine::os_image(&paths), "Test OS 1");
    assert_eq!(
        paths.stats().memory().ok().map(|m| m.available),
        Some(1024 * 1024)
    );
    assert_eq!(paths.stats().pids(), Some((100000, 250)));
    // The manager reads the facts once and keeps them, as upstream keeps
    // cadvisor's MachineInfo.
    let manager = |paths: &HostPaths| {
        let mut mgr = NodeStatusManager::new(
            NodeStatusConfig::new("n"),
            client("http://127.0.0.1:9"),
            Box::new(KubeletHealth::default),
            NodeStatusLinks::default(),
        );
        Arc::get_mut(&mut mgr).expect("not shared yet").paths = paths.clone();
        mgr
    };
    let mgr = manager(&paths);
    let first = mgr.machine_facts().unwrap();
    write(
        &paths.proc_dir.join("sys/kernel/osrelease"),
        "6.2.0-later
",
    );
    write(&paths.proc_dir.join("cpuinfo"), "processor : 0\n");
    let again = mgr.machine_facts().unwrap();
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(again.kernel_version, "6.1.0-test");
    assert_eq!(again.info.num_cores, 2);
    assert_eq!(again.os_image, "Test OS 1");
    // Missing meminfo is an error, not a panic; and it is not kept: the
    // facts are read again until they can be.
    std::fs::remove_file(paths.proc_dir.join("meminfo")).unwrap();
    assert!(machine::read_machine_info(&paths).is_err());
    let unlucky = manager(&paths);
    assert!(unlucky.machine_facts().is_err());
    write(&paths.proc_dir.join("meminfo"), "MemTotal: 4096 kB\n");
    let read = unlucky.machine_facts().expect("read once meminfo is back");
    assert_eq!(read.info.memory_capacity, 4096 * 1024);
    assert_eq!(read.kernel_version, "6.2.0-later");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn host_machine_info_and_root_fs() {
    let info = machine::read_machine_info(&HostPaths::default()).expect("host machine info");
    assert!(info.num_cores >= 1 && info.memory_capacity > 0);
    let fs = crate::stats::statvfs(std::path::Path::new("/")).expect("statvfs /");
    assert!(fs.capacity >= fs.available);
    assert!(crate::stats::statvfs(std::path::Path::new("/nonexistent/x")).is_err());
}

/// The runtime's handlers in its order, the default one without a name,
/// both features stated; none listed leaves the field out, and features
/// appear only where the runtime reports them.
#[test]
fn runtime_handlers_and_features_follow_the_runtime() {
    use crate::container::{RuntimeFeatures, RuntimeHandler};
    let mut node = Node::default();
    setters::set_runtime_handlers(&mut node, &[]);
    setters::set_node_features(&mut node, None);
    let json = serde_json::to_value(&node).expect("node");
    assert_eq!(json["status"].get("runtimeHandlers"), None, "{json}");
    assert_eq!(json["status"].get("features"), None, "{json}");
    let handlers = [
        RuntimeHandler {
            name: String::new(),
            supports_recursive_read_only_mounts: true,
            supports_user_namespaces: false,
        },
        RuntimeHandler {
            name: "crun".into(),
            supports_recursive_read_only_mounts: false,
            supports_user_namespaces: true,
        },
    ];
    setters::set_runtime_handlers(&mut node, &handlers);
    setters::set_node_features(
        &mut node,
        Some(RuntimeFeatures {
            supplemental_groups_policy: false,
        }),
    );
    let json = serde_json::to_value(&node).expect("node");
    assert_eq!(
        json["status"]["runtimeHandlers"],
        serde_json::json!([
            {"features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}},
            {"name": "crun", "features": {"recursiveReadOnlyMounts": false, "userNamespaces": true}}
        ])
    );
    assert_eq!(
        json["status"]["features"],
        serde_json::json!({"supplementalGroupsPolicy": false})
    );
}
