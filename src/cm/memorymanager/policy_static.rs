//! The memory manager's `Static` policy (upstream `memorymanager/
//! policy_static.go`): a container of a Guaranteed pod gets its memory
//! (and huge pages) from the NUMA nodes the topology manager chose, or
//! the narrowest set with room, and runs with `cpuset.mems` on them. The
//! machine state keeps, per node and memory type, what is free.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::state::{Block, MemoryManagerState, MemoryTable, NumaNodeState};
use crate::cm::topologymanager::bitmask::BitMask;
use crate::cm::topologymanager::{generate_hints, ResourceHints, TopologyHint};
use crate::kuberuntime::qos::{qos_class, QosClass};
use crate::podutil::PodExt;
use crate::util::quantity::parse_quantity_value;

pub const POLICY_NAME: &str = "Static";
const MEMORY: &str = "memory";

/// Why a container's memory could not be placed (upstream's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    #[error(
        "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough \
         memory is available"
    )]
    NoDefaultAffinity,
    #[error("[memorymanager] failed to find NUMA nodes to extend the current topology hint")]
    CannotExtend,
    #[error("[memorymanager] failed to find the default preferred hint")]
    DefaultNotPreferred,
    #[error("[memorymanager] failed to find the extended preferred hint")]
    ExtendedNotPreferred,
    #[error("[memorymanager] preferred hint violates NUMA node allocation")]
    ViolatesNumaAllocation,
}

/// Bytes by memory type, sorted by type. A list, not a map: the static
/// binary carries no map code for it.
pub type Sizes = Vec<(String, u64)>;

/// The memory a container requests, by type, in bytes: `memory` and the
/// `hugepages-*` sizes (upstream getRequestedResources).
pub fn requested(container: &Container) -> Sizes {
    let res = container.resources.as_ref();
    let list = res
        .and_then(|r| r.requests.as_ref())
        .or_else(|| res.and_then(|r| r.limits.as_ref()));
    list.into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() == MEMORY || k.starts_with("hugepages-"))
        .filter_map(|(k, q)| {
            Some((
                k.clone(),
                u64::try_from(parse_quantity_value(&q.0).ok()?).ok()?,
            ))
        })
        .filter(|(_, v)| *v > 0)
        .collect() // the requests map is sorted already
}

/// Memory an init container left, by type and node set.
type Reusable = Vec<(String, BitMask, u64)>;

/// Adds `n` to the size of `kind`, or keeps the larger of the two.
fn add(sizes: &mut Sizes, kind: &str, n: u64, sum: bool) {
    match sizes.iter_mut().find(|(k, _)| k == kind) {
        Some((_, have)) => {
            *have = if sum {
                have.saturating_add(n)
            } else {
                (*have).max(n)
            }
        }
        None => {
            sizes.push((kind.to_string(), n));
            sizes.sort();
        }
    }
}

#[derive(Debug)]
pub struct StaticPolicy {
    /// The machine state with nothing given out (upstream
    /// getDefaultMachineState).
    initial: Vec<NumaNodeState>,
    /// The init containers' memory of the pod being admitted, which the
    /// containers after them take again, by (type, nodes).
    reuse: Option<(String, Reusable)>,
}

impl StaticPolicy {
    pub fn new(initial: Vec<NumaNodeState>) -> StaticPolicy {
        StaticPolicy {
            initial,
            reuse: None,
        }
    }

    fn nodes(&self) -> Vec<u32> {
        self.initial.iter().map(|n| n.node).collect()
    }

    /// upstream validateState: a new state gets the initial machine
    /// state; a restored one must be what its assignments make of it.
    pub fn start(&self, state: &mut MemoryManagerState) -> Result<(), String> {
        if state.machine.is_empty() {
            if !state.entries.is_empty() {
                return Err(
                    "[memorymanager] machine state can not be empty when it has memory assignments"
                        .into(),
                );
            }
            state.machine = self.initial.clone();
            return Ok(());
        }
        let mut expected = MemoryManagerState {
            machine: self.initial.clone(),
            ..Default::default()
        };
        for e in &state.entries {
            for b in &e.blocks {
                let known = b.numa_affinity.iter().all(|n| {
                    expected
                        .machine
                        .iter()
                        .any(|s| s.node == *n && s.table(&b.kind).is_some())
                });
                if !known {
                    return Err(format!(
                        "[memorymanager] (pod: {}, container: {}) the memory assignment uses the NUMA that does not exist",
                        e.pod_uid, e.container
                    ));
                }
                take(&mut expected, &b.numa_affinity, &b.kind, b.size);
            }
        }
        if expected.machine != state.machine {
            return Err(
                "[memorymanager] the expected machine state is different from the real one".into(),
            );
        }
        Ok(())
    }

