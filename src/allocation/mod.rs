//! What the kubelet allocated to each pod's containers, and what it has
//! put into effect (upstream `pkg/kubelet/allocation`, v1.34).
//!
//! The API's `spec.containers[].resources` is what the user asks for;
//! with in-place resize (InPlacePodVerticalScaling, on by default from
//! v1.33) it may change while the pod runs. The node decides whether to
//! take the new value ([`feasibility`]); what it took is the pod's
//! *allocation*, which admission, the sync and the status read in place
//! of the spec. What the runtime was last told is the *actuated* value:
//! where the two differ, the sync resizes the container.
//!
//! Both are checkpointed under the root directory, so a restarted kubelet
//! neither forgets an allocation the server no longer shows (a resize
//! still pending) nor applies a resize twice.

pub mod feasibility;
mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

use crate::podutil::PodExt;
use store::Store;

/// Upstream's checkpoint file names, under the kubelet's root directory.
pub const ALLOCATED_CHECKPOINT: &str = "allocated_pods_state_checkpoint";
pub const ACTUATED_CHECKPOINT: &str = "actuated_pods_state_checkpoint";

/// Why a resize waits (the reason of the PodResizePending condition, and
/// of `status.resize` before v1.33).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingReason {
    /// It fits the node, but not beside the other pods now.
    Deferred,
    /// It can never fit this node.
    Infeasible,
}

impl PendingReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReason::Deferred => "Deferred",
            PendingReason::Infeasible => "Infeasible",
        }
    }
}

/// A resize the node has not taken, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingResize {
    pub reason: PendingReason,
    pub message: String,
}

/// The containers whose resources count: app containers and every init
/// container (upstream stores them all; only app containers and sidecars
/// can be resized).
fn containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.init_containers().iter().chain(pod.containers().iter())
}

fn spec_resources(c: &Container) -> ResourceRequirements {
    c.resources.clone().unwrap_or_default()
}

/// Two requirements are the same allocation when their requests and
/// limits are (claims are not resizable).
fn same(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    let norm = |m: &Option<BTreeMap<_, _>>| m.clone().filter(|m| !m.is_empty());
    norm(&a.requests) == norm(&b.requests) && norm(&a.limits) == norm(&b.limits)
}

