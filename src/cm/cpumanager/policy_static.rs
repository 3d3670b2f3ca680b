//! The `static` policy (upstream `policy_static.go`): a container of a
//! Guaranteed pod that requests a whole number of CPUs gets that many CPUs
//! of its own; every other container shares the rest, the shared pool
//! (upstream's default CPU set). The reserved CPUs stay in the shared
//! pool and are never given exclusively, so the system, the kubelet and
//! the BestEffort and Burstable pods always keep them.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::cpu_assignment::{take_by_topology, take_by_topology_numa_distributed, NotEnoughCpus};
use super::state::CpuManagerState;
use super::topology::CpuTopology;
use crate::cm::cpuset::CpuSet;
use crate::cm::topologymanager::bitmask::BitMask;
use crate::cm::topologymanager::{generate_hints, min_affinity_size, ResourceHints, TopologyHint};
use crate::kuberuntime::qos::{qos_class, QosClass};
use crate::podutil::PodExt;
use crate::util::quantity::parse_quantity;

pub const POLICY_NAME: &str = "static";
/// The resource the hints are for.
const CPU: &str = "cpu";

/// `cpuManagerPolicyOptions` the static policy knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StaticPolicyOptions {
    /// `full-pcpus-only`: exclusive CPUs come in whole physical cores.
    pub full_pcpus_only: bool,
    /// `distribute-cpus-across-numa` (upstream 1.23): a request one NUMA
    /// node cannot hold is spread evenly over the nodes it needs.
    pub distribute_cpus_across_numa: bool,
    /// `align-by-socket` (upstream 1.25): CPUs are aligned to the sockets
    /// of the topology manager's NUMA nodes rather than to the nodes.
    pub align_by_socket: bool,
}

/// Why the policy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "[cpumanager] the static policy requires systemreserved.cpu + kubereserved.cpu \
         to be greater than zero"
    )]
    NothingReserved,
    #[error(
        "[cpumanager] unable to reserve the required amount of CPUs \
         (size of {reserved:?} did not equal {wanted})"
    )]
    Reserve { reserved: String, wanted: usize },
    #[error("static policy invalid state, please drain node and remove policy state file: {0}")]
    InvalidState(String),
    #[error(
        "Align by socket is not compatible with hardware where number of sockets \
         are more than number of NUMA"
    )]
    AlignBySocketHardware,
}

/// Why a container could not be given its CPUs at admission.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    #[error(transparent)]
    NotEnough(#[from] NotEnoughCpus),
    #[error(
        "SMT Alignment Error: requested {requested} cpus not multiple cpus per core = {per_core}"
    )]
    SmtAlignment { requested: usize, per_core: usize },
}

#[derive(Debug)]
pub struct StaticPolicy {
    topology: CpuTopology,
    reserved: CpuSet,
    options: StaticPolicyOptions,
    /// The init containers' CPUs of the pod being admitted, which its app
    /// containers take again (upstream cpusToReuse): init containers run
    /// before them, one at a time.
    reuse: Option<(String, CpuSet)>,
}

impl StaticPolicy {
    /// `reserved_cpus` is `reservedSystemCPUs` (may be empty);
    /// `reserved_quantity` the reserved cpu quantities in millicores.
    /// Without a list, the reserved CPUs are the first ones topology
    /// packing would give away, as upstream takes them.
    pub fn new(
        topology: CpuTopology,
        reserved_cpus: &CpuSet,
        reserved_quantity: i128,
        options: StaticPolicyOptions,
    ) -> Result<StaticPolicy, PolicyError> {
        if reserved_quantity <= 0 {
            return Err(PolicyError::NothingReserved);
        }
        if options.align_by_socket && topology.num_sockets() > topology.num_numa_nodes() {
            return Err(PolicyError::AlignBySocketHardware);
        }
        let wanted = usize::try_from((reserved_quantity + 999) / 1000).unwrap_or(usize::MAX);
        let reserved = match reserved_cpus.is_empty() {
            false => reserved_cpus.clone(),
            true => take_by_topology(&topology, &topology.cpus(), wanted).unwrap_or_default(),
        };
        if reserved.len() != wanted {
            return Err(PolicyError::Reserve {
                reserved: reserved.to_string(),
                wanted,
            });
        }
        Ok(StaticPolicy {
            topology,
            reserved,
            options,
            reuse: None,
        })
    }