    /// upstream Allocate: nothing for a pod that is not Guaranteed or a
    /// container that has its blocks; else blocks on the topology
    /// manager's hint (widened to nodes that have room) or the narrowest
    /// node set with room. A preferred hint is only ever replaced by a
    /// preferred one, and a node never serves both a single-node and a
    /// multi-node allocation.
    pub fn allocate(
        &mut self,
        state: &mut MemoryManagerState,
        pod: &Pod,
        container: &Container,
        hint: TopologyHint,
    ) -> Result<(), AllocateError> {
        let wanted = requested(container);
        if qos_class(pod) != QosClass::Guaranteed || wanted.is_empty() {
            return Ok(());
        }
        if state.blocks(pod.uid(), &container.name).is_some() {
            return Ok(());
        }
        let mask = self.placement(state, pod, &wanted, hint)?;
        let nodes: Vec<u32> = mask.nodes().collect();
        let mut blocks = Vec::new();
        for (kind, size) in &wanted {
            blocks.push(Block {
                numa_affinity: nodes.clone(),
                kind: kind.clone(),
                size: *size,
            });
            let reused = self.reusable(pod.uid(), kind, mask).min(*size);
            take(state, &nodes, kind, size - reused);
            shrink_init_blocks(state, pod, &container.name, kind, &nodes, reused);
        }
        self.update_reuse(pod, container, &blocks);
        state.set_blocks(pod.uid(), &container.name, blocks);
        Ok(())
    }

    /// The nodes for a container's blocks: the hint's, or the best of
    /// this manager's own hints (upstream getDefaultHint) when it names
    /// none, extended to a set with room (extendTopologyManagerHint).
    fn placement(
        &self,
        state: &MemoryManagerState,
        pod: &Pod,
        wanted: &Sizes,
        hint: TopologyHint,
    ) -> Result<BitMask, AllocateError> {
        use AllocateError::*;
        let mut best = hint;
        if hint.affinity.is_none() {
            let default = self
                .best_hint(state, pod, wanted, |_| true)
                .ok_or(NoDefaultAffinity)?;
            if !default.preferred && hint.preferred {
                return Err(DefaultNotPreferred);
            }
            best = default;
        }
        let mut mask = best.affinity.unwrap_or_default();
        if !fits(state, mask, wanted) {
            let extended = self
                .best_hint(state, pod, wanted, move |h| h.and(mask) == mask)
                .ok_or(CannotExtend)?;
            if !extended.preferred && best.preferred {
                return Err(ExtendedNotPreferred);
            }
            mask = extended.affinity.unwrap_or_default();
        }
        if violates_numa_allocations(state, mask) {
            return Err(ViolatesNumaAllocation);
        }
        Ok(mask)
    }

    /// upstream findBestHint over calculateHints' hints that `keep`
    /// accepts: a preferred one, the narrowest.
    fn best_hint(
        &self,
        state: &MemoryManagerState,
        pod: &Pod,
        wanted: &Sizes,
        keep: impl Fn(BitMask) -> bool,
    ) -> Option<TopologyHint> {
        let hints = self.calculate_hints(state, pod, wanted);
        let first = hints.first().map(|(_, h)| h.as_slice()).unwrap_or_default();
        let mut best: Option<TopologyHint> = None;
        for h in first.iter().filter(|h| h.affinity.is_some_and(&keep)) {
            let better = match best {
                None => true,
                Some(b) if h.preferred != b.preferred => h.preferred,
                Some(b) => h
                    .affinity
                    .unwrap_or_default()
                    .is_narrower_than(b.affinity.unwrap_or_default()),
            };
            if better {
                best = Some(*h);
            }
        }
        best
    }

    fn reusable(&self, pod_uid: &str, kind: &str, mask: BitMask) -> u64 {
        match &self.reuse {
            Some((uid, m)) if uid == pod_uid => m
                .iter()
                .find(|(k, b, _)| k == kind && *b == mask)
                .map_or(0, |(_, _, n)| *n),
            _ => 0,
        }
    }

