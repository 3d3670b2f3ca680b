//! The pod conditions the kubelet owns (upstream `pkg/kubelet/status/
//! generate.go`): Initialized, Ready, ContainersReady and
//! PodReadyToStartContainers, with upstream's reasons and messages, and the
//! readiness-gate check (upstream `NeedToReconcilePodReadiness`).
//!
//! Pure: the pod, its container statuses and phase in, conditions out.
//! Transition times are left for the status manager.

use k8s_openapi::api::core::v1 as api;

use crate::podutil::{is_restartable_init, PodExt};

pub const POD_COMPLETED: &str = "PodCompleted";
pub const POD_FAILED: &str = "PodFailed";
pub const CONTAINERS_NOT_READY: &str = "ContainersNotReady";
pub const CONTAINERS_NOT_INITIALIZED: &str = "ContainersNotInitialized";
pub const READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// A condition as upstream builds it; `observedGeneration` is the pod's
/// generation (PodObservedGenerationTracking, on by default since 1.34).
fn cond(
    pod: &api::Pod,
    kind: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<String>,
) -> api::PodCondition {
    api::PodCondition {
        type_: kind.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message: message.filter(|m| !m.is_empty()),
        observed_generation: pod.metadata.generation,
        ..Default::default()
    }
}

/// Go's `%s` of a `[]string`: `[a b]`.
fn go_list(names: &[String]) -> String {
    format!("[{}]", names.join(" "))
}

fn find<'a>(statuses: &'a [api::ContainerStatus], name: &str) -> Option<&'a api::ContainerStatus> {
    statuses.iter().find(|s| s.name == name)
}

/// Upstream `GenerateContainersReadyCondition`. `statuses` holds the init
/// and the app containers' statuses.
pub fn containers_ready(
    pod: &api::Pod,
    statuses: &[api::ContainerStatus],
    phase: &str,
) -> api::PodCondition {
    const KIND: &str = "ContainersReady";
    let (mut unknown, mut unready) = (Vec::new(), Vec::new());
    let sidecars = pod
        .init_containers()
        .iter()
        .filter(|c| is_restartable_init(c));
    for c in sidecars.chain(pod.containers()) {
        match find(statuses, &c.name) {
            Some(s) if !s.ready => unready.push(c.name.clone()),
            Some(_) => {}
            None => unknown.push(c.name.clone()),
        }
    }
    if (phase == "Succeeded" && unknown.is_empty()) || phase == "Failed" {
        let reason = if phase == "Failed" {
            POD_FAILED
        } else {
            POD_COMPLETED
        };
        return cond(pod, KIND, "False", Some(reason), None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !unready.is_empty() {
        messages.push(format!(
            "containers with unready status: {}",
            go_list(&unready)
        ));
    }
    if messages.is_empty() {
        cond(pod, KIND, "True", None, None)
    } else {
        cond(
            pod,
            KIND,
            "False",
            Some(CONTAINERS_NOT_READY),
            Some(messages.join(", ")),
        )
    }
}

/// Upstream `GeneratePodReadyCondition`: containers ready, and every
/// readiness gate's condition (looked up in `conditions`) True.
pub fn pod_ready(
    pod: &api::Pod,
    conditions: &[api::PodCondition],
    statuses: &[api::ContainerStatus],
    phase: &str,
) -> api::PodCondition {
    const KIND: &str = "Ready";
    let cr = containers_ready(pod, statuses, phase);
    if cr.status != "True" {
        return cond(pod, KIND, &cr.status, cr.reason.as_deref(), cr.message);
    }
    let gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_deref())
        .unwrap_or_default();
    let messages: Vec<String> = gates
        .iter()
        .filter_map(|g| {
            let t = &g.condition_type;
            match conditions.iter().find(|c| &c.type_ == t) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate {t:?} does not exist."
                )),
                Some(c) if c.status != "True" => Some(format!(
                    "the status of pod readiness gate {t:?} is not \"True\", but {}",
                    c.status
                )),
                Some(_) => None,
            }
        })
        .collect();
    if messages.is_empty() {
        cond(pod, KIND, "True", None, None)
    } else {
        cond(
            pod,
            KIND,
            "False",
            Some(READINESS_GATES_NOT_READY),
            Some(messages.join(", ")),
        )
    }
}

/// Upstream `HasAnyRegularContainerStarted`.
fn any_regular_container_started(pod: &api::Pod, statuses: &[api::ContainerStatus]) -> bool {
    pod.containers().iter().any(|c| {
        find(statuses, &c.name)
            .and_then(|s| s.state.as_ref())
            .is_some_and(|st| st.running.is_some() || st.terminated.is_some())
    })
}