    pub fn reserved(&self) -> &CpuSet {
        &self.reserved
    }

    pub fn topology(&self) -> &CpuTopology {
        &self.topology
    }

    /// Upstream validateState: a new state's shared pool is every CPU; a
    /// restored one must still hold the reserved CPUs in the pool, keep
    /// exclusive CPUs out of it, and name exactly this machine's CPUs.
    pub fn start(&self, state: &mut CpuManagerState) -> Result<(), PolicyError> {
        let invalid = |m: String| Err(PolicyError::InvalidState(m));
        let pool = state.default_cpu_set.clone();
        if pool.is_empty() {
            if !state.assignments.is_empty() {
                return invalid("default cpuset cannot be empty".into());
            }
            state.default_cpu_set = self.topology.cpus();
            return Ok(());
        }
        if !self.reserved.is_subset_of(&pool) {
            return invalid(format!(
                "not all reserved cpus: \"{}\" are present in defaultCpuSet: \"{pool}\"",
                self.reserved
            ));
        }
        for a in &state.assignments {
            if !a.cpus.intersection(&pool).is_empty() {
                return invalid(format!(
                    "pod: {}, container: {} cpuset: \"{}\" overlaps with default cpuset \"{pool}\"",
                    a.pod_uid, a.container, a.cpus
                ));
            }
        }
        let known = pool.union(&state.assigned_cpus());
        if known != self.topology.cpus() {
            return invalid(format!(
                "current set of available CPUs \"{}\" doesn't match with CPUs in state \"{known}\"",
                self.topology.cpus()
            ));
        }
        Ok(())
    }

    /// CPUs that can be given exclusively: the shared pool but for the
    /// reserved ones.
    pub fn assignable(&self, state: &CpuManagerState) -> CpuSet {
        state.default_cpu_set.difference(&self.reserved)
    }

    /// Gives `container` of `pod` its exclusive CPUs, if it is to have
    /// any, on the topology manager's NUMA nodes as far as they go; a
    /// container that already has them keeps them (a restart).
    pub fn allocate(
        &mut self,
        state: &mut CpuManagerState,
        pod: &Pod,
        container: &Container,
        affinity: Option<BitMask>,
    ) -> Result<(), AllocateError> {
        let requested = guaranteed_cpus(pod, container);
        if requested == 0 {
            return Ok(());
        }
        let per_core = self.topology.cpus_per_core();
        if self.options.full_pcpus_only && !requested.is_multiple_of(per_core) {
            return Err(AllocateError::SmtAlignment {
                requested,
                per_core,
            });
        }
        let uid = pod.uid();
        if let Some(cpus) = state.cpuset(uid, &container.name).cloned() {
            log::info!(
                "cpu manager: pod {} container {:?} already has CPUs {cpus}",
                pod.full_name(),
                container.name
            );
            self.update_reuse(pod, container, &cpus);
            return Ok(());
        }
        let from = self.assignable(state).union(&self.reusable(uid));
        let cpus = self.allocate_cpus(&from, requested, affinity)?;
        state.default_cpu_set = state.default_cpu_set.difference(&cpus);
        state.set_cpuset(uid, &container.name, cpus.clone());
        self.update_reuse(pod, container, &cpus);
        Ok(())
    }

    fn reusable(&self, pod_uid: &str) -> CpuSet {
        match &self.reuse {
            Some((owner, cpus)) if owner == pod_uid => cpus.clone(),
            _ => CpuSet::default(),
        }
    }