    /// upstream updatePodReusableMemory: an init container's blocks can
    /// be taken again (the largest per type and nodes); an app container
    /// uses them up.
    fn update_reuse(&mut self, pod: &Pod, container: &Container, blocks: &[Block]) {
        let uid = pod.uid();
        let mut reuse = match self.reuse.take() {
            Some((owner, m)) if owner == uid => m,
            _ => Vec::new(),
        };
        // a sidecar keeps running: its share is not left to those after it
        let is_init = crate::podutil::is_regular_init_container(pod, &container.name);
        for b in blocks {
            let mask = BitMask::of(b.numa_affinity.iter().copied());
            let at = match reuse
                .iter()
                .position(|(k, m, _)| *k == b.kind && *m == mask)
            {
                Some(i) => i,
                None => {
                    reuse.push((b.kind.clone(), mask, 0));
                    reuse.len() - 1
                }
            };
            let have = &mut reuse[at].2;
            *have = match is_init {
                true => (*have).max(b.size),
                false => have.saturating_sub(b.size),
            };
        }
        self.reuse = Some((uid.to_string(), reuse));
    }

    /// upstream RemoveContainer: the blocks go back to their nodes.
    pub fn remove_container(&self, state: &mut MemoryManagerState, pod_uid: &str, container: &str) {
        let Some(blocks) = state.blocks(pod_uid, container).map(<[Block]>::to_vec) else {
            return;
        };
        state
            .entries
            .retain(|e| !(e.pod_uid == pod_uid && e.container == container));
        for b in &blocks {
            let mut released = b.size;
            for n in &b.numa_affinity {
                let Some(node) = state.node_mut(*n) else {
                    continue;
                };
                node.assignments = node.assignments.saturating_sub(1);
                if node.assignments == 0 {
                    node.cells = vec![*n];
                }
                let Some(t) = node.table_mut(&b.kind) else {
                    continue;
                };
                let back = released.min(t.reserved);
                t.reserved -= back;
                t.free += back;
                released -= back;
            }
        }
    }

    /// upstream GetTopologyHints: a container with blocks answers where
    /// they are (no preference if its request changed); else
    /// calculateHints.
    pub fn topology_hints(
        &self,
        state: &MemoryManagerState,
        pod: &Pod,
        container: &Container,
    ) -> ResourceHints {
        let wanted = requested(container);
        if qos_class(pod) != QosClass::Guaranteed || wanted.is_empty() {
            return Vec::new();
        }
        match state.blocks(pod.uid(), &container.name) {
            Some(blocks) => regenerate_hints(blocks, &wanted),
            None => self.calculate_hints(state, pod, &wanted),
        }
    }

    /// upstream GetPodTopologyHints: the same for the pod's request (the
    /// largest init container's, or the app containers' sum, per type).
    pub fn pod_topology_hints(&self, state: &MemoryManagerState, pod: &Pod) -> ResourceHints {
        if qos_class(pod) != QosClass::Guaranteed {
            return Vec::new();
        }
        let mut wanted = Sizes::new();
        for c in pod.containers() {
            for (k, v) in requested(c) {
                add(&mut wanted, &k, v, true);
            }
        }
        for c in pod.init_containers() {
            for (k, v) in requested(c) {
                add(&mut wanted, &k, v, false);
            }
        }
        if wanted.is_empty() {
            return Vec::new();
        }
        // upstream: the first container that has blocks answers
        let held = pod
            .init_containers()
            .iter()
            .chain(pod.containers())
            .find_map(|c| state.blocks(pod.uid(), &c.name));
        match held {
            None => self.calculate_hints(state, pod, &wanted),
            Some(blocks) => regenerate_hints(blocks, &wanted),
        }
    }

