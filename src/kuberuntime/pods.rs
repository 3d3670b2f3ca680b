//! The runtime's view of pods (upstream GetPods and GetPodStatus, in
//! kuberuntime_manager.go): every pod its sandboxes' and containers'
//! labels make up, and one pod's statuses inspected.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::listing_memo::{self, container_state};
use super::{from_unix_nanos, labels, sandbox, KubeRuntimeManager};
use crate::container::{
    ContainerState, ContainerStatus, ContainerUser, LinuxContainerUser, PodStatus, RuntimePod,
    OOM_KILLED_REASON,
};
use crate::cri::{api, CriError};

impl KubeRuntimeManager {
    /// Every pod the runtime holds that carries the kubelet's labels; the
    /// same snapshot as the last call's when nothing changed since.
    pub fn get_pods(&self) -> Result<Arc<Vec<RuntimePod>>, CriError> {
        let (sandboxes, containers) = self.runtime.list_pod_sandbox_and_containers_raw()?;
        self.listings
            .pods(&sandboxes, &containers, group_pods)
            .map_err(|e| CriError {
                method: "ListPodSandbox/ListContainers",
                code: None,
                message: format!("decoding the answer: {e}"),
            })
    }

    /// Inspects one pod's sandboxes and containers (upstream GetPodStatus).
    pub fn get_pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodStatus, CriError> {
        let selector = HashMap::from([(labels::POD_UID_LABEL.to_string(), uid.to_string())]);
        let sb_filter = api::PodSandboxFilter {
            label_selector: selector.clone(),
            ..Default::default()
        };
        let mut sandboxes = Vec::new();
        for sb in self.runtime.list_pod_sandbox(Some(sb_filter))? {
            match self.runtime.pod_sandbox_status(&sb.id) {
                Ok(s) => sandboxes.push(sandbox::to_sandbox_status(&s)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let c_filter = api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        };
        let mut containers = Vec::new();
        for c in self.runtime.list_containers(Some(c_filter))? {
            match self.runtime.container_status(&c.id) {
                Ok(s) => {
                    let mut status = to_container_status(&s);
                    if status.may_be_unreported_oom_kill()
                        && crate::oom::container_oom_events(&status.id) > 0
                    {
                        // The kernel's record says what the runtime's
                        // answer has not caught up with yet.
                        status.reason = OOM_KILLED_REASON.to_string();
                    }
                    if status.state == ContainerState::Exited {
                        status.message = self.term_messages.message(uid, &s);
                    }
                    containers.push(status);
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let present: HashSet<&str> = containers.iter().map(|c| c.id.as_str()).collect();
        self.term_messages.retain(uid, &present);
        sandboxes.sort_by_key(|x| std::cmp::Reverse(x.created_at));
        containers.sort_by_key(|x| std::cmp::Reverse(x.created_at));
        Ok(PodStatus {
            uid: uid.to_string(),
            name: name.to_string(),
            namespace: namespace.to_string(),
            sandboxes,
            containers,
        })
    }
}

/// The kubelet's sandboxes and containers grouped by pod, newest first.
pub(super) fn group_pods(
    sandboxes: Vec<listing_memo::SandboxEntry>,
    containers: Vec<listing_memo::ContainerEntry>,
) -> Vec<RuntimePod> {
    let mut pods: HashMap<String, RuntimePod> = HashMap::new();
    for (id, sandbox) in sandboxes.into_iter().flatten() {
        pod_entry(&mut pods, id).sandboxes.push(sandbox);
    }
    for (id, container) in containers.into_iter().flatten() {
        pod_entry(&mut pods, id).containers.push(container);
    }
    let mut out: Vec<RuntimePod> = pods.into_values().collect();
    for p in &mut out {
        // The PLEG keeps this list until the listing changes: no spare room.
        p.sandboxes.shrink_to_fit();
        p.containers.shrink_to_fit();
        p.sandboxes.sort_by_key(|x| std::cmp::Reverse(x.created_at));
        p.containers
            .sort_by_key(|x| std::cmp::Reverse(x.created_at));
    }
    out
}

/// The runtime pod an object's labels assign it to.
fn pod_entry(pods: &mut HashMap<String, RuntimePod>, id: labels::PodIdentity) -> &mut RuntimePod {
    pods.entry(id.uid.clone())
        .or_insert_with(|| runtime_pod(id))
}

fn runtime_pod(id: labels::PodIdentity) -> RuntimePod {
    RuntimePod {
        uid: id.uid,
        name: id.name,
        namespace: id.namespace,
        ..Default::default()
    }
}

fn to_container_status(s: &api::ContainerStatus) -> ContainerStatus {
    let nonzero = |ns: i64| (ns > 0).then(|| from_unix_nanos(ns));
    ContainerStatus {
        id: s.id.clone(),
        name: s
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default(),
        state: container_state(s.state.enum_value_or_default()),
        created_at: from_unix_nanos(s.created_at),
        started_at: nonzero(s.started_at),
        finished_at: nonzero(s.finished_at),
        exit_code: s.exit_code,
        image: s
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        image_ref: s.image_ref.clone(),
        hash: s
            .annotations
            .get(labels::CONTAINER_HASH_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        restart_count: labels::restart_count(&s.annotations),
        reason: s.reason.clone(),
        message: s.message.clone(),
        user: s.user.as_ref().map(container_user),
    }
}

/// upstream toKubeContainerUser (Linux).
fn container_user(u: &api::ContainerUser) -> ContainerUser {
    ContainerUser {
        linux: u.linux.as_ref().map(|l| LinuxContainerUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: l.supplemental_groups.clone(),
        }),
    }
}
