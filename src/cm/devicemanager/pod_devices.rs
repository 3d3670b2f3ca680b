//! Which devices each container holds, and what its plugin said to inject
//! (upstream `devicemanager/pod_devices.go`), with the pure choice of
//! devices at admission (`devicesToAllocate`).
//!
//! Flat lists rather than nested maps: a node holds tens of these, and
//! every map type would be one more copy of the B-tree's code in the
//! static binary.

use std::time::Instant;

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
    Failed { why: String, at: Instant },
}

/// One container's devices of one resource; `ids` sorted.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Held {
    pub uid: String,
    pub container: String,
    pub resource: String,
    pub ids: Vec<String>,
    pub allocation: Allocation,
}

impl Held {
    fn is(&self, uid: &str, container: &str, resource: &str) -> bool {
        self.uid == uid && self.container == container && self.resource == resource
    }
}

#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct PodDevices(Vec<Held>);

impl PodDevices {
    /// Adds or replaces the container's devices of `h.resource`.
    pub fn insert(&mut self, h: Held) {
        match self
            .0
            .iter_mut()
            .find(|x| x.is(&h.uid, &h.container, &h.resource))
        {
            Some(x) => *x = h,
            None => self.0.push(h),
        }
    }

    pub fn get(&self, uid: &str, container: &str, resource: &str) -> Option<&Held> {
        self.0.iter().find(|x| x.is(uid, container, resource))
    }

    pub fn get_mut(&mut self, uid: &str, container: &str, resource: &str) -> Option<&mut Held> {
        self.0.iter_mut().find(|x| x.is(uid, container, resource))
    }

    /// The container's devices, by resource.
    pub fn container<'a>(
        &'a self,
        uid: &'a str,
        container: &'a str,
    ) -> impl Iterator<Item = &'a Held> {
        self.0
            .iter()
            .filter(move |x| x.uid == uid && x.container == container)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Held> {
        self.0.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Held> {
        self.0.iter_mut()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Drops the pod's devices; true when it held any.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        self.retain_pods(|u| u != uid)
    }

    /// The devices of `resource` held by any container (upstream
    /// devices()).
    pub fn in_use(&self, resource: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|x| x.resource == resource)
            .flat_map(|x| x.ids.iter().map(String::as_str))
            .collect()
    }

    /// Frees the devices of pods `keep` says no to (upstream
    /// updateAllocatedDevices); true when any went.
    pub fn retain_pods(&mut self, keep: impl Fn(&str) -> bool) -> bool {
        let before = self.0.len();
        self.0.retain(|x| keep(&x.uid));
        self.0.len() != before
    }
}

/// What one container asks of one resource, with what is held and what
/// the pod's earlier init containers left to reuse.
pub(super) struct Request<'a> {
    pub resource: &'a str,
    pub needed: usize,
    /// Healthy devices, sorted.
    pub healthy: &'a [&'a str],
    pub in_use: &'a [&'a str],
    pub reusable: &'a [String],
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
/// The result is sorted.
pub(super) fn choose(req: &Request<'_>) -> Result<Vec<String>, String> {
    let mut chosen: Vec<String> = req
        .reusable
        .iter()
        .filter(|id| req.healthy.contains(&id.as_str()))
        .take(req.needed)
        .cloned()
        .collect();
    if chosen.len() < req.needed {
        let available: Vec<&str> = req
            .healthy
            .iter()
            .copied()
            .filter(|id| !req.in_use.contains(id) && !chosen.iter().any(|c| c == id))
            .collect();
        let short = req.needed - chosen.len();
        if available.len() < short {
            return Err(unavailable(req.resource, short, available.len()));
        }
        chosen.extend(available.into_iter().take(short).map(String::from));
    }
    chosen.sort();
    Ok(chosen)
}
