//! The node's memory from `/proc/meminfo` and `/proc/vmstat`, computed as
//! cAdvisor computes the root cgroup's and upstream eviction reads it
//! (`pkg/kubelet/eviction/helpers.go` makeSignalObservations): usage is
//! total − free, the working set is usage − inactive file pages, and
//! memory.available is capacity − working set.

use std::collections::BTreeMap;

/// The node's memory in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeMemory {
    /// MemTotal.
    pub capacity: u64,
    /// MemTotal − MemFree.
    pub usage: u64,
    /// usage − Inactive(file), at least 0.
    pub working_set: u64,
    /// capacity − working set, at least 0: the memory.available signal.
    pub available: u64,
    /// AnonPages.
    pub rss: Option<u64>,
    /// pgfault in /proc/vmstat.
    pub page_faults: Option<u64>,
    /// pgmajfault in /proc/vmstat.
    pub major_page_faults: Option<u64>,
    /// None when meminfo has no SwapTotal.
    pub swap: Option<SwapInfo>,
}

/// Swap in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapInfo {
    /// SwapFree.
    pub available: u64,
    /// SwapTotal − SwapFree.
    pub usage: u64,
}

/// `/proc/meminfo` as bytes by field: `MemTotal: 16318936 kB` →
/// 16710590464; a value without `kB` (`HugePages_Total: 3`) is a count and
/// kept as is. Lines that do not parse are skipped.
pub fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines().filter_map(parse_meminfo_line).collect()
}

fn parse_meminfo_line(line: &str) -> Option<(String, u64)> {
    let (key, rest) = line.split_once(':')?;
    let mut fields = rest.split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    let bytes = match fields.next() {
        Some("kB") => value.saturating_mul(1024),
        _ => value,
    };
    Some((key.trim().to_string(), bytes))
}

/// `/proc/vmstat`'s `key value` lines.
pub fn parse_vmstat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The working set: usage less the inactive file pages the kernel can drop
/// at once, at least 0.
pub fn working_set(usage: u64, inactive_file: u64) -> u64 {
    usage.saturating_sub(inactive_file)
}

/// memory.available as upstream eviction defines it: capacity − working
/// set, at least 0.
pub fn memory_available(capacity: u64, working_set: u64) -> u64 {
    capacity.saturating_sub(working_set)
}

/// The node's memory from parsed meminfo and vmstat; None without MemTotal.
pub fn node_memory(
    meminfo: &BTreeMap<String, u64>,
    vmstat: &BTreeMap<String, u64>,
) -> Option<NodeMemory> {
    let field = |k: &str| meminfo.get(k).copied();
    let capacity = field("MemTotal")?;
    let usage = capacity.saturating_sub(field("MemFree").unwrap_or(0));
    let working_set = working_set(usage, field("Inactive(file)").unwrap_or(0));
    Some(NodeMemory {
        capacity,
        usage,
        working_set,
        available: memory_available(capacity, working_set),
        rss: field("AnonPages"),
        page_faults: vmstat.get("pgfault").copied(),
        major_page_faults: vmstat.get("pgmajfault").copied(),
        swap: swap(meminfo),
    })
}

fn swap(meminfo: &BTreeMap<String, u64>) -> Option<SwapInfo> {
    let total = *meminfo.get("SwapTotal")?;
    let free = meminfo.get("SwapFree").copied().unwrap_or(0);
    Some(SwapInfo {
        available: free,
        usage: total.saturating_sub(free),
    })
}

/// The total task count in /proc/loadavg (`1.36 3.49 4.53 2/3518 3715089` → 3518).
pub fn parse_loadavg_tasks(text: &str) -> Option<u64> {
    let field = text.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}
