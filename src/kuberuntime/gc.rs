//! Container and sandbox garbage collection (upstream
//! `kuberuntime_gc.go`, with MaxPerPodContainer = 1, MaxContainers = -1,
//! MinAge = 0: the kubelet's defaults).

use std::collections::{HashMap, HashSet};

use super::{ignore_not_found, KubeRuntimeManager};
use crate::container::{ContainerState, RuntimeContainer, RuntimePod};
use crate::cri::CriError;

/// Dead instances kept per container: the newest one carries the restart
/// count and exit status the next start and the pod status need.
const MAX_PER_POD_CONTAINER: usize = 1;

impl KubeRuntimeManager {
    /// Removes dead containers beyond what restart bookkeeping needs, and
    /// everything of pods no source wants any more (only once all sources
    /// have reported, so a slow source does not cost a pod its containers).
    pub fn garbage_collect(
        &self,
        desired: &HashSet<String>,
        all_sources_ready: bool,
    ) -> Result<(), CriError> {
        for pod in self.get_pods()?.iter() {
            let deleted = all_sources_ready && !desired.contains(&pod.uid);
            if deleted && !pod.is_running() {
                log::info!(
                    "removing runtime objects of deleted pod {}/{} ({})",
                    pod.namespace,
                    pod.name,
                    pod.uid
                );
                self.remove_pod(&pod.uid)?;
                continue;
            }
            for c in evictable_containers(pod) {
                log::debug!(
                    "removing dead container {} ({}) of pod {}",
                    c.id,
                    c.name,
                    pod.name
                );
                self.remove_container(&c.id)?;
            }
            for sb in evictable_sandboxes(pod) {
                ignore_not_found(self.runtime.remove_pod_sandbox(&sb))?;
            }
        }
        self.gc_backoffs();
        let running: std::collections::HashSet<String> =
            crate::container::running_container_ids(&self.get_pods()?)
                .map(str::to_owned)
                .collect();
        crate::logs::cleanup_dangling_symlinks(&self.cfg.container_logs_dir, &|id| {
            running.contains(id)
        });
        Ok(())
    }
}

/// Non-running instances of each container beyond the newest
/// MAX_PER_POD_CONTAINER (containers are sorted newest first).
fn evictable_containers(pod: &RuntimePod) -> Vec<&RuntimeContainer> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut out = Vec::new();
    for c in pod
        .containers
        .iter()
        .filter(|c| c.state != ContainerState::Running)
    {
        let n = seen.entry(c.name.as_str()).or_default();
        *n += 1;
        if *n > MAX_PER_POD_CONTAINER {
            out.push(c);
        }
    }
    out
}

/// Not-ready sandboxes other than the newest, with no containers left.
fn evictable_sandboxes(pod: &RuntimePod) -> Vec<String> {
    pod.sandboxes
        .iter()
        .skip(1)
        .filter(|s| !s.ready)
        .map(|s| s.id.clone())
        .filter(|_| pod.containers.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::RuntimeSandbox;
    use std::time::{Duration, SystemTime};

    fn c(id: &str, name: &str, state: ContainerState, age: u64) -> RuntimeContainer {
        RuntimeContainer {
            id: id.into(),
            name: name.into(),
            state,
            hash: String::new(),
            created_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1000 - age),
            grace_seconds: None,
        }
    }

    #[test]
    fn keeps_newest_dead_instance_per_container() {
        let pod = RuntimePod {
            containers: vec![
                c("a3", "a", ContainerState::Running, 1),
                c("a2", "a", ContainerState::Exited, 2),
                c("a1", "a", ContainerState::Exited, 3),
                c("b1", "b", ContainerState::Exited, 4),
            ],
            ..Default::default()
        };
        let ids: Vec<&str> = evictable_containers(&pod)
            .iter()
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(ids, vec!["a1"]);
    }

    #[test]
    fn old_empty_sandboxes_go() {
        let sb = |id: &str, ready: bool| RuntimeSandbox {
            id: id.into(),
            ready,
            created_at: SystemTime::UNIX_EPOCH,
        };
        let pod = RuntimePod {
            sandboxes: vec![sb("new", true), sb("old", false)],
            ..Default::default()
        };
        assert_eq!(evictable_sandboxes(&pod), vec!["old".to_string()]);
    }
}
