use super::*;
use crate::cm::cpumanager::state::Assignment;
use crate::cm::cpumanager::topology::fake;

fn topology(sockets: u32, cores: u32, threads: u32, nodes: u32) -> CpuTopology {
    let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
    fake::machine(dir.path(), sockets, cores, threads, nodes);
    CpuTopology::discover(dir.path()).unwrap()
}

fn set(list: &str) -> CpuSet {
    CpuSet::parse(list).unwrap()
}

/// 2 sockets x 4 cores x 2 threads: core c holds CPUs c and c+8.
fn policy(reserved: &str, full_pcpus_only: bool) -> StaticPolicy {
    let list = set(reserved);
    let milli = list.len() as i128 * 1000;
    let options = StaticPolicyOptions {
        full_pcpus_only,
        ..Default::default()
    };
    StaticPolicy::new(topology(2, 4, 2, 2), &list, milli, options).unwrap()
}

fn started(p: &StaticPolicy) -> CpuManagerState {
    let mut s = CpuManagerState {
        policy: POLICY_NAME.into(),
        ..Default::default()
    };
    p.start(&mut s).unwrap();
    s
}

/// A pod whose containers ask for (cpu, memory) as requests = limits
/// (Guaranteed when every container has both), init containers first.
pub(crate) fn pod(uid: &str, init: &[(&str, &str)], app: &[(&str, &str)]) -> Pod {
    let containers = |list: &[(&str, &str)], prefix: &str| {
        list.iter()
            .enumerate()
            .map(|(i, (cpu, mem))| {
                let mut res = serde_json::Map::new();
                if !cpu.is_empty() {
                    res.insert("cpu".into(), (*cpu).into());
                }
                if !mem.is_empty() {
                    res.insert("memory".into(), (*mem).into());
                }
                serde_json::json!({
                    "name": format!("{prefix}{i}"),
                    "image": "busybox",
                    "resources": {"requests": res.clone(), "limits": res},
                })
            })
            .collect::<Vec<_>>()
    };
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"initContainers": containers(init, "init"), "containers": containers(app, "app")},
    }))
    .unwrap()
}

fn allocate_all(
    p: &mut StaticPolicy,
    s: &mut CpuManagerState,
    pod: &Pod,
) -> Result<(), AllocateError> {
    let containers: Vec<Container> = pod
        .init_containers()
        .iter()
        .chain(pod.containers())
        .cloned()
        .collect();
    containers
        .iter()
        .try_for_each(|c| p.allocate(s, pod, c, None))
}

fn cpus_of(s: &CpuManagerState, uid: &str, name: &str) -> Option<String> {
    s.cpuset(uid, name).map(ToString::to_string)
}

