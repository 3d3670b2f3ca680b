//! Node-level stats for the summary, in place of cAdvisor's root container:
//! `/proc/stat` (CPU time, boot time), `/proc/net/dev` + `/proc/net/route`
//! (interfaces), pid_max + sysinfo (rlimit). Memory and filesystems come
//! from the host stats provider ([`crate::stats`]), which node status reads
//! too; this file turns them into the summary's types.

use std::fs;
use std::path::Path;

use super::types::{FsStats, InterfaceStats, MemoryStats, NetworkStats, SwapStats, Time};
use crate::stats::{FsInfo, NodeMemory, SwapInfo};

/// Cumulative CPU of the whole node from the aggregate `cpu` line of
/// /proc/stat: user+nice+system+irq+softirq+steal (guest time is already in
/// user), converted from USER_HZ ticks to nanoseconds.
pub fn cpu_usage_ns(proc_stat: &str, clk_tck: u64) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let ticks = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
    let tck = clk_tck.max(1);
    Some(((ticks as u128) * 1_000_000_000 / tck as u128) as u64)
}

/// Boot time (btime, seconds since the epoch) from /proc/stat.
pub fn boot_time(proc_stat: &str) -> Option<i64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let v = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if v > 0 {
        v as u64
    } else {
        100
    }
}

/// The summary's node memory from the host's (working set and
/// memory.available as [`crate::stats::node`] defines them).
pub fn memory_stats(m: &NodeMemory, time: Time) -> MemoryStats {
    MemoryStats {
        time,
        available_bytes: Some(m.available),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: m.rss,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    }
}

pub fn swap_stats(s: SwapInfo, time: Time) -> SwapStats {
    SwapStats {
        time,
        swap_available_bytes: Some(s.available),
        swap_usage_bytes: Some(s.usage),
    }
}

/// Interfaces that are not the node's own (cAdvisor ignores these too).
fn is_virtual_interface(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "lo", "veth", "docker", "cni", "flannel", "cali", "cilium", "vxlan", "tunl", "kube-",
        "br-", "virbr", "nerdctl", "weave", "genev",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The interface of the default route in /proc/net/route.
pub fn default_route_interface(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
    })
}

/// /proc/net/dev -> node NetworkStats (the default-route interface inlined,
/// falling back to eth0 as cAdvisor, then to the first one).
pub fn network_stats(
    net_dev: &str,
    default_iface: Option<&str>,
    time: Time,
) -> Option<NetworkStats> {
    let mut ifaces = Vec::new();
    for l in net_dev.lines().skip(2) {
        let Some((name, rest)) = l.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if is_virtual_interface(name) {
            continue;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        if f.len() < 11 {
            continue;
        }
        ifaces.push(InterfaceStats {
            name: name.to_string(),
            rx_bytes: Some(f[0]),
            rx_errors: Some(f[2]),
            tx_bytes: Some(f[8]),
            tx_errors: Some(f[10]),
        });
    }
    if ifaces.is_empty() {
        return None;
    }
    let pick = |n: &str| ifaces.iter().find(|i| i.name == n).cloned();
    let default = default_iface
        .and_then(pick)
        .or_else(|| pick("eth0"))
        .unwrap_or_else(|| ifaces[0].clone());
    Some(NetworkStats {
        time,
        default,
        interfaces: ifaces,
    })
}

/// The node's fs stats (usage of the whole filesystem).
pub fn fs_stats(info: FsInfo, time: Time) -> FsStats {
    let mut s = FsStats {
        time,
        used_bytes: Some(info.used),
        inodes_used: Some(info.inodes.saturating_sub(info.inodes_free)),
        ..Default::default()
    };
    set_fs_capacity(&mut s, &info);
    s
}

/// The filesystem's size and free space, for stats whose usage the runtime
/// reported.
pub fn set_fs_capacity(s: &mut FsStats, info: &FsInfo) {
    s.available_bytes = Some(info.available);
    s.capacity_bytes = Some(info.capacity);
    s.inodes_free = Some(info.inodes_free);
    s.inodes = Some(info.inodes);
}

/// Disk usage (allocated blocks, as `du`) and file count under `dir`,
/// not following symlinks. Missing dir -> None.
pub fn disk_usage(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0u64;
    let mut inodes = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    let mut first = true;
    while let Some(d) = stack.pop() {
        let entries = match fs::read_dir(&d) {
            Ok(e) => e,
            Err(_) if first => return None,
            Err(_) => continue,
        };
        first = false;
        for e in entries.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Some((bytes, inodes))
}
