use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use super::address::{self, InterfaceAddr};
use super::machine::{self, quantity, HugePages, MachineInfo};
use super::patch::{node_status_has_changed, node_status_patch};
use super::setters::{self, NodeEvent, Pressure, Reservation};
use super::testserver::{status, FakeServer};
use super::*;
use crate::stats::FsInfo;

fn t(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

fn named(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn conditions(node: &Node) -> Vec<NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

fn machine_info() -> MachineInfo {
    MachineInfo {
        num_cores: 4,
        memory_capacity: 16318936 * 1024,
        hugepages: vec![
            HugePages {
                page_size: 2 << 20,
                num_pages: 512,
            },
            HugePages {
                page_size: 1 << 30,
                num_pages: 0,
            },
        ],
        machine_id: "mid".into(),
        system_uuid: "uuid".into(),
        boot_id: "boot-1".into(),
    }
}

// ---- initial node and reconciliation ----

#[test]
fn initial_node_labels_annotation_taints() {
    let mut cfg = NodeStatusConfig::new("node-a");
    cfg.node_labels.insert("role".into(), "worker".into());
    cfg.node_labels
        .insert(LABEL_HOSTNAME.into(), "override".into());
    cfg.register_with_taints = vec![Taint {
        key: "dedicated".into(),
        value: Some("x".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }];
    cfg.provider_id = "kind://docker/a".into();
    let node = initial_node_object(&cfg);
    let labels = node.metadata.labels.clone().unwrap();
    let arch = machine::go_arch();
    assert_eq!(labels.get(LABEL_HOSTNAME).unwrap(), "override");
    assert_eq!(labels.get(LABEL_OS_STABLE).unwrap(), "linux");
    assert_eq!(labels.get(LABEL_ARCH_STABLE).unwrap(), arch);
    assert_eq!(labels.get(LABEL_OS_BETA).unwrap(), "linux");
    assert_eq!(labels.get(LABEL_ARCH_BETA).unwrap(), arch);
    assert_eq!(labels.get("role").unwrap(), "worker");
    assert_eq!(
        node.metadata
            .annotations
            .unwrap()
            .get(CONTROLLER_MANAGED_ATTACH_ANNOTATION)
            .unwrap(),
        "true"
    );
    let spec = node.spec.unwrap();
    assert_eq!(spec.taints.unwrap()[0].key, "dedicated");
    assert_eq!(spec.provider_id.as_deref(), Some("kind://docker/a"));
    assert_eq!(spec.unschedulable, None);

    cfg.enable_controller_attach_detach = false;
    cfg.register_with_taints.clear();
    cfg.provider_id.clear();
    let node = initial_node_object(&cfg);
    assert!(node.metadata.annotations.is_none());
    let spec = node.spec.unwrap();
    assert!(spec.taints.is_none() && spec.provider_id.is_none());
    assert_eq!(
        arch,
        if cfg!(target_arch = "x86_64") {
            "amd64"
        } else {
            arch
        }
    );
}

#[test]
fn reconcile_existing_node_sets_defaults_and_annotation() {
    let cfg = NodeStatusConfig::new("node-a");
    let initial = initial_node_object(&cfg);
    let mut existing = named("node-a");
    existing.metadata.labels = Some(BTreeMap::from([
        (LABEL_HOSTNAME.to_string(), "old".to_string()),
        ("custom".to_string(), "kept".to_string()),
    ]));
    assert!(reconcile_existing_node(&initial, &mut existing));
    let labels = existing.metadata.labels.clone().unwrap();
    assert_eq!(labels.get(LABEL_HOSTNAME).unwrap(), "node-a");
    assert_eq!(labels.get(LABEL_OS_STABLE).unwrap(), "linux");
    assert_eq!(labels.get("custom").unwrap(), "kept");
    assert_eq!(
        existing
            .metadata
            .annotations
            .clone()
            .unwrap()
            .get(CONTROLLER_MANAGED_ATTACH_ANNOTATION)
            .unwrap(),
        "true"
    );
    // Already reconciled: nothing to do.
    let mut again = existing.clone();
    assert!(!reconcile_existing_node(&initial, &mut again));

    // Attach-detach turned off: the annotation goes.
    let mut cfg2 = cfg.clone();
    cfg2.enable_controller_attach_detach = false;
    let initial2 = initial_node_object(&cfg2);
    assert!(reconcile_existing_node(&initial2, &mut again));
    assert!(again.metadata.annotations.unwrap().is_empty());
}

#[test]
fn reconcile_hugepages_replaces_unsupported_sizes() {
    let mut initial = named("n");
    initial.status = Some(NodeStatus {
        capacity: Some(BTreeMap::from([
            ("hugepages-2Mi".to_string(), q("1Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        allocatable: Some(BTreeMap::from([
            ("hugepages-2Mi".to_string(), q("1Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        ..Default::default()
    });
    let mut existing = named("n");
    existing.status = Some(NodeStatus {
        capacity: Some(BTreeMap::from([
            ("hugepages-1Gi".to_string(), q("2Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        allocatable: Some(BTreeMap::from([
            ("hugepages-1Gi".to_string(), q("2Gi")),
            ("cpu".to_string(), q("4")),
        ])),
        ..Default::default()
    });
    assert!(reconcile_existing_node(&initial, &mut existing));
    let st = existing.status.unwrap();
    let cap = st.capacity.unwrap();
    assert_eq!(cap.get("hugepages-2Mi"), Some(&q("1Gi")));
    assert!(!cap.contains_key("hugepages-1Gi"));
    assert!(!st.allocatable.unwrap().contains_key("hugepages-1Gi"));
}

// ---- machine info, capacity and allocatable ----

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
        Threshold::parse("100Mi"),
        Ok(Threshold::Quantity(104857600 * 1000))
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
        "MemTotal: 2048 kB\nMemFree: 512 kB\nMemAvailable: 1024 kB\nInactive(file): 512 kB\n",
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
    // Missing meminfo is an error, not a panic.
    std::fs::remove_file(paths.proc_dir.join("meminfo")).unwrap();
    assert!(machine::read_machine_info(&paths).is_err());
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

// ---- addresses ----

fn iface(name: &str, ip: &str, up: bool, loopback: bool) -> InterfaceAddr {
    InterfaceAddr {
        interface: name.into(),
        up,
        loopback,
        ip: ip.parse().unwrap(),
    }
}

const ROUTES: &str =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";

#[test]
fn address_detection() {
    let host = vec![
        iface("lo", "127.0.0.1", true, true),
        iface("eth1", "192.168.0.5", true, false),
        iface("eth0", "fe80::1", true, false),
        iface("eth0", "10.1.2.3", true, false),
    ];
    assert_eq!(
        address::parse_default_route_interfaces(ROUTES),
        vec!["eth0".to_string()]
    );
    assert_eq!(
        address::choose_host_ip(ROUTES, &host),
        Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)))
    );
    // Without a default route: the first usable interface.
    assert_eq!(
        address::choose_host_ip("", &host),
        Some("192.168.0.5".parse().unwrap())
    );
    // Nothing usable.
    assert_eq!(
        address::choose_host_ip("", &[iface("lo", "127.0.0.1", true, true)]),
        None
    );
    assert_eq!(
        address::choose_host_ip("", &[iface("eth9", "10.0.0.9", false, false)]),
        None
    );
    assert_eq!(
        address::choose_host_ip("", &[iface("eth0", "fd00::5", true, false)]),
        Some("fd00::5".parse().unwrap())
    );

    let addrs = address::node_addresses(None, "node-a", ROUTES, &host).unwrap();
    assert_eq!(
        addrs,
        vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.1.2.3".into()
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "node-a".into()
            },
        ]
    );
    let explicit = address::node_addresses(
        Some("192.168.0.5".parse().unwrap()),
        "node-a",
        ROUTES,
        &host,
    )
    .unwrap();
    assert_eq!(explicit[0].address, "192.168.0.5");
    let by_name = address::node_addresses(None, "172.16.0.4", "", &[]).unwrap();
    assert_eq!(by_name[0].address, "172.16.0.4");
    assert!(address::node_addresses(None, "node-a", "", &[]).is_err());

    assert!(address::validate_node_ip(&"127.0.0.1".parse().unwrap(), &host).is_err());
    assert!(address::validate_node_ip(&"10.9.9.9".parse().unwrap(), &host).is_err());
    assert!(address::validate_node_ip(&"10.1.2.3".parse().unwrap(), &host).is_ok());
}

#[test]
fn address_detection_never_panics_on_garbage() {
    for routes in [
        "",
        "\n\n",
        "Iface\n",
        "eth0 zz yy",
        "a\tb\tc\td\te\tf\tg\th\n\u{0}\u{1}",
        "Iface\nx 00000000 0 zz 0 0 0 00000000\n",
    ] {
        let _ = address::parse_default_route_interfaces(routes);
        let _ = address::node_addresses(None, "n", routes, &[]);
    }
    // The real host: an answer or an error, never a panic.
    let _ = address::detect(None, "n", std::path::Path::new("/proc"));
    let _ = address::detect(None, "n", std::path::Path::new("/nonexistent"));
    let _ = address::host_addrs();
}

// ---- conditions ----

fn ready(
    status: &str,
    reason: &str,
    message: &str,
    transition: i64,
    heartbeat: i64,
) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(t(heartbeat)),
        last_transition_time: Some(t(transition)),
    }
}

fn with_capacity() -> Node {
    let mut node = named("n");
    node.status = Some(NodeStatus {
        capacity: Some(
            ["cpu", "memory", "pods", "ephemeral-storage"]
                .into_iter()
                .map(|k| (k.to_string(), q("1")))
                .collect(),
        ),
        ..Default::default()
    });
    node
}

#[test]
fn ready_condition_transitions() {
    let now = t(100);
    // New and ready: no event.
    let mut node = with_capacity();
    let mut ev = Vec::new();
    setters::set_ready_condition(&mut node, &now, &[], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            100,
            100
        )]
    );
    assert!(ev.is_empty());

    // Ready, no transition: heartbeat moves, transition kept.
    let mut ev = Vec::new();
    setters::set_ready_condition(&mut node, &t(110), &[], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            100,
            110
        )]
    );
    assert!(ev.is_empty());

    // Transition to not ready, errors aggregated.
    let errs = vec![
        "runtime".to_string(),
        "network".to_string(),
        "runtime".to_string(),
    ];
    setters::set_ready_condition(&mut node, &t(120), &errs, &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "False",
            "KubeletNotReady",
            "[runtime, network]",
            120,
            120
        )]
    );
    assert_eq!(ev, vec![NodeEvent::status("n", "NodeNotReady")]);
    assert_eq!(ev[0].message, "Node n status is now: NodeNotReady");

    // Not ready, message changes, no transition.
    let mut ev = Vec::new();
    setters::set_ready_condition(&mut node, &t(130), &["foo".to_string()], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready("False", "KubeletNotReady", "foo", 120, 130)]
    );
    assert!(ev.is_empty());

    // Back to ready.
    setters::set_ready_condition(&mut node, &t(140), &[], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            140,
            140
        )]
    );
    assert_eq!(ev, vec![NodeEvent::status("n", "NodeReady")]);

    // Missing capacity.
    let mut bare = named("n");
    setters::set_ready_condition(&mut bare, &now, &[], &mut Vec::new());
    assert_eq!(
        conditions(&bare)[0].message.as_deref(),
        Some("missing node capacity for resources: cpu, memory, pods, ephemeral-storage")
    );
}

