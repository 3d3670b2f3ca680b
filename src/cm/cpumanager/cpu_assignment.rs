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
use crate::cm::topologymanager::bitmask::MAX_NUMA_NODES;

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

/// upstream takeByTopologyNUMADistributed (KEP-2902, option
/// `distribute-cpus-across-numa`): a request that one NUMA node cannot
/// hold is spread evenly, in groups of `group` CPUs (a whole core under
/// `full-pcpus-only`), over the fewest nodes that can hold it. Among the
/// node sets of that size the one leaving the free CPUs per node most even
/// wins, and so does the subset that takes a remainder that does not
/// divide evenly. Each node's share is then packed as
/// [`take_by_topology`] packs. Requests that are not whole groups, or
/// that no node set can hold evenly, are packed as usual.
///
/// Upstream ranks node sets by the standard deviation of the free CPUs
/// per node, rounded to 1/1000; here the same spread is compared exactly,
/// as the integer n·Σx² − (Σx)². The search grows as 3^n in the nodes, so
/// machines with more than 8 (the topology manager's limit) are packed.
pub fn take_by_topology_numa_distributed(
    topology: &CpuTopology,
    available: &CpuSet,
    n: usize,
    group: usize,
) -> Result<CpuSet, NotEnoughCpus> {
    let group = group.max(1);
    if n == 0 || !n.is_multiple_of(group) {
        return take_by_topology(topology, available, n);
    }
    if available.len() < n {
        return Err(NotEnoughCpus);
    }
    let nodes = sorted_free_nodes(topology, available);
    if nodes.len() > MAX_NUMA_NODES {
        return take_by_topology(topology, available, n);
    }
    let free: Vec<usize> = nodes.iter().map(|(_, cpus)| cpus.len()).collect();
    let (min, max) = nodes_needed(topology, nodes.len(), n, group);
    for k in min..=max {
        let mut best: Option<(u64, Vec<usize>, Vec<usize>)> = None;
        for_each_combination(nodes.len(), k, &mut |combo| {
            if let Some((score, rest)) = spread(&free, combo, n, group) {
                if best.as_ref().is_none_or(|(b, _, _)| score < *b) {
                    best = Some((score, combo.to_vec(), rest));
                }
            }
            best.as_ref().is_none_or(|(b, _, _)| *b != 0)
        });
        if let Some((_, combo, rest)) = best {
            return take_spread(topology, &nodes, &combo, &rest, n, group);
        }
    }
    take_by_topology(topology, available, n)
}

/// The available CPUs by NUMA node, in upstream's sortAvailableNUMANodes
/// order: fewest free CPUs first; where a socket holds several nodes,
/// socket by socket, the socket with the fewest free CPUs first.
fn sorted_free_nodes(topology: &CpuTopology, available: &CpuSet) -> Vec<(u32, CpuSet)> {
    let details = topology.details();
    let free = |keep: &dyn Fn(&CpuInfo) -> bool| {
        CpuSet::new(
            details
                .iter()
                .filter(|d| keep(d) && available.contains(d.cpu))
                .map(|d| d.cpu),
        )
    };
    let numa_first = topology.num_sockets() >= topology.num_numa_nodes();
    let mut nodes: Vec<(u32, CpuSet)> = topology
        .numa_nodes()
        .into_iter()
        .map(|node| (node, free(&|d| d.numa_node == node)))
        .filter(|(_, cpus)| !cpus.is_empty())
        .collect();
    nodes.sort_by_cached_key(|(node, cpus)| {
        let socket = details
            .iter()
            .find(|d| d.numa_node == *node)
            .map_or(0, |d| d.socket);
        match numa_first {
            true => (0, 0, cpus.len(), *node),
            false => (
                free(&|d| d.socket == socket).len(),
                socket,
                cpus.len(),
                *node,
            ),
        }
    });
    nodes
}

