use std::sync::{Arc, Mutex};

use super::*;

fn mask(nodes: &[u32]) -> BitMask {
    BitMask::of(nodes.iter().copied())
}

fn hint(nodes: &[u32], preferred: bool) -> TopologyHint {
    TopologyHint {
        affinity: Some(mask(nodes)),
        preferred,
    }
}

fn merge(policy: &str, providers: &[ResourceHints]) -> (TopologyHint, bool) {
    Policy::parse(policy).unwrap().merge(&[0, 1], providers)
}

fn cpu(hints: &[TopologyHint]) -> ResourceHints {
    vec![("cpu".to_string(), hints.to_vec())]
}

/// Hints as the CPU manager gives them for a request that fits on either
/// node: each node preferred, both not.
fn either_node() -> Vec<TopologyHint> {
    vec![hint(&[0], true), hint(&[1], true), hint(&[0, 1], false)]
}

#[test]
fn without_hints_any_node_is_preferred() {
    for policy in ["best-effort", "restricted", "single-numa-node"] {
        let (best, admit) = merge(policy, &[Vec::new(), Vec::new()]);
        assert!(admit && best.preferred, "{policy}");
        let any = if policy == "single-numa-node" {
            None
        } else {
            Some(mask(&[0, 1]))
        };
        assert_eq!(best.affinity, any, "{policy}");
    }
}

#[test]
fn the_narrowest_preferred_permutation_wins() {
    let memory = vec![(
        "memory".to_string(),
        vec![hint(&[1], true), hint(&[0, 1], false)],
    )];
    let (best, admit) = merge("restricted", &[cpu(&either_node()), memory]);
    assert_eq!(best, hint(&[1], true));
    assert!(admit);
    // two resources that prefer different nodes: no preferred merge; the
    // narrowest of the others, as upstream
    let memory = vec![(
        "memory".to_string(),
        vec![hint(&[0], true), hint(&[0, 1], false)],
    )];
    let (best, admit) = merge(
        "best-effort",
        &[cpu(&[hint(&[1], true), hint(&[0, 1], false)]), memory],
    );
    assert_eq!((best, admit), (hint(&[0], false), true));
}

#[test]
fn restricted_and_single_numa_node_refuse_what_best_effort_admits() {
    let spread = cpu(&[hint(&[0, 1], true)]);
    assert_eq!(
        merge("best-effort", std::slice::from_ref(&spread)),
        (hint(&[0, 1], true), true)
    );
    assert_eq!(
        merge("restricted", std::slice::from_ref(&spread)),
        (hint(&[0, 1], true), true)
    );
    // single-numa-node drops the two-node hint: nothing is left
    let (best, admit) = merge("single-numa-node", std::slice::from_ref(&spread));
    assert!(!admit && !best.preferred);

    let not_preferred = cpu(&[hint(&[0, 1], false)]);
    assert!(merge("best-effort", std::slice::from_ref(&not_preferred)).1);
    assert!(!merge("restricted", &[not_preferred]).1);
    // a provider that cannot place the request at all
    let nowhere = cpu(&[]);
    assert!(merge("best-effort", std::slice::from_ref(&nowhere)).1);
    assert!(!merge("restricted", &[nowhere]).1);
    assert_eq!(
        merge("single-numa-node", &[cpu(&either_node())]),
        (hint(&[0], true), true)
    );
}

/// A container's name and the nodes it was placed on.
type Placed = (String, Option<String>);

/// A provider that records its allocations and answers fixed hints.
#[derive(Clone, Default)]
struct Fake {
    hints: ResourceHints,
    allocated: Arc<Mutex<Vec<Placed>>>,
    released: Arc<Mutex<Vec<String>>>,
    refuse: Option<&'static str>,
}

