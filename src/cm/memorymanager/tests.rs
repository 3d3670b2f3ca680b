use super::*;
use crate::cm::cpumanager::policy_static::tests::pod;
use crate::kubeletconfig::MemoryReservation;
use crate::podutil::PodExt;

fn config(reserved: &[(i32, &str)]) -> KubeletConfiguration {
    let mut c = KubeletConfiguration {
        memory_manager_policy: "Static".into(),
        ..Default::default()
    };
    c.system_reserved.insert("memory".into(), "1Gi".into());
    c.eviction_hard
        .insert("memory.available".into(), "100Mi".into());
    c.reserved_memory = reserved
        .iter()
        .map(|(node, q)| MemoryReservation {
            numa_node: *node,
            limits: [("memory".to_string(), q.to_string())].into(),
        })
        .collect();
    c
}

/// A sysfs with two NUMA nodes of 4 GiB, 2 MiB pages on node 0.
fn sysfs() -> tempfile::TempDir {
    let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
    for n in 0..2 {
        let node = dir.path().join(format!("devices/system/node/node{n}"));
        std::fs::create_dir_all(node.join("hugepages/hugepages-2048kB")).unwrap();
        std::fs::write(
            node.join("meminfo"),
            format!("Node {n} MemTotal:        4194304 kB\nNode {n} MemFree: 1 kB\n"),
        )
        .unwrap();
        let pages = if n == 0 { "4\n" } else { "0\n" };
        std::fs::write(node.join("hugepages/hugepages-2048kB/nr_hugepages"), pages).unwrap();
    }
    dir
}

fn start(
    c: &KubeletConfiguration,
) -> (Result<MemoryManager, MemoryManagerError>, tempfile::TempDir) {
    let root = tempfile::TempDir::with_prefix("rkubelet-root-").unwrap();
    let s = sysfs();
    (
        MemoryManager::start(c, root.path(), s.path(), 8 << 30),
        root,
    )
}

#[test]
fn the_none_policy_does_nothing() {
    let (m, root) = start(&KubeletConfiguration::default());
    let m = m.unwrap();
    assert!(!m.is_static());
    assert!(!root.path().join(state::STATE_FILE).exists());
    assert_eq!(m.container_cpuset_mems("u", "c"), None);
}

#[test]
fn reserved_memory_must_add_up_to_node_allocatables_reservation() {
    let (m, root) = start(&config(&[(0, "612Mi"), (1, "512Mi")]));
    let m = m.unwrap();
    let text = std::fs::read_to_string(root.path().join(state::STATE_FILE)).unwrap();
    assert!(text.starts_with(r#"{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"hugepages-2Mi":{"total":8388608,"systemReserved":0,"allocatable":8388608,"reserved":0,"free":8388608},"memory":{"total":4294967296,"systemReserved":641728512,"#), "{text}");
    let g = pod("g", &[], &[("1", "1Gi")]);
    m.allocate(&g, &g.containers()[0].clone(), TopologyHint::default())
        .unwrap();
    assert_eq!(m.container_cpuset_mems("g", "app0").as_deref(), Some("0"));
    m.remove_stale_state(&HashSet::new(), true);
    assert_eq!(m.container_cpuset_mems("g", "app0"), None);

    let e = start(&config(&[(0, "1Gi")])).0.err().unwrap().to_string();
    assert!(
        e.starts_with("reservedMemory: the total amount \"1073741824\" of type \"memory\" is not equal to the value \"1178599424\""),
        "{e}"
    );
    let e = start(&config(&[(2, "1124Mi")]))
        .0
        .err()
        .unwrap()
        .to_string();
    assert_eq!(e, "reservedMemory: the reserved memory configuration references a NUMA node 2 that does not exist on this machine");
    let mut c = config(&[]);
    c.system_reserved.clear();
    c.eviction_hard.clear();
    let e = start(&c).0.err().unwrap().to_string();
    assert_eq!(
        e,
        "reservedMemory: [memorymanager] you should specify the system reserved memory"
    );
}

#[test]
fn a_refused_pod_keeps_no_memory() {
    let (m, _root) = start(&config(&[(0, "612Mi"), (1, "512Mi")]));
    let m = m.unwrap();
    let g = pod("g", &[], &[("1", "1Gi"), ("1", "64Gi")]);
    m.allocate(&g, &g.containers()[0].clone(), TopologyHint::default())
        .unwrap();
    let r = m
        .allocate(&g, &g.containers()[1].clone(), TopologyHint::default())
        .unwrap_err();
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert!(r.message.starts_with(
        "Allocate failed due to [memorymanager] failed to get the default NUMA affinity"
    ));
    m.release("g");
    assert_eq!(m.container_cpuset_mems("g", "app0"), None);
}