/// upstream rangeNUMANodesNeededToSatisfy: the fewest and the most nodes
/// a request of `n` CPUs in groups of `group` can take.
fn nodes_needed(
    topology: &CpuTopology,
    nodes_free: usize,
    n: usize,
    group: usize,
) -> (usize, usize) {
    let all_nodes = topology.num_numa_nodes().max(1);
    let groups = topology.num_cpus().div_ceil(group);
    let groups_per_node = groups.div_ceil(all_nodes).max(1);
    let needed = n.div_ceil(group);
    (needed.div_ceil(groups_per_node), needed.min(nodes_free))
}

/// Whether the nodes at `combo` (indices into `free`) can hold `n` CPUs
/// evenly, in groups, and if so the spread this leaves and the nodes
/// that take the remainder.
fn spread(free: &[usize], combo: &[usize], n: usize, group: usize) -> Option<(u64, Vec<usize>)> {
    let share = n / combo.len() / group * group;
    let total: usize = combo.iter().map(|&i| free[i]).sum();
    let groups: usize = combo.iter().map(|&i| free[i] / group).sum();
    if total < n || groups * group < n || combo.iter().any(|&i| free[i] < share) {
        return None;
    }
    let mut after = free.to_vec();
    combo.iter().for_each(|&i| after[i] -= share);
    let remainder = n - share * combo.len();
    if remainder == 0 {
        return Some((unevenness(&after), Vec::new()));
    }
    let candidates: Vec<usize> = combo
        .iter()
        .copied()
        .filter(|&i| after[i] >= group)
        .collect();
    let mut best: Option<(u64, Vec<usize>)> = None;
    for k in (1..=candidates.len()).rev() {
        for_each_combination(candidates.len(), k, &mut |picked| {
            let subset: Vec<usize> = picked.iter().map(|&p| candidates[p]).collect();
            let mut left = after.clone();
            if take_remainder(&mut left, &subset, remainder, group) {
                let score = unevenness(&left);
                if best.as_ref().is_none_or(|(b, _)| score < *b) {
                    best = Some((score, subset));
                }
            }
            true
        });
    }
    best
}

/// Takes `remainder` CPUs a group at a time, round robin over `subset`;
/// false when they cannot hold it.
fn take_remainder(
    left: &mut [usize],
    subset: &[usize],
    mut remainder: usize,
    group: usize,
) -> bool {
    while remainder > 0 {
        let before = remainder;
        for &i in subset {
            if remainder > 0 && left[i] >= group {
                left[i] -= group;
                remainder -= group;
            }
        }
        if remainder == before {
            return false;
        }
    }
    true
}

/// n·Σx² − (Σx)²: zero when every node keeps as many free CPUs, larger
/// the more they differ (n² times the variance).
fn unevenness(free: &[usize]) -> u64 {
    let n = free.len() as u64;
    let sum: u64 = free.iter().map(|&x| x as u64).sum();
    let squares: u64 = free.iter().map(|&x| (x as u64) * (x as u64)).sum();
    (n * squares).saturating_sub(sum * sum)
}

/// The chosen spread: each node's share, then the remainder a group at a
/// time from the remainder nodes, every part packed by topology.
fn take_spread(
    topology: &CpuTopology,
    nodes: &[(u32, CpuSet)],
    combo: &[usize],
    rest: &[usize],
    n: usize,
    group: usize,
) -> Result<CpuSet, NotEnoughCpus> {
    let share = n / combo.len() / group * group;
    let mut result = CpuSet::default();
    let take = |i: usize, k: usize, result: &mut CpuSet| {
        let left = nodes[i].1.difference(result);
        let cpus = take_by_topology(topology, &left, k)?;
        *result = result.union(&cpus);
        Ok::<(), NotEnoughCpus>(())
    };
    for &i in combo {
        take(i, share, &mut result)?;
    }
    while result.len() < n {
        let before = result.len();
        for &i in rest {
            if result.len() < n && nodes[i].1.difference(&result).len() >= group {
                take(i, group, &mut result)?;
            }
        }
        if result.len() == before {
            return Err(NotEnoughCpus);
        }
    }
    Ok(result)
}

