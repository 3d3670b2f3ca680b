//! CPU and memory of a cgroup, read as cadvisor's libcontainer handler
//! reads them (`container/libcontainer/handler.go` setCPUStats,
//! setMemoryStats), for the pod-level figures of /stats/summary.
//!
//! | figure | v1 | v2 |
//! | --- | --- | --- |
//! | cpu usage (ns) | `cpuacct.usage` | `cpu.stat` `usage_usec` × 1000 |
//! | memory usage | `memory.usage_in_bytes` | `memory.current` |
//! | working set | usage − `memory.stat` `total_inactive_file` (≥ 0) | usage − `inactive_file` (≥ 0) |
//! | rss | `total_rss` | `anon` |
//! | page faults | `pgfault`, `pgmajfault` | `pgfault`, `pgmajfault` |
//! | limit | `memory.limit_in_bytes` | `memory.max` (`max`: none) |

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::cgroup_manager::{Hierarchies, Version};
use super::ContainerManager;

/// Above this a limit means "unlimited" (upstream isMemoryUnlimited).
const MAX_MEMORY_SIZE: u64 = 1 << 62;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    pub usage: u64,
    pub working_set: u64,
    pub rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
    /// None when unlimited.
    pub limit: Option<u64>,
}

impl MemoryUsage {
    /// limit − working set when limited (upstream availableBytes).
    pub fn available(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.working_set))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// Cumulative CPU time, in core-nanoseconds.
    pub cpu_usage_ns: Option<u64>,
    pub memory: Option<MemoryUsage>,
}

/// `key value` lines (memory.stat, cpu.stat).
fn flat_keyed(text: &str) -> HashMap<&str, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k, v.trim().parse().ok()?))
        })
        .collect()
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn read_keyed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn working_set(usage: u64, inactive_file: Option<u64>) -> u64 {
    usage.saturating_sub(inactive_file.unwrap_or(0))
}

fn limited(v: u64) -> Option<u64> {
    (v <= MAX_MEMORY_SIZE).then_some(v)
}

/// v1: `cpuacct` and `memory` are the cgroup's directories in those
/// hierarchies (either may be missing).
pub fn read_v1(cpuacct: Option<&Path>, memory: Option<&Path>) -> CgroupStats {
    let cpu_usage_ns = cpuacct.and_then(|d| read_u64(&d.join("cpuacct.usage")));
    let memory = memory.and_then(|d| {
        let usage = read_u64(&d.join("memory.usage_in_bytes"))?;
        let stat_text = read_keyed(&d.join("memory.stat")).unwrap_or_default();
        let stat = flat_keyed(&stat_text);
        Some(MemoryUsage {
            usage,
            working_set: working_set(usage, stat.get("total_inactive_file").copied()),
            rss: stat.get("total_rss").copied(),
            page_faults: stat.get("pgfault").copied(),
            major_page_faults: stat.get("pgmajfault").copied(),
            limit: read_u64(&d.join("memory.limit_in_bytes")).and_then(limited),
        })
    });
    CgroupStats {
        cpu_usage_ns,
        memory,
    }
}

/// v2: the cgroup's directory in the unified tree.
pub fn read_v2(dir: &Path) -> CgroupStats {
    let cpu_text = read_keyed(&dir.join("cpu.stat")).unwrap_or_default();
    let cpu_usage_ns = flat_keyed(&cpu_text)
        .get("usage_usec")
        .map(|us| us.saturating_mul(1000));
    let memory = read_u64(&dir.join("memory.current")).map(|usage| {
        let stat_text = read_keyed(&dir.join("memory.stat")).unwrap_or_default();
        let stat = flat_keyed(&stat_text);
        // "max" does not parse: no limit.
        let limit = read_u64(&dir.join("memory.max")).and_then(limited);
        MemoryUsage {
            usage,
            working_set: working_set(usage, stat.get("inactive_file").copied()),
            rss: stat.get("anon").copied(),
            page_faults: stat.get("pgfault").copied(),
            major_page_faults: stat.get("pgmajfault").copied(),
            limit,
        }
    });
    CgroupStats {
        cpu_usage_ns,
        memory,
    }
}

/// The cgroup at `rel` (on-disk, driver syntax) in whichever version.
pub fn read(h: &Hierarchies, rel: &str) -> CgroupStats {
    let rel = rel.trim_start_matches('/');
    match h.version {
        Version::V2 => read_v2(&h.mounts[0].path.join(rel)),
        Version::V1 => {
            let dir = |c: &str| controller_dir(h, c).map(|m| m.join(rel));
            read_v1(dir("cpuacct").as_deref(), dir("memory").as_deref())
        }
    }
}

fn controller_dir(h: &Hierarchies, controller: &str) -> Option<PathBuf> {
    h.mounts
        .iter()
        .find(|m| m.controllers.iter().any(|c| c == controller))
        .map(|m| m.path.clone())
}