#[test]
fn reserved_cpus_come_from_the_list_or_from_topology_packing() {
    assert_eq!(policy("3", false).reserved().to_string(), "3");
    let t = topology(2, 4, 2, 2);
    let p = StaticPolicy::new(t.clone(), &CpuSet::default(), 1500, Default::default()).unwrap();
    assert_eq!(
        p.reserved().to_string(),
        "0,8",
        "1.5 CPUs round up to a whole core"
    );
    let e = StaticPolicy::new(t.clone(), &CpuSet::default(), 0, Default::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu to be greater than zero"
    );
    let e = StaticPolicy::new(t, &set("0-2"), 2000, Default::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[cpumanager] unable to reserve the required amount of CPUs (size of \"0-2\" did not equal 2)"
    );
}

#[test]
fn a_new_state_shares_every_cpu_reserved_ones_included() {
    let p = policy("0", false);
    assert_eq!(started(&p).default_cpu_set.to_string(), "0-15");
    assert_eq!(p.assignable(&started(&p)).to_string(), "1-15");
}

#[test]
fn a_restored_state_must_fit_the_machine_and_the_reservation() {
    let p = policy("0", false);
    let assigned = |pool: &str, cpus: &str| CpuManagerState {
        policy: POLICY_NAME.into(),
        default_cpu_set: set(pool),
        assignments: vec![Assignment {
            pod_uid: "u1".into(),
            container: "c".into(),
            cpus: set(cpus),
        }],
    };
    let err = |mut s: CpuManagerState| p.start(&mut s).unwrap_err().to_string();
    assert!(p.start(&mut assigned("0,3-15", "1-2")).is_ok());
    assert!(err(assigned("", "1-2")).ends_with(": default cpuset cannot be empty"));
    assert!(err(assigned("1,3-15", "2"))
        .ends_with(": not all reserved cpus: \"0\" are present in defaultCpuSet: \"1,3-15\""));
    assert!(err(assigned("0,2-15", "1-2")).ends_with(
        ": pod: u1, container: c cpuset: \"1-2\" overlaps with default cpuset \"0,2-15\""
    ));
    let e = err(assigned("0,3-17", "1-2"));
    assert!(
        e.starts_with(
            "static policy invalid state, please drain node and remove policy state file: "
        ) && e.ends_with(
            "current set of available CPUs \"0-15\" doesn't match with CPUs in state \"0-17\""
        ),
        "{e}"
    );
}

#[test]
fn guaranteed_integer_cpus_get_cpus_of_their_own() {
    let mut p = policy("0", false);
    let mut s = started(&p);
    let g = pod("g", &[], &[("2", "1Gi"), ("500m", "1Gi")]);
    allocate_all(&mut p, &mut s, &g).unwrap();
    // a whole core, not the reserved CPU's sibling
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("1,9"));
    assert_eq!(
        cpus_of(&s, "g", "app1"),
        None,
        "a fractional request shares"
    );
    assert_eq!(s.default_cpu_set.to_string(), "0,2-8,10-15");

    // Burstable and BestEffort pods share, whatever they ask
    let burstable = pod("b", &[], &[("2", "")]);
    let best_effort = pod("e", &[], &[("", "")]);
    allocate_all(&mut p, &mut s, &burstable).unwrap();
    allocate_all(&mut p, &mut s, &best_effort).unwrap();
    assert_eq!(s.assignments.len(), 1);

    // again (a restart): the same CPUs, nothing taken twice
    allocate_all(&mut p, &mut s, &g).unwrap();
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("1,9"));
    assert_eq!(s.default_cpu_set.to_string(), "0,2-8,10-15");

    p.remove_container(&mut s, "g", "app0");
    assert_eq!(s.default_cpu_set.to_string(), "0-15");
    assert!(s.assignments.is_empty());
}

#[test]
fn reserved_cpus_are_never_given() {
    let t = topology(1, 2, 1, 0);
    let mut p = StaticPolicy::new(t, &set("0"), 1000, Default::default()).unwrap();
    let mut s = started(&p);
    allocate_all(&mut p, &mut s, &pod("a", &[], &[("1", "1Gi")])).unwrap();
    assert_eq!(cpus_of(&s, "a", "app0").as_deref(), Some("1"));
    assert_eq!(s.default_cpu_set.to_string(), "0");
    let e = allocate_all(&mut p, &mut s, &pod("b", &[], &[("1", "1Gi")])).unwrap_err();
    assert_eq!(e, AllocateError::NotEnough(NotEnoughCpus));
    assert_eq!(
        s.default_cpu_set.to_string(),
        "0",
        "a failed request takes nothing"
    );
}

