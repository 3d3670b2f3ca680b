//! The topology manager (upstream `pkg/kubelet/cm/topologymanager`): at
//! admission it asks each hint provider (the device, CPU and memory
//! managers) on which NUMA nodes it could place a container's (or a pod's)
//! resources, merges the answers, and under `restricted` and
//! `single-numa-node` refuses a pod whose resources cannot share a NUMA
//! node set the providers prefer (`TopologyAffinityError`). The merged
//! affinity then guides each provider's allocation.
//!
//! Policies `none`, `best-effort`, `restricted`, `single-numa-node`;
//! scopes `container` (each container on its own) and `pod` (one
//! affinity for all of them).

pub mod bitmask;
mod policy;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::kubeletconfig::KubeletConfiguration;
use crate::lifecycle::admission::Rejection;
use crate::podutil::PodExt;
pub use bitmask::BitMask;
pub use policy::Policy;

/// upstream's reason and message for a pod the policy cannot place.
pub const TOPOLOGY_AFFINITY_ERROR: &str = "TopologyAffinityError";
const TOPOLOGY_AFFINITY_MESSAGE: &str = "Resources cannot be allocated with Topology locality";

/// A set of NUMA nodes a provider could place a request on, and whether
/// it is one of the narrowest such sets. `affinity` None: any node. The
/// default (any node, not preferred) is what the `none` policy admits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopologyHint {
    pub affinity: Option<BitMask>,
    pub preferred: bool,
}

/// One provider's hints, by resource. An empty list: the provider cannot
/// place the request anywhere. A resource left out, or no resource at
/// all: no preference.
pub type ResourceHints = Vec<(String, Vec<TopologyHint>)>;

/// What the topology manager asks of each resource manager (upstream
/// HintProvider).
pub trait HintProvider: Send + Sync {
    fn topology_hints(&self, pod: &Pod, container: &Container) -> ResourceHints;
    fn pod_topology_hints(&self, pod: &Pod) -> ResourceHints;
    /// Places the container's resources, on the hint's nodes where it can
    /// (None: anywhere). The hint is the merged one the policy admitted
    /// (upstream's affinity store), preferred or not.
    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        hint: TopologyHint,
    ) -> Result<(), Rejection>;
    /// Undoes every allocation of a pod that was refused after all.
    fn release(&self, pod_uid: &str);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Container,
    Pod,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyManagerError {
    #[error("topologyManagerPolicy: unknown policy: {0:?}")]
    UnknownPolicy(String),
    #[error("topologyManagerScope: unknown scope: {0:?}")]
    UnknownScope(String),
    #[error("topologyManagerPolicy {policy:?}: unsupported on machines with more than {max} NUMA Nodes (this one has {found})")]
    TooManyNumaNodes {
        policy: String,
        max: usize,
        found: usize,
    },
}

pub struct TopologyManager {
    policy: Policy,
    scope: Scope,
    numa_nodes: Vec<u32>,
    providers: Vec<Box<dyn HintProvider>>,
}

impl TopologyManager {
    /// `numa_nodes` are the machine's (from sysfs); `providers` in
    /// upstream's order: devices, CPUs, memory.
    pub fn new(
        config: &KubeletConfiguration,
        numa_nodes: Vec<u32>,
        providers: Vec<Box<dyn HintProvider>>,
    ) -> Result<TopologyManager, TopologyManagerError> {
        let policy = Policy::parse(&config.topology_manager_policy).ok_or_else(|| {
            TopologyManagerError::UnknownPolicy(config.topology_manager_policy.clone())
        })?;
        let scope = match config.topology_manager_scope.as_str() {
            "" | "container" => Scope::Container,
            "pod" => Scope::Pod,
            other => return Err(TopologyManagerError::UnknownScope(other.to_string())),
        };
        let too_many =
            numa_nodes.len() > bitmask::MAX_NUMA_NODES || numa_nodes.iter().any(|n| *n >= 64);
        if policy != Policy::None && too_many {
            return Err(TopologyManagerError::TooManyNumaNodes {
                policy: config.topology_manager_policy.clone(),
                max: bitmask::MAX_NUMA_NODES,
                found: numa_nodes.len(),
            });
        }
        if !config.topology_manager_policy_options.is_empty() {
            log::warn!("topologyManagerPolicyOptions: not honoured by rkubelet, ignored");
        }
        Ok(TopologyManager {
            policy,
            scope,
            numa_nodes,
            providers,
        })
    }

