//! Node-level stats from the host, in place of cAdvisor's root container:
//! `/proc/stat` (CPU time, boot time), `/proc/meminfo` + `/proc/vmstat`
//! (memory, swap, page faults), `/proc/net/dev` + `/proc/net/route`
//! (interfaces), statvfs (filesystems), pid_max + sysinfo (rlimit).

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::types::{FsStats, InterfaceStats, MemoryStats, NetworkStats, SwapStats, Time};

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

/// `Key: value kB` lines -> bytes.
pub fn parse_meminfo(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, rest) = l.split_once(':')?;
            let mut f = rest.split_whitespace();
            let n: u64 = f.next()?.parse().ok()?;
            let mult = if f.next() == Some("kB") { 1024 } else { 1 };
            Some((k.trim().to_string(), n * mult))
        })
        .collect()
}

/// `key value` lines (/proc/vmstat).
pub fn parse_vmstat(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Node memory as cAdvisor reports the root cgroup: usage = total - free,
/// working set = usage - inactive file pages, available = total - working set.
pub fn memory_stats(
    meminfo: &HashMap<String, u64>,
    vmstat: &HashMap<String, u64>,
    time: Time,
) -> Option<MemoryStats> {
    let total = *meminfo.get("MemTotal")?;
    let free = meminfo.get("MemFree").copied().unwrap_or(0);
    let usage = total.saturating_sub(free);
    let inactive_file = meminfo.get("Inactive(file)").copied().unwrap_or(0);
    let working_set = usage.saturating_sub(inactive_file);
    Some(MemoryStats {
        time,
        available_bytes: Some(total.saturating_sub(working_set)),
        usage_bytes: Some(usage),
        working_set_bytes: Some(working_set),
        rss_bytes: meminfo.get("AnonPages").copied(),
        page_faults: vmstat.get("pgfault").copied(),
        major_page_faults: vmstat.get("pgmajfault").copied(),
    })
}

pub fn swap_stats(meminfo: &HashMap<String, u64>, time: Time) -> Option<SwapStats> {
    let total = *meminfo.get("SwapTotal")?;
    let free = meminfo.get("SwapFree").copied().unwrap_or(0);
    Some(SwapStats {
        time,
        swap_available_bytes: Some(free),
        swap_usage_bytes: Some(total.saturating_sub(free)),
    })
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

/// Capacity and free space of the filesystem holding `path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsInfo {
    pub capacity: u64,
    pub available: u64,
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

pub fn statvfs(path: &Path) -> Option<FsInfo> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: c is a valid C string; st is ours to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    let blocks = st.f_blocks as u64;
    Some(FsInfo {
        capacity: blocks * frsize,
        available: st.f_bavail as u64 * frsize,
        used: blocks.saturating_sub(st.f_bfree as u64) * frsize,
        inodes: st.f_files as u64,
        inodes_free: st.f_ffree as u64,
    })
}

impl FsInfo {
    /// The node's fs stats (usage of the whole filesystem).
    pub fn to_fs_stats(self, time: Time) -> FsStats {
        FsStats {
            time,
            available_bytes: Some(self.available),
            capacity_bytes: Some(self.capacity),
            used_bytes: Some(self.used),
            inodes_free: Some(self.inodes_free),
            inodes: Some(self.inodes),
            inodes_used: Some(self.inodes.saturating_sub(self.inodes_free)),
        }
    }
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

/// Number of processes on the node (sysinfo.procs, as upstream).
pub fn process_count() -> Option<i64> {
    // SAFETY: sysinfo fills the struct we own.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return None;
    }
    Some(i64::from(si.procs))
}
