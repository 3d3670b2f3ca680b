//! The machine's CPU topology (upstream `cpumanager/topology`): for each
//! online logical CPU, its socket, its core and its NUMA node, read from
//! sysfs as cAdvisor reads it for upstream's Discover.
//!
//! A core is named by the lowest CPU among its hyperthread siblings
//! (upstream getUniqueCoreID): sysfs' `core_id` repeats across sockets.

use std::path::{Path, PathBuf};

use crate::cm::cpuset::{CpuSet, CpuSetError};

/// Where one logical CPU sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuInfo {
    pub cpu: u32,
    pub core: u32,
    /// -1 where the firmware does not say (some ARM machines and VMs), as
    /// cAdvisor takes it.
    pub socket: i32,
    pub numa_node: u32,
}

/// The online CPUs, by CPU ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuTopology {
    details: Vec<CpuInfo>,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    List { path: PathBuf, source: CpuSetError },
    #[error("{path}: {text:?} is not a number")]
    Number { path: PathBuf, text: String },
    #[error("no online CPU in {0}")]
    NoCpus(PathBuf),
}

impl CpuTopology {
    /// Reads `<sysfs>/devices/system/cpu` and `<sysfs>/devices/system/node`.
    /// Without NUMA node directories every CPU is on node 0, as cAdvisor
    /// reports a machine without NUMA.
    pub fn discover(sysfs: &Path) -> Result<CpuTopology, TopologyError> {
        let cpu_dir = sysfs.join("devices/system/cpu");
        let online = read_list(&cpu_dir.join("online"))?;
        if online.is_empty() {
            return Err(TopologyError::NoCpus(cpu_dir));
        }
        let nodes = numa_nodes(&sysfs.join("devices/system/node"))?;
        let mut details = Vec::with_capacity(online.len());
        for cpu in online.iter() {
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            let socket = read_number(&topo.join("physical_package_id"))?;
            let siblings = read_list(&topo.join("thread_siblings_list"))?;
            let numa_node = nodes
                .iter()
                .find(|(_, cpus)| cpus.contains(cpu))
                .map_or(0, |(node, _)| *node);
            details.push(CpuInfo {
                cpu,
                core: siblings.iter().next().unwrap_or(cpu).min(cpu),
                socket,
                numa_node,
            });
        }
        Ok(CpuTopology { details })
    }

    pub fn details(&self) -> &[CpuInfo] {
        &self.details
    }

    pub fn cpus(&self) -> CpuSet {
        CpuSet::new(self.details.iter().map(|d| d.cpu))
    }

    pub fn num_cpus(&self) -> usize {
        self.details.len()
    }

    pub fn num_cores(&self) -> usize {
        self.count(|d| i64::from(d.core))
    }

    pub fn num_sockets(&self) -> usize {
        self.count(|d| i64::from(d.socket))
    }

    pub fn num_numa_nodes(&self) -> usize {
        self.count(|d| i64::from(d.numa_node))
    }

    /// The NUMA nodes' numbers, ascending.
    pub fn numa_nodes(&self) -> Vec<u32> {
        let mut n: Vec<u32> = self.details.iter().map(|d| d.numa_node).collect();
        n.sort_unstable();
        n.dedup();
        n
    }

    /// Hyperthreads per core (1 without SMT).
    pub fn cpus_per_core(&self) -> usize {
        self.num_cpus() / self.num_cores().max(1)
    }

    /// Logical CPUs per socket (upstream CPUsPerSocket).
    pub fn cpus_per_socket(&self) -> usize {
        self.num_cpus() / self.num_sockets().max(1)
    }

    /// The CPUs of a NUMA node, a socket or a core.
    #[cfg(test)]
    pub fn cpus_where(&self, keep: impl Fn(&CpuInfo) -> bool) -> CpuSet {
        CpuSet::new(self.details.iter().filter(|d| keep(d)).map(|d| d.cpu))
    }

    fn count(&self, key: impl Fn(&CpuInfo) -> i64) -> usize {
        let mut ids: Vec<i64> = self.details.iter().map(key).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
}

/// `nodeN/cpulist` of each NUMA node, by node number.
fn numa_nodes(dir: &Path) -> Result<Vec<(u32, CpuSet)>, TopologyError> {
    let dirs = match numa_node_dirs(dir) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TopologyError::Read {
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    dirs.into_iter()
        .map(|(n, path)| Ok((n, read_list(&path.join("cpulist"))?)))
        .collect()
}

/// The `nodeN` directories in `dir` (`<sysfs>/devices/system/node`), by
/// node number: what the CPU and memory managers read each node from.
pub(crate) fn numa_node_dirs(dir: &Path) -> std::io::Result<Vec<(u32, PathBuf)>> {
    let mut nodes: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)?
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let n = name.to_str()?.strip_prefix("node")?.parse::<u32>().ok()?;
            Some((n, entry.path()))
        })
        .collect();
    nodes.sort_unstable_by_key(|(n, _)| *n);
    Ok(nodes)
}