impl HintProvider for Fake {
    fn topology_hints(&self, _: &Pod, _: &Container) -> ResourceHints {
        self.hints.clone()
    }
    fn pod_topology_hints(&self, _: &Pod) -> ResourceHints {
        self.hints.clone()
    }
    fn allocate(&self, _: &Pod, c: &Container, hint: TopologyHint) -> Result<(), Rejection> {
        if self.refuse == Some(c.name.as_str()) {
            return Err(Rejection {
                reason: "UnexpectedAdmissionError".into(),
                message: "no".into(),
            });
        }
        let a = hint.affinity.map(|a| a.to_string());
        self.allocated.lock().unwrap().push((c.name.clone(), a));
        Ok(())
    }
    fn release(&self, uid: &str) {
        self.released.lock().unwrap().push(uid.to_string());
    }
}

fn manager(policy: &str, scope: &str, fake: &Fake) -> TopologyManager {
    let c = KubeletConfiguration {
        topology_manager_policy: policy.into(),
        topology_manager_scope: scope.into(),
        ..Default::default()
    };
    TopologyManager::new(&c, vec![0, 1], vec![Box::new(fake.clone())]).unwrap()
}

fn pod() -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "spec": {
            "initContainers": [{"name": "i", "image": "busybox"}],
            "containers": [{"name": "a", "image": "busybox"}, {"name": "b", "image": "busybox"}],
        },
    }))
    .unwrap()
}

#[test]
fn every_container_is_placed_on_the_merged_affinity() {
    let fake = Fake {
        hints: cpu(&either_node()),
        ..Default::default()
    };
    manager("restricted", "container", &fake)
        .admit(&pod())
        .unwrap();
    let got = fake.allocated.lock().unwrap().clone();
    let on0 = |n: &str| (n.to_string(), Some("0".to_string()));
    assert_eq!(got, vec![on0("i"), on0("a"), on0("b")]);

    // the none policy asks no hints: anywhere
    let fake = Fake::default();
    manager("none", "container", &fake).admit(&pod()).unwrap();
    assert_eq!(fake.allocated.lock().unwrap()[0], ("i".to_string(), None));
}

#[test]
fn a_pod_the_policy_cannot_place_is_refused_with_nothing_kept() {
    let fake = Fake {
        hints: cpu(&[hint(&[0, 1], true)]),
        ..Default::default()
    };
    let r = manager("single-numa-node", "pod", &fake)
        .admit(&pod())
        .unwrap_err();
    assert_eq!(r.reason, "TopologyAffinityError");
    assert_eq!(
        r.message,
        "Resources cannot be allocated with Topology locality"
    );
    assert!(
        fake.allocated.lock().unwrap().is_empty(),
        "nothing allocated"
    );
    assert_eq!(*fake.released.lock().unwrap(), ["u1"]);

    // a provider that fails half-way: what was placed is released
    let fake = Fake {
        refuse: Some("b"),
        ..Default::default()
    };
    let r = manager("best-effort", "container", &fake)
        .admit(&pod())
        .unwrap_err();
    assert_eq!(r.reason, "UnexpectedAdmissionError");
    assert_eq!(fake.allocated.lock().unwrap().len(), 2);
    assert_eq!(*fake.released.lock().unwrap(), ["u1"]);
}

#[test]
fn bad_configuration_stops_the_start() {
    let c = |policy: &str, scope: &str| KubeletConfiguration {
        topology_manager_policy: policy.into(),
        topology_manager_scope: scope.into(),
        ..Default::default()
    };
    let e = |c: KubeletConfiguration, nodes: u32| {
        TopologyManager::new(&c, (0..nodes).collect(), Vec::new())
            .err()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        e(c("sometimes", "pod"), 1),
        "topologyManagerPolicy: unknown policy: \"sometimes\""
    );
    assert_eq!(
        e(c("none", "node"), 1),
        "topologyManagerScope: unknown scope: \"node\""
    );
    assert!(e(c("restricted", "pod"), 9)
        .contains("unsupported on machines with more than 8 NUMA Nodes"));
    assert!(TopologyManager::new(&c("none", "pod"), (0..9).collect(), Vec::new()).is_ok());
}
