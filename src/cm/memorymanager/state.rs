//! The memory manager's state file, `<root-dir>/memory_manager_state`
//! (upstream `memorymanager/state`): for each NUMA node its memory by type
//! (total, reserved for the system, allocatable, given to containers,
//! free), how many containers it serves and the nodes it is grouped with;
//! and each container's blocks (type, size, NUMA nodes).
//!
//! ```json
//! {"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,
//!  "memoryMap":{"memory":{"total":..,"systemReserved":..,"allocatable":..,
//!  "reserved":0,"free":..}},"cells":[0]}},"checksum":..}
//! ```
//!
//! The checksum is FNV-32a over go-spew's `%#v` of the Go struct, written
//! out in [`Checkpoint::dump`] by the rules the CPU and device managers'
//! golden tests established; no golden file of an upstream kubelet's holds
//! this type's dump, so a mismatch on restore is logged
//! rather than fatal (the machine state is then checked against the
//! machine, as upstream's validateState does).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Map, Value};

pub const STATE_FILE: &str = "memory_manager_state";

/// One memory type on one NUMA node, in bytes (upstream MemoryTable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryTable {
    pub total: u64,
    pub system_reserved: u64,
    pub allocatable: u64,
    pub reserved: u64,
    pub free: u64,
}

/// upstream NUMANodeState.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaNodeState {
    pub node: u32,
    pub assignments: u64,
    /// By memory type (`memory`, `hugepages-2Mi`, ...), sorted.
    pub memory: Vec<(String, MemoryTable)>,
    /// The nodes this one is grouped with for multi-node allocations.
    pub cells: Vec<u32>,
}

impl NumaNodeState {
    pub fn table_mut(&mut self, kind: &str) -> Option<&mut MemoryTable> {
        self.memory
            .iter_mut()
            .find(|(k, _)| k == kind)
            .map(|(_, t)| t)
    }

    pub fn table(&self, kind: &str) -> Option<&MemoryTable> {
        self.memory.iter().find(|(k, _)| k == kind).map(|(_, t)| t)
    }
}

/// Memory of one type given to a container, on these nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub numa_affinity: Vec<u32>,
    pub kind: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerBlocks {
    pub pod_uid: String,
    pub container: String,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryManagerState {
    pub policy: String,
    /// By node number.
    pub machine: Vec<NumaNodeState>,
    /// Sorted by pod UID, then container name.
    pub entries: Vec<ContainerBlocks>,
}

/// Why the state could not be restored or written, with upstream's advice.
pub type StateError = crate::checkpointmanager::CheckpointError;

/// The manager's name in the messages.
const MANAGER: &str = "memory manager";

impl MemoryManagerState {
    pub fn blocks(&self, pod_uid: &str, container: &str) -> Option<&[Block]> {
        self.entries
            .iter()
            .find(|e| e.pod_uid == pod_uid && e.container == container)
            .map(|e| e.blocks.as_slice())
    }

    pub fn set_blocks(&mut self, pod_uid: &str, container: &str, blocks: Vec<Block>) {
        self.entries
            .retain(|e| !(e.pod_uid == pod_uid && e.container == container));
        let key = (pod_uid, container);
        let at = self
            .entries
            .partition_point(|e| (e.pod_uid.as_str(), e.container.as_str()) < key);
        self.entries.insert(
            at,
            ContainerBlocks {
                pod_uid: pod_uid.to_string(),
                container: container.to_string(),
                blocks,
            },
        );
    }

    pub fn node_mut(&mut self, node: u32) -> Option<&mut NumaNodeState> {
        self.machine.iter_mut().find(|n| n.node == node)
    }

    /// upstream NewCheckpointState: the state in `dir`, or none yet. A
    /// corrupt file or one of another policy stops the start with
    /// upstream's message.
    pub fn restore(dir: &Path, policy: &str) -> Result<Option<MemoryManagerState>, StateError> {
        let path = dir.join(STATE_FILE);
        let fail = |reason: String| StateError::Restore {
            manager: MANAGER,
            reason,
            path: path.clone(),
        };
        let blob = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(e.to_string())),
        };
        let (state, checksum) =
            from_json(&blob).ok_or_else(|| fail("checkpoint is corrupted".into()))?;
        if state.policy != policy {
            return Err(fail(format!(
                "configured policy {policy:?} differs from state checkpoint policy {:?}",
                state.policy
            )));
        }
        if checksum != Checkpoint(&state).checksum() {
            log::warn!(
                "memory manager: {} has checksum {checksum}, not the {} rkubelet computes; \
                 its content is checked against the machine instead",
                path.display(),
                Checkpoint(&state).checksum()
            );
        }
        Ok(Some(state))
    }

    /// Writes the file whole (a temporary file renamed over it).
    pub fn store(&self, dir: &Path) -> Result<(), StateError> {
        let path = dir.join(STATE_FILE);
        let body = Checkpoint(self).to_json();
        crate::checkpointmanager::write_atomic(&path, body.as_bytes()).map_err(|source| {
            StateError::Write {
                manager: MANAGER,
                path,
                source,
            }
        })
    }
}

