//! The probe results cache (upstream `prober/results`): one result per
//! container ID and probe kind.

use std::collections::HashMap;

use super::{ProbeKind, ProbeResult};

#[derive(Default)]
pub(crate) struct Results {
    by_kind: [HashMap<String, ProbeResult>; 3],
}

fn index(kind: ProbeKind) -> usize {
    match kind {
        ProbeKind::Liveness => 0,
        ProbeKind::Readiness => 1,
        ProbeKind::Startup => 2,
    }
}

impl Results {
    pub fn get(&self, kind: ProbeKind, container_id: &str) -> Option<ProbeResult> {
        self.by_kind[index(kind)].get(container_id).copied()
    }

    /// Stores the result; true when it is new or changed (an update is due).
    pub fn set(&mut self, kind: ProbeKind, container_id: &str, result: ProbeResult) -> bool {
        let map = &mut self.by_kind[index(kind)];
        map.insert(container_id.to_string(), result) != Some(result)
    }

    pub fn remove(&mut self, kind: ProbeKind, container_id: &str) {
        self.by_kind[index(kind)].remove(container_id);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_kind.iter().map(HashMap::len).sum()
    }
}
