//! Which devices a container gets at admission (upstream
//! devicesToAllocate with filterByAffinity): what the init containers
//! before it left, then healthy free devices, those on the topology
//! manager's NUMA nodes first, then those without a node, then the
//! others. The topology manager asks for each container in turn, so the
//! next container's hints already see this one's devices taken.

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use super::pod_devices::{self, Allocation, Held, PodDevices};
use super::{device_limits, Inner, Resource, State};
use crate::cm::topologymanager::BitMask;
use crate::podutil::PodExt;

impl Inner {
    /// Reserves devices for each device plugin resource `container` of
    /// `pod` asks for and does not hold yet (a restart read them from the
    /// checkpoint).
    pub(super) fn reserve(
        &self,
        pod: &Pod,
        container: &Container,
        affinity: Option<BitMask>,
    ) -> Result<(), String> {
        lock(&self.state).reserve(pod, container, affinity)
    }
}

impl State {
    pub(super) fn reserve(
        &mut self,
        pod: &Pod,
        container: &Container,
        affinity: Option<BitMask>,
    ) -> Result<(), String> {
        let uid = pod.uid();
        for (resource, needed) in device_limits(container) {
            if self.pods.get(uid, &container.name, resource).is_some() {
                continue;
            }
            let Some(res) = self.resource(resource) else {
                if self.pods.in_use(resource).is_empty() {
                    // Not a device plugin's: the fit check counts it.
                    continue;
                }
                return Err(format!("can't allocate unregistered device {resource}"));
            };
            let mut healthy = res.healthy();
            if let Some(mask) = affinity {
                aligned_first(res, &mut healthy, mask);
            }
            let ids = pod_devices::choose(&pod_devices::Request {
                resource,
                needed,
                healthy: &healthy,
                in_use: &self.pods.in_use(resource),
                reusable: &reusable(&self.pods, pod, &container.name, resource),
            })?;
            self.pods.insert(Held {
                uid: uid.to_string(),
                container: container.name.clone(),
                resource: resource.to_string(),
                ids,
                allocation: Allocation::Reserved,
            });
        }
        Ok(())
    }
}

/// The devices of `resource` that the init containers before `container`
/// leave to it (upstream devicesToReuse): init containers run one at a
/// time, so theirs pass on; an app container's, or a sidecar's (it keeps
/// running), are used up.
pub(super) fn reusable(
    pods: &PodDevices,
    pod: &Pod,
    container: &str,
    resource: &str,
) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let inits = pod.init_containers().iter().map(|c| (c, true));
    for (c, init) in inits.chain(pod.containers().iter().map(|c| (c, false))) {
        if c.name == container {
            break;
        }
        let Some(held) = pods.get(pod.uid(), &c.name, resource) else {
            continue;
        };
        match init && !crate::podutil::is_restartable_init(c) {
            true => ids.extend(held.ids.iter().cloned()),
            false => ids.retain(|id| !held.ids.contains(id)),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
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