#[derive(Default)]
pub struct Manager {
    allocated: Mutex<Store>,
    actuated: Mutex<Store>,
    pending: Mutex<HashMap<String, PendingResize>>,
    /// Pods allocated a resize not yet in effect (PodResizeInProgress).
    in_progress: Mutex<HashSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Manager {
    /// Restores both checkpoints from `root_dir`; `None` keeps them in
    /// memory only (tests).
    pub fn new(root_dir: Option<&Path>) -> Self {
        Manager {
            allocated: Mutex::new(Store::load(root_dir.map(|d| d.join(ALLOCATED_CHECKPOINT)))),
            actuated: Mutex::new(Store::load(root_dir.map(|d| d.join(ACTUATED_CHECKPOINT)))),
            pending: Mutex::default(),
            in_progress: Mutex::default(),
        }
    }

    /// An admitted pod: its spec's resources are its allocation, unless a
    /// checkpoint already holds one (the kubelet restarted under it).
    pub fn add_pod(&self, pod: &Pod) {
        let mut allocated = lock(&self.allocated);
        if allocated.has_pod(pod.uid()) {
            return;
        }
        allocated.set_pod(pod.uid(), allocation_of(pod));
    }

    /// Takes the spec's resources as the allocation: the resize is
    /// accepted, and in progress until the sync has put it into effect.
    pub fn allocate(&self, pod: &Pod) {
        lock(&self.allocated).set_pod(pod.uid(), allocation_of(pod));
        lock(&self.pending).remove(pod.uid());
        lock(&self.in_progress).insert(pod.uid().to_string());
    }

    /// Whether an accepted resize is not yet in effect.
    pub fn in_progress(&self, uid: &str) -> bool {
        lock(&self.in_progress).contains(uid)
    }

    /// The sync found the allocation in effect (`done`) or not. Returns
    /// true when that ends a resize in progress.
    pub fn set_in_progress(&self, uid: &str, in_progress: bool) -> bool {
        let mut set = lock(&self.in_progress);
        if in_progress {
            set.insert(uid.to_string());
            false
        } else {
            set.remove(uid)
        }
    }

    /// Whether the spec asks for resources other than those allocated.
    pub fn needs_resize(&self, pod: &Pod) -> bool {
        let allocated = lock(&self.allocated);
        allocated.has_pod(pod.uid())
            && containers(pod).any(|c| {
                allocated
                    .get(pod.uid(), &c.name)
                    .is_some_and(|a| !same(a, &spec_resources(c)))
            })
    }

    /// `pod` with each container's resources as allocated (upstream
    /// UpdatePodFromAllocation); the same Arc when nothing differs.
    pub fn allocated_pod(&self, pod: &Arc<Pod>) -> Arc<Pod> {
        let allocated = lock(&self.allocated);
        let differs = |c: &Container| {
            allocated
                .get(pod.uid(), &c.name)
                .is_some_and(|a| !same(a, &spec_resources(c)))
        };
        if !containers(pod).any(differs) {
            return Arc::clone(pod);
        }
        let mut out = (**pod).clone();
        if let Some(spec) = out.spec.as_mut() {
            let all = spec
                .init_containers
                .iter_mut()
                .flatten()
                .chain(spec.containers.iter_mut());
            for c in all {
                if let Some(a) = allocated.get(pod.uid(), &c.name) {
                    c.resources = Some(a.clone());
                }
            }
        }
        Arc::new(out)
    }

    /// The container's allocation, if the pod was admitted.
    #[cfg(test)]
    pub fn container_allocation(&self, uid: &str, name: &str) -> Option<ResourceRequirements> {
        lock(&self.allocated).get(uid, name).cloned()
    }

    /// What the runtime was last told for the container.
    pub fn actuated(&self, uid: &str, name: &str) -> Option<ResourceRequirements> {
        lock(&self.actuated).get(uid, name).cloned()
    }

    /// The runtime now runs the container with `resources` (a start, or a
    /// resize that succeeded).
    pub fn set_actuated(&self, uid: &str, name: &str, resources: ResourceRequirements) {
        lock(&self.actuated).set(uid, name, resources);
    }

    /// Records why the pod's resize waits, or that it no longer does.
    /// Returns whether that changed.
    pub fn set_pending(&self, uid: &str, pending: Option<PendingResize>) -> bool {
        let mut map = lock(&self.pending);
        match pending {
            Some(p) => map.insert(uid.to_string(), p.clone()).as_ref() != Some(&p),
            None => map.remove(uid).is_some(),
        }
    }

    pub fn pending(&self, uid: &str) -> Option<PendingResize> {
        lock(&self.pending).get(uid).cloned()
    }

    /// UIDs of the pods whose resize waits: retried when room may appear.
    pub fn pending_uids(&self) -> Vec<String> {
        lock(&self.pending).keys().cloned().collect()
    }

    /// Forgets every pod not in `keep` (housekeeping, upstream
    /// RemoveOrphanedPods).
    pub fn remove_orphans(&self, keep: &HashSet<String>) {
        lock(&self.allocated).retain(keep);
        lock(&self.actuated).retain(keep);
        lock(&self.pending).retain(|uid, _| keep.contains(uid));
        lock(&self.in_progress).retain(|uid| keep.contains(uid));
    }
}

fn allocation_of(pod: &Pod) -> BTreeMap<String, ResourceRequirements> {
    containers(pod)
        .map(|c| (c.name.clone(), spec_resources(c)))
        .collect()
}

#[cfg(test)]
mod tests;