impl ContainerManager {
    /// kubepods' directory on a v2 host (its memory.events feeds the OOM
    /// watcher when kmsg cannot be read); None on v1.
    pub fn kubepods_dir_v2(&self) -> Option<PathBuf> {
        let h = &self.cgroups.hierarchies;
        (h.version == Version::V2).then(|| {
            let rel = self.cgroups.name(&self.kubepods);
            h.mounts[0].path.join(rel.trim_start_matches('/'))
        })
    }

    /// CPU and memory of every pod cgroup, by pod UID, with the cgroup's
    /// path in the driver's syntax (cadvisor's `id`).
    pub fn pod_cgroup_stats(&self) -> HashMap<String, (String, CgroupStats)> {
        self.pods
            .pods_from_cgroups()
            .into_iter()
            .map(|(uid, name)| {
                let rel = self.cgroups.name(&name);
                let stats = read(&self.cgroups.hierarchies, &rel);
                (uid, (rel, stats))
            })
            .collect()
    }

    pub fn driver(&self) -> super::Driver {
        self.cfg.driver
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::cgroup_manager::Mount;
    use std::fs;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        fs::create_dir_all(dir).unwrap();
        for (f, v) in files {
            fs::write(dir.join(f), v).unwrap();
        }
    }

    const V1_MEMORY_STAT: &str = "cache 100\nrss 7\ninactive_file 5\npgfault 11\npgmajfault 2\n\
        total_cache 4096\ntotal_rss 20480\ntotal_inactive_file 3072\ntotal_pgfault 99\n";

    #[test]
    fn v1_files_map_as_cadvisor_reads_them() {
        let tmp = tempfile::TempDir::with_prefix("rk-cgstats-v1-").unwrap();
        let root = tmp.path();
        let rel = "kubepods/burstable/podu1";
        write(
            &root.join("cpuacct").join(rel),
            &[("cpuacct.usage", "123456789\n")],
        );
        write(
            &root.join("memory").join(rel),
            &[
                ("memory.usage_in_bytes", "10000\n"),
                ("memory.limit_in_bytes", "33554432\n"),
                ("memory.stat", V1_MEMORY_STAT),
            ],
        );
        let h = Hierarchies {
            version: Version::V1,
            mounts: ["cpu,cpuacct", "memory"]
                .iter()
                .map(|c| Mount {
                    path: root.join(c.split(',').next_back().unwrap()),
                    controllers: c.split(',').map(str::to_string).collect(),
                })
                .collect(),
            fake: true,
        };
        let s = read(&h, "/kubepods/burstable/podu1");
        assert_eq!(s.cpu_usage_ns, Some(123_456_789));
        let m = s.memory.unwrap();
        assert_eq!(
            m,
            MemoryUsage {
                usage: 10000,
                working_set: 10000 - 3072,
                rss: Some(20480),
                page_faults: Some(11),
                major_page_faults: Some(2),
                limit: Some(33554432),
            }
        );
        assert_eq!(m.available(), Some(33554432 - 6928));
    }

    #[test]
    fn v1_unlimited_and_inactive_above_usage() {
        let tmp = tempfile::TempDir::with_prefix("rk-cgstats-v1u-").unwrap();
        let root = tmp.path();
        write(
            root,
            &[
                ("memory.usage_in_bytes", "100\n"),
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.stat", "total_inactive_file 500\n"),
            ],
        );
        let s = read_v1(None, Some(root));
        let m = s.memory.unwrap();
        assert_eq!((m.working_set, m.limit, m.available()), (0, None, None));
        assert_eq!(s.cpu_usage_ns, None);
    }

    #[test]
    fn v2_files_map_as_cadvisor_reads_them() {
        let tmp = tempfile::TempDir::with_prefix("rk-cgstats-v2-").unwrap();
        let root = tmp.path();
        let dir =
            root.join("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu2.slice");
        write(
            &dir,
            &[
                ("cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n"),
                ("memory.current", "8192\n"),
                ("memory.max", "max\n"),
                (
                    "memory.stat",
                    "anon 4096\nfile 4096\ninactive_file 1024\nactive_file 3072\npgfault 7\npgmajfault 1\n",
                ),
            ],
        );
        let h = Hierarchies::v2(root);
        let s = read(
            &h,
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu2.slice",
        );
        assert_eq!(s.cpu_usage_ns, Some(2_500_000));
        assert_eq!(
            s.memory,
            Some(MemoryUsage {
                usage: 8192,
                working_set: 8192 - 1024,
                rss: Some(4096),
                page_faults: Some(7),
                major_page_faults: Some(1),
                limit: None,
            })
        );
        fs::write(dir.join("memory.max"), "16384\n").unwrap();
        assert_eq!(
            read_v2(&dir).memory.unwrap().available(),
            Some(16384 - 7168)
        );
    }

    #[test]
    fn a_missing_cgroup_reads_as_nothing() {
        let s = read_v2(Path::new("/nonexistent/rk"));
        assert_eq!(s, CgroupStats::default());
    }
}
