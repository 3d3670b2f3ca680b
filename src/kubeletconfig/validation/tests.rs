//! Tests of the configuration, label and `--node-ip` checks.

use super::*;
use std::collections::BTreeMap;

/// A default configuration with `edit` applied.
fn with(edit: impl FnOnce(&mut KubeletConfiguration)) -> KubeletConfiguration {
    let mut c = KubeletConfiguration::default();
    edit(&mut c);
    c
}

fn fields(c: &KubeletConfiguration) -> Vec<String> {
    validate_configuration(c)
        .into_iter()
        .map(|e| e.field)
        .collect()
}

#[test]
fn defaults_are_valid() {
    assert_eq!(
        validate_configuration(&KubeletConfiguration::default()),
        vec![]
    );
    assert_eq!(
        validate_configuration(&KubeletConfiguration::legacy_flag_defaults()),
        vec![]
    );
}

#[test]
fn ports() {
    let c = with(|c| {
        c.healthz_port = -1;
        c.read_only_port = 70000;
        c.port = 0;
    });
    assert_eq!(fields(&c), vec!["port", "healthzPort", "readOnlyPort"]);
    let c = with(|c| {
        c.enable_server = false;
        c.port = 0;
    });
    assert!(fields(&c).is_empty());
}

#[test]
fn image_gc_and_limits() {
    let c = with(|c| {
        c.image_gc_low_threshold_percent = 90;
        c.image_gc_high_threshold_percent = 101;
        c.max_pods = -1;
        c.oom_score_adj = -1001;
        c.node_lease_duration_seconds = 0;
        c.node_status_update_frequency = Duration::ZERO;
    });
    let got = fields(&c);
    for want in [
        "imageGCHighThresholdPercent",
        "maxPods",
        "oomScoreAdj",
        "nodeLeaseDurationSeconds",
        "nodeStatusUpdateFrequency",
    ] {
        assert!(got.iter().any(|f| f == want), "{want} missing from {got:?}");
    }
    let c = with(|c| c.image_gc_low_threshold_percent = 85);
    assert_eq!(fields(&c), vec!["imageGCLowThresholdPercent"]);
}

#[test]
fn policies_and_logs() {
    let c = with(|c| {
        c.cgroup_driver = "cgroupv2".into();
        c.container_log_max_files = 1;
        c.container_log_max_size = "ten megs".into();
        c.pod_logs_dir = "/var/log/../pods/".into();
        c.hairpin_mode = "bogus".into();
    });
    assert_eq!(
        fields(&c),
        vec![
            "cgroupDriver",
            "hairpinMode",
            "containerLogMaxFiles",
            "containerLogMaxSize",
            "podLogsDir"
        ]
    );
}

#[test]
fn eviction_thresholds() {
    let mut c = KubeletConfiguration::default();
    c.eviction_hard
        .insert("disk.available".into(), "1Gi".into());
    c.eviction_hard
        .insert("memory.available".into(), "150%".into());
    c.eviction_soft
        .insert("nodefs.available".into(), "20%".into());
    let errs = validate_configuration(&c);
    assert_eq!(errs.len(), 3, "{errs:?}");
    assert!(errs.iter().any(|e| e.value == "disk.available"));
    assert!(errs.iter().any(|e| e.field == "evictionSoftGracePeriod"));
    c.eviction_soft_grace_period
        .insert("nodefs.available".into(), "1m30s".into());
    c.eviction_hard.remove("disk.available");
    c.eviction_hard
        .insert("memory.available".into(), "0%".into());
    assert!(fields(&c).is_empty());
}

#[test]
fn reserved_and_allocatable() {
    let mut c = KubeletConfiguration::default();
    c.system_reserved.insert("cpu".into(), "200m".into());
    c.system_reserved.insert("gpu".into(), "1".into());
    c.kube_reserved.insert("memory".into(), "-1Gi".into());
    c.enforce_node_allocatable = vec!["pods".into(), "kube-reserved".into(), "pods".into()];
    let got = fields(&c);
    assert_eq!(
        got,
        vec![
            "systemReserved",
            "kubeReserved",
            "enforceNodeAllocatable",
            "enforceNodeAllocatable"
        ]
    );
    c = KubeletConfiguration::default();
    c.enforce_node_allocatable = vec!["none".into(), "pods".into()];
    assert_eq!(fields(&c), vec!["enforceNodeAllocatable"]);
}

