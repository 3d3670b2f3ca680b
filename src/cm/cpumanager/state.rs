//! The CPU manager's state file, `<root-dir>/cpu_manager_state`
//! (upstream `cpumanager/state`): the policy's name, the shared pool and
//! the exclusive assignments by pod UID and container name, with
//! upstream's checksum, so either kubelet can read what the other wrote.
//!
//! ```json
//! {"policyName":"none","defaultCpuSet":"","checksum":1353318690}
//! ```
//!
//! The checksum is FNV-32a over go-spew's dump of the Go struct (pointer,
//! checksum zeroed), the same scheme as the device manager's checkpoint;
//! the golden tests hold it to files upstream kubelets wrote. Only the
//! format of upstream 1.18 and later (`entries` by pod, then container)
//! is read; the older one (by container ID) is refused as corrupt.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use crate::cm::cpuset::CpuSet;

/// The file's name under the root dir.
pub const STATE_FILE: &str = "cpu_manager_state";

/// Exclusive CPUs of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub pod_uid: String,
    pub container: String,
    pub cpus: CpuSet,
}

/// What the file holds, restored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuManagerState {
    pub policy: String,
    pub default_cpu_set: CpuSet,
    /// Sorted by pod UID, then container name.
    pub assignments: Vec<Assignment>,
}

/// Why the state could not be restored or written, with upstream's advice.
pub type StateError = crate::checkpointmanager::CheckpointError;

/// The manager's name in the messages.
const MANAGER: &str = "CPU manager";

/// The file, field for field (upstream CPUManagerCheckpoint). Read and
/// written through `serde_json::Value` rather than derived code (the
/// static binary carries Value's already).
#[derive(Debug)]
struct Checkpoint {
    policy_name: String,
    default_cpu_set: String,
    /// Pod UID to an object of container name to CPU list.
    entries: serde_json::Map<String, Value>,
    checksum: u32,
}

impl Checkpoint {
    fn of(state: &CpuManagerState) -> Checkpoint {
        let mut cp = Checkpoint {
            policy_name: state.policy.clone(),
            default_cpu_set: state.default_cpu_set.to_string(),
            entries: state
                .assignments
                .iter()
                .fold(serde_json::Map::new(), |mut m, a| {
                    let pod = m
                        .entry(a.pod_uid.clone())
                        .or_insert_with(|| Value::Object(serde_json::Map::new()));
                    if let Value::Object(cs) = pod {
                        cs.insert(a.container.clone(), Value::String(a.cpus.to_string()));
                    }
                    m
                }),
            checksum: 0,
        };
        cp.checksum = cp.compute_checksum();
        cp
    }

    /// go-spew's `%#v` of `*state.CPUManagerCheckpoint` with a zero
    /// checksum: struct fields carry their types, map entries do not, keys
    /// sort bytewise; entries is never nil (upstream makes the map).
    fn dump(&self) -> String {
        let mut out = format!(
            "(*state.CPUManagerCheckpoint){{PolicyName:(string){} DefaultCPUSet:(string){} \
             Entries:(map[string]map[string]string)map[",
            self.policy_name, self.default_cpu_set
        );
        for (i, (pod, containers)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{pod}:map[");
            let containers = containers.as_object().into_iter().flatten();
            for (j, (name, set)) in containers.enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{name}:{}", set.as_str().unwrap_or_default());
            }
            out.push(']');
        }
        out.push_str("] Checksum:(checksum.Checksum)0}");
        out
    }

    /// Go's encoding/json of the struct: fields in declaration order,
    /// `entries` left out when empty, map keys sorted.
    fn to_json(&self) -> String {
        let text = |s: &str| Value::String(s.to_string()).to_string();
        let entries = match self.entries.is_empty() {
            true => String::new(),
            false => format!(",\"entries\":{}", Value::Object(self.entries.clone())),
        };
        format!(
            "{{\"policyName\":{},\"defaultCpuSet\":{}{entries},\"checksum\":{}}}",
            text(&self.policy_name),
            text(&self.default_cpu_set),
            self.checksum
        )
    }

