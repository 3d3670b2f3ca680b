//! A cgroup's memory as cAdvisor reads it for upstream's summary (the
//! `pods` system container that allocatableMemory.available comes from):
//! usage, the limit, and the working set (usage − inactive file pages).

use std::path::Path;

use super::StatsError;

/// v1 writes "no limit" as a page-rounded i64::MAX; anything this large
/// is no limit.
const V1_UNLIMITED: u64 = 1 << 62;

/// A cgroup's memory in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupMemory {
    pub usage: u64,
    /// None when unlimited.
    pub limit: Option<u64>,
    /// usage − inactive_file, at least 0.
    pub working_set: u64,
}

fn read(dir: &Path, file: &str) -> Result<String, StatsError> {
    let path = dir.join(file);
    std::fs::read_to_string(&path).map_err(|source| StatsError::Read { path, source })
}

fn number(dir: &Path, file: &str) -> Result<u64, StatsError> {
    let text = read(dir, file)?;
    text.trim().parse().map_err(|_| StatsError::MissingField {
        path: dir.join(file),
        field: "a number",
    })
}

/// `memory.stat`'s `key value` lines, one field.
fn stat_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The memory of the cgroup directory `dir`, v1 (memory controller) or v2.
pub fn cgroup_memory(dir: &Path, v2: bool) -> Result<CgroupMemory, StatsError> {
    let (usage_file, limit_file, inactive_key) = if v2 {
        ("memory.current", "memory.max", "inactive_file")
    } else {
        (
            "memory.usage_in_bytes",
            "memory.limit_in_bytes",
            "total_inactive_file",
        )
    };
    let usage = number(dir, usage_file)?;
    let limit_text = read(dir, limit_file)?;
    let limit = match limit_text.trim() {
        "max" => None,
        t => t.parse::<u64>().ok().filter(|l| *l < V1_UNLIMITED),
    };
    let inactive = stat_field(&read(dir, "memory.stat")?, inactive_key).unwrap_or(0);
    Ok(CgroupMemory {
        usage,
        limit,
        working_set: super::node::working_set(usage, inactive),
    })
}
