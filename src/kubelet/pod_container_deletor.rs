//! Upstream `pod_container_deletor.go`: when PLEG reports a container
//! died, its older dead instances go at once (`cleanUpContainersInPod`)
//! rather than waiting for the next container GC a minute later. The
//! removals run on the `gc` thread, fed by a bounded queue; when the queue
//! is full the periodic GC catches up, so the sync loop never blocks here.

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::container::{ContainerState, PodStatus};

/// Upstream's containerDeletorBufferLimit.
const BUFFER_LIMIT: usize = 50;
/// Dead instances of a container kept per pod (upstream
/// MaxPerPodContainerCount's default): the newest carries the restart
/// count and last exit status.
pub const CONTAINERS_TO_KEEP: usize = 1;

pub struct PodContainerDeletor {
    tx: Sender<String>,
    rx: Receiver<String>,
}

impl Default for PodContainerDeletor {
    fn default() -> Self {
        let (tx, rx) = bounded(BUFFER_LIMIT);
        PodContainerDeletor { tx, rx }
    }
}

impl PodContainerDeletor {
    /// The container IDs to remove, for the thread that removes them.
    pub fn queue(&self) -> Receiver<String> {
        self.rx.clone()
    }

    /// Queues the removal of the dead instances of the container that
    /// exited as `exited_id`, beyond the newest `keep`.
    pub fn delete_containers_in_pod(&self, exited_id: &str, status: &PodStatus, keep: usize) {
        for id in containers_to_delete(exited_id, status, keep) {
            match self.tx.try_send(id) {
                Ok(()) => {}
                Err(TrySendError::Full(id)) => {
                    log::debug!("container deletor queue full; GC will remove {id}");
                    return;
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

/// Exited instances of the same container (by name) as `exited_id`, the
/// newest `keep` spared, oldest last (upstream
/// getContainersToDeleteInPod). An ID the status does not know yields
/// nothing: the status is older than the event.
pub fn containers_to_delete(exited_id: &str, status: &PodStatus, keep: usize) -> Vec<String> {
    let Some(name) = status
        .containers
        .iter()
        .find(|c| c.id == exited_id)
        .map(|c| c.name.as_str())
    else {
        return Vec::new();
    };
    let mut dead: Vec<_> = status
        .containers
        .iter()
        .filter(|c| c.name == name && c.state == ContainerState::Exited)
        .collect();
    dead.sort_by_key(|c| std::cmp::Reverse(c.created_at));
    dead.into_iter().skip(keep).map(|c| c.id.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::ContainerStatus;
    use std::time::{Duration, SystemTime};

    fn ctr(id: &str, name: &str, state: ContainerState, age_s: u64) -> ContainerStatus {
        ContainerStatus {
            id: id.into(),
            name: name.into(),
            state,
            created_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1000 - age_s),
            started_at: None,
            finished_at: None,
            exit_code: 0,
            image: String::new(),
            image_ref: String::new(),
            hash: String::new(),
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            user: None,
        }
    }

    fn status(containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            uid: "u".into(),
            containers,
            ..Default::default()
        }
    }

    #[test]
    fn keeps_the_newest_dead_instance_of_that_container_only() {
        let s = status(vec![
            ctr("a3", "app", ContainerState::Running, 1),
            ctr("a1", "app", ContainerState::Exited, 30),
            ctr("a2", "app", ContainerState::Exited, 20),
            ctr("a0", "app", ContainerState::Exited, 40),
            ctr("s1", "side", ContainerState::Exited, 50),
            ctr("s0", "side", ContainerState::Exited, 60),
        ]);
        // The running one is never a candidate; "side" is another container.
        assert_eq!(containers_to_delete("a2", &s, 1), ["a1", "a0"]);
        assert_eq!(containers_to_delete("a2", &s, 0), ["a2", "a1", "a0"]);
        assert_eq!(containers_to_delete("s1", &s, 1), ["s0"]);
        assert!(containers_to_delete("unknown", &s, 1).is_empty());
    }

    #[test]
    fn a_full_queue_drops_instead_of_blocking() {
        let d = PodContainerDeletor::default();
        let many: Vec<_> = (0..BUFFER_LIMIT as u64 + 10)
            .map(|i| ctr(&format!("c{i}"), "app", ContainerState::Exited, i))
            .collect();
        d.delete_containers_in_pod("c0", &status(many), 1);
        assert_eq!(d.queue().len(), BUFFER_LIMIT);
    }
}