/// Upstream `GeneratePodInitializedCondition`.
pub fn initialized(
    pod: &api::Pod,
    statuses: &[api::ContainerStatus],
    phase: &str,
) -> api::PodCondition {
    const KIND: &str = "Initialized";
    let (mut unknown, mut incomplete) = (Vec::new(), Vec::new());
    for c in pod.init_containers() {
        let Some(s) = find(statuses, &c.name) else {
            unknown.push(c.name.clone());
            continue;
        };
        let done = if is_restartable_init(c) {
            s.started == Some(true)
        } else {
            s.ready
        };
        if !done {
            incomplete.push(c.name.clone());
        }
    }
    if phase == "Succeeded" && unknown.is_empty() {
        return cond(pod, KIND, "True", Some(POD_COMPLETED), None);
    }
    if any_regular_container_started(pod, statuses) {
        return cond(pod, KIND, "True", None, None);
    }
    let mut messages = Vec::new();
    if !unknown.is_empty() {
        messages.push(format!(
            "containers with unknown status: {}",
            go_list(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        messages.push(format!(
            "containers with incomplete status: {}",
            go_list(&incomplete)
        ));
    }
    if messages.is_empty() {
        cond(pod, KIND, "True", None, None)
    } else {
        cond(
            pod,
            KIND,
            "False",
            Some(CONTAINERS_NOT_INITIALIZED),
            Some(messages.join(", ")),
        )
    }
}

/// Upstream `GeneratePodReadyToStartContainersCondition`: True once the
/// pod has a sandbox that need not be recreated.
pub fn ready_to_start_containers(pod: &api::Pod, sandbox_ok: bool) -> api::PodCondition {
    let status = if sandbox_ok { "True" } else { "False" };
    cond(pod, "PodReadyToStartContainers", status, None, None)
}

/// PodScheduled: a pod the kubelet sees is scheduled.
pub fn scheduled(pod: &api::Pod) -> api::PodCondition {
    cond(pod, "PodScheduled", "True", None, None)
}

/// Upstream `NeedToReconcilePodReadiness`: the API's Ready condition of a
/// pod with readiness gates no longer matches what the gates say (another
/// writer changed a gate condition), so the pod must be synced.
pub fn need_to_reconcile_readiness(pod: &api::Pod) -> bool {
    let has_gates = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    if !has_gates {
        return false;
    }
    let Some(st) = pod.status.as_ref() else {
        return false;
    };
    let conditions = st.conditions.as_deref().unwrap_or_default();
    let Some(current) = conditions.iter().find(|c| c.type_ == "Ready") else {
        return false;
    };
    // Sidecars count towards Ready: their statuses are needed too (upstream
    // passes the app containers' alone here, so a pod with a sidecar and a
    // gate would look out of date at every check).
    let statuses: Vec<api::ContainerStatus> = st
        .init_container_statuses
        .iter()
        .chain(st.container_statuses.iter())
        .flatten()
        .cloned()
        .collect();
    let want = pod_ready(
        pod,
        conditions,
        &statuses,
        st.phase.as_deref().unwrap_or_default(),
    );
    current.status != want.status || current.message != want.message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(inits: &[&str], apps: &[&str], gates: &[&str]) -> api::Pod {
        let c = |n: &&str| api::Container {
            name: n.to_string(),
            ..Default::default()
        };
        api::Pod {
            spec: Some(api::PodSpec {
                init_containers: Some(inits.iter().map(c).collect()),
                containers: apps.iter().map(c).collect(),
                readiness_gates: Some(
                    gates
                        .iter()
                        .map(|g| api::PodReadinessGate {
                            condition_type: g.to_string(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn st(name: &str, ready: bool) -> api::ContainerStatus {
        api::ContainerStatus {
            name: name.into(),
            ready,
            ..Default::default()
        }
    }

    fn running(name: &str) -> api::ContainerStatus {
        api::ContainerStatus {
            name: name.into(),
            state: Some(api::ContainerState {
                running: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn c(kind: &str, status: &str) -> api::PodCondition {
        api::PodCondition {
            type_: kind.into(),
            status: status.into(),
            ..Default::default()
        }
    }

    fn summary(c: &api::PodCondition) -> (String, Option<String>, Option<String>) {
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn s(
        status: &str,
        reason: Option<&str>,
        msg: Option<&str>,
    ) -> (String, Option<String>, Option<String>) {
        (status.into(), reason.map(Into::into), msg.map(Into::into))
    }

    /// Upstream TestGenerateContainersReadyCondition's cases.
    #[test]
    fn containers_ready_cases() {
        let p = pod(&[], &["1234", "5678"], &[]);
        let cases = [
            (
                vec![],
                "Running",
                s(
                    "False",
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [1234 5678]"),
                ),
            ),
            (
                vec![st("1234", true)],
                "Running",
                s(
                    "False",
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unknown status: [5678]"),
                ),
            ),
            (
                vec![st("1234", true), st("5678", true)],
                "Running",
                s("True", None, None),
            ),
            (
                vec![st("1234", true), st("5678", false)],
                "Running",
                s(
                    "False",
                    Some(CONTAINERS_NOT_READY),
                    Some("containers with unready status: [5678]"),
                ),
            ),
            (
                vec![st("1234", false), st("5678", false)],
                "Succeeded",
                s("False", Some(POD_COMPLETED), None),
            ),
            (
                vec![st("1234", true)],
                "Failed",
                s("False", Some(POD_FAILED), None),
            ),
        ];
        for (statuses, phase, want) in cases {
            assert_eq!(
                summary(&containers_ready(&p, &statuses, phase)),
                want,
                "{statuses:?} {phase}"
            );
        }
    }

    /// Upstream TestGeneratePodReadyCondition's readiness-gate cases.
    #[test]
    fn ready_with_gates() {
        let all = [st("a", true)];
        let p = pod(&[], &["a"], &["gate1", "gate2"]);
        let got = pod_ready(&p, &[], &all, "Running");
        assert_eq!(
            summary(&got),
            s(
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some("corresponding condition of pod readiness gate \"gate1\" does not exist., corresponding condition of pod readiness gate \"gate2\" does not exist.")
            )
        );
        let got = pod_ready(
            &p,
            &[c("gate1", "True"), c("gate2", "False")],
            &all,
            "Running",
        );
        assert_eq!(
            summary(&got),
            s(
                "False",
                Some(READINESS_GATES_NOT_READY),
                Some("the status of pod readiness gate \"gate2\" is not \"True\", but False")
            )
        );
        let got = pod_ready(
            &p,
            &[c("gate1", "True"), c("gate2", "True")],
            &all,
            "Running",
        );
        assert_eq!(summary(&got), s("True", None, None));
        // Unready containers win over gates, with ContainersReady's words.
        let got = pod_ready(
            &p,
            &[c("gate1", "True"), c("gate2", "True")],
            &[st("a", false)],
            "Running",
        );
        assert_eq!(
            summary(&got),
            s(
                "False",
                Some(CONTAINERS_NOT_READY),
                Some("containers with unready status: [a]")
            )
        );
    }

    /// Upstream TestGeneratePodInitializedCondition's cases.
    #[test]
    fn initialized_cases() {
        let p = pod(&["i1", "i2"], &["a"], &[]);
        let got = initialized(&p, &[st("i1", true)], "Pending");
        assert_eq!(
            summary(&got),
            s(
                "False",
                Some(CONTAINERS_NOT_INITIALIZED),
                Some("containers with unknown status: [i2]")
            )
        );
        let got = initialized(&p, &[st("i1", true), st("i2", false)], "Pending");
        assert_eq!(
            summary(&got),
            s(
                "False",
                Some(CONTAINERS_NOT_INITIALIZED),
                Some("containers with incomplete status: [i2]")
            )
        );
        let got = initialized(&p, &[st("i1", true), st("i2", true)], "Pending");
        assert_eq!(summary(&got), s("True", None, None));
        let got = initialized(&p, &[st("i1", false), st("i2", false)], "Succeeded");
        assert_eq!(summary(&got), s("True", Some(POD_COMPLETED), None));
        // A started app container means init already completed.
        let got = initialized(
            &p,
            &[st("i1", false), st("i2", false), running("a")],
            "Running",
        );
        assert_eq!(summary(&got), s("True", None, None));
        // No init containers: initialized at once.
        let p = pod(&[], &["a"], &[]);
        assert_eq!(
            summary(&initialized(&p, &[], "Pending")),
            s("True", None, None)
        );
    }

    #[test]
    fn readiness_reconcile_only_on_mismatch() {
        let mut p = pod(&[], &["a"], &["g"]);
        let ready = |status: &str, msg: Option<&str>| api::PodCondition {
            message: msg.map(Into::into),
            ..c("Ready", status)
        };
        p.status = Some(api::PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![
                c("g", "True"),
                ready(
                    "False",
                    Some("the status of pod readiness gate \"g\" is not \"True\", but False"),
                ),
            ]),
            container_statuses: Some(vec![st("a", true)]),
            ..Default::default()
        });
        assert!(need_to_reconcile_readiness(&p));
        p.status.as_mut().unwrap().conditions = Some(vec![c("g", "True"), ready("True", None)]);
        assert!(!need_to_reconcile_readiness(&p));
        // Without gates, never.
        let mut q = pod(&[], &["a"], &[]);
        q.status = p.status.clone();
        assert!(!need_to_reconcile_readiness(&q));
    }

    #[test]
    fn readiness_reconcile_sees_sidecar_statuses() {
        let mut p = pod(&["s1"], &["a"], &["g"]);
        if let Some(sidecar) = p
            .spec
            .as_mut()
            .and_then(|s| s.init_containers.as_mut())
            .and_then(|c| c.first_mut())
        {
            sidecar.restart_policy = Some("Always".into());
        }
        p.status = Some(api::PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![c("g", "True"), c("Ready", "True")]),
            init_container_statuses: Some(vec![st("s1", true)]),
            container_statuses: Some(vec![st("a", true)]),
            ..Default::default()
        });
        // Up to date: the sidecar's status is where it belongs.
        assert!(!need_to_reconcile_readiness(&p));
        if let Some(st) = p.status.as_mut() {
            st.init_container_statuses = Some(vec![api::ContainerStatus {
                name: "s1".into(),
                ..Default::default()
            }]);
        }
        assert!(need_to_reconcile_readiness(&p));
    }
}
