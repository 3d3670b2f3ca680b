//! The device manager as a hint provider of the topology manager
//! (upstream `devicemanager/topology_hints.go`): for each device plugin
//! resource whose devices report NUMA nodes, the node sets with enough
//! free healthy devices, preferred where as small as the smallest set
//! holding enough devices at all. The affinity the topology manager then
//! chooses is kept for the pod's device choice ([`super::admission`]).

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use super::{device_limits, DeviceManager, Resource, State};
use crate::cm::topologymanager::bitmask::{BitMask, MAX_NUMA_NODES};
use crate::cm::topologymanager::{generate_hints, HintProvider, ResourceHints, TopologyHint};
use crate::lifecycle::admission::Rejection;
use crate::podutil::PodExt;

impl HintProvider for DeviceManager {
    fn topology_hints(&self, pod: &Pod, container: &Container) -> ResourceHints {
        let s = lock(&self.inner.state);
        device_limits(container)
            .into_iter()
            .filter_map(|(resource, needed)| {
                let held = s.pods.get(pod.uid(), &container.name, resource);
                s.hints(resource, needed, held.map(|h| h.ids.clone()))
            })
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
                s.hints(&resource, needed, (!held.is_empty()).then_some(held))
            })
            .collect()
    }

    /// Devices are chosen by the device manager's own admission, right
    /// after the topology manager's: the affinity is kept for it.
    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<BitMask>,
    ) -> Result<(), Rejection> {
        if let (Some(mask), false) = (affinity, device_limits(container).is_empty()) {
            let mut s = lock(&self.inner.state);
            s.affinity
                .push((pod.uid().to_string(), container.name.clone(), mask));
        }
        Ok(())
    }

    fn release(&self, pod_uid: &str) {
        lock(&self.inner.state)
            .affinity
            .retain(|(uid, _, _)| uid != pod_uid);
    }
}

impl State {
    /// Hints for `needed` devices of `resource`: None when it is not a
    /// plugin's or its devices report no NUMA node (no preference); where
    /// `held` devices are (none usable if their number changed); else
    /// where enough free healthy ones are.
    fn hints(
        &self,
        resource: &str,
        needed: usize,
        held: Option<Vec<String>>,
    ) -> Option<(String, Vec<TopologyHint>)> {
        let res = self.resource(resource)?;
        if res.devices.iter().all(|d| d.numa.is_empty()) {
            return None;
        }
        let available: Vec<String> = match held {
            Some(ids) if ids.len() != needed => return Some((resource.to_string(), Vec::new())),
            Some(ids) => ids,
            None => {
                let in_use = self.pods.in_use(resource);
                let free = res.healthy().into_iter().filter(|id| !in_use.contains(id));
                free.map(String::from).collect()
            }
        };
        Some((resource.to_string(), device_hints(res, &available, needed)?))
    }
}

/// upstream generateDeviceTopologyHints; None (no preference) when the
/// plugin reports more NUMA nodes than the topology manager handles.
fn device_hints(res: &Resource, available: &[String], needed: usize) -> Option<Vec<TopologyHint>> {
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
    let mut nodes: Vec<u32> = res.devices.iter().flat_map(|d| nodes_of(&d.id)).collect();
    nodes.sort_unstable();
    nodes.dedup();
    // what a plugin reports is not trusted with the mask loop's 2^n
    if nodes.len() > MAX_NUMA_NODES || nodes.iter().any(|n| *n >= 64) {
        return None;
    }
    Some(generate_hints(
        &nodes,
        |mask| res.devices.iter().filter(|d| in_mask(mask, &d.id)).count() >= needed,
        |mask| available.iter().filter(|id| in_mask(mask, id)).count() >= needed,
    ))
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
        let mut s = State::default();
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
            listed(s.hints(r, 1, None)),
            [
                ("0".into(), true),
                ("1".into(), true),
                ("0,1".into(), false)
            ]
        );
        assert_eq!(
            listed(s.hints(r, 2, None)),
            [("0".into(), true), ("0,1".into(), false)]
        );
        assert_eq!(listed(s.hints(r, 3, None)), [("0,1".into(), true)]);
        // a taken: node 0 no longer holds two
        s.pods.insert(Held {
            uid: "u".into(),
            container: "c".into(),
            resource: r.into(),
            ids: vec!["a".into()],
            allocation: Allocation::Reserved,
        });
        assert_eq!(listed(s.hints(r, 2, None)), [("0,1".into(), false)]);
        // held devices answer where they are; another count, nowhere
        assert_eq!(
            listed(s.hints(r, 1, Some(vec!["c".into()]))),
            [("1".into(), true), ("0,1".into(), false)]
        );
        assert_eq!(
            s.hints(r, 2, Some(vec!["c".into()])).map(|h| h.1.len()),
            Some(0)
        );
        // not a plugin's, or without NUMA nodes: no preference
        assert!(s.hints("example.com/other", 1, None).is_none());
        s.resources[0]
            .devices
            .iter_mut()
            .for_each(|d| d.numa.clear());
        assert!(s.hints(r, 1, None).is_none());
    }

    #[test]
    fn devices_on_the_affinitys_nodes_are_chosen_first() {
        let s = state();
        let mut healthy = s.resources[0].healthy();
        super::super::admission::aligned_first(&s.resources[0], &mut healthy, BitMask::of([1]));
        assert_eq!(healthy, ["c", "d", "a", "b"]);
    }
}
