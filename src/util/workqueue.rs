//! The kubelet's resync queue (upstream `pkg/kubelet/util/queue`): pods
//! due for a periodic sync, taken by the sync loop on each sync tick.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rkubelet_util::lock;

#[derive(Default)]
pub struct WorkQueue {
    due: Mutex<HashMap<String, Instant>>,
}

impl WorkQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `uid` after `delay`; a later schedule replaces an earlier.
    pub fn enqueue(&self, uid: &str, delay: Duration) {
        let mut due = lock(&self.due);
        due.insert(uid.to_string(), Instant::now() + delay);
    }

    /// Takes every UID that is due.
    pub fn get_work(&self) -> Vec<String> {
        let now = Instant::now();
        let mut due = lock(&self.due);
        let ready: Vec<String> = due
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for u in &ready {
            due.remove(u);
        }
        ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_due_items_are_taken() {
        let q = WorkQueue::new();
        q.enqueue("a", Duration::ZERO);
        q.enqueue("b", Duration::from_secs(60));
        assert_eq!(q.get_work(), vec!["a".to_string()]);
        assert!(q.get_work().is_empty());
    }
}
