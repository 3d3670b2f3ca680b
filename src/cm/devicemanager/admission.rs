//! Which devices a pod's containers get at admission (upstream
//! devicesToAllocate with filterByAffinity): an init container's devices
//! pass on to the containers after it; then healthy free devices, those
//! on the topology manager's NUMA nodes first, then those without a
//! node, then the others.

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use super::pod_devices::{self, Allocation, Held};
use super::{device_limits, Inner, Resource};
use crate::cm::topologymanager::BitMask;
use crate::podutil::PodExt;

impl Inner {
    /// Chooses devices for each container that asks for a plugin's
    /// resource and does not hold them yet; true when any was chosen.
    pub(super) fn reserve(&self, pod: &Pod) -> Result<bool, String> {
        let uid = pod.uid();
        let mut s = lock(&self.state);
        let affinity: Vec<(String, BitMask)> = s
            .affinity
            .iter()
            .filter(|(u, _, _)| u == uid)
            .map(|(_, c, m)| (c.clone(), *m))
            .collect();
        s.affinity.clear();
        let mut chosen: Vec<Held> = Vec::new();
        // (resource, ids) an init container leaves to the next container.
        let mut reusable: Vec<(String, Vec<String>)> = Vec::new();
        let containers = pod
            .init_containers()
            .iter()
            .map(|c| (c, true))
            .chain(pod.containers().iter().map(|c| (c, false)));
        for (c, init) in containers {
            for (resource, needed) in device_limits(c) {
                let reuse = reusable.iter().position(|(r, _)| r == resource);
                if let Some(have) = s.pods.get(uid, &c.name, resource) {
                    // Already held (a restart read them from the checkpoint).
                    if init {
                        reusable.push((resource.to_string(), have.ids.clone()));
                    }
                    continue;
                }
                let Some(res) = s.resource(resource) else {
                    if s.pods.in_use(resource).is_empty() {
                        // Not a device plugin's: the fit check counts it.
                        continue;
                    }
                    return Err(format!("can't allocate unregistered device {resource}"));
                };
                let mut healthy = res.healthy();
                if let Some((_, mask)) = affinity.iter().find(|(name, _)| *name == c.name) {
                    aligned_first(res, &mut healthy, *mask);
                }
                let mut in_use = s.pods.in_use(resource);
                in_use.extend(
                    chosen
                        .iter()
                        .filter(|h| h.resource == resource)
                        .flat_map(|h| h.ids.iter().map(String::as_str)),
                );
                let ids = pod_devices::choose(&pod_devices::Request {
                    resource,
                    needed,
                    healthy: &healthy,
                    in_use: &in_use,
                    reusable: reuse.map(|i| reusable[i].1.as_slice()).unwrap_or(&[]),
                })?;
                match (init, reuse) {
                    (true, _) => reusable.push((resource.to_string(), ids.clone())),
                    (false, Some(i)) => reusable[i].1.retain(|id| !ids.contains(id)),
                    (false, None) => {}
                }
                chosen.push(Held {
                    uid: uid.to_string(),
                    container: c.name.clone(),
                    resource: resource.to_string(),
                    ids,
                    allocation: Allocation::Reserved,
                });
            }
        }
        let any = !chosen.is_empty();
        for h in chosen {
            s.pods.insert(h);
        }
        Ok(any)
    }
}

/// Orders `healthy` (sorted IDs) as upstream's filterByAffinity splits
/// it: on `mask`'s nodes, without a node, on other nodes; sorted within.
pub(super) fn aligned_first(res: &Resource, healthy: &mut [&str], mask: BitMask) {
    let rank = |id: &str| {
        let numa = res
            .devices
            .iter()
            .find(|d| d.id == id)
            .map(|d| d.numa.as_slice())
            .unwrap_or_default();
        match numa {
            [] => 1,
            nodes
                if nodes
                    .iter()
                    .any(|n| u32::try_from(*n).is_ok_and(|n| mask.is_set(n))) =>
            {
                0
            }
            _ => 2,
        }
    };
    healthy.sort_by_key(|id| rank(id));
}