/// The file's Go type, for its JSON and checksum.
struct Checkpoint<'a>(&'a MemoryManagerState);

impl Checkpoint<'_> {
    /// Go's encoding/json of upstream MemoryManagerCheckpoint: fields in
    /// declaration order, map keys sorted as strings, `entries` left out
    /// when empty.
    fn to_json(&self) -> String {
        let s = self.0;
        // Go writes struct fields in declaration order and map keys sorted
        // as strings; serde_json's Map would sort the fields too, so the
        // objects are written out.
        let mut nodes: Vec<(String, &NumaNodeState)> =
            s.machine.iter().map(|n| (n.node.to_string(), n)).collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        let machine = nodes
            .iter()
            .map(|(key, n)| {
                let memory: Vec<String> = n
                    .memory
                    .iter()
                    .map(|(k, t)| format!("{}:{}", json!(k), table_json(t)))
                    .collect();
                format!(
                    "{}:{{\"numberOfAssignments\":{},\"memoryMap\":{{{}}},\"cells\":{}}}",
                    json!(key),
                    n.assignments,
                    memory.join(","),
                    json!(n.cells)
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        let entries = match s.entries.is_empty() {
            true => String::new(),
            false => format!(",\"entries\":{}", entries_json(&s.entries)),
        };
        format!(
            "{{\"policyName\":{},\"machineState\":{{{machine}}}{entries},\"checksum\":{}}}",
            json!(s.policy),
            self.checksum()
        )
    }

    fn checksum(&self) -> u32 {
        crate::checkpointmanager::fnv32a(self.dump().as_bytes())
    }

    /// go-spew's `%#v` of `*state.MemoryManagerCheckpoint`, checksum 0:
    /// struct fields typed, map entries and elements not, pointers in a
    /// map shown as `<*>`, keys sorted (numerically for the node map).
    fn dump(&self) -> String {
        let s = self.0;
        let mut out = format!(
            "(*state.MemoryManagerCheckpoint){{PolicyName:(string){} \
             MachineState:(state.NUMANodeMap)map[",
            s.policy
        );
        for (i, n) in s.machine.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let _ = write!(
                out,
                "{}:<*>{{NumberOfAssignments:(int){} \
                 MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[",
                n.node, n.assignments
            );
            for (j, (k, t)) in n.memory.iter().enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                let _ = write!(
                    out,
                    "{k}:<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} \
                     Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
                    t.total, t.system_reserved, t.allocatable, t.reserved, t.free
                );
            }
            let _ = write!(out, "] Cells:([]int){}}}", ints(&n.cells));
        }
        out.push_str("] Entries:(state.ContainerMemoryAssignments)map[");
        let mut pods: Vec<&str> = s.entries.iter().map(|e| e.pod_uid.as_str()).collect();
        pods.dedup();
        for (i, pod) in pods.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{pod}:map[");
            let containers = s.entries.iter().filter(|e| e.pod_uid == *pod);
            for (j, c) in containers.enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{}:[", c.container);
                for (k, b) in c.blocks.iter().enumerate() {
                    if k > 0 {
                        out.push(' ');
                    }
                    let _ = write!(
                        out,
                        "{{NUMAAffinity:([]int){} Type:(v1.ResourceName){} Size:(uint64){}}}",
                        ints(&b.numa_affinity),
                        b.kind,
                        b.size
                    );
                }
                out.push(']');
            }
            out.push(']');
        }
        out.push_str("] Checksum:(checksum.Checksum)0}");
        out
    }
}

