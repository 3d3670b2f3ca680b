//! Which CPUs an exclusive request takes (upstream `cpu_assignment.go`,
//! takeByTopology): whole sockets first when the request is at least a
//! socket, then whole cores when it is at least a core, then single
//! threads, preferring cores on the sockets already taken from and the
//! fullest-used sockets and cores, so that what is left stays in whole
//! cores and sockets for the next request.
//!
//! Upstream v1.22 sorts with comparators that are not a strict order
//! (`a < b || c < d`); here the same keys are compared in order, as
//! upstream's later releases do.

use crate::cm::cpuset::CpuSet;

use super::topology::{CpuInfo, CpuTopology};

/// upstream's message when the free CPUs cannot cover a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not enough cpus available to satisfy request")]
pub struct NotEnoughCpus;

/// `n` CPUs out of `available`, packed as upstream packs them.
pub fn take_by_topology(
    topology: &CpuTopology,
    available: &CpuSet,
    n: usize,
) -> Result<CpuSet, NotEnoughCpus> {
    let mut acc = Accumulator::new(topology, available, n);
    if acc.satisfied() {
        return Ok(acc.result());
    }
    if acc.free.len() < acc.needed {
        return Err(NotEnoughCpus);
    }
    if acc.needs(topology.cpus_per_socket()) {
        for socket in acc.free_sockets() {
            acc.take(|d| d.socket == socket);
            if acc.satisfied() {
                return Ok(acc.result());
            }
            if !acc.needs(topology.cpus_per_socket()) {
                break;
            }
        }
    }
    if acc.needs(topology.cpus_per_core()) {
        for core in acc.free_cores() {
            acc.take(|d| d.core == core);
            if acc.satisfied() {
                return Ok(acc.result());
            }
            if !acc.needs(topology.cpus_per_core()) {
                break;
            }
        }
    }
    for cpu in acc.free_cpus() {
        if acc.needs(1) {
            acc.take(|d| d.cpu == cpu);
        }
        if acc.satisfied() {
            return Ok(acc.result());
        }
    }
    Err(NotEnoughCpus)
}

struct Accumulator<'a> {
    topology: &'a CpuTopology,
    /// The available CPUs not taken yet.
    free: Vec<CpuInfo>,
    taken: Vec<CpuInfo>,
    needed: usize,
}

impl<'a> Accumulator<'a> {
    fn new(topology: &'a CpuTopology, available: &CpuSet, needed: usize) -> Self {
        let free = topology
            .details()
            .iter()
            .filter(|d| available.contains(d.cpu))
            .copied()
            .collect();
        Accumulator {
            topology,
            free,
            taken: Vec::new(),
            needed,
        }
    }

    fn take(&mut self, which: impl Fn(&CpuInfo) -> bool) {
        let (mut taken, free): (Vec<CpuInfo>, Vec<CpuInfo>) =
            self.free.iter().partition(|d| which(d));
        self.needed = self.needed.saturating_sub(taken.len());
        self.taken.append(&mut taken);
        self.free = free;
    }

    fn needs(&self, n: usize) -> bool {
        self.needed >= n
    }

    fn satisfied(&self) -> bool {
        self.needed == 0
    }

    fn result(&self) -> CpuSet {
        CpuSet::new(self.taken.iter().map(|d| d.cpu))
    }

    fn free_in(&self, keep: impl Fn(&CpuInfo) -> bool) -> usize {
        self.free.iter().filter(|d| keep(d)).count()
    }

    /// Sockets whose CPUs are all free, by ID.
    fn free_sockets(&self) -> Vec<i32> {
        let mut sockets = ids(self.free.iter().map(|d| d.socket));
        let whole = self.topology.cpus_per_socket();
        sockets.retain(|s| self.free_in(|d| d.socket == *s) == whole);
        sockets
    }