#[test]
fn pressure_condition_transitions() {
    let cases = [
        (
            Pressure::Memory,
            "MemoryPressure",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        (
            Pressure::Disk,
            "DiskPressure",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "NodeHasNoDiskPressure",
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
        ),
        (
            Pressure::Pid,
            "PIDPressure",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "NodeHasSufficientPID",
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
    ];
    for (kind, ty, ok_reason, ok_msg, ok_event, bad_reason, bad_msg, bad_event) in cases {
        let mut node = named("n");
        // New, no pressure: condition False, with an event.
        let mut ev = Vec::new();
        setters::set_pressure_condition(&mut node, &t(0), kind, false, &mut ev);
        let c = conditions(&node)[0].clone();
        assert_eq!((c.type_.as_str(), c.status.as_str()), (ty, "False"));
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some(ok_reason), Some(ok_msg))
        );
        assert_eq!(ev, vec![NodeEvent::status("n", ok_event)]);
        // Same status: only the heartbeat moves.
        let mut ev = Vec::new();
        setters::set_pressure_condition(&mut node, &t(10), kind, false, &mut ev);
        let c = conditions(&node)[0].clone();
        assert_eq!(
            (c.last_transition_time, c.last_heartbeat_time),
            (Some(t(0)), Some(t(10)))
        );
        assert!(ev.is_empty());
        // Pressure: transition.
        setters::set_pressure_condition(&mut node, &t(20), kind, true, &mut ev);
        let c = conditions(&node)[0].clone();
        assert_eq!(c.status, "True");
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some(bad_reason), Some(bad_msg))
        );
        assert_eq!(
            (c.last_transition_time, c.last_heartbeat_time),
            (Some(t(20)), Some(t(20)))
        );
        assert_eq!(ev, vec![NodeEvent::status("n", bad_event)]);
        assert_eq!(conditions(&node).len(), 1);
    }
}