/// Calls `f` on every k-subset of 0..n, in lexicographic order, until it
/// answers false (upstream iterateCombinations).
fn for_each_combination(n: usize, k: usize, f: &mut dyn FnMut(&[usize]) -> bool) {
    if k == 0 || k > n {
        return;
    }
    let mut idx: Vec<usize> = (0..k).collect();
    loop {
        if !f(&idx) {
            return;
        }
        let Some(i) = (0..k).rev().find(|&i| idx[i] < n - k + i) else {
            return;
        };
        idx[i] += 1;
        for j in i + 1..k {
            idx[j] = idx[j - 1] + 1;
        }
    }
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

    /// Two sockets, each one NUMA node of 4 cores with 2 threads: node 0
    /// holds 0-3 and 8-11, node 1 4-7 and 12-15.
    #[test]
    fn distributed_spreads_evenly_over_the_fewest_nodes() {
        let t = topology(2, 4, 2, 2);
        let spread = |available: &str, n: usize, group: usize| {
            let available = CpuSet::parse(available).unwrap();
            take_by_topology_numa_distributed(&t, &available, n, group).map(|s| s.to_string())
        };
        // one node holds it: packed there, as without the option
        assert_eq!(spread("0-15", 8, 1).unwrap(), "0-3,8-11");
        // ten: five on each node rather than a socket and a core
        assert_eq!(spread("0-15", 10, 1).unwrap(), "0-2,4-6,8-9,12-13");
        // in whole cores: four each, then a core of remainder on node 0
        assert_eq!(spread("0-15", 10, 2).unwrap(), "0-2,4-5,8-10,12-13");
        // node 0 has two free: the four fit on node 1 alone, where
        // packing would take node 0's free core first
        assert_eq!(spread("3-7,11-15", 4, 1).unwrap(), "4-5,12-13");
        assert_eq!(take(&t, "3-7,11-15", 4).unwrap(), "3-4,11-12");
        // not whole groups: packed
        assert_eq!(spread("0-15", 3, 2).unwrap(), take(&t, "0-15", 3).unwrap());
        assert_eq!(spread("0-15", 0, 2).unwrap(), "");
        assert_eq!(spread("0-3", 6, 1), Err(NotEnoughCpus));
    }

    /// Four nodes of two CPUs on one socket: a request of six takes three
    /// nodes whole, the most even spread of what is left.
    #[test]
    fn distributed_picks_the_most_even_node_set() {
        let t = topology(1, 8, 1, 4);
        let available = CpuSet::parse("0-7").unwrap();
        let got = take_by_topology_numa_distributed(&t, &available, 6, 1).unwrap();
        assert_eq!(got.len(), 6);
        assert_eq!(got.to_string(), "0-5");
        // node 1 half used: one CPU from each of two full nodes and the
        // remainder from one of them leaves the free CPUs per node most
        // even; node 1's lone CPU stays free
        let available = CpuSet::parse("0-2,4-7").unwrap();
        let got = take_by_topology_numa_distributed(&t, &available, 3, 1).unwrap();
        assert_eq!(got.to_string(), "0-1,4");
    }

    #[test]
    fn combinations_come_in_order() {
        let mut seen = Vec::new();
        for_each_combination(4, 2, &mut |c| {
            seen.push(c.to_vec());
            true
        });
        assert_eq!(seen, [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]);
        let mut n = 0;
        for_each_combination(3, 1, &mut |_| {
            n += 1;
            false
        });
        assert_eq!(n, 1, "stops when told");
        for_each_combination(2, 3, &mut |_| unreachable!());
        assert_eq!(unevenness(&[3, 3]), 0);
        assert_eq!(unevenness(&[2, 4]), 4);
    }
}
