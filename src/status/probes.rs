//! Probe verdicts straight into the cached status (upstream
//! `SetContainerReadiness` and `SetContainerStartup`): a readiness change
//! reaches the API without waiting for a pod worker to run a full sync.
//! The sync still follows, as upstream's handleProbeSync does, and computes
//! the same values from the same prober results.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};

use super::{conditions, StatusManager};

impl StatusManager {
    /// Sets `ready` of the container instance `container_id` (the bare
    /// runtime ID) and recomputes the Ready and ContainersReady conditions.
    pub fn set_container_readiness(&self, pod: &Pod, container_id: &str, ready: bool) {
        self.update_container(pod, container_id, |c| {
            let changed = c.ready != ready;
            c.ready = ready;
            changed
        });
    }

    /// Sets `started` of the container instance `container_id`.
    pub fn set_container_startup(&self, pod: &Pod, container_id: &str, started: bool) {
        self.update_container(pod, container_id, |c| {
            let changed = c.started != Some(started);
            c.started = Some(started);
            changed
        });
    }

    /// Applies `f` to the cached status of one container instance; when it
    /// changed something, regenerates the two readiness conditions and
    /// stores the result. A pod or instance without a cached status is left
    /// alone: its first sync will generate everything.
    fn update_container(
        &self,
        pod: &Pod,
        container_id: &str,
        f: impl FnOnce(&mut ContainerStatus) -> bool,
    ) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let Some(mut status) = self.get(uid) else {
            return;
        };
        let instance = status
            .init_container_statuses
            .iter_mut()
            .flatten()
            .chain(status.container_statuses.iter_mut().flatten())
            .find(|c| is_instance(c, container_id));
        if !instance.is_some_and(f) {
            return;
        }
        let phase = status.phase.clone().unwrap_or_default();
        let all: Vec<ContainerStatus> = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
            .cloned()
            .collect();
        let conds = status.conditions.get_or_insert_with(Vec::new);
        let ready = conditions::pod_ready(pod, conds, &all, &phase);
        let containers_ready = conditions::containers_ready(pod, &all, &phase);
        replace(conds, ready);
        replace(conds, containers_ready);
        self.set_pod_status(pod, status);
    }
}

/// `containerID` is `<runtime>://<id>`.
fn is_instance(c: &ContainerStatus, id: &str) -> bool {
    !id.is_empty()
        && c.container_id
            .as_deref()
            .and_then(|cid| cid.split_once("://"))
            .is_some_and(|(_, bare)| bare == id)
}

/// Replaces the condition of the same type, keeping its place (or appends).
fn replace(conds: &mut Vec<PodCondition>, c: PodCondition) {
    match conds.iter_mut().find(|x| x.type_ == c.type_) {
        Some(slot) => *slot = c,
        None => conds.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                name: Some("p".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![
                    Container {
                        name: "a".into(),
                        ..Default::default()
                    },
                    Container {
                        name: "b".into(),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cs(name: &str, id: &str, ready: bool) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            container_id: Some(format!("containerd://{id}")),
            ready,
            ..Default::default()
        }
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t} condition in {s:?}"))
    }

    fn manager_with(status: PodStatus) -> StatusManager {
        let m = StatusManager::new();
        m.set_pod_status(&pod(), status);
        m
    }

    #[test]
    fn readiness_flips_the_container_and_both_conditions() {
        let p = pod();
        let m = manager_with(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![cs("a", "ida", true), cs("b", "idb", false)]),
            ..Default::default()
        });
        m.set_container_readiness(&p, "idb", true);
        let s = m.get("u1").unwrap();
        assert!(s
            .container_statuses
            .as_ref()
            .unwrap()
            .iter()
            .all(|c| c.ready));
        assert_eq!(cond(&s, "Ready").status, "True");
        assert_eq!(cond(&s, "ContainersReady").status, "True");

        m.set_container_readiness(&p, "ida", false);
        let s = m.get("u1").unwrap();
        assert_eq!(cond(&s, "Ready").status, "False");
        assert_eq!(
            cond(&s, "ContainersReady").message.as_deref(),
            Some("containers with unready status: [a]")
        );
    }

    /// A probe turning readiness True stamps the flipped conditions: the
    /// status PATCH sends the new time, never null (null deletes the field
    /// on the server; fidelity capture, pod st-running-ready).
    #[test]
    fn readiness_flip_sends_a_transition_time() {
        // Unready since long ago: the flip's time differs from it.
        let unready = |t: &str| PodCondition {
            type_: t.into(),
            status: "False".into(),
            last_transition_time: crate::status::generate::to_time(std::time::UNIX_EPOCH),
            ..Default::default()
        };
        let m = manager_with(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![unready("Ready"), unready("ContainersReady")]),
            container_statuses: Some(vec![cs("a", "ida", true), cs("b", "idb", false)]),
            ..Default::default()
        });
        let mut api = pod();
        api.status = m.get("u1");
        m.set_container_readiness(&api, "idb", true);
        let s = m.get("u1").unwrap();
        for t in ["Ready", "ContainersReady"] {
            assert!(cond(&s, t).last_transition_time.is_some(), "{t}: {s:?}");
        }
        let patch = super::super::status_patch(&api, &s);
        let conds = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 2, "{patch}");
        for c in conds {
            assert!(c["lastTransitionTime"].is_string(), "{patch}");
        }
    }

    #[test]
    fn another_instance_or_an_unknown_pod_changes_nothing() {
        let p = pod();
        let m = manager_with(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![cs("a", "ida", false), cs("b", "idb", false)]),
            ..Default::default()
        });
        let before = m.get("u1").unwrap();
        m.set_container_readiness(&p, "old-instance-of-a", true);
        m.set_container_readiness(&p, "", true);
        assert_eq!(m.get("u1").unwrap(), before);
        let mut other = pod();
        other.metadata.uid = Some("u2".into());
        m.set_container_readiness(&other, "ida", true);
        assert!(m.get("u2").is_none());
    }

    #[test]
    fn startup_sets_started() {
        let p = pod();
        let m = manager_with(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![cs("a", "ida", false)]),
            ..Default::default()
        });
        m.set_container_startup(&p, "ida", true);
        let s = m.get("u1").unwrap();
        assert_eq!(s.container_statuses.unwrap()[0].started, Some(true));
    }
}