#[test]
fn aggregate_error_format() {
    assert_eq!(setters::aggregate_errors(&[]), None);
    assert_eq!(
        setters::aggregate_errors(&["a".into()]).as_deref(),
        Some("a")
    );
    assert_eq!(
        setters::aggregate_errors(&["a".into(), "a".into()]).as_deref(),
        Some("a")
    );
    assert_eq!(
        setters::aggregate_errors(&["a".into(), "b".into()]).as_deref(),
        Some("[a, b]")
    );
}

#[test]
fn schedulable_events() {
    let mut node = named("n");
    let mut last = false;
    let mut ev = Vec::new();
    setters::record_schedulable_event(&node, &mut last, &mut ev);
    assert!(ev.is_empty());
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    setters::record_schedulable_event(&node, &mut last, &mut ev);
    setters::record_schedulable_event(&node, &mut last, &mut ev);
    assert_eq!(ev, vec![NodeEvent::status("n", "NodeNotSchedulable")]);
}

#[test]
fn images_sorted_cut_and_names_capped() {
    let images: Vec<ImageInfo> = (1..=4)
        .map(|i| ImageInfo {
            names: (0..7).map(|n| format!("img{i}:{n}")).collect(),
            size_bytes: i * 100,
        })
        .collect();
    let mut node = named("n");
    setters::set_images(&mut node, 2, &images);
    let list = node.status.clone().unwrap().images.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].size_bytes, Some(400));
    assert_eq!(list[1].size_bytes, Some(300));
    assert_eq!(
        list[0].names.as_ref().unwrap().len(),
        setters::MAX_NAMES_PER_IMAGE
    );
    setters::set_images(&mut node, -1, &images);
    assert_eq!(node.status.clone().unwrap().images.unwrap().len(), 4);
    setters::set_images(&mut node, 50, &[]);
    assert!(node.status.unwrap().images.is_none());
}