    /// upstream allocateCPUs: as many as there are on the affinity's
    /// nodes (or, under `align-by-socket`, their sockets) from there, the
    /// rest from anywhere.
    fn allocate_cpus(
        &self,
        from: &CpuSet,
        n: usize,
        affinity: Option<BitMask>,
    ) -> Result<CpuSet, NotEnoughCpus> {
        let mut result = CpuSet::default();
        if let Some(mask) = affinity {
            let aligned = from.intersection(&self.aligned_cpus(mask));
            result = self.take(&aligned, n.min(aligned.len()))?;
        }
        let rest = self.take(&from.difference(&result), n - result.len())?;
        Ok(result.union(&rest))
    }

    /// upstream's policy takeByTopology: packed, or spread over NUMA
    /// nodes (in whole cores under `full-pcpus-only`).
    fn take(&self, from: &CpuSet, n: usize) -> Result<CpuSet, NotEnoughCpus> {
        if !self.options.distribute_cpus_across_numa {
            return take_by_topology(&self.topology, from, n);
        }
        let group = match self.options.full_pcpus_only {
            true => self.topology.cpus_per_core(),
            false => 1,
        };
        take_by_topology_numa_distributed(&self.topology, from, n, group)
    }

    /// upstream getAlignedCPUs: the CPUs of the mask's nodes, or of the
    /// sockets those nodes are on.
    fn aligned_cpus(&self, mask: BitMask) -> CpuSet {
        if !self.options.align_by_socket {
            return self.cpus_on(mask);
        }
        let sockets = self.sockets_of(mask);
        let on = self.topology.details().iter();
        CpuSet::new(on.filter(|d| sockets.contains(&d.socket)).map(|d| d.cpu))
    }

    /// The sockets the mask's NUMA nodes are on.
    fn sockets_of(&self, mask: BitMask) -> Vec<i32> {
        let on = self.topology.details().iter();
        let mut sockets: Vec<i32> = on
            .filter(|d| mask.is_set(d.numa_node))
            .map(|d| d.socket)
            .collect();
        sockets.sort_unstable();
        sockets.dedup();
        sockets
    }

    /// upstream isHintSocketAligned: the mask's nodes span as few sockets
    /// as the narrowest node set that could hold the request needs.
    fn socket_aligned(&self, mask: BitMask, min_nodes: u32) -> bool {
        let per_socket = self.topology.num_numa_nodes() / self.topology.num_sockets().max(1);
        if per_socket == 0 {
            return false;
        }
        self.sockets_of(mask).len() == (min_nodes as usize).div_ceil(per_socket)
    }

    fn cpus_on(&self, mask: BitMask) -> CpuSet {
        let on = self
            .topology
            .details()
            .iter()
            .filter(|d| mask.is_set(d.numa_node));
        CpuSet::new(on.map(|d| d.cpu))
    }

    /// upstream GetTopologyHints: none for a container without exclusive
    /// CPUs; for one that has them, the hints of where they are (none
    /// usable if their number changed); else where the request fits.
    pub fn topology_hints(
        &self,
        state: &CpuManagerState,
        pod: &Pod,
        container: &Container,
    ) -> ResourceHints {
        let requested = guaranteed_cpus(pod, container);
        if requested == 0 {
            return Vec::new();
        }
        let hints = match state.cpuset(pod.uid(), &container.name) {
            Some(held) if held.len() != requested => Vec::new(),
            Some(held) => self.generate_hints(held, &CpuSet::default(), requested),
            None => self.generate_hints(
                &self.assignable(state),
                &self.reusable(pod.uid()),
                requested,
            ),
        };
        vec![(CPU.to_string(), hints)]
    }

    /// upstream GetPodTopologyHints: the same for the whole pod's request
    /// (the largest init container's, or the app containers' sum).
    pub fn pod_topology_hints(&self, state: &CpuManagerState, pod: &Pod) -> ResourceHints {
        let each = |cs: &[Container]| {
            cs.iter()
                .map(|c| guaranteed_cpus(pod, c))
                .collect::<Vec<_>>()
        };
        let init = each(pod.init_containers()).into_iter().max().unwrap_or(0);
        let requested = init.max(
            each(pod.containers())
                .into_iter()
                .fold(0, usize::saturating_add),
        );
        if requested == 0 {
            return Vec::new();
        }
        let mut assigned = CpuSet::default();
        for c in pod.init_containers().iter().chain(pod.containers()) {
            if let Some(held) = state.cpuset(pod.uid(), &c.name) {
                if held.len() != guaranteed_cpus(pod, c) {
                    return vec![(CPU.to_string(), Vec::new())];
                }
                assigned = assigned.union(held);
            }
        }
        let hints = match assigned.len() == requested {
            true => self.generate_hints(&assigned, &CpuSet::default(), requested),
            false => {
                let reusable = self.reusable(pod.uid()).union(&assigned);
                self.generate_hints(&self.assignable(state), &reusable, requested)
            }
        };
        vec![(CPU.to_string(), hints)]
    }

