//! The device manager as a hint provider of the topology manager
//! (upstream `devicemanager/topology_hints.go`): for each device plugin
//! resource whose devices report NUMA nodes, the node sets with enough
//! free healthy devices, preferred where as small as the smallest set
//! holding enough devices at all. The affinity the topology manager then
//! chooses is kept for the pod's device choice ([`super::admission`]).

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use super::admission::reusable;
use super::{device_limits, DeviceManager, Resource, State};
use crate::cm::topologymanager::bitmask::BitMask;
use crate::cm::topologymanager::{generate_hints, HintProvider, ResourceHints, TopologyHint};
use crate::lifecycle::admission::Rejection;
use crate::podutil::PodExt;

impl HintProvider for DeviceManager {
    fn topology_hints(&self, pod: &Pod, container: &Container) -> ResourceHints {
        let s = lock(&self.inner.state);
        device_limits(container)
            .into_iter()
            .filter_map(|(resource, needed)| s.container_hints(pod, container, resource, needed))
            .collect()
    }

    /// The pod's request per resource: the largest init container's, or
    /// the app containers' sum (upstream getPodDeviceRequest).
    fn pod_topology_hints(&self, pod: &Pod) -> ResourceHints {
        let mut wanted: Vec<(String, usize)> = Vec::new();
        let mut add = |resource: &str, n: usize, sum: bool| match wanted
            .iter_mut()
            .find(|(r, _)| r == resource)
        {
            Some((_, have)) => {
                *have = if sum {
                    have.saturating_add(n)
                } else {
                    (*have).max(n)
                }
            }
            None => wanted.push((resource.to_string(), n)),
        };
        for c in pod.containers() {
            device_limits(c)
                .into_iter()
                .for_each(|(r, n)| add(r, n, true));
        }
        for c in pod.init_containers() {
            device_limits(c)
                .into_iter()
                .for_each(|(r, n)| add(r, n, false));
        }
        let s = lock(&self.inner.state);
        wanted
            .into_iter()
            .filter_map(|(resource, needed)| {
                // a device an app container took over from an init
                // container counts once, as upstream's set does
                let mut held: Vec<String> = s
                    .pods
                    .iter()
                    .filter(|h| h.uid == pod.uid() && h.resource == resource)
                    .flat_map(|h| h.ids.iter().cloned())
                    .collect();
                held.sort_unstable();
                held.dedup();
                s.hints(&resource, needed, (!held.is_empty()).then_some(held), &[])
            })
            .collect()
    }

    /// Reserves the container's devices, on the hint's nodes first; the
    /// plugins are asked once the pod is admitted.
    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        hint: TopologyHint,
    ) -> Result<(), Rejection> {
        self.inner
            .reserve(pod, container, hint.affinity)
            .map_err(crate::lifecycle::admission::unexpected_admission_error)
    }

    /// Undoes the reservations of a pod an admission check refused.
    fn release(&self, pod_uid: &str) {
        if lock(&self.inner.state).pods.remove_pod(pod_uid) {
            // a pod re-admitted from the checkpoint and then refused
            self.inner.checkpoint_changed();
        }
    }
}

impl State {
    /// upstream GetTopologyHints for one resource of one container.
    fn container_hints(
        &self,
        pod: &Pod,
        container: &Container,
        resource: &str,
        needed: usize,
    ) -> Option<(String, Vec<TopologyHint>)> {
        let held = self.pods.get(pod.uid(), &container.name, resource);
        let reusable = reusable(&self.pods, pod, &container.name, resource);
        self.hints(resource, needed, held.map(|h| h.ids.clone()), &reusable)
    }

    /// Hints for `needed` devices of `resource`: None when it is not a
    /// plugin's or its devices report no NUMA node (no preference); where
    /// `held` devices are (none usable if their number changed); else
    /// where the `reusable` ones and enough free healthy ones are.
    fn hints(
        &self,
        resource: &str,
        needed: usize,
        held: Option<Vec<String>>,
        reusable: &[String],
    ) -> Option<(String, Vec<TopologyHint>)> {
        let res = self.resource(resource)?;
        if res.devices.iter().all(|d| d.numa.is_empty()) {
            return None;
        }
        let (available, reusable): (Vec<String>, &[String]) = match held {
            Some(ids) if ids.len() != needed => return Some((resource.to_string(), Vec::new())),
            Some(ids) => (ids, &[]),
            None => {
                let in_use = self.pods.in_use(resource);
                let free = res.healthy().into_iter().filter(|id| !in_use.contains(id));
                (free.map(String::from).collect(), reusable)
            }
        };
        let hints = device_hints(res, &self.numa_nodes, &available, reusable, needed);
        Some((resource.to_string(), hints))
    }
}