    /// upstream calculateHints: every node set with enough allocatable
    /// and free memory of each type, not breaking up an existing group of
    /// nodes; preferred are the smallest sets that could hold it at all.
    fn calculate_hints(
        &self,
        state: &MemoryManagerState,
        pod: &Pod,
        wanted: &Sizes,
    ) -> ResourceHints {
        let sum = |mask: BitMask, kind: &str, f: fn(&MemoryTable) -> u64| -> u64 {
            let on = state.machine.iter().filter(|n| mask.is_set(n.node));
            on.filter_map(|n| n.table(kind)).map(f).sum()
        };
        let could_hold = |mask: BitMask| {
            wanted
                .iter()
                .all(|(k, v)| sum(mask, k, |t| t.allocatable) >= *v)
        };
        let fits = |mask: BitMask| {
            let nodes: Vec<&NumaNodeState> = state
                .machine
                .iter()
                .filter(|n| mask.is_set(n.node))
                .collect();
            // a node grouped with others is offered only with its group
            let grouped_elsewhere = match nodes.as_slice() {
                [one] => one.cells.len() > 1,
                _ => violates_numa_allocations(state, mask),
            };
            let room = wanted
                .iter()
                .all(|(k, v)| sum(mask, k, |t| t.free) + self.reusable(pod.uid(), k, mask) >= *v);
            could_hold(mask) && !grouped_elsewhere && room
        };
        let hints = generate_hints(&self.nodes(), could_hold, fits);
        wanted
            .iter()
            .map(|(k, _)| (k.clone(), hints.clone()))
            .collect()
    }
}

/// What a container took again of the init containers before it comes
/// off their blocks (upstream updateInitContainersMemoryBlocks), so that
/// the blocks always add up to what the nodes have reserved: a restart
/// replays them, and a release gives back no more than was taken.
fn shrink_init_blocks(
    state: &mut MemoryManagerState,
    pod: &Pod,
    container: &str,
    kind: &str,
    nodes: &[u32],
    mut reused: u64,
) {
    for init in pod.init_containers() {
        if init.name == container || reused == 0 {
            return;
        }
        if crate::podutil::is_restartable_init(init) {
            continue;
        }
        let Some(mut blocks) = state.blocks(pod.uid(), &init.name).map(<[Block]>::to_vec) else {
            continue;
        };
        for b in blocks
            .iter_mut()
            .filter(|b| b.kind == kind && b.numa_affinity == nodes)
        {
            let off = reused.min(b.size);
            b.size -= off;
            reused -= off;
        }
        state.set_blocks(pod.uid(), &init.name, blocks);
    }
}

/// upstream isAffinityViolatingNUMAAllocations: a multi-node set whose
/// nodes already serve single-node allocations or another group.
fn violates_numa_allocations(state: &MemoryManagerState, mask: BitMask) -> bool {
    let nodes = state.machine.iter().filter(|n| mask.is_set(n.node));
    mask.count() > 1
        && nodes
            .filter(|n| n.assignments > 0)
            .any(|n| n.cells.len() == 1 || BitMask::of(n.cells.iter().copied()) != mask)
}

/// Whether `mask`'s nodes have the free memory of every type.
fn fits(state: &MemoryManagerState, mask: BitMask, wanted: &Sizes) -> bool {
    wanted.iter().all(|(k, v)| {
        let free: u64 = state
            .machine
            .iter()
            .filter(|n| mask.is_set(n.node))
            .filter_map(|n| n.table(k))
            .map(|t| t.free)
            .sum();
        free >= *v
    })
}

/// upstream regenerateHints: the blocks' nodes, preferred; no preference
/// at all when the blocks are not what is asked (another size or type), as
/// upstream answers then, so a restarted kubelet admits its pods again.
fn regenerate_hints(blocks: &[Block], wanted: &Sizes) -> ResourceHints {
    let same = blocks.len() == wanted.len()
        && blocks
            .iter()
            .all(|b| wanted.iter().any(|(k, v)| *k == b.kind && *v == b.size));
    if !same {
        return Vec::new();
    }
    blocks
        .iter()
        .map(|b| {
            let hint = TopologyHint {
                affinity: Some(BitMask::of(b.numa_affinity.iter().copied())),
                preferred: true,
            };
            (b.kind.clone(), vec![hint])
        })
        .collect()
}

/// upstream updateMachineState: `size` of `kind` off the nodes in order;
/// every node counts the assignment and joins the group.
fn take(state: &mut MemoryManagerState, nodes: &[u32], kind: &str, size: u64) {
    let mut left = size;
    for n in nodes {
        let Some(node) = state.node_mut(*n) else {
            continue;
        };
        node.assignments += 1;
        node.cells = nodes.to_vec();
        let Some(t) = node.table_mut(kind) else {
            continue;
        };
        let got = left.min(t.free);
        t.reserved += got;
        t.free -= got;
        left -= got;
    }
}

#[cfg(test)]
#[path = "policy_static_tests.rs"]
mod tests;