fn ints(v: &[u32]) -> String {
    let items: Vec<String> = v.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(" "))
}

fn table_json(t: &MemoryTable) -> String {
    format!(
        "{{\"total\":{},\"systemReserved\":{},\"allocatable\":{},\"reserved\":{},\"free\":{}}}",
        t.total, t.system_reserved, t.allocatable, t.reserved, t.free
    )
}

fn entries_json(entries: &[ContainerBlocks]) -> String {
    let mut pods: Map<String, Value> = Map::new();
    for e in entries {
        let blocks: Vec<String> = e
            .blocks
            .iter()
            .map(|b| {
                format!(
                    "{{\"numaAffinity\":{},\"type\":{},\"size\":{}}}",
                    json!(b.numa_affinity),
                    json!(b.kind),
                    b.size
                )
            })
            .collect();
        let pod = pods
            .entry(e.pod_uid.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(cs) = pod {
            cs.insert(
                e.container.clone(),
                Value::String(format!("[{}]", blocks.join(","))),
            );
        }
    }
    // the blocks keep their field order: spliced in as text
    let pods: Vec<String> = pods
        .iter()
        .map(|(uid, cs)| {
            let cs: Vec<String> = cs
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, b)| format!("{}:{}", json!(name), b.as_str().unwrap_or("[]")))
                .collect();
            format!("{}:{{{}}}", json!(uid), cs.join(","))
        })
        .collect();
    format!("{{{}}}", pods.join(","))
}