    /// Cores whose CPUs are all free: the sockets with the fewest free
    /// cores first, then by socket ID, and by core ID within a socket.
    fn free_cores(&self) -> Vec<u32> {
        let whole = self.topology.cpus_per_core();
        let mut cores = ids(self.free.iter().map(|d| d.core));
        cores.retain(|c| self.free_in(|d| d.core == *c) == whole);
        let socket_of = |core: u32| self.socket_of_core(core);
        let free_cores_on = |socket: i32| cores.iter().filter(|c| socket_of(**c) == socket).count();
        let mut keyed: Vec<(usize, i32, u32)> = cores
            .iter()
            .map(|&c| (free_cores_on(socket_of(c)), socket_of(c), c))
            .collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, _, c)| c).collect()
    }

    /// Free CPUs core by core: cores on the sockets this request already
    /// took most from, then on the sockets with the fewest free CPUs, then
    /// the cores with the fewest free CPUs, then by socket and core ID.
    fn free_cpus(&self) -> Vec<u32> {
        let mut cores = ids(self.free.iter().map(|d| d.core));
        let key = |core: u32| {
            let socket = self.socket_of_core(core);
            let colocated = self.taken.iter().filter(|d| d.socket == socket).count();
            (
                std::cmp::Reverse(colocated),
                self.free_in(|d| d.socket == socket),
                self.free_in(|d| d.core == core),
                socket,
                core,
            )
        };
        cores.sort_by_cached_key(|&c| key(c));
        cores
            .into_iter()
            .flat_map(|core| {
                let mut cpus: Vec<u32> = self
                    .free
                    .iter()
                    .filter(|d| d.core == core)
                    .map(|d| d.cpu)
                    .collect();
                cpus.sort_unstable();
                cpus
            })
            .collect()
    }

    fn socket_of_core(&self, core: u32) -> i32 {
        self.topology
            .details()
            .iter()
            .find(|d| d.core == core)
            .map_or(-1, |d| d.socket)
    }
}

/// The distinct values, sorted.
fn ids<T: Ord>(values: impl Iterator<Item = T>) -> Vec<T> {
    let mut v: Vec<T> = values.collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cm::cpumanager::topology::fake;

    fn topology(sockets: u32, cores: u32, threads: u32, nodes: u32) -> CpuTopology {
        let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
        fake::machine(dir.path(), sockets, cores, threads, nodes);
        CpuTopology::discover(dir.path()).unwrap()
    }

    fn take(t: &CpuTopology, available: &str, n: usize) -> Result<String, NotEnoughCpus> {
        take_by_topology(t, &CpuSet::parse(available).unwrap(), n).map(|s| s.to_string())
    }

    /// Two sockets of 4 cores with 2 threads: CPUs 0-3 and 8-11 on
    /// socket 0, 4-7 and 12-15 on socket 1; core c holds c and c+8.
    #[test]
    fn packs_sockets_then_cores_then_threads() {
        let t = topology(2, 4, 2, 2);
        assert_eq!(take(&t, "0-15", 0).unwrap(), "");
        // a whole socket when the request is one
        assert_eq!(take(&t, "0-15", 8).unwrap(), "0-3,8-11");
        // a socket and a core
        assert_eq!(take(&t, "0-15", 10).unwrap(), "0-4,8-12");
        // whole cores, on the socket with the fewest free cores
        assert_eq!(take(&t, "1-15", 2).unwrap(), "1,9");
        assert_eq!(take(&t, "0-15", 4).unwrap(), "0-1,8-9");
        // a thread: the sibling of a used core first
        assert_eq!(take(&t, "1-15", 1).unwrap(), "8");
        assert_eq!(take(&t, "0-15", 1).unwrap(), "0");
        // three: a core, then a thread next to it
        assert_eq!(take(&t, "0-15", 3).unwrap(), "0-1,8");
    }

    #[test]
    fn without_smt_cores_are_threads() {
        let t = topology(1, 2, 1, 0);
        assert_eq!(take(&t, "1", 1).unwrap(), "1");
        assert_eq!(take(&t, "0-1", 1).unwrap(), "0");
        assert_eq!(take(&t, "0-1", 2).unwrap(), "0-1");
        let t = topology(1, 8, 1, 4);
        assert_eq!(take(&t, "0,2-7", 3).unwrap(), "0,2-3");
    }

    #[test]
    fn too_few_free_cpus_is_upstreams_error() {
        let t = topology(1, 2, 1, 0);
        assert_eq!(take(&t, "1", 2), Err(NotEnoughCpus));
        assert_eq!(take(&t, "", 1), Err(NotEnoughCpus));
        assert_eq!(
            NotEnoughCpus.to_string(),
            "not enough cpus available to satisfy request"
        );
    }
}