#[test]
fn full_pcpus_only_refuses_part_of_a_core() {
    let mut p = policy("0,8", true);
    let mut s = started(&p);
    let e = allocate_all(&mut p, &mut s, &pod("a", &[], &[("3", "1Gi")])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"
    );
    allocate_all(&mut p, &mut s, &pod("b", &[], &[("4", "1Gi")])).unwrap();
    assert_eq!(cpus_of(&s, "b", "app0").as_deref(), Some("1-2,9-10"));
    // without SMT every count is whole cores
    let t = topology(1, 4, 1, 0);
    let mut p = StaticPolicy::new(
        t,
        &set("0"),
        1000,
        StaticPolicyOptions {
            full_pcpus_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut s = started(&p);
    allocate_all(&mut p, &mut s, &pod("c", &[], &[("3", "1Gi")])).unwrap();
    assert_eq!(cpus_of(&s, "c", "app0").as_deref(), Some("1-3"));
}

#[test]
fn app_containers_reuse_their_init_containers_cpus() {
    let t = topology(1, 4, 1, 0);
    let mut p = StaticPolicy::new(t, &set("0"), 1000, Default::default()).unwrap();
    let mut s = started(&p);
    let g = pod("g", &[("2", "1Gi")], &[("1", "1Gi"), ("1", "1Gi")]);
    allocate_all(&mut p, &mut s, &g).unwrap();
    assert_eq!(cpus_of(&s, "g", "init0").as_deref(), Some("1-2"));
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("1"));
    assert_eq!(cpus_of(&s, "g", "app1").as_deref(), Some("2"));
    assert_eq!(s.default_cpu_set.to_string(), "0,3");
    // the init container's entry goes; CPUs its app containers hold stay
    p.remove_container(&mut s, "g", "init0");
    assert_eq!(s.default_cpu_set.to_string(), "0,3");
    p.remove_container(&mut s, "g", "app0");
    assert_eq!(s.default_cpu_set.to_string(), "0-1,3");
}

#[test]
fn a_sidecars_cpus_are_not_reused() {
    let t = topology(1, 4, 1, 0);
    let mut p = StaticPolicy::new(t, &set("0"), 1000, Default::default()).unwrap();
    let mut s = started(&p);
    let mut g = pod("g", &[("1", "1Gi")], &[("1", "1Gi")]);
    if let Some(spec) = g.spec.as_mut() {
        for c in spec.init_containers.iter_mut().flatten() {
            c.restart_policy = Some("Always".into());
        }
    }
    allocate_all(&mut p, &mut s, &g).unwrap();
    assert_eq!(cpus_of(&s, "g", "init0").as_deref(), Some("1"));
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("2"));
}

#[test]
fn guaranteed_cpus_reads_the_limit_when_no_request_is_given() {
    let mut g = pod("g", &[], &[("2", "1Gi")]);
    assert_eq!(guaranteed_cpus(&g, &g.containers()[0].clone()), 2);
    if let Some(r) = g.spec.as_mut().unwrap().containers[0].resources.as_mut() {
        r.requests = None;
    }
    assert_eq!(guaranteed_cpus(&g, &g.containers()[0].clone()), 2);
    let f = pod("f", &[], &[("1500m", "1Gi")]);
    assert_eq!(guaranteed_cpus(&f, &f.containers()[0].clone()), 0);
}

/// 2 sockets of 4 cores, 2 threads, 2 NUMA nodes (CPUs 0-3 and 8-11 on
/// node 0, 4-7 and 12-15 on node 1), CPU 0 reserved.
#[test]
fn hints_name_the_nodes_a_request_fits_on() {
    let mut p = policy("0", false);
    let mut s = started(&p);
    let nodes = |hints: &ResourceHints| -> Vec<(String, bool)> {
        hints[0]
            .1
            .iter()
            .map(|h| {
                (
                    h.affinity.map(|a| a.to_string()).unwrap_or_default(),
                    h.preferred,
                )
            })
            .collect()
    };
    let g = |n: &str| pod("g", &[], &[(n, "1Gi")]);
    let hints = p.topology_hints(&s, &g("4"), &g("4").containers()[0]);
    assert_eq!(hints[0].0, "cpu");
    assert_eq!(
        nodes(&hints),
        [
            ("0".into(), true),
            ("1".into(), true),
            ("0,1".into(), false)
        ]
    );
    // 8 CPUs fit on node 1 alone; node 0 has only 7 left after the reserved one
    let hints = p.topology_hints(&s, &g("8"), &g("8").containers()[0]);
    assert_eq!(nodes(&hints), [("1".into(), true), ("0,1".into(), false)]);
    // more than a node: both, preferred as the narrowest that fits
    let hints = p.topology_hints(&s, &g("10"), &g("10").containers()[0]);
    assert_eq!(nodes(&hints), [("0,1".into(), true)]);
    // no exclusive CPUs: no hints
    let b = pod("b", &[], &[("4", "")]);
    assert!(p.topology_hints(&s, &b, &b.containers()[0]).is_empty());

    // placed on node 1 as the hint says
    let pod4 = g("4");
    p.allocate(&mut s, &pod4, &pod4.containers()[0], Some(BitMask::of([1])))
        .unwrap();
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("4-5,12-13"));
    // held: the hints of where its CPUs are
    let hints = p.topology_hints(&s, &pod4, &pod4.containers()[0]);
    assert_eq!(nodes(&hints), [("1".into(), true), ("0,1".into(), false)]);
    // the pod's hints: the same for a one-container pod
    assert_eq!(nodes(&p.pod_topology_hints(&s, &pod4)), nodes(&hints));
}