    /// The file's fields; None when it is not this format.
    fn from_json(blob: &[u8]) -> Option<Checkpoint> {
        let v: Value = serde_json::from_slice(blob).ok()?;
        let text = |v: &Value| v.as_str().map(str::to_string);
        let mut entries = serde_json::Map::new();
        if let Some(pods) = v.get("entries").filter(|e| !e.is_null()) {
            for (pod, cs) in pods.as_object()? {
                // every container's CPUs a string, or not this format
                if !cs.as_object()?.values().all(Value::is_string) {
                    return None;
                }
                entries.insert(pod.clone(), cs.clone());
            }
        }
        Some(Checkpoint {
            policy_name: text(&v["policyName"])?,
            default_cpu_set: text(&v["defaultCpuSet"])?,
            entries,
            checksum: u32::try_from(v["checksum"].as_u64()?).ok()?,
        })
    }

    fn compute_checksum(&self) -> u32 {
        crate::checkpointmanager::fnv32a(self.dump().as_bytes())
    }
}

impl CpuManagerState {
    /// The exclusive CPUs of a container, if it has any.
    pub fn cpuset(&self, pod_uid: &str, container: &str) -> Option<&CpuSet> {
        self.assignments
            .iter()
            .find(|a| a.pod_uid == pod_uid && a.container == container)
            .map(|a| &a.cpus)
    }

    /// A container's exclusive CPUs, else the shared pool (upstream
    /// GetCPUSetOrDefault).
    pub fn cpuset_or_default(&self, pod_uid: &str, container: &str) -> &CpuSet {
        self.cpuset(pod_uid, container)
            .unwrap_or(&self.default_cpu_set)
    }

    /// Records a container's exclusive CPUs, keeping the order the file
    /// and the checksum need.
    pub fn set_cpuset(&mut self, pod_uid: &str, container: &str, cpus: CpuSet) {
        self.delete(pod_uid, container);
        let at = self
            .assignments
            .partition_point(|a| (a.pod_uid.as_str(), a.container.as_str()) < (pod_uid, container));
        self.assignments.insert(
            at,
            Assignment {
                pod_uid: pod_uid.to_string(),
                container: container.to_string(),
                cpus,
            },
        );
    }

    pub fn delete(&mut self, pod_uid: &str, container: &str) {
        self.assignments
            .retain(|a| !(a.pod_uid == pod_uid && a.container == container));
    }

    /// Every CPU named in an exclusive assignment.
    pub fn assigned_cpus(&self) -> CpuSet {
        CpuSet::new(self.assignments.iter().flat_map(|a| a.cpus.iter()))
    }

    /// Upstream NewCheckpointState: the state in `dir`, or a new one for
    /// `policy` (written at once) when there is none. A corrupt file, one
    /// whose checksum does not match, or one of another policy stops the
    /// start with upstream's message.
    pub fn restore(dir: &Path, policy: &str) -> Result<CpuManagerState, StateError> {
        let path = dir.join(STATE_FILE);
        let fail = |reason: String| StateError::Restore {
            manager: MANAGER,
            reason,
            path: path.clone(),
        };
        let blob = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let state = CpuManagerState {
                    policy: policy.to_string(),
                    ..Default::default()
                };
                state.store(dir)?;
                return Ok(state);
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        let cp =
            Checkpoint::from_json(&blob).ok_or_else(|| fail("checkpoint is corrupted".into()))?;
        // A zero checksum is accepted, as upstream does for old files.
        if cp.checksum != 0 && cp.checksum != cp.compute_checksum() {
            return Err(fail("checkpoint is corrupted".into()));
        }
        if cp.policy_name != policy {
            return Err(fail(format!(
                "configured policy {policy:?} differs from state checkpoint policy {:?}",
                cp.policy_name
            )));
        }
        let parse = |what: &str, s: &str| {
            CpuSet::parse(s).map_err(|e| fail(format!("could not parse {what} {s:?}: {e}")))
        };
        let mut assignments = Vec::new();
        for (pod, containers) in &cp.entries {
            for (name, set) in containers.as_object().into_iter().flatten() {
                assignments.push(Assignment {
                    pod_uid: pod.clone(),
                    container: name.clone(),
                    cpus: parse("cpuset", set.as_str().unwrap_or_default())?,
                });
            }
        }
        Ok(CpuManagerState {
            policy: cp.policy_name.clone(),
            default_cpu_set: parse("default cpu set", &cp.default_cpu_set)?,
            assignments,
        })
    }

