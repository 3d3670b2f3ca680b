//! The memory manager (upstream `pkg/kubelet/cm/memorymanager`): with
//! `memoryManagerPolicy: Static`, a container of a Guaranteed pod gets
//! its memory and huge pages from chosen NUMA nodes, recorded in
//! `<root-dir>/memory_manager_state`, and runs with `cpuset.mems` on those
//! nodes. It is a hint provider of the topology manager, after the CPU
//! manager. `None` (the default) does nothing and writes no file.

pub mod policy_static;
pub mod state;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cm::topologymanager::{HintProvider, ResourceHints, TopologyHint};
use crate::kubeletconfig::KubeletConfiguration;
use crate::lifecycle::admission::{unexpected_admission_error, Rejection};
use crate::util::quantity::parse_quantity_value;
use policy_static::StaticPolicy;
use state::{MemoryManagerState, MemoryTable, NumaNodeState, StateError};

#[derive(Debug, thiserror::Error)]
pub enum MemoryManagerError {
    #[error("memoryManagerPolicy: unknown policy: {0:?}")]
    UnknownPolicy(String),
    #[error("reading the NUMA nodes' memory: {path}: {reason}")]
    Machine { path: PathBuf, reason: String },
    #[error("reservedMemory: the reserved memory configuration references a NUMA node {0} that does not exist on this machine")]
    NoSuchNode(i32),
    #[error(
        "reservedMemory: the total amount \"{total}\" of type \"{kind}\" is not equal to the value \
         \"{expected}\" determined by Node Allocatable feature (kubeReserved + systemReserved + \
         evictionHard memory.available)"
    )]
    Sum {
        total: u64,
        kind: String,
        expected: u64,
    },
    #[error("reservedMemory: [memorymanager] you should specify the system reserved memory")]
    NothingReserved,
    #[error(transparent)]
    State(#[from] StateError),
    #[error("{0}, please drain node and remove policy state file")]
    InvalidState(String),
}

/// The memory manager; clones share it. `None` when built by `Default`.
#[derive(Clone, Default)]
pub struct MemoryManager {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    root_dir: PathBuf,
    core: Mutex<(StaticPolicy, MemoryManagerState)>,
}

impl MemoryManager {
    /// upstream NewManager and Start: the policy, the machine's NUMA
    /// nodes and `reservedMemory` checked against node allocatable, the
    /// state restored and checked against both.
    pub fn start(
        config: &KubeletConfiguration,
        root_dir: &Path,
        sysfs: &Path,
        machine_memory: u64,
    ) -> Result<MemoryManager, MemoryManagerError> {
        match config.memory_manager_policy.as_str() {
            "" | "None" => return Ok(MemoryManager::default()),
            policy_static::POLICY_NAME => {}
            other => return Err(MemoryManagerError::UnknownPolicy(other.to_string())),
        }
        let nodes = numa_memory(sysfs, machine_memory)?;
        let initial = initial_machine_state(config, &nodes, machine_memory)?;
        let policy = StaticPolicy::new(initial);
        let mut state = MemoryManagerState::restore(root_dir, policy_static::POLICY_NAME)?
            .unwrap_or_else(|| MemoryManagerState {
                policy: policy_static::POLICY_NAME.into(),
                ..Default::default()
            });
        policy
            .start(&mut state)
            .map_err(MemoryManagerError::InvalidState)?;
        state.store(root_dir)?;
        log::info!(
            "memory manager: Static policy on NUMA nodes {:?}, {} containers with memory blocks",
            nodes.iter().map(|n| n.0).collect::<Vec<_>>(),
            state.entries.len()
        );
        Ok(MemoryManager {
            inner: Some(Arc::new(Inner {
                root_dir: root_dir.to_path_buf(),
                core: Mutex::new((policy, state)),
            })),
        })
    }

    /// The container's `cpuset.mems` (upstream PreCreateContainer): its
    /// blocks' NUMA nodes, ascending, comma-separated; None without.
    pub fn container_cpuset_mems(&self, pod_uid: &str, container: &str) -> Option<String> {
        let inner = self.inner.as_ref()?;
        let core = inner.lock();
        let blocks = core.1.blocks(pod_uid, container)?;
        let mut nodes: Vec<u32> = blocks
            .iter()
            .flat_map(|b| b.numa_affinity.iter().copied())
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        let nodes: Vec<String> = nodes.iter().map(u32::to_string).collect();
        (!nodes.is_empty()).then(|| nodes.join(","))
    }