/// `distribute-cpus-across-numa` on 2 sockets x 4 cores x 2 threads, one
/// NUMA node each, with core 0 (CPUs 0 and 8) reserved.
#[test]
fn distribute_cpus_across_numa_spreads_what_one_node_cannot_hold() {
    let new = |full_pcpus_only| {
        let options = StaticPolicyOptions {
            full_pcpus_only,
            distribute_cpus_across_numa: true,
            ..Default::default()
        };
        StaticPolicy::new(topology(2, 4, 2, 2), &set("0,8"), 2000, options).unwrap()
    };
    // packed, ten CPUs would be socket 1 and a core of socket 0
    let mut p = policy("0,8", false);
    let mut s = started(&p);
    allocate_all(&mut p, &mut s, &pod("g", &[], &[("10", "1Gi")])).unwrap();
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("1,4-7,9,12-15"));
    // spread: five on each node
    let mut p = new(false);
    let mut s = started(&p);
    allocate_all(&mut p, &mut s, &pod("g", &[], &[("10", "1Gi")])).unwrap();
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("1-6,9-10,12-13"));
    // in whole cores: two cores each, and the remainder where it leaves
    // the free CPUs most even (node 1)
    let mut p = new(true);
    let mut s = started(&p);
    allocate_all(&mut p, &mut s, &pod("g", &[], &[("10", "1Gi")])).unwrap();
    assert_eq!(
        cpus_of(&s, "g", "app0").as_deref(),
        Some("1-2,4-6,9-10,12-14")
    );
}

/// 2 sockets x 4 cores x 2 threads over 4 NUMA nodes: nodes 0 and 1 on
/// socket 0 (cores 0-1 and 2-3), nodes 2 and 3 on socket 1.
#[test]
fn align_by_socket_takes_the_affinitys_socket_first() {
    let new = |align_by_socket| {
        let options = StaticPolicyOptions {
            align_by_socket,
            ..Default::default()
        };
        let reserved = set("0-2,8-10");
        StaticPolicy::new(topology(2, 4, 2, 4), &reserved, 6000, options).unwrap()
    };
    let g = pod("g", &[], &[("6", "1Gi")]);
    let node2 = Some(BitMask::of([2]));
    // node 2's four, then the socket with the fewest free cores: socket 0
    let mut p = new(false);
    let mut s = started(&p);
    p.allocate(&mut s, &g, &g.containers()[0], node2).unwrap();
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("3-5,11-13"));
    // by socket: all six on node 2's socket
    let mut p = new(true);
    let mut s = started(&p);
    p.allocate(&mut s, &g, &g.containers()[0], node2).unwrap();
    assert_eq!(cpus_of(&s, "g", "app0").as_deref(), Some("4-6,12-14"));

    // three CPUs fit on one node (nodes 2 and 3: node 0 is reserved, node
    // 1 half); a hint on two nodes of one socket is preferred too, one
    // across sockets (0,2 and the like) is not
    let preferred = |p: &StaticPolicy| {
        let s = started(p);
        let g = pod("h", &[], &[("3", "1Gi")]);
        let hints = p.topology_hints(&s, &g, &g.containers()[0]);
        let list = hints[0].1.iter().filter(|h| h.preferred);
        list.map(|h| h.affinity.map(|a| a.to_string()).unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(preferred(&new(false)), ["2", "3"]);
    assert_eq!(preferred(&new(true)), ["2", "3", "2,3"]);
}

#[test]
fn align_by_socket_needs_a_node_per_socket_at_least() {
    let options = StaticPolicyOptions {
        align_by_socket: true,
        ..Default::default()
    };
    // two sockets, one NUMA node
    let e = StaticPolicy::new(topology(2, 2, 1, 0), &set("0"), 1000, options).unwrap_err();
    assert_eq!(
        e.to_string(),
        "Align by socket is not compatible with hardware where number of sockets are more than number of NUMA"
    );
}