fn read(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|source| TopologyError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_list(path: &Path) -> Result<CpuSet, TopologyError> {
    CpuSet::parse(&read(path)?).map_err(|source| TopologyError::List {
        path: path.to_path_buf(),
        source,
    })
}

fn read_number(path: &Path) -> Result<i32, TopologyError> {
    let text = read(path)?;
    text.trim().parse().map_err(|_| TopologyError::Number {
        path: path.to_path_buf(),
        text: text.trim().to_string(),
    })
}

#[cfg(test)]
pub(crate) mod fake {
    //! Fake sysfs trees for the CPU and memory managers' tests.

    use std::fs;
    use std::path::Path;

    /// Writes a sysfs tree for `sockets` x `cores` x `threads` CPUs spread
    /// evenly over `numa_nodes` (0 writes no node directories). CPU IDs
    /// run over the first thread of every core, then the second, as Linux
    /// numbers them on x86.
    pub fn machine(root: &Path, sockets: u32, cores: u32, threads: u32, numa_nodes: u32) {
        let per_thread = sockets * cores;
        let total = per_thread * threads;
        let cpu_dir = root.join("devices/system/cpu");
        fs::create_dir_all(&cpu_dir).unwrap();
        fs::write(cpu_dir.join("online"), format!("0-{}\n", total - 1)).unwrap();
        for cpu in 0..total {
            let first = cpu % per_thread;
            let socket = first / cores;
            let siblings: Vec<String> = (0..threads)
                .map(|t| (first + t * per_thread).to_string())
                .collect();
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            fs::create_dir_all(&topo).unwrap();
            fs::write(topo.join("physical_package_id"), format!("{socket}\n")).unwrap();
            fs::write(topo.join("core_id"), format!("{}\n", first % cores)).unwrap();
            fs::write(topo.join("thread_siblings_list"), siblings.join(",") + "\n").unwrap();
        }
        for node in 0..numa_nodes {
            // Cores are split evenly between nodes, all threads with them.
            let per_node = per_thread / numa_nodes;
            let cpus: Vec<String> = (0..total)
                .filter(|c| (c % per_thread) / per_node == node)
                .map(|c| c.to_string())
                .collect();
            let dir = root.join(format!("devices/system/node/node{node}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("cpulist"), cpus.join(",") + "\n").unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn discover(sockets: u32, cores: u32, threads: u32, nodes: u32) -> CpuTopology {
        let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
        fake::machine(dir.path(), sockets, cores, threads, nodes);
        CpuTopology::discover(dir.path()).unwrap()
    }

    #[test]
    fn one_socket_without_smt_or_numa() {
        let t = discover(1, 2, 1, 0);
        assert_eq!((t.num_cpus(), t.num_cores(), t.num_sockets()), (2, 2, 1));
        assert_eq!(t.num_numa_nodes(), 1, "no node directories: all on node 0");
        assert_eq!(t.cpus_per_core(), 1);
        assert_eq!(t.cpus().to_string(), "0-1");
    }

    #[test]
    fn two_sockets_two_numa_nodes_with_smt() {
        let t = discover(2, 4, 2, 2);
        assert_eq!(
            (
                t.num_cpus(),
                t.num_cores(),
                t.num_sockets(),
                t.num_numa_nodes()
            ),
            (16, 8, 2, 2)
        );
        assert_eq!(t.cpus_per_core(), 2);
        // cpu 9 is the second thread of core 1 (cpu 1), socket 0, node 0
        assert_eq!(
            t.details()[9],
            CpuInfo {
                cpu: 9,
                core: 1,
                socket: 0,
                numa_node: 0
            }
        );
        assert_eq!(t.cpus_where(|d| d.numa_node == 1).to_string(), "4-7,12-15");
        assert_eq!(t.cpus_where(|d| d.core == 5).to_string(), "5,13");
        // core IDs stay unique across sockets although sysfs repeats them
        assert_eq!(t.details()[4].core, 4);
    }

    #[test]
    fn four_numa_nodes_on_one_socket_without_smt() {
        let t = discover(1, 8, 1, 4);
        assert_eq!(
            (
                t.num_cpus(),
                t.num_cores(),
                t.num_sockets(),
                t.num_numa_nodes()
            ),
            (8, 8, 1, 4)
        );
        assert_eq!(t.cpus_where(|d| d.numa_node == 3).to_string(), "6-7");
    }

    #[test]
    fn this_machine_reads() {
        let t = CpuTopology::discover(Path::new("/sys")).unwrap();
        assert!(t.num_cpus() >= 1);
        assert!(t.num_cores() <= t.num_cpus() && t.num_sockets() <= t.num_cores());
        let online =
            CpuSet::parse(&std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap())
                .unwrap();
        assert_eq!(t.cpus(), online);
    }

    #[test]
    fn a_socket_the_firmware_does_not_name_is_minus_one() {
        let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
        fake::machine(dir.path(), 1, 2, 1, 0);
        for cpu in 0..2 {
            let id = dir.path().join(format!(
                "devices/system/cpu/cpu{cpu}/topology/physical_package_id"
            ));
            std::fs::write(id, "-1\n").unwrap();
        }
        let t = CpuTopology::discover(dir.path()).unwrap();
        assert_eq!((t.num_sockets(), t.details()[1].socket), (1, -1));
    }

    #[test]
    fn a_broken_tree_names_the_file() {
        let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
        fake::machine(dir.path(), 1, 2, 1, 0);
        let id = dir
            .path()
            .join("devices/system/cpu/cpu1/topology/physical_package_id");
        std::fs::write(&id, "zero\n").unwrap();
        let e = CpuTopology::discover(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("cpu1/topology/physical_package_id") && e.contains("\"zero\""),
            "{e}"
        );
        std::fs::remove_file(&id).unwrap();
        let e = CpuTopology::discover(dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with("reading ") && e.contains("physical_package_id"),
            "{e}"
        );
    }
}
