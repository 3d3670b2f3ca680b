//! A set of NUMA nodes (upstream `topologymanager/bitmask`): bit n is
//! node n. The topology manager refuses machines with more than
//! [`MAX_NUMA_NODES`] nodes, as upstream does, so a u64 always holds it.

use std::fmt;

/// upstream maxAllowableNUMANodes.
pub const MAX_NUMA_NODES: usize = 8;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BitMask(u64);

impl BitMask {
    /// Nodes numbered 64 and up cannot be held: the topology manager
    /// refuses such machines at start (upstream NewBitMask refuses them).
    pub fn of(nodes: impl IntoIterator<Item = u32>) -> BitMask {
        let bit = |n: u32| 1u64.checked_shl(n).unwrap_or(0);
        BitMask(nodes.into_iter().fold(0, |m, n| m | bit(n)))
    }

    pub fn count(self) -> u32 {
        self.0.count_ones()
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn is_set(self, node: u32) -> bool {
        node < 64 && self.0 & (1 << node) != 0
    }

    pub fn and(self, other: BitMask) -> BitMask {
        BitMask(self.0 & other.0)
    }

    /// Fewer nodes, or as many with lower node numbers (upstream
    /// IsNarrowerThan).
    pub fn is_narrower_than(self, other: BitMask) -> bool {
        match self.count().cmp(&other.count()) {
            std::cmp::Ordering::Equal => self.0 < other.0,
            o => o == std::cmp::Ordering::Less,
        }
    }

    pub fn nodes(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |n| self.is_set(*n))
    }
}

impl fmt::Display for BitMask {
    /// The nodes as a list, `0,1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes().map(|n| n.to_string()).collect();
        f.write_str(&nodes.join(","))
    }
}

/// Every non-empty combination of `nodes`, one node first, then two, and
/// so on (upstream IterateBitMasks).
pub fn iterate_bit_masks(nodes: &[u32], mut f: impl FnMut(BitMask)) {
    fn choose(nodes: &[u32], k: usize, from: usize, acc: BitMask, f: &mut dyn FnMut(BitMask)) {
        if k == 0 {
            f(acc);
            return;
        }
        for i in from..nodes.len() {
            let next = BitMask(acc.0 | 1u64.checked_shl(nodes[i]).unwrap_or(0));
            choose(nodes, k - 1, i + 1, next, f);
        }
    }
    for k in 1..=nodes.len() {
        choose(nodes, k, 0, BitMask::default(), &mut f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_iterate_by_size_then_order() {
        let mut seen = Vec::new();
        iterate_bit_masks(&[0, 1, 2], |m| seen.push(m.to_string()));
        assert_eq!(seen, ["0", "1", "2", "0,1", "0,2", "1,2", "0,1,2"]);
    }

    #[test]
    fn narrower_means_fewer_nodes_then_lower_ones() {
        let m = |n: &[u32]| BitMask::of(n.iter().copied());
        assert!(m(&[1]).is_narrower_than(m(&[0, 1])));
        assert!(m(&[0]).is_narrower_than(m(&[1])));
        assert!(!m(&[0, 1]).is_narrower_than(m(&[0])));
        assert!(!m(&[1]).is_narrower_than(m(&[1])));
        assert_eq!(m(&[0, 2]).and(m(&[2, 3])), m(&[2]));
        assert_eq!(m(&[0, 2]).count(), 2);
    }
}