    /// Writes the file whole (a temporary file renamed over it).
    pub fn store(&self, dir: &Path) -> Result<(), StateError> {
        let path = dir.join(STATE_FILE);
        let body = Checkpoint::of(self).to_json();
        crate::checkpointmanager::write_atomic(&path, body.as_bytes()).map_err(|source| {
            StateError::Write {
                manager: MANAGER,
                path: path.clone(),
                source,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files upstream kubelets wrote, byte for byte.
    const NONE: &str = r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#;
    const STATIC: &str = r#"{"policyName":"static","defaultCpuSet":"0,2-12,14-23","entries":{"235148fe-393f-47a8-a17d-bd55bc1a836b":{"cgroup1-0":"1,13"}},"checksum":1552716370}"#;

    fn dir_with(content: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::TempDir::with_prefix("rkubelet-cpu-state-").unwrap();
        if let Some(c) = content {
            std::fs::write(dir.path().join(STATE_FILE), c).unwrap();
        }
        dir
    }

    #[test]
    fn a_new_none_state_is_written_as_upstream_writes_it() {
        let dir = dir_with(None);
        let st = CpuManagerState::restore(dir.path(), "none").unwrap();
        assert_eq!(st.policy, "none");
        let written = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
        assert_eq!(written, NONE);
        // and read back
        assert_eq!(CpuManagerState::restore(dir.path(), "none").unwrap(), st);
    }

    #[test]
    fn an_upstream_static_file_round_trips() {
        let dir = dir_with(Some(STATIC));
        let st = CpuManagerState::restore(dir.path(), "static").unwrap();
        assert_eq!(st.default_cpu_set.to_string(), "0,2-12,14-23");
        assert_eq!(
            st.assignments,
            vec![Assignment {
                pod_uid: "235148fe-393f-47a8-a17d-bd55bc1a836b".into(),
                container: "cgroup1-0".into(),
                cpus: CpuSet::parse("1,13").unwrap(),
            }]
        );
        st.store(dir.path()).unwrap();
        let written = std::fs::read_to_string(dir.path().join(STATE_FILE)).unwrap();
        assert_eq!(written, STATIC);
    }

    #[test]
    fn another_policy_or_a_corrupt_file_stops_the_start_with_upstreams_advice() {
        let dir = dir_with(Some(STATIC));
        let e = CpuManagerState::restore(dir.path(), "none")
            .unwrap_err()
            .to_string();
        let file = dir.path().join(STATE_FILE);
        assert_eq!(
            e,
            format!(
                "could not restore state from checkpoint: configured policy \"none\" differs from \
                 state checkpoint policy \"static\", please drain this node and delete the CPU \
                 manager checkpoint file {file:?} before restarting Kubelet"
            )
        );
        for bad in [
            NONE.replace("1353318690", "1353318691"),
            "{not json".to_string(),
            // the format of before upstream 1.18: entries by container ID
            r#"{"policyName":"none","defaultCpuSet":"","entries":{"c1":"1"},"checksum":1}"#.into(),
        ] {
            let dir = dir_with(Some(&bad));
            let e = CpuManagerState::restore(dir.path(), "none")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("could not restore state from checkpoint: checkpoint is corrupted"),
                "{bad}: {e}"
            );
        }
        // a zero checksum is accepted
        let dir = dir_with(Some(&NONE.replace("1353318690", "0")));
        assert!(CpuManagerState::restore(dir.path(), "none").is_ok());
    }
}