    /// upstream generateCPUTopologyHints: every NUMA node set that holds
    /// the reusable CPUs and enough free ones; preferred are those as
    /// small as the smallest set whose CPUs could hold the request at all.
    fn generate_hints(
        &self,
        available: &CpuSet,
        reusable: &CpuSet,
        request: usize,
    ) -> Vec<TopologyHint> {
        let details = self.topology.details();
        let nodes = self.topology.numa_nodes();
        let numa_of = |cpu: u32| {
            details
                .iter()
                .find(|d| d.cpu == cpu)
                .map_or(0, |d| d.numa_node)
        };
        let could_hold = |mask: BitMask| self.cpus_on(mask).len() >= request;
        let mut hints = generate_hints(&nodes, could_hold, |mask| {
            let all_reusable = reusable.iter().all(|c| mask.is_set(numa_of(c)));
            let free = available
                .iter()
                .filter(|c| mask.is_set(numa_of(*c)))
                .count();
            all_reusable && reusable.len() + free >= request
        });
        if self.options.align_by_socket {
            let min = min_affinity_size(&nodes, could_hold);
            for h in &mut hints {
                h.preferred |= h.affinity.is_some_and(|a| self.socket_aligned(a, min));
            }
        }
        hints
    }

    /// An init container's CPUs become reusable by the app containers
    /// after it; an app container's are no longer.
    fn update_reuse(&mut self, pod: &Pod, container: &Container, cpus: &CpuSet) {
        let uid = pod.uid();
        let mut reuse = match self.reuse.take() {
            Some((owner, set)) if owner == uid => set,
            _ => CpuSet::default(),
        };
        // a sidecar keeps running: its share is not left to those after it
        let is_init = crate::podutil::is_regular_init_container(pod, &container.name);
        reuse = match is_init {
            true => reuse.union(cpus),
            false => reuse.difference(cpus),
        };
        self.reuse = Some((uid.to_string(), reuse));
    }

    /// Returns a container's exclusive CPUs to the shared pool, but for
    /// those another container of the pod still holds (an app container
    /// that reused its init container's CPUs).
    pub fn remove_container(&self, state: &mut CpuManagerState, pod_uid: &str, container: &str) {
        let Some(cpus) = state.cpuset(pod_uid, container).cloned() else {
            return;
        };
        state.delete(pod_uid, container);
        let still_held = state.assigned_cpus();
        state.default_cpu_set = state.default_cpu_set.union(&cpus.difference(&still_held));
    }
}

/// Upstream guaranteedCPUs: the whole CPUs a container of a Guaranteed
/// pod requests; 0 for any other container, or a fractional request.
/// A limit stands for a missing request, as the API server defaults it.
pub fn guaranteed_cpus(pod: &Pod, container: &Container) -> usize {
    if qos_class(pod) != QosClass::Guaranteed {
        return 0;
    }
    let res = container.resources.as_ref();
    let cpu = res
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get("cpu"))
        .or_else(|| {
            res.and_then(|r| r.limits.as_ref())
                .and_then(|m| m.get("cpu"))
        });
    let milli = cpu.and_then(|q| parse_quantity(&q.0).ok()).unwrap_or(0);
    if milli <= 0 || milli % 1000 != 0 {
        return 0;
    }
    usize::try_from(milli / 1000).unwrap_or(0)
}

#[cfg(test)]
#[path = "policy_static_tests.rs"]
pub(crate) mod tests;