/// upstream generateDeviceTopologyHints: sets of the machine's NUMA nodes
/// (at most 8, numbered below 64: the topology manager refuses to start
/// otherwise) holding every reusable device that reports a node, and with
/// it enough available ones. A device on a node the machine lacks is on
/// none of them.
fn device_hints(
    res: &Resource,
    machine_nodes: &[u32],
    available: &[String],
    reusable: &[String],
    needed: usize,
) -> Vec<TopologyHint> {
    let nodes_of = |id: &str| -> Vec<u32> {
        let d = res.devices.iter().find(|d| d.id == id);
        d.map(|d| {
            d.numa
                .iter()
                .filter_map(|n| u32::try_from(*n).ok())
                .collect()
        })
        .unwrap_or_default()
    };
    let in_mask = |mask: BitMask, id: &str| nodes_of(id).iter().any(|n| mask.is_set(*n));
    generate_hints(
        machine_nodes,
        |mask| res.devices.iter().filter(|d| in_mask(mask, &d.id)).count() >= needed,
        |mask| {
            let placed = reusable.iter().filter(|id| !nodes_of(id).is_empty());
            let all_in = placed.clone().all(|id| in_mask(mask, id));
            let free = available.iter().filter(|id| in_mask(mask, id)).count();
            all_in && placed.count() + free >= needed
        },
    )
}

#[cfg(test)]
mod tests {
    use super::super::pod_devices::{Allocation, Held};
    use super::super::Device;
    use super::*;

    /// Four devices: a and b on node 0, c on node 1, d without a node.
    fn state() -> State {
        let dev = |id: &str, numa: &[i64]| Device {
            id: id.into(),
            healthy: true,
            numa: numa.to_vec(),
        };
        let mut s = State {
            numa_nodes: vec![0, 1],
            ..State::default()
        };
        s.resources.push(Resource {
            name: "example.com/nic".into(),
            endpoint: None,
            stopped: None,
            devices: vec![
                dev("a", &[0]),
                dev("b", &[0]),
                dev("c", &[1]),
                dev("d", &[]),
            ],
        });
        s
    }

    fn listed(h: Option<(String, Vec<TopologyHint>)>) -> Vec<(String, bool)> {
        h.map(|(_, l)| l)
            .unwrap_or_default()
            .iter()
            .map(|h| {
                (
                    h.affinity.map(|a| a.to_string()).unwrap_or_default(),
                    h.preferred,
                )
            })
            .collect()
    }

    #[test]
    fn hints_name_the_nodes_with_enough_free_devices() {
        let mut s = state();
        let r = "example.com/nic";
        assert_eq!(
            listed(s.hints(r, 1, None, &[])),
            [
                ("0".into(), true),
                ("1".into(), true),
                ("0,1".into(), false)
            ]
        );
        assert_eq!(
            listed(s.hints(r, 2, None, &[])),
            [("0".into(), true), ("0,1".into(), false)]
        );
        assert_eq!(listed(s.hints(r, 3, None, &[])), [("0,1".into(), true)]);
        // a taken: node 0 no longer holds two
        s.pods.insert(Held {
            uid: "u".into(),
            container: "c".into(),
            resource: r.into(),
            ids: vec!["a".into()],
            allocation: Allocation::Reserved,
        });
        assert_eq!(listed(s.hints(r, 2, None, &[])), [("0,1".into(), false)]);
        // held devices answer where they are; another count, nowhere
        assert_eq!(
            listed(s.hints(r, 1, Some(vec!["c".into()]), &[])),
            [("1".into(), true), ("0,1".into(), false)]
        );
        assert_eq!(
            s.hints(r, 2, Some(vec!["c".into()]), &[])
                .map(|h| h.1.len()),
            Some(0)
        );
        // not a plugin's, or without NUMA nodes: no preference
        assert!(s.hints("example.com/other", 1, None, &[]).is_none());
        s.resources[0]
            .devices
            .iter_mut()
            .for_each(|d| d.numa.clear());
        assert!(s.hints(r, 1, None, &[]).is_none());
    }