    /// upstream removeStaleState: once the pod sources are ready, the
    /// memory of pods not in `active` goes back to its nodes (housekeeping,
    /// and before each admission).
    pub fn remove_stale_state(&self, active: &HashSet<String>, sources_ready: bool) {
        let (Some(inner), true) = (&self.inner, sources_ready) else {
            return;
        };
        let mut core = inner.lock();
        let (policy, state) = &mut *core;
        let stale: Vec<(String, String)> = state
            .entries
            .iter()
            .filter(|e| !active.contains(&e.pod_uid))
            .map(|e| (e.pod_uid.clone(), e.container.clone()))
            .collect();
        for (uid, name) in &stale {
            log::info!("memory manager: pod {uid} is no longer active; container {name:?}'s memory goes back");
            policy.remove_container(state, uid, name);
        }
        if !stale.is_empty() {
            inner.store(state);
        }
    }

    /// A container's memory blocks (the pod resources API): type, bytes,
    /// NUMA nodes.
    pub fn container_memory(&self, pod_uid: &str, container: &str) -> Vec<state::Block> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        core.1
            .blocks(pod_uid, container)
            .map(<[state::Block]>::to_vec)
            .unwrap_or_default()
    }

    /// Each node's allocatable memory by type, as blocks of one node
    /// (upstream GetAllocatableMemory).
    pub fn allocatable_memory(&self) -> Vec<state::Block> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        core.1
            .machine
            .iter()
            .flat_map(|n| {
                n.memory.iter().map(|(kind, t)| state::Block {
                    numa_affinity: vec![n.node],
                    kind: kind.clone(),
                    size: t.allocatable,
                })
            })
            .collect()
    }

    pub fn is_static(&self) -> bool {
        self.inner.is_some()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, (StaticPolicy, MemoryManagerState)> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store(&self, state: &MemoryManagerState) {
        if let Err(e) = state.store(&self.root_dir) {
            log::error!("memory manager: {e}");
        }
    }
}

impl HintProvider for MemoryManager {
    fn topology_hints(&self, pod: &Pod, container: &Container) -> ResourceHints {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        core.0.topology_hints(&core.1, pod, container)
    }

    fn pod_topology_hints(&self, pod: &Pod) -> ResourceHints {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let core = inner.lock();
        core.0.pod_topology_hints(&core.1, pod)
    }

    fn allocate(
        &self,
        pod: &Pod,
        container: &Container,
        hint: TopologyHint,
    ) -> Result<(), Rejection> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let mut core = inner.lock();
        let (policy, state) = &mut *core;
        let before = state.entries.len();
        policy
            .allocate(state, pod, container, hint)
            .map_err(unexpected_admission_error)?;
        if state.entries.len() != before {
            inner.store(state);
        }
        Ok(())
    }

    fn release(&self, pod_uid: &str) {
        let Some(inner) = &self.inner else {
            return;
        };
        let mut core = inner.lock();
        let (policy, state) = &mut *core;
        let names: Vec<String> = state
            .entries
            .iter()
            .filter(|e| e.pod_uid == pod_uid)
            .map(|e| e.container.clone())
            .collect();
        for name in &names {
            policy.remove_container(state, pod_uid, name);
        }
        if !names.is_empty() {
            inner.store(state);
        }
    }
}

/// A NUMA node and its memory by type.
type NodeMemory = (u32, policy_static::Sizes);

/// Each NUMA node's memory by type, in bytes: `MemTotal` of its meminfo
/// and its huge pages (`hugepages-2Mi`, ...). Without node directories,
/// one node 0 with the machine's memory, as cAdvisor reports it.
fn numa_memory(sysfs: &Path, machine_memory: u64) -> Result<Vec<NodeMemory>, MemoryManagerError> {
    let fail = |path: &Path, reason: String| MemoryManagerError::Machine {
        path: path.to_path_buf(),
        reason,
    };
    let dir = sysfs.join("devices/system/node");
    let dirs = crate::cm::cpumanager::topology::numa_node_dirs(&dir).unwrap_or_default();
    if dirs.is_empty() {
        return Ok(vec![(0, vec![("memory".to_string(), machine_memory)])]);
    }
    let mut nodes = Vec::new();
    for (node, path) in dirs {
        if node >= 64 {
            return Err(fail(
                &path,
                "NUMA node numbers from 64 on are not supported".into(),
            ));
        }
        let meminfo = path.join("meminfo");
        let text = std::fs::read_to_string(&meminfo).map_err(|e| fail(&meminfo, e.to_string()))?;
        let kb = text
            .lines()
            .find_map(|l| {
                l.split_once("MemTotal:")
                    .map(|(_, v)| v.trim().trim_end_matches("kB").trim().to_string())
            })
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| fail(&meminfo, "no MemTotal".into()))?;
        let mut memory = vec![("memory".to_string(), kb * 1024)];
        // the node's pools, read and named as node status reads the machine's
        for h in crate::nodestatus::machine::read_hugepages(&path.join("hugepages")) {
            let name = crate::nodestatus::setters::hugepage_resource_name(h.page_size);
            memory.push((name, h.num_pages.saturating_mul(h.page_size)));
        }
        memory.sort();
        nodes.push((node, memory));
    }
    Ok(nodes)
}

