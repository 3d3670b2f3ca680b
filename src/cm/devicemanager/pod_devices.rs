//! Which devices each container holds, and what its plugin said to inject
//! (upstream `devicemanager/pod_devices.go`), with the pure choice of
//! devices at admission (`devicesToAllocate`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::cri::deviceplugin::v1beta1::api::ContainerAllocateResponse;

/// Upstream's `nodeWithoutTopology`: the checkpoint key of devices that
/// report no NUMA node.
pub(super) const NODE_WITHOUT_TOPOLOGY: i64 = -1;

/// Where one container's devices of one resource stand.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Allocation {
    /// Chosen at admission; `Allocate` has not answered yet.
    Reserved,
    /// The plugin's answer: what the container gets.
    Allocated(ContainerAllocateResponse),
    /// `Allocate` failed: why, and when.
    Failed { why: String, at: std::time::Instant },
}

/// One container's devices of one resource.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ContainerDevices {
    pub ids: BTreeSet<String>,
    pub allocation: Allocation,
}

/// pod UID -> container name -> resource name -> devices.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct PodDevices(
    BTreeMap<String, BTreeMap<String, BTreeMap<String, ContainerDevices>>>,
);

impl PodDevices {
    pub fn insert(&mut self, uid: &str, container: &str, resource: &str, d: ContainerDevices) {
        self.0
            .entry(uid.to_string())
            .or_default()
            .entry(container.to_string())
            .or_default()
            .insert(resource.to_string(), d);
    }

    pub fn get(&self, uid: &str, container: &str, resource: &str) -> Option<&ContainerDevices> {
        self.0.get(uid)?.get(container)?.get(resource)
    }

    pub fn get_mut(
        &mut self,
        uid: &str,
        container: &str,
        resource: &str,
    ) -> Option<&mut ContainerDevices> {
        self.0.get_mut(uid)?.get_mut(container)?.get_mut(resource)
    }

    /// The container's devices by resource.
    pub fn container(
        &self,
        uid: &str,
        container: &str,
    ) -> Option<&BTreeMap<String, ContainerDevices>> {
        self.0.get(uid)?.get(container)
    }

    pub fn has_pod(&self, uid: &str) -> bool {
        self.0.contains_key(uid)
    }

    pub fn remove_pod(&mut self, uid: &str) {
        self.0.remove(uid);
    }

    /// Every (uid, container, resource, devices).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &str, &ContainerDevices)> {
        self.0.iter().flat_map(|(uid, cs)| {
            cs.iter().flat_map(move |(c, rs)| {
                rs.iter()
                    .map(move |(r, d)| (uid.as_str(), c.as_str(), r.as_str(), d))
            })
        })
    }

    /// The devices of `resource` held by any container (upstream
    /// devices()).
    pub fn in_use(&self, resource: &str) -> BTreeSet<String> {
        self.iter()
            .filter(|(_, _, r, _)| *r == resource)
            .flat_map(|(_, _, _, d)| d.ids.iter().cloned())
            .collect()
    }

    /// Frees the devices of pods that are no longer active (upstream
    /// updateAllocatedDevices); true when any went.
    pub fn retain_pods(&mut self, active: &HashSet<String>) -> bool {
        let before = self.0.len();
        self.0.retain(|uid, _| active.contains(uid));
        self.0.len() != before
    }
}

/// What one container asks of one resource, with what it already holds
/// and what the pod's earlier init containers left to reuse.
pub(super) struct Request<'a> {
    pub resource: &'a str,
    pub needed: usize,
    pub healthy: &'a BTreeSet<String>,
    pub in_use: &'a BTreeSet<String>,
    pub reusable: &'a BTreeSet<String>,
}

/// Upstream devicesToAllocate's refusal, word for word.
pub(super) fn unavailable(resource: &str, needed: usize, available: usize) -> String {
    format!(
        "requested number of devices unavailable for {resource}. Requested: {needed}, Available: {available}"
    )
}

/// Picks `needed` devices: first those an init container of the pod left
/// (init containers run one at a time, so theirs pass on), then healthy
/// devices no one holds, lowest IDs first so the choice is repeatable.
pub(super) fn choose(req: &Request<'_>) -> Result<BTreeSet<String>, String> {
    let mut chosen: BTreeSet<String> = req
        .reusable
        .iter()
        .filter(|id| req.healthy.contains(*id))
        .take(req.needed)
        .cloned()
        .collect();
    if chosen.len() == req.needed {
        return Ok(chosen);
    }
    let available: Vec<&String> = req
        .healthy
        .iter()
        .filter(|id| !req.in_use.contains(*id) && !chosen.contains(*id))
        .collect();
    let short = req.needed - chosen.len();
    if available.len() < short {
        return Err(unavailable(req.resource, short, available.len()));
    }
    chosen.extend(available.into_iter().take(short).cloned());
    Ok(chosen)
}
