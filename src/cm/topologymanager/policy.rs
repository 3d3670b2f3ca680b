//! The policies' merge (upstream `policy.go`, `policy_best_effort.go`,
//! `policy_restricted.go`, `policy_single_numa_node.go`): every
//! combination of one hint per resource is ANDed into one affinity, and
//! the best is kept, a preferred one over any other, then the narrowest.

use super::bitmask::BitMask;
use super::{ResourceHints, TopologyHint};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        Some(match name {
            "" | "none" => Policy::None,
            "best-effort" => Policy::BestEffort,
            "restricted" => Policy::Restricted,
            "single-numa-node" => Policy::SingleNumaNode,
            _ => return None,
        })
    }

    /// The best hint for the providers' answers, and whether the policy
    /// admits it: best-effort always, restricted and single-numa-node only
    /// a preferred one. single-numa-node considers only one-node (or
    /// any-node) preferred hints, and answers "any node" for the hint that
    /// spans them all.
    pub fn merge(self, numa_nodes: &[u32], providers: &[ResourceHints]) -> (TopologyHint, bool) {
        let mut hints = filter_provider_hints(providers);
        if self == Policy::SingleNumaNode {
            hints = hints.into_iter().map(single_numa_hints).collect();
        }
        let mut best = merge_filtered_hints(numa_nodes, &hints);
        if self == Policy::SingleNumaNode
            && best.affinity == Some(BitMask::of(numa_nodes.iter().copied()))
        {
            best.affinity = None;
        }
        let admit = match self {
            Policy::None | Policy::BestEffort => true,
            Policy::Restricted | Policy::SingleNumaNode => best.preferred,
        };
        (best, admit)
    }
}

/// One list of hints per resource (upstream filterProvidersHints): a
/// provider without an answer, or a resource without hints, is a single
/// preferred any-node hint; an empty list stays a single not-preferred
/// any-node hint, so nothing merged with it is preferred.
fn filter_provider_hints(providers: &[ResourceHints]) -> Vec<Vec<TopologyHint>> {
    let any = |preferred| {
        vec![TopologyHint {
            affinity: None,
            preferred,
        }]
    };
    let mut out = Vec::new();
    for resources in providers {
        if resources.is_empty() {
            out.push(any(true));
            continue;
        }
        for (_, hints) in resources {
            out.push(match hints.is_empty() {
                true => any(false),
                false => hints.clone(),
            });
        }
    }
    out
}

/// upstream filterSingleNumaHints: preferred hints on one node, or on any.
fn single_numa_hints(hints: Vec<TopologyHint>) -> Vec<TopologyHint> {
    hints
        .into_iter()
        .filter(|h| h.preferred && h.affinity.is_none_or(|a| a.count() == 1))
        .collect()
}

/// upstream mergeFilteredHints: over every permutation (one hint from each
/// list), the preferred merged hint with the narrowest affinity; an empty
/// affinity never wins. Nothing better: any node, not preferred.
fn merge_filtered_hints(numa_nodes: &[u32], hints: &[Vec<TopologyHint>]) -> TopologyHint {
    let all = BitMask::of(numa_nodes.iter().copied());
    let mut best = TopologyHint {
        affinity: Some(all),
        preferred: false,
    };
    if hints.iter().any(Vec::is_empty) {
        return best;
    }
    let mut index = vec![0usize; hints.len()];
    loop {
        let merged = merge_permutation(all, hints.iter().zip(&index).map(|(h, i)| h[*i]));
        if better(&merged, &best) {
            best = merged;
        }
        if !next(&mut index, hints) {
            return best;
        }
    }
}

fn better(merged: &TopologyHint, best: &TopologyHint) -> bool {
    let affinity = merged.affinity.unwrap_or_default();
    if affinity.is_empty() {
        return false;
    }
    match (merged.preferred, best.preferred) {
        (true, false) => true,
        (false, true) => false,
        _ => affinity.is_narrower_than(best.affinity.unwrap_or_default()),
    }
}

/// The AND of the permutation's affinities (any node where none is
/// given); preferred only if every hint is.
fn merge_permutation(
    all: BitMask,
    permutation: impl Iterator<Item = TopologyHint>,
) -> TopologyHint {
    let mut affinity = all;
    let mut preferred = true;
    for h in permutation {
        affinity = affinity.and(h.affinity.unwrap_or(all));
        preferred &= h.preferred;
    }
    TopologyHint {
        affinity: Some(affinity),
        preferred,
    }
}

/// Advances the odometer over the lists; false once every permutation was
/// seen.
fn next(index: &mut [usize], hints: &[Vec<TopologyHint>]) -> bool {
    for (i, list) in index.iter_mut().zip(hints) {
        *i += 1;
        if *i < list.len() {
            return true;
        }
        *i = 0;
    }
    false
}