#[test]
fn version_info_and_endpoints() {
    let mut node = named("n");
    setters::set_version_info(
        &mut node,
        "6.1.0",
        "Debian 12",
        Some("containerd"),
        Some("1.7.24"),
        "v1.34.0",
    );
    setters::set_daemon_endpoints(&mut node, 10250);
    setters::set_go_runtime(&mut node);
    let v = serde_json::to_value(node.status.as_ref().unwrap()).unwrap();
    assert_eq!(
        v["nodeInfo"]["containerRuntimeVersion"],
        "containerd://1.7.24"
    );
    assert_eq!(v["nodeInfo"]["kubeletVersion"], "v1.34.0");
    assert_eq!(v["nodeInfo"]["kernelVersion"], "6.1.0");
    assert_eq!(v["nodeInfo"]["osImage"], "Debian 12");
    assert_eq!(v["nodeInfo"]["operatingSystem"], "linux");
    assert_eq!(
        v["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 10250}})
    );
    setters::set_version_info(
        &mut node,
        "6.1.0",
        "Debian 12",
        Some("containerd"),
        None,
        "v1.34.0",
    );
    let v = serde_json::to_value(node.status.as_ref().unwrap()).unwrap();
    assert_eq!(
        v["nodeInfo"]["containerRuntimeVersion"],
        "containerd://Unknown"
    );
}

// ---- change detection and the patch ----

fn status_with(conds: Vec<NodeCondition>) -> NodeStatus {
    NodeStatus {
        conditions: Some(conds),
        capacity: Some(BTreeMap::from([("memory".to_string(), q("1Gi"))])),
        ..Default::default()
    }
}

#[test]
fn status_change_ignores_heartbeat() {
    let a = status_with(vec![ready("True", "KubeletReady", "m", 0, 0)]);
    let b = status_with(vec![ready("True", "KubeletReady", "m", 0, 50)]);
    assert!(!node_status_has_changed(Some(&a), Some(&b)));
    // Semantic quantity equality.
    let mut c = b.clone();
    c.capacity = Some(BTreeMap::from([("memory".to_string(), q("1024Mi"))]));
    assert!(!node_status_has_changed(Some(&a), Some(&c)));
    // Order of conditions does not matter.
    let mut two = status_with(vec![
        ready("True", "KubeletReady", "m", 0, 0),
        NodeCondition {
            type_: "DiskPressure".into(),
            status: "False".into(),
            ..Default::default()
        },
    ]);
    let mut swapped = two.clone();
    swapped.conditions.as_mut().unwrap().reverse();
    assert!(!node_status_has_changed(Some(&two), Some(&swapped)));
    // A message, status or transition change counts.
    let d = status_with(vec![ready("True", "KubeletReady", "other", 0, 50)]);
    assert!(node_status_has_changed(Some(&a), Some(&d)));
    let e = status_with(vec![ready("False", "KubeletReady", "m", 0, 0)]);
    assert!(node_status_has_changed(Some(&a), Some(&e)));
    // Other fields count.
    two.images = Some(vec![Default::default()]);
    assert!(node_status_has_changed(Some(&swapped), Some(&two)));
    assert!(node_status_has_changed(None, Some(&a)));
    assert!(!node_status_has_changed(None, None));
}

#[test]
fn strategic_merge_patch_for_status() {
    let mut original = named("n");
    original.metadata.resource_version = Some("7".into());
    original.status = Some(NodeStatus {
        addresses: Some(vec![NodeAddress {
            type_: "InternalIP".into(),
            address: "10.0.0.1".into(),
        }]),
        conditions: Some(vec![
            NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                reason: Some("KubeletHasSufficientMemory".into()),
                message: Some("kubelet has sufficient memory available".into()),
                last_heartbeat_time: Some(t(0)),
                last_transition_time: Some(t(0)),
            },
            ready("False", "KubeletNotReady", "x", 0, 0),
        ]),
        ..Default::default()
    });
    let mut node = original.clone();
    // The spec never goes into a status patch.
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    {
        let st = node.status.as_mut().unwrap();
        let conds = st.conditions.as_mut().unwrap();
        conds[0].last_heartbeat_time = Some(t(10));
        conds[1] = ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            10,
            10,
        );
        st.addresses = Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.2".into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "n".into(),
            },
        ]);
    }
    node.metadata.labels = Some(BTreeMap::from([(
        "kubernetes.io/os".to_string(),
        "linux".to_string(),
    )]));
    let patch = node_status_patch(&original, &node).unwrap();
    let hb0 = "2023-11-14T22:13:30Z";
    assert_eq!(serde_json::to_value(t(10)).unwrap(), json!(hb0));
    assert_eq!(
        patch,
        json!({
            "metadata": {"labels": {"kubernetes.io/os": "linux"}},
            "status": {
                "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
                "conditions": [
                    {"type": "MemoryPressure", "lastHeartbeatTime": hb0},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady",
                     "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": hb0, "lastTransitionTime": hb0},
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "10.0.0.2"},
                    {"type": "Hostname", "address": "n"},
                    {"$patch": "replace"},
                ],
            }
        })
    );
    // First addresses on a node without any: a plain list.
    let mut bare = original.clone();
    bare.status.as_mut().unwrap().addresses = None;
    let patch = node_status_patch(&bare, &node).unwrap();
    assert_eq!(
        patch["status"]["addresses"],
        json!([{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n"}])
    );
    // Nothing changed: an empty patch.
    assert_eq!(node_status_patch(&original, &original).unwrap(), json!({}));
}

// ---- against a scripted API server ----

fn test_config(name: &str) -> NodeStatusConfig {
    let mut cfg = NodeStatusConfig::new(name);
    cfg.node_ip = Some("10.0.0.9".parse().unwrap());
    cfg.root_dir = std::env::temp_dir();
    cfg.node_status_update_frequency = Duration::from_millis(300);
    cfg
}

fn healthy() -> HealthFn {
    Box::new(|| KubeletHealth {
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        images: vec![ImageInfo {
            names: vec!["busybox:latest".into()],
            size_bytes: 1000,
        }],
        ..Default::default()
    })
}

/// A node as the API server would hold it, for the handler's answers.
fn stored_node(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "uid": "uid-1", "resourceVersion": "5", "labels": labels},
           "spec": {}, "status": {}})
}

