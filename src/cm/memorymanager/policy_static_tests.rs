use super::*;
use crate::cm::cpumanager::policy_static::tests::pod;

const GI: u64 = 1 << 30;

/// The `none` policy's hint: anywhere, not preferred.
const ANY: TopologyHint = TopologyHint {
    affinity: None,
    preferred: false,
};

fn on(nodes: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(BitMask::of(nodes.iter().copied())),
        preferred,
    }
}

/// Two NUMA nodes of 4 GiB memory, 1 GiB of each reserved.
fn policy() -> (StaticPolicy, MemoryManagerState) {
    let node = |n: u32| NumaNodeState {
        node: n,
        assignments: 0,
        memory: vec![(
            "memory".into(),
            MemoryTable {
                total: 4 * GI,
                system_reserved: GI,
                allocatable: 3 * GI,
                reserved: 0,
                free: 3 * GI,
            },
        )],
        cells: vec![n],
    };
    let p = StaticPolicy::new(vec![node(0), node(1)]);
    let mut s = MemoryManagerState {
        policy: POLICY_NAME.into(),
        ..Default::default()
    };
    p.start(&mut s).unwrap();
    (p, s)
}

fn hint_list(h: &ResourceHints) -> Vec<(String, bool)> {
    h.first()
        .map(|(_, l)| {
            l.iter()
                .map(|h| {
                    (
                        h.affinity.map(|a| a.to_string()).unwrap_or_default(),
                        h.preferred,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn free(s: &MemoryManagerState, node: u32) -> u64 {
    s.machine[node as usize].table("memory").unwrap().free
}

#[test]
fn guaranteed_memory_comes_from_the_narrowest_node_with_room() {
    let (mut p, mut s) = policy();
    let g = pod("g", &[], &[("1", "2Gi")]);
    let c = g.containers()[0].clone();
    assert_eq!(
        hint_list(&p.topology_hints(&s, &g, &c)),
        [
            ("0".into(), true),
            ("1".into(), true),
            ("0,1".into(), false)
        ]
    );
    p.allocate(&mut s, &g, &c, ANY).unwrap();
    let blocks = s.blocks("g", "app0").unwrap();
    assert_eq!(
        (blocks[0].numa_affinity.clone(), blocks[0].size),
        (vec![0], 2 * GI)
    );
    assert_eq!((free(&s, 0), free(&s, 1)), (GI, 3 * GI));
    assert_eq!(s.machine[0].assignments, 1);

    // 4 GiB fits on no single node: both, grouped
    let big = pod("big", &[], &[("1", "4Gi")]);
    let c = big.containers()[0].clone();
    assert_eq!(
        hint_list(&p.topology_hints(&s, &big, &c)),
        [] as [(String, bool); 0]
    );
    // without the first pod, both nodes are the one preferred set
    p.remove_container(&mut s, "g", "app0");
    assert_eq!(s, policy().1, "all given back");
    assert_eq!(
        hint_list(&p.topology_hints(&s, &big, &c)),
        [("0,1".into(), true)]
    );
    p.allocate(&mut s, &big, &c, ANY).unwrap();
    assert_eq!(s.machine[1].cells, vec![0, 1]);
    assert_eq!((free(&s, 0), free(&s, 1)), (0, 2 * GI));
    // a grouped node is not offered alone
    let small = pod("small", &[], &[("1", "1Gi")]);
    let c = small.containers()[0].clone();
    assert_eq!(
        hint_list(&p.topology_hints(&s, &small, &c)),
        [("0,1".into(), false)]
    );
}

#[test]
fn the_topology_managers_affinity_is_used_or_widened() {
    let (mut p, mut s) = policy();
    let g = pod("g", &[], &[("1", "1Gi")]);
    let c = g.containers()[0].clone();
    p.allocate(&mut s, &g, &c, on(&[1], false)).unwrap();
    assert_eq!(s.blocks("g", "app0").unwrap()[0].numa_affinity, vec![1]);
    let h = pod("h", &[], &[("1", "3Gi")]);
    let c = h.containers()[0].clone();
    // node 1 has 2 GiB left: widened to a set that holds node 1
    let e = p.allocate(&mut s, &h, &c, on(&[1], false)).unwrap_err();
    assert_eq!(
        e,
        AllocateError::CannotExtend,
        "node 1 is alone in its group"
    );
    p.allocate(&mut s, &h, &c, ANY).unwrap();
    assert_eq!(s.blocks("h", "app0").unwrap()[0].numa_affinity, vec![0]);
    let i = pod("i", &[], &[("1", "3Gi")]);
    let e = p
        .allocate(&mut s, &i, &i.containers()[0].clone(), ANY)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available"
    );
}

#[test]
fn only_guaranteed_pods_get_blocks_and_init_memory_is_reused() {
    let (mut p, mut s) = policy();
    let b = pod("b", &[], &[("", "1Gi")]);
    p.allocate(&mut s, &b, &b.containers()[0].clone(), ANY)
        .unwrap();
    assert!(s.entries.is_empty());
    let g = pod("g", &[("1", "2Gi")], &[("1", "2Gi")]);
    for c in g
        .init_containers()
        .iter()
        .chain(g.containers())
        .cloned()
        .collect::<Vec<_>>()
    {
        p.allocate(&mut s, &g, &c, ANY).unwrap();
    }
    assert_eq!(s.entries.len(), 2);
    assert_eq!(
        free(&s, 0),
        GI,
        "the app container took the init container's 2 GiB again"
    );
    // the init container's block gave way: the blocks add up to what is
    // reserved, so a restart's check passes and a release frees 2 GiB
    assert_eq!(s.blocks("g", "init0").unwrap()[0].size, 0);
    assert!(p.start(&mut s.clone()).is_ok());
    // re-admitted after a restart, the pod scope's hints do not refuse it
    assert!(
        p.pod_topology_hints(&s, &g).is_empty(),
        "no preference: sizes differ"
    );
    p.remove_container(&mut s, "g", "init0");
    p.remove_container(&mut s, "g", "app0");
    assert_eq!(free(&s, 0), 3 * GI);
}

#[test]
fn a_restored_state_must_match_its_assignments() {
    let (mut p, mut s) = policy();
    let g = pod("g", &[], &[("1", "1Gi")]);
    p.allocate(&mut s, &g, &g.containers()[0].clone(), ANY)
        .unwrap();
    let mut restored = s.clone();
    assert!(p.start(&mut restored).is_ok());
    restored.machine[0].memory[0].1.free += 1;
    assert_eq!(
        p.start(&mut restored).unwrap_err(),
        "[memorymanager] the expected machine state is different from the real one"
    );
    let mut empty = MemoryManagerState {
        entries: s.entries.clone(),
        ..Default::default()
    };
    assert!(p
        .start(&mut empty)
        .unwrap_err()
        .contains("machine state can not be empty"));
}

/// A hint the topology manager preferred is only replaced by a preferred
/// one, and a node serves either single-node or multi-node blocks.
#[test]
fn a_preferred_hint_stays_preferred_and_groups_stay_apart() {
    let (mut p, mut s) = policy();
    // 4 GiB over both nodes groups them: each keeps 1 GiB free
    let big = pod("big", &[], &[("1", "4Gi")]);
    p.allocate(&mut s, &big, &big.containers()[0].clone(), ANY)
        .unwrap();
    assert_eq!(s.blocks("big", "app0").unwrap()[0].numa_affinity, [0, 1]);
    // 2 GiB would fit one node: only the group has room, not preferred
    let g = pod("g", &[], &[("1", "2Gi")]);
    let c = g.containers()[0].clone();
    let any_preferred = TopologyHint {
        affinity: None,
        preferred: true,
    };
    let e = p.allocate(&mut s, &g, &c, any_preferred).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[memorymanager] failed to find the default preferred hint"
    );
    let e = p.allocate(&mut s, &g, &c, on(&[0], true)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[memorymanager] failed to find the extended preferred hint"
    );
    assert!(s.blocks("g", "app0").is_none());
    // not preferred by the topology manager: the group takes it
    p.allocate(&mut s, &g, &c, on(&[0], false)).unwrap();
    assert_eq!(s.blocks("g", "app0").unwrap()[0].numa_affinity, [0, 1]);

    // node 0 serves a single-node block: no multi-node block joins it
    let (mut p, mut s) = policy();
    let one = pod("one", &[], &[("1", "1Gi")]);
    p.allocate(&mut s, &one, &one.containers()[0].clone(), on(&[0], true))
        .unwrap();
    let two = pod("two", &[], &[("1", "1Gi")]);
    let e = p
        .allocate(
            &mut s,
            &two,
            &two.containers()[0].clone(),
            on(&[0, 1], false),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "[memorymanager] preferred hint violates NUMA node allocation"
    );
}