/// The state and checksum of a file in upstream's format; None when it
/// is not one.
fn from_json(blob: &[u8]) -> Option<(MemoryManagerState, u32)> {
    let v: Value = serde_json::from_slice(blob).ok()?;
    let u64_of = |v: &Value| v.as_u64();
    let nodes_of = |v: &Value| -> Option<Vec<u32>> {
        v.as_array()?
            .iter()
            .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
            .collect()
    };
    let mut machine = Vec::new();
    for (node, state) in v["machineState"].as_object()? {
        let mut memory = Vec::new();
        for (kind, t) in state["memoryMap"].as_object()? {
            memory.push((
                kind.clone(),
                MemoryTable {
                    total: u64_of(&t["total"])?,
                    system_reserved: u64_of(&t["systemReserved"])?,
                    allocatable: u64_of(&t["allocatable"])?,
                    reserved: u64_of(&t["reserved"])?,
                    free: u64_of(&t["free"])?,
                },
            ));
        }
        machine.push(NumaNodeState {
            node: node.parse().ok()?,
            assignments: u64_of(&state["numberOfAssignments"])?,
            memory,
            cells: nodes_of(&state["cells"])?,
        });
    }
    machine.sort_by_key(|n| n.node);
    let mut entries = Vec::new();
    if let Some(pods) = v.get("entries").filter(|e| !e.is_null()) {
        for (pod, cs) in pods.as_object()? {
            for (name, blocks) in cs.as_object()? {
                let blocks = blocks
                    .as_array()?
                    .iter()
                    .map(|b| {
                        Some(Block {
                            numa_affinity: nodes_of(&b["numaAffinity"])?,
                            kind: b["type"].as_str()?.to_string(),
                            size: u64_of(&b["size"])?,
                        })
                    })
                    .collect::<Option<Vec<_>>>()?;
                entries.push(ContainerBlocks {
                    pod_uid: pod.clone(),
                    container: name.clone(),
                    blocks,
                });
            }
        }
    }
    let state = MemoryManagerState {
        policy: v["policyName"].as_str()?.to_string(),
        machine,
        entries,
    };
    Some((state, u32::try_from(v["checksum"].as_u64()?).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> MemoryManagerState {
        let table = MemoryTable {
            total: 4 << 30,
            system_reserved: 1 << 30,
            allocatable: 3 << 30,
            reserved: 64 << 20,
            free: (3 << 30) - (64 << 20),
        };
        MemoryManagerState {
            policy: "Static".into(),
            machine: vec![NumaNodeState {
                node: 0,
                assignments: 1,
                memory: vec![("memory".into(), table)],
                cells: vec![0],
            }],
            entries: vec![ContainerBlocks {
                pod_uid: "u1".into(),
                container: "c".into(),
                blocks: vec![Block {
                    numa_affinity: vec![0],
                    kind: "memory".into(),
                    size: 64 << 20,
                }],
            }],
        }
    }

    #[test]
    fn the_file_is_upstreams_json_and_round_trips() {
        let dir = tempfile::TempDir::with_prefix("rkubelet-mm-state-").unwrap();
        let s = state();
        s.store(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
        let want = format!(
            "{{\"policyName\":\"Static\",\"machineState\":{{\"0\":{{\"numberOfAssignments\":1,\
             \"memoryMap\":{{\"memory\":{{\"total\":4294967296,\"systemReserved\":1073741824,\
             \"allocatable\":3221225472,\"reserved\":67108864,\"free\":3154116608}}}},\"cells\":[0]}}}},\
             \"entries\":{{\"u1\":{{\"c\":[{{\"numaAffinity\":[0],\"type\":\"memory\",\"size\":67108864}}]}}}},\
             \"checksum\":{}}}",
            Checkpoint(&s).checksum()
        );
        assert_eq!(text, want);
        assert_eq!(
            MemoryManagerState::restore(dir.path(), "Static").unwrap(),
            Some(s)
        );
    }

    #[test]
    fn the_dump_follows_go_spews_rules() {
        let s = state();
        assert_eq!(
            Checkpoint(&s).dump(),
            "(*state.MemoryManagerCheckpoint){PolicyName:(string)Static \
             MachineState:(state.NUMANodeMap)map[0:<*>{NumberOfAssignments:(int)1 \
             MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[memory:<*>{TotalMemSize:(uint64)4294967296 \
             SystemReserved:(uint64)1073741824 Allocatable:(uint64)3221225472 Reserved:(uint64)67108864 \
             Free:(uint64)3154116608}] Cells:([]int)[0]}] Entries:(state.ContainerMemoryAssignments)\
             map[u1:map[c:[{NUMAAffinity:([]int)[0] Type:(v1.ResourceName)memory Size:(uint64)67108864}]]] \
             Checksum:(checksum.Checksum)0}"
        );
    }

    #[test]
    fn another_policy_or_a_corrupt_file_stops_the_start() {
        let dir = tempfile::TempDir::with_prefix("rkubelet-mm-state-").unwrap();
        assert_eq!(
            MemoryManagerState::restore(dir.path(), "Static").unwrap(),
            None
        );
        state().store(dir.path()).unwrap();
        let e = MemoryManagerState::restore(dir.path(), "None")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "could not restore state from checkpoint: configured policy \"None\" differs"
            ),
            "{e}"
        );
        std::fs::write(dir.path().join(STATE_FILE), "{\"policyName\":").unwrap();
        let e = MemoryManagerState::restore(dir.path(), "Static")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("checkpoint is corrupted, please drain this node"),
            "{e}"
        );
    }
}