#[test]
fn registration_reconciles_an_existing_node() {
    let node = Arc::new(Mutex::new(stored_node("node-a", json!({"custom": "x"}))));
    let n = node.clone();
    let server = FakeServer::start(Box::new(move |r| {
        match (r.method.as_str(), r.path.as_str()) {
            ("POST", "/api/v1/nodes") => (
                409,
                status(409, "AlreadyExists", "nodes \"node-a\" already exists"),
            ),
            ("GET", "/api/v1/nodes/node-a") => (200, n.lock().unwrap().clone()),
            ("PATCH", "/api/v1/nodes/node-a/status") => {
                let mut cur = n.lock().unwrap();
                // Enough of a merge for the test: labels, annotations, status.
                let patch = r.json();
                if let Some(l) = patch["metadata"]["labels"].as_object() {
                    for (k, v) in l {
                        cur["metadata"]["labels"][k] = v.clone();
                    }
                }
                if let Some(a) = patch["metadata"]["annotations"].as_object() {
                    cur["metadata"]["annotations"] = Value::Object(a.clone());
                }
                (200, cur.clone())
            }
            _ => (404, status(404, "NotFound", "no")),
        }
    }));
    let mgr = NodeStatusManager::new(test_config("node-a"), server.client(), healthy());
    let mut events = Vec::new();
    let initial = {
        let mut st = mgr.state.lock().unwrap();
        mgr.initial_node(&mut st, &mut events)
    };
    // Upstream records the pressure conditions' first status on the initial node.
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"
        ]
    );
    assert!(mgr.try_register_with_api_server(&initial));
    assert_eq!(
        server.calls(),
        vec![
            "POST /api/v1/nodes",
            "GET /api/v1/nodes/node-a",
            "PATCH /api/v1/nodes/node-a/status"
        ]
    );
    let reqs = server.requests();
    let created = reqs[0].json();
    assert_eq!(
        created["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    assert_eq!(created["status"]["conditions"][3]["type"], "Ready");
    assert_eq!(created["status"]["addresses"][0]["address"], "10.0.0.9");
    assert_eq!(
        reqs[2].content_type,
        "application/strategic-merge-patch+json"
    );
    let patch = reqs[2].json();
    assert_eq!(
        patch["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    assert_eq!(patch["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert!(patch["metadata"]["labels"].get("custom").is_none());
    assert_eq!(
        patch["metadata"]["annotations"][CONTROLLER_MANAGED_ATTACH_ANNOTATION],
        "true"
    );
    // The cached node is the patched one.
    let cached = mgr.node().unwrap();
    assert_eq!(cached.metadata.labels.unwrap()["custom"], "x");
    assert_eq!(cached.metadata.uid.as_deref(), Some("uid-1"));
}

#[test]
fn registration_fails_on_other_errors() {
    let server = FakeServer::start(Box::new(|_| (403, status(403, "Forbidden", "nope"))));
    let mgr = NodeStatusManager::new(test_config("node-a"), server.client(), healthy());
    let node = initial_node_object(&mgr.cfg);
    assert!(!mgr.try_register_with_api_server(&node));
    assert_eq!(server.calls(), vec!["POST /api/v1/nodes"]);
}

/// A server that stores the node on create and merges status patches.
fn node_server(name: &'static str) -> (FakeServer, Arc<Mutex<Option<Value>>>) {
    let store: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let s = store.clone();
    let server = FakeServer::start(Box::new(move |r| {
        let path = r.path.as_str();
        let mut cur = s.lock().unwrap();
        match r.method.as_str() {
            "POST" if path == "/api/v1/nodes" => {
                let mut n = r.json();
                n["metadata"]["uid"] = json!("uid-9");
                n["metadata"]["resourceVersion"] = json!("1");
                *cur = Some(n.clone());
                (201, n)
            }
            "GET" if path == format!("/api/v1/nodes/{name}") => match cur.as_ref() {
                Some(n) => (200, n.clone()),
                None => (404, status(404, "NotFound", "not found")),
            },
            "PATCH" if path == format!("/api/v1/nodes/{name}/status") => {
                let Some(n) = cur.as_mut() else {
                    return (404, status(404, "NotFound", "not found"));
                };
                // Conditions merge by type (enough for the loop's patches).
                let patch = r.json();
                if let Some(conds) = patch["status"]["conditions"].as_array() {
                    for pc in conds {
                        let list = n["status"]["conditions"].as_array_mut().unwrap();
                        if let Some(c) = list.iter_mut().find(|c| c["type"] == pc["type"]) {
                            for (k, v) in pc.as_object().unwrap() {
                                c[k] = v.clone();
                            }
                        }
                    }
                }
                (200, n.clone())
            }
            _ => (404, status(404, "NotFound", "no")),
        }
    }));
    (server, store)
}

#[test]
fn status_loop_registers_then_patches_and_stops() {
    let (server, store) = node_server("node-b");
    // The runtime is down at first; then it comes up.
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let u = up.clone();
    let health: HealthFn = Box::new(move || KubeletHealth {
        runtime_errors: if u.load(std::sync::atomic::Ordering::SeqCst) {
            vec![]
        } else {
            vec!["container runtime is down".into()]
        },
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        ..Default::default()
    });
    let mgr = NodeStatusManager::new(test_config("node-b"), server.client(), health);
    let seen = Arc::new(Mutex::new(Vec::<(String, String, String)>::new()));
    let s = seen.clone();
    mgr.set_event_sink(Arc::new(SeenEvents(s)));
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    let handle = mgr.start(rx).unwrap();
    assert_eq!(handle.thread().name(), Some("node-status"));
    assert!(server.wait_for(Duration::from_secs(5), |r| r
        .iter()
        .any(|r| r.method == "PATCH")));
    assert!(mgr.registered());
    let created = &server.requests()[0];
    assert_eq!(
        created.json()["status"]["conditions"][3]["message"],
        "container runtime is down"
    );

    // Runtime up: the fast update patches Ready at once.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(server.wait_for(Duration::from_secs(5), |reqs| reqs
        .iter()
        .any(|r| { r.method == "PATCH" && r.body.contains("\"KubeletReady\"") })));
    let stored = store.lock().unwrap().clone().unwrap();
    let ready = stored["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "KubeletReady");
    assert!(server.wait_for(Duration::from_secs(2), |_| seen
        .lock()
        .unwrap()
        .iter()
        .any(|e| e.1 == "NodeReady")));
    let events = seen.lock().unwrap().clone();
    assert!(events.contains(&(
        "Normal".into(),
        "NodeReady".into(),
        "Node node-b status is now: NodeReady".into()
    )));
    assert!(events.iter().any(|e| e.1 == "NodeHasSufficientMemory"));

    drop(tx);
    handle.join().unwrap();
    // Nothing after shutdown.
    let n = server.requests().len();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(server.requests().len(), n);
}

#[test]
fn unchanged_status_is_not_patched_until_report_is_due() {
    let (server, _store) = node_server("node-c");
    let mut cfg = test_config("node-c");
    cfg.node_status_report_frequency = Duration::from_secs(3600);
    let mgr = NodeStatusManager::new(cfg, server.client(), healthy());
    let initial = {
        let mut st = mgr.state.lock().unwrap();
        mgr.initial_node(&mut st, &mut Vec::new())
    };
    assert!(mgr.try_register_with_api_server(&initial));
    // First update: report due (never reported).
    mgr.update_node_status().unwrap();
    assert_eq!(
        server
            .calls()
            .iter()
            .filter(|c| c.starts_with("PATCH"))
            .count(),
        1
    );
    // Second: nothing changed, report not due: GET only.
    mgr.update_node_status().unwrap();
    let calls = server.calls();
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("PATCH")).count(),
        1,
        "{calls:?}"
    );
    assert_eq!(calls.last().unwrap(), "GET /api/v1/nodes/node-c");
    // Report due: patched even though unchanged, with fresh heartbeats.
    mgr.state.lock().unwrap().last_status_report =
        Some(std::time::Instant::now() - Duration::from_secs(7200));
    // Heartbeats have second precision: let one pass.
    std::thread::sleep(Duration::from_millis(1100));
    mgr.update_node_status().unwrap();
    let reqs = server.requests();
    let last = reqs.last().unwrap();
    assert_eq!(last.method, "PATCH");
    let patch = last.json();
    assert!(patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c.get("lastHeartbeatTime").is_some()));
    assert!(patch.get("spec").is_none());
}