#[test]
fn endpoints() {
    assert!(check_endpoint("unix:///run/containerd/containerd.sock").is_ok());
    assert!(check_endpoint("/run/crio/crio.sock").is_ok());
    assert!(check_endpoint("tcp://127.0.0.1:1234").is_err());
    assert!(check_endpoint("unix://relative.sock").is_err());
    assert!(check_endpoint("").is_err());
    let c = with(|c| c.image_service_endpoint = "npipe:////./pipe/x".into());
    assert_eq!(fields(&c), vec!["imageServiceEndpoint"]);
}

#[test]
fn taints() {
    let mut c = KubeletConfiguration::default();
    let taint = |k: &str, v: &str, eff: &str| Taint {
        key: k.into(),
        value: v.into(),
        effect: eff.into(),
        time_added: None,
    };
    c.register_with_taints = vec![
        taint("dedicated", "edge", "NoSchedule"),
        taint("bad key!", "", "NoExecute"),
        taint("ok", "", "Sometimes"),
        taint("example.com/x", "v", "PreferNoSchedule"),
    ];
    let errs = validate_configuration(&c);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(errs.iter().all(|e| e.field == "registerWithTaints"));
}

#[test]
fn label_syntax() {
    for good in ["a", "app.kubernetes.io/name", "example.com/a-b_c.d", "A1"] {
        assert!(check_qualified_name(good).is_ok(), "{good}");
    }
    for bad in [
        "",
        "-a",
        "a-",
        "a/b/c",
        "Example.com/a",
        "/a",
        "a/",
        &"x".repeat(64),
    ] {
        assert!(check_qualified_name(bad).is_err(), "{bad}");
    }
    assert!(check_label_value("").is_ok());
    assert!(check_label_value("v1.2").is_ok());
    assert!(check_label_value("has space").is_err());
}

#[test]
fn node_label_namespaces() {
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let ok = labels(&[
        ("node-role", "edge"),
        ("node.kubernetes.io/pool", "a"),
        ("topology.kubernetes.io/zone", "z1"),
        ("foo.kubelet.kubernetes.io/x", ""),
    ]);
    assert_eq!(validate_node_labels(&ok), Vec::<String>::new());
    let bad = labels(&[
        ("node-role.kubernetes.io/master", ""),
        ("k8s.io/x", "y"),
        ("x", "a b"),
    ]);
    assert_eq!(validate_node_labels(&bad).len(), 3);
}

#[test]
fn node_ip() {
    assert!(validate_node_ip("10.0.0.5").is_ok());
    assert!(validate_node_ip("10.0.0.5,fd00::5").is_ok());
    assert!(validate_node_ip("::").is_ok());
    assert!(validate_node_ip("10.0.0.5,10.0.0.6").is_err());
    assert!(validate_node_ip("node1").is_err());
}

/// Upstream's two rules for reservedSystemCPUs, with its wording.
#[test]
fn reserved_system_cpus() {
    assert!(fields(&with(|c| c.reserved_system_cpus = "0-1,3".into())).is_empty());
    let errs = validate_configuration(&with(|c| {
        c.reserved_system_cpus = "0".into();
        c.system_reserved_cgroup = "/system.slice".into();
    }));
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "reservedSystemCPUs");
    assert!(
        errs[0]
            .reason
            .starts_with("can't use reservedSystemCPUs (--reserved-cpus) with"),
        "{errs:?}"
    );
    let errs = validate_configuration(&with(|c| c.reserved_system_cpus = "0-x".into()));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0]
            .reason
            .starts_with("unable to parse reservedSystemCPUs (--reserved-cpus): "),
        "{errs:?}"
    );
}

/// upstream's rules for reservedMemory entries, with its wording.
#[test]
fn reserved_memory() {
    use crate::kubeletconfig::MemoryReservation;
    let entry = |node: i32, kind: &str, q: &str| MemoryReservation {
        numa_node: node,
        limits: [(kind.to_string(), q.to_string())].into(),
    };
    let ok = with(|c| {
        c.reserved_memory = vec![entry(0, "memory", "1Gi"), entry(1, "hugepages-2Mi", "4Mi")]
    });
    assert!(fields(&ok).is_empty());
    let errs = validate_configuration(&with(|c| {
        c.reserved_memory = vec![
            entry(0, "cpu", "1"),
            entry(0, "memory", "0"),
            entry(1, "memory", "1Gi"),
            entry(1, "memory", "2Gi"),
        ]
    }));
    let reasons: Vec<&str> = errs.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "the limit type \"cpu\" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted",
            "reserved memory may not be zero for NUMA node 0 and resource \"memory\"",
            "the reserved memory has a duplicate value for NUMA node 1 and resource \"memory\"",
        ]
    );
    assert_eq!(errs[0].field, "reservedMemory[numaNode=0].limits.cpu");
}