    /// This machine's NUMA nodes, from sysfs, read only when the policy
    /// needs them (`[0]` under `none`): the topology manager's and the
    /// device manager's hints range over them.
    pub fn machine_numa_nodes(
        config: &KubeletConfiguration,
        sysfs: &std::path::Path,
    ) -> Result<Vec<u32>, crate::cm::cpumanager::topology::TopologyError> {
        match Policy::parse(&config.topology_manager_policy) {
            Some(Policy::None) => Ok(vec![0]),
            _ => Ok(crate::cm::cpumanager::topology::CpuTopology::discover(sysfs)?.numa_nodes()),
        }
    }

    /// Admission (upstream Topology Admit Handler): every container's
    /// resources placed, or the pod refused with nothing kept.
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let result = match (self.policy, self.scope) {
            (Policy::None, _) => self.allocate_all(pod, TopologyHint::default()),
            (_, Scope::Container) => self.admit_containers(pod),
            (_, Scope::Pod) => self.admit_pod(pod),
        };
        result.inspect_err(|_| self.release(pod.uid()))
    }

    /// Undoes the providers' allocations for a pod refused later.
    pub fn release(&self, pod_uid: &str) {
        for p in &self.providers {
            p.release(pod_uid);
        }
    }

    fn admit_containers(&self, pod: &Pod) -> Result<(), Rejection> {
        for c in all_containers(pod) {
            let hints = self.providers.iter().map(|p| p.topology_hints(pod, c));
            let hint = self.merge(hints.collect(), pod, &c.name)?;
            for p in &self.providers {
                p.allocate(pod, c, hint)?;
            }
        }
        Ok(())
    }

    fn admit_pod(&self, pod: &Pod) -> Result<(), Rejection> {
        let hints = self.providers.iter().map(|p| p.pod_topology_hints(pod));
        let hint = self.merge(hints.collect(), pod, "")?;
        self.allocate_all(pod, hint)
    }

    /// Every container's resources, on the hint's nodes first.
    fn allocate_all(&self, pod: &Pod, hint: TopologyHint) -> Result<(), Rejection> {
        for c in all_containers(pod) {
            for p in &self.providers {
                p.allocate(pod, c, hint)?;
            }
        }
        Ok(())
    }

    /// The policy's merge of the providers' hints: the hint to place on,
    /// or the pod's refusal.
    fn merge(
        &self,
        hints: Vec<ResourceHints>,
        pod: &Pod,
        container: &str,
    ) -> Result<TopologyHint, Rejection> {
        let (best, admit) = self.policy.merge(&self.numa_nodes, &hints);
        log::info!(
            "topology manager: pod {} {}: best hint {:?} ({})",
            pod.full_name(),
            if container.is_empty() {
                "(pod scope)"
            } else {
                container
            },
            best.affinity.map(|a| a.to_string()),
            if best.preferred {
                "preferred"
            } else {
                "not preferred"
            },
        );
        if !admit {
            return Err(Rejection {
                reason: TOPOLOGY_AFFINITY_ERROR.into(),
                message: TOPOLOGY_AFFINITY_MESSAGE.into(),
            });
        }
        Ok(best)
    }
}

/// The hints a provider gives, in upstream's shape (the CPU, memory and
/// device managers' generate*TopologyHints): every node set where the
/// free resources `fit` the request, preferred where it has as few nodes
/// as the smallest set whose whole capacity `could_hold` it.
pub fn generate_hints(
    nodes: &[u32],
    could_hold: impl Fn(BitMask) -> bool,
    fits: impl Fn(BitMask) -> bool,
) -> Vec<TopologyHint> {
    let min_size = min_affinity_size(nodes, could_hold);
    let mut hints = Vec::new();
    bitmask::iterate_bit_masks(nodes, |mask| {
        if fits(mask) {
            hints.push(TopologyHint {
                affinity: Some(mask),
                preferred: mask.count() == min_size,
            });
        }
    });
    hints
}

/// The fewest nodes whose whole capacity `could_hold` the request (all of
/// them when none does).
pub fn min_affinity_size(nodes: &[u32], could_hold: impl Fn(BitMask) -> bool) -> u32 {
    let mut min_size = nodes.len() as u32;
    bitmask::iterate_bit_masks(nodes, |mask| {
        if could_hold(mask) {
            min_size = min_size.min(mask.count());
        }
    });
    min_size
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.init_containers().iter().chain(pod.containers())
}

#[cfg(test)]
mod tests;