#[test]
fn shutdown_interrupts_registration() {
    let server = FakeServer::start(Box::new(|_| (500, status(500, "InternalError", "down"))));
    let mgr = NodeStatusManager::new(test_config("node-d"), server.client(), healthy());
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let handle = mgr.start(rx).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    tx.send(()).unwrap();
    let start = std::time::Instant::now();
    handle.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(8));
    assert!(!mgr.registered());
}

/// Records node events as (type, reason, message).
struct SeenEvents(Arc<Mutex<Vec<(String, String, String)>>>);

impl crate::events::EventRecorder for SeenEvents {
    fn pod_event(
        &self,
        _: &k8s_openapi::api::core::v1::Pod,
        _: crate::events::EventType,
        _: &str,
        _: &str,
    ) {
    }

    fn node_event(&self, kind: crate::events::EventType, reason: &str, message: &str) {
        self.0
            .lock()
            .unwrap()
            .push((kind.as_str().into(), reason.into(), message.into()));
    }
}

/// The pressure conditions are the eviction manager's, passed in the
/// kubelet's health; node status no longer computes them itself.
#[test]
fn pressure_conditions_come_from_the_eviction_manager() {
    let server = FakeServer::start(Box::new(|_| (404, status(404, "NotFound", "no"))));
    let health: HealthFn = Box::new(|| KubeletHealth {
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        memory_pressure: true,
        pid_pressure: true,
        ..Default::default()
    });
    let mut cfg = test_config("node-p");
    // A threshold the host could never meet: ignored by node status now.
    cfg.eviction_hard = BTreeMap::from([("nodefs.available".into(), "100%".into())]);
    let mgr = NodeStatusManager::new(cfg, server.client(), health);
    let mut events = Vec::new();
    let node = {
        let mut st = mgr.state.lock().unwrap();
        mgr.initial_node(&mut st, &mut events)
    };
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "NodeHasInsufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasInsufficientPID"
        ]
    );
    let conds = node.status.unwrap().conditions.unwrap();
    let of = |t: &str| {
        conds
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        (of("MemoryPressure"), of("DiskPressure"), of("PIDPressure")),
        ("True".into(), "False".into(), "True".into())
    );
}
