//! postStart hooks that never hold a pod worker. Upstream runs the hook
//! inside startContainer, blocking only that pod's goroutine; here an exec
//! hook is an async ExecSync completed on gRPC's completion-queue thread,
//! and an httpGet or sleep hook runs on the handler runner. While it runs,
//! the pod's next containers wait (as upstream's sequential starts do) but
//! no other pod does. A failed hook is recorded at
//! completion; the pod's next sync kills the container, which then restarts
//! per its restart policy, as upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rkubelet_util::lock;

/// Where one container's hook stands.
enum Hook {
    Running,
    Failed(String),
}

struct Entry {
    pod_uid: String,
    container: String,
    hook: Hook,
}

/// postStart hooks under way or failed, by container instance ID.
#[derive(Clone, Default)]
pub struct PostStartHooks {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
}

/// A hook that failed: the container to kill and why.
#[derive(Debug, PartialEq, Eq)]
pub struct FailedHook {
    pub container_id: String,
    pub container: String,
    pub message: String,
}

impl PostStartHooks {
    /// A hook of this instance has begun.
    pub fn started(&self, pod_uid: &str, container: &str, id: &str) {
        lock(&self.entries).insert(
            id.to_string(),
            Entry {
                pod_uid: pod_uid.to_string(),
                container: container.to_string(),
                hook: Hook::Running,
            },
        );
    }

    /// The hook finished: forgotten when it passed, kept for the pod's next
    /// sync when it failed.
    pub fn finished(&self, id: &str, result: Result<(), String>) {
        let mut entries = lock(&self.entries);
        match result {
            Ok(()) => {
                entries.remove(id);
            }
            Err(msg) => {
                if let Some(e) = entries.get_mut(id) {
                    e.hook = Hook::Failed(msg);
                }
            }
        }
    }

    /// Whether a hook of the pod is still running (its next containers wait).
    pub fn running(&self, pod_uid: &str) -> bool {
        lock(&self.entries)
            .values()
            .any(|e| e.pod_uid == pod_uid && matches!(e.hook, Hook::Running))
    }

    /// The pod's failed hooks, each handed out once.
    pub fn take_failed(&self, pod_uid: &str) -> Vec<FailedHook> {
        let mut entries = lock(&self.entries);
        let ids: Vec<String> = entries
            .iter()
            .filter(|(_, e)| e.pod_uid == pod_uid && matches!(e.hook, Hook::Failed(_)))
            .map(|(id, _)| id.clone())
            .collect();
        ids.into_iter()
            .filter_map(|id| {
                let e = entries.remove(&id)?;
                let Hook::Failed(message) = e.hook else {
                    return None;
                };
                Some(FailedHook {
                    container_id: id,
                    container: e.container,
                    message,
                })
            })
            .collect()
    }

    /// Forgets a pod (gone); a hook still running finds no entry and is
    /// dropped.
    pub fn forget_pod(&self, pod_uid: &str) {
        lock(&self.entries).retain(|_, e| e.pod_uid != pod_uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_hooks_hold_only_their_pod() {
        let h = PostStartHooks::default();
        h.started("p1", "web", "c1");
        assert!(h.running("p1"));
        assert!(!h.running("p2"));
        h.finished("c1", Ok(()));
        assert!(!h.running("p1"));
        assert!(h.take_failed("p1").is_empty());
    }

    #[test]
    fn a_failed_hook_is_handed_out_once() {
        let h = PostStartHooks::default();
        h.started("p1", "web", "c1");
        h.started("p1", "side", "c2");
        h.finished("c1", Err("exit 3".into()));
        assert!(h.running("p1"), "c2 still runs");
        assert_eq!(
            h.take_failed("p1"),
            [FailedHook {
                container_id: "c1".into(),
                container: "web".into(),
                message: "exit 3".into()
            }]
        );
        assert!(h.take_failed("p1").is_empty());
        h.forget_pod("p1");
        assert!(!h.running("p1"));
        h.finished("c2", Err("late".into()));
        assert!(
            h.take_failed("p1").is_empty(),
            "a forgotten pod stays forgotten"
        );
    }
}