    /// Hints range over the machine's nodes, as upstream's: node 2 has no
    /// device, yet node sets with it are hints (not preferred).
    #[test]
    fn hints_range_over_the_machines_nodes() {
        let mut s = state();
        s.numa_nodes = vec![0, 1, 2];
        let got: Vec<(String, bool)> = listed(s.hints("example.com/nic", 2, None, &[]));
        assert_eq!(
            got,
            [
                ("0".into(), true),
                ("0,1".into(), false),
                ("0,2".into(), false),
                ("0,1,2".into(), false)
            ]
        );
    }

    #[test]
    fn devices_on_the_affinitys_nodes_are_chosen_first() {
        let s = state();
        let mut healthy = s.resources[0].healthy();
        super::super::admission::aligned_first(&s.resources[0], &mut healthy, BitMask::of([1]));
        assert_eq!(healthy, ["c", "d", "a", "b"]);
    }

    /// A pod whose containers ask for `n` NICs each, init containers first.
    fn nic_pod(init: &[u32], app: &[u32]) -> Pod {
        let list = |ns: &[u32], prefix: &str| {
            ns.iter()
                .enumerate()
                .map(|(i, n)| {
                    serde_json::json!({
                        "name": format!("{prefix}{i}"),
                        "resources": {"limits": {"example.com/nic": n.to_string()}},
                    })
                })
                .collect::<Vec<_>>()
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"initContainers": list(init, "init"), "containers": list(app, "app")},
        }))
        .unwrap()
    }

    fn held(s: &State, container: &str) -> Vec<String> {
        let h = s.pods.get("u", container, "example.com/nic");
        h.map(|h| h.ids.clone()).unwrap_or_default()
    }

    /// Under the container scope each container's devices are taken
    /// before the next container's hints are asked for: the second
    /// container is told where devices are still free.
    #[test]
    fn each_containers_devices_are_taken_before_the_next_is_hinted() {
        let mut s = state();
        let pod = nic_pod(&[], &[2, 1]);
        let c = pod.containers();
        s.reserve(&pod, &c[0], Some(BitMask::of([0]))).unwrap();
        assert_eq!(held(&s, "app0"), ["a", "b"]);
        let (_, hints) = s
            .container_hints(&pod, &c[1], "example.com/nic", 1)
            .unwrap();
        let preferred: Vec<String> = hints
            .iter()
            .filter(|h| h.preferred)
            .filter_map(|h| h.affinity.map(|a| a.to_string()))
            .collect();
        assert_eq!(preferred, ["1"], "node 0's devices are taken");
        s.reserve(&pod, &c[1], Some(BitMask::of([1]))).unwrap();
        assert_eq!(held(&s, "app1"), ["c"]);
        // held devices stay where they are; a second call keeps them
        s.reserve(&pod, &c[0], None).unwrap();
        assert_eq!(held(&s, "app0"), ["a", "b"]);
    }

    /// A sidecar keeps running: its device is not passed on.
    #[test]
    fn a_sidecars_devices_are_not_passed_on() {
        let mut s = state();
        let mut pod = nic_pod(&[1], &[1]);
        if let Some(spec) = pod.spec.as_mut() {
            for c in spec.init_containers.iter_mut().flatten() {
                c.restart_policy = Some("Always".into());
            }
        }
        s.reserve(&pod, &pod.init_containers()[0], Some(BitMask::of([1])))
            .unwrap();
        assert_eq!(held(&s, "init0"), ["c"]);
        s.reserve(&pod, &pod.containers()[0], Some(BitMask::of([1])))
            .unwrap();
        assert_eq!(held(&s, "app0"), ["d"], "c is the sidecar's");
    }

    /// An app container reuses its init container's device, and its hints
    /// keep to that device's node.
    #[test]
    fn an_init_containers_devices_pass_on_and_anchor_the_hints() {
        let mut s = state();
        let pod = nic_pod(&[1], &[1]);
        s.reserve(&pod, &pod.init_containers()[0], Some(BitMask::of([1])))
            .unwrap();
        assert_eq!(held(&s, "init0"), ["c"]);
        let app = &pod.containers()[0];
        let (_, hints) = s.container_hints(&pod, app, "example.com/nic", 1).unwrap();
        let listed: Vec<(String, bool)> = hints
            .iter()
            .map(|h| (h.affinity.unwrap().to_string(), h.preferred))
            .collect();
        assert_eq!(listed, [("1".into(), true), ("0,1".into(), false)]);
        s.reserve(&pod, app, Some(BitMask::of([1]))).unwrap();
        assert_eq!(held(&s, "app0"), ["c"], "the init container's device");
    }
}