/// upstream getDefaultMachineState after validateReservedMemory: each
/// node's memory less what `reservedMemory` keeps there for the system,
/// whose per-type sums must be node allocatable's reservation.
fn initial_machine_state(
    config: &KubeletConfiguration,
    nodes: &[NodeMemory],
    machine_memory: u64,
) -> Result<Vec<NumaNodeState>, MemoryManagerError> {
    // (node, type, bytes)
    let mut reserved: Vec<(u32, String, u64)> = Vec::new();
    for r in &config.reserved_memory {
        let node = u32::try_from(r.numa_node)
            .ok()
            .filter(|n| nodes.iter().any(|(m, _)| m == n))
            .ok_or(MemoryManagerError::NoSuchNode(r.numa_node))?;
        for (kind, q) in &r.limits {
            reserved.push((node, kind.clone(), bytes(q)));
        }
    }
    let expected = node_allocatable_reservation(config, machine_memory);
    let mut kinds: Vec<&String> = reserved
        .iter()
        .map(|(_, k, _)| k)
        .chain(expected.iter().map(|(k, _)| k))
        .collect();
    kinds.sort();
    kinds.dedup();
    for kind in kinds {
        let total: u64 = reserved
            .iter()
            .filter(|(_, k, _)| k == kind)
            .map(|(_, _, v)| v)
            .sum();
        let want = expected
            .iter()
            .find(|(k, _)| k == kind)
            .map_or(0, |(_, v)| *v);
        if total != want {
            return Err(MemoryManagerError::Sum {
                total,
                kind: kind.clone(),
                expected: want,
            });
        }
    }
    if !reserved.iter().any(|(_, k, v)| k == "memory" && *v > 0) {
        return Err(MemoryManagerError::NothingReserved);
    }
    Ok(nodes
        .iter()
        .map(|(node, memory)| NumaNodeState {
            node: *node,
            assignments: 0,
            memory: memory
                .iter()
                .map(|(kind, total)| {
                    let system = reserved
                        .iter()
                        .find(|(n, k, _)| n == node && k == kind)
                        .map_or(0, |(_, _, v)| *v);
                    let allocatable = total.saturating_sub(system);
                    let t = MemoryTable {
                        total: *total,
                        system_reserved: system,
                        allocatable,
                        reserved: 0,
                        free: allocatable,
                    };
                    (kind.clone(), t)
                })
                .collect(),
            cells: vec![*node],
        })
        .collect())
}

/// kubeReserved + systemReserved (+ evictionHard's memory.available for
/// memory), per memory type, in bytes (upstream
/// GetNodeAllocatableReservation).
fn node_allocatable_reservation(
    config: &KubeletConfiguration,
    machine_memory: u64,
) -> policy_static::Sizes {
    let mut out = policy_static::Sizes::new();
    let mut add = |kind: &str, v: u64| match out.iter_mut().find(|(k, _)| k == kind) {
        Some((_, have)) => *have += v,
        None => out.push((kind.to_string(), v)),
    };
    for m in [&config.kube_reserved, &config.system_reserved] {
        for (kind, q) in m {
            if kind == "memory" || kind.starts_with("hugepages-") {
                add(kind, bytes(q));
            }
        }
    }
    if let Some(q) = config.eviction_hard.get("memory.available") {
        let v = match q.strip_suffix('%') {
            Some(pct) => pct
                .parse::<f64>()
                .map(|p| (machine_memory as f64 * p / 100.0) as u64)
                .unwrap_or(0),
            None => bytes(q),
        };
        add("memory", v);
    }
    out.retain(|(_, v)| *v > 0);
    out
}

/// A quantity in bytes; 0 when it does not parse (validation refused it).
fn bytes(q: &str) -> u64 {
    parse_quantity_value(q)
        .ok()
        .and_then(|v| u64::try_from(v).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
