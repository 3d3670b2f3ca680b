//! What a sync must do to bring a pod's runtime state to its spec (upstream
//! `computePodActions` in `kuberuntime_manager.go`). Pure: the pod and its
//! runtime status in, a plan out, so every branch is unit-tested.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Pod, Probe};

use super::init_actions;
use super::labels::container_hash;
use crate::container::{ContainerState, ContainerStatus, PodStatus};
use crate::podutil::{PodExt, RestartPolicy};
use crate::prober::ProbeKind;

/// A running container to stop, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerToKill {
    pub id: String,
    pub name: String,
    pub reason: String,
    /// The failed probe's own `terminationGracePeriodSeconds`, which
    /// replaces the pod's for this kill (upstream setTerminationGracePeriod).
    pub probe_grace: Option<i64>,
}

impl ContainerToKill {
    /// `spec`'s instance `running`, stopped because its `kind` probe
    /// failed; `who` is "Container" or "Init container".
    pub fn probe_failed(
        who: &str,
        spec: &Container,
        running: &ContainerStatus,
        kind: ProbeKind,
    ) -> Self {
        let (what, probe) = match kind {
            ProbeKind::Startup => ("startup", spec.startup_probe.as_ref()),
            _ => ("liveness", spec.liveness_probe.as_ref()),
        };
        ContainerToKill {
            id: running.id.clone(),
            name: spec.name.clone(),
            reason: format!("{who} {} failed {what} probe, will be restarted", spec.name),
            probe_grace: probe.and_then(|p: &Probe| p.termination_grace_period_seconds),
        }
    }
}

/// What the probes say about running containers, by container ID.
#[derive(Debug, Clone, Default)]
pub struct ProbeResults {
    /// The liveness or startup probe failed (which one, by container ID):
    /// the container is restarted.
    pub failed: HashMap<String, ProbeKind>,
    /// The startup probe passed. Only asked for containers that have one:
    /// a sidecar with a startup probe holds back the next init container
    /// until then.
    pub started: HashSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodActions {
    /// Stop every container and the sandbox first.
    pub kill_pod: bool,
    pub create_sandbox: bool,
    /// The sandbox to run containers in when it is kept.
    pub sandbox_id: Option<String>,
    /// Attempt number of the sandbox to create.
    pub attempt: u32,
    /// Indices into `spec.initContainers` of those to start, in order: the
    /// next one during initialization, and sidecars to restart.
    pub init_to_start: Vec<usize>,
    /// Indices into `spec.containers` of those to start.
    pub containers_to_start: Vec<usize>,
    pub containers_to_kill: Vec<ContainerToKill>,
    /// Indices into `spec.ephemeralContainers` of those to start: each one
    /// that has never run (upstream `EphemeralContainersToStart`).
    pub ephemeral_to_start: Vec<usize>,
}

pub fn compute_pod_actions(pod: &Pod, status: &PodStatus, probes: &ProbeResults) -> PodActions {
    let (create_sandbox, attempt, sandbox_id) = sandbox_changed(pod, status);
    let mut actions = PodActions {
        kill_pod: create_sandbox,
        create_sandbox,
        sandbox_id,
        attempt,
        ..Default::default()
    };

    if create_sandbox {
        plan_fresh_sandbox(pod, status, &mut actions);
        return actions;
    }

    // Ephemeral containers may start before initialization completes, and
    // never restart: one with any instance, whatever its exit, is done.
    actions.ephemeral_to_start = pod
        .ephemeral_containers()
        .iter()
        .enumerate()
        .filter(|(_, ec)| status.find_container(&ec.name).is_none())
        .map(|(i, _)| i)
        .collect();

    let initialized = init_actions::compute_init_actions(pod, status, probes, &mut actions);
    if actions.kill_pod || !initialized {
        // Initialization failed or is under way: app containers wait.
        return actions;
    }

    // Only regular containers keep a pod alive: running sidecars do not.
    let mut keep = 0;
    for (idx, container) in pod.containers().iter().enumerate() {
        let current = status.find_container(&container.name);
        match current {
            Some(c) if c.state == ContainerState::Running => {
                match kill_reason(container, c, &probes.failed) {
                    None => keep += 1,
                    Some(kill) => {
                        actions.containers_to_kill.push(kill);
                        if should_restart(container, pod, status, true) {
                            actions.containers_to_start.push(idx);
                        }
                    }
                }
            }
            _ => {
                if should_restart(container, pod, status, false) {
                    actions.containers_to_start.push(idx);
                }
            }
        }
    }

    // Nothing left running and nothing to start: the pod is done; stop the
    // sandbox and the sidecars with it (upstream kills the pod here too),
    // which must not be restarted to keep the pod alive.
    if keep == 0 && actions.containers_to_start.is_empty() {
        actions.kill_pod = true;
        actions.init_to_start.clear();
    }
    actions
}

fn kill_reason(
    spec: &Container,
    running: &ContainerStatus,
    probe_failed: &HashMap<String, ProbeKind>,
) -> Option<ContainerToKill> {
    if running.hash != container_hash(spec) {
        return Some(ContainerToKill {
            id: running.id.clone(),
            name: spec.name.clone(),
            reason: format!(
                "Container {} definition changed, will be restarted",
                spec.name
            ),
            probe_grace: None,
        });
    }
    let kind = probe_failed.get(&running.id)?;
    Some(ContainerToKill::probe_failed(
        "Container",
        spec,
        running,
        *kind,
    ))
}

/// Whether the sandbox must be (re)created, with the attempt number and the
/// current sandbox to use otherwise (upstream `podSandboxChanged`).
pub(crate) fn sandbox_changed(pod: &Pod, status: &PodStatus) -> (bool, u32, Option<String>) {
    let Some(newest) = status.sandboxes.first() else {
        return (true, 0, None);
    };
    let next_attempt = newest.attempt + 1;
    let ready_count = status.sandboxes.iter().filter(|s| s.ready).count();
    let changed = !newest.ready
        || ready_count > 1
        || newest.host_network != pod.is_host_network()
        || (!pod.is_host_network() && newest.ip.is_none());
    if changed {
        (true, next_attempt, Some(newest.id.clone()))
    } else {
        (false, newest.attempt, Some(newest.id.clone()))
    }
}

/// Plans a pod whose sandbox is new or recreated: start from the first init
/// container, or all app containers that should run.
fn plan_fresh_sandbox(pod: &Pod, status: &PodStatus, actions: &mut PodActions) {
    let policy = pod.restart_policy();
    // A pod that will not restart, whose containers already ran, stays done:
    // no new sandbox just to find nothing to start.
    if policy == RestartPolicy::Never && actions.attempt != 0 && !status.containers.is_empty() {
        actions.create_sandbox = false;
        return;
    }
    if !pod.init_containers().is_empty() {
        actions.init_to_start = vec![0];
        return;
    }
    for (idx, c) in pod.containers().iter().enumerate() {
        let succeeded = status
            .find_container(&c.name)
            .is_some_and(|s| s.state == ContainerState::Exited && s.exit_code == 0);
        if succeeded && policy == RestartPolicy::OnFailure {
            continue;
        }
        actions.containers_to_start.push(idx);
    }
    if actions.containers_to_start.is_empty() && actions.attempt != 0 {
        // OnFailure pod whose containers all succeeded: nothing to recreate.
        actions.create_sandbox = false;
    }
}

/// Upstream `ShouldContainerBeRestarted` for a container as it stands.
pub fn should_container_be_restarted(container: &Container, pod: &Pod, status: &PodStatus) -> bool {
    should_restart(container, pod, status, false)
}

/// Upstream `ShouldContainerBeRestarted`. `killing` is set when the current
/// instance is about to be killed and judged as if it had exited badly.
fn should_restart(container: &Container, pod: &Pod, status: &PodStatus, killing: bool) -> bool {
    if pod.is_being_deleted() {
        return false;
    }
    let Some(s) = status.find_container(&container.name) else {
        return true;
    };
    if killing {
        return pod.restart_policy() != RestartPolicy::Never;
    }
    match s.state {
        ContainerState::Running => false,
        ContainerState::Created | ContainerState::Unknown => true,
        ContainerState::Exited => match pod.restart_policy() {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => s.exit_code != 0,
            RestartPolicy::Always => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::SandboxStatus;
    use k8s_openapi::api::core::v1::PodSpec;
    use std::time::{Duration, SystemTime};

    fn spec_container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("busybox:1.36".into()),
            ..Default::default()
        }
    }

    fn pod(policy: &str, inits: &[&str], apps: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(policy.into()),
                init_containers: Some(inits.iter().map(|n| spec_container(n)).collect()),
                containers: apps.iter().map(|n| spec_container(n)).collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ready_sandbox() -> SandboxStatus {
        SandboxStatus {
            id: "sb1".into(),
            ready: true,
            attempt: 0,
            created_at: SystemTime::UNIX_EPOCH,
            ip: Some("10.0.0.2".into()),
            additional_ips: vec![],
            host_network: false,
        }
    }

    fn cstatus(
        pod: &Pod,
        name: &str,
        state: ContainerState,
        exit: i32,
        age: u64,
    ) -> ContainerStatus {
        // Ephemeral containers are never compared by hash.
        let hash = pod
            .containers()
            .iter()
            .chain(pod.init_containers())
            .find(|c| c.name == name)
            .map(container_hash)
            .unwrap_or_default();
        ContainerStatus {
            id: format!("{name}-{age}"),
            name: name.into(),
            state,
            created_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1000 - age),
            started_at: None,
            finished_at: None,
            exit_code: exit,
            image: String::new(),
            image_ref: String::new(),
            hash,
            restart_count: 0,
            reason: String::new(),
            message: String::new(),
            user: None,
        }
    }

    fn status(sandbox: bool, containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            sandboxes: if sandbox {
                vec![ready_sandbox()]
            } else {
                vec![]
            },
            containers,
            ..Default::default()
        }
    }

    fn none() -> ProbeResults {
        ProbeResults::default()
    }

    #[test]
    fn new_pod_creates_sandbox_and_starts_all() {
        let p = pod("Always", &[], &["a", "b"]);
        let a = compute_pod_actions(&p, &status(false, vec![]), &none());
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 0);
        assert_eq!(a.containers_to_start, vec![0, 1]);
    }

    #[test]
    fn running_pod_is_left_alone() {
        let p = pod("Always", &[], &["a"]);
        let st = status(true, vec![cstatus(&p, "a", ContainerState::Running, 0, 1)]);
        assert_eq!(
            compute_pod_actions(&p, &st, &none()),
            PodActions {
                sandbox_id: Some("sb1".into()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn exited_container_restart_policy() {
        for (policy, exit, restart) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 1, true),
            ("OnFailure", 0, false),
            ("Never", 1, false),
            ("Never", 0, false),
        ] {
            let p = pod(policy, &[], &["a"]);
            let st = status(
                true,
                vec![cstatus(&p, "a", ContainerState::Exited, exit, 1)],
            );
            let a = compute_pod_actions(&p, &st, &none());
            assert_eq!(
                !a.containers_to_start.is_empty(),
                restart,
                "{policy} exit {exit}"
            );
            // A finished pod stops its sandbox.
            assert_eq!(a.kill_pod, !restart, "{policy} exit {exit}");
        }
    }

    #[test]
    fn changed_spec_restarts_running_container() {
        let p = pod("Always", &[], &["a"]);
        let mut c = cstatus(&p, "a", ContainerState::Running, 0, 1);
        c.hash = "stale".into();
        let a = compute_pod_actions(&p, &status(true, vec![c]), &none());
        assert_eq!(a.containers_to_kill.len(), 1);
        assert_eq!(a.containers_to_start, vec![0]);
        assert!(!a.kill_pod);
    }

    #[test]
    fn a_probe_kill_carries_that_probes_grace() {
        let mut p = pod("Always", &[], &["a"]);
        let grace = |secs| Probe {
            termination_grace_period_seconds: Some(secs),
            ..Default::default()
        };
        if let Some(spec) = p.spec.as_mut() {
            spec.containers[0].liveness_probe = Some(grace(7));
            spec.containers[0].startup_probe = Some(grace(3));
        }
        let running = cstatus(&p, "a", ContainerState::Running, 0, 1);
        for (kind, want, what) in [
            (ProbeKind::Liveness, 7, "liveness"),
            (ProbeKind::Startup, 3, "startup"),
        ] {
            let failed = ProbeResults {
                failed: HashMap::from([(running.id.clone(), kind)]),
                ..Default::default()
            };
            let a = compute_pod_actions(&p, &status(true, vec![running.clone()]), &failed);
            let k = &a.containers_to_kill[0];
            assert_eq!(k.probe_grace, Some(want));
            assert_eq!(
                k.reason,
                format!("Container a failed {what} probe, will be restarted")
            );
        }
    }

    #[test]
    fn liveness_failure_restarts_unless_never() {
        for (policy, restart) in [("Always", true), ("Never", false)] {
            let p = pod(policy, &[], &["a", "b"]);
            let running_a = cstatus(&p, "a", ContainerState::Running, 0, 1);
            let running_b = cstatus(&p, "b", ContainerState::Running, 0, 1);
            let failed = ProbeResults {
                failed: HashMap::from([(running_a.id.clone(), ProbeKind::Liveness)]),
                ..Default::default()
            };
            let a = compute_pod_actions(&p, &status(true, vec![running_a, running_b]), &failed);
            assert_eq!(a.containers_to_kill[0].name, "a");
            assert_eq!(a.containers_to_start == vec![0], restart);
        }
    }

    #[test]
    fn init_containers_run_in_order() {
        let p = pod("Always", &["i1", "i2"], &["a"]);
        // Fresh sandbox: first init container only.
        let a = compute_pod_actions(&p, &status(false, vec![]), &none());
        assert_eq!(a.init_to_start, vec![0]);
        assert!(a.containers_to_start.is_empty());
        // i1 running: wait.
        let st = status(true, vec![cstatus(&p, "i1", ContainerState::Running, 0, 1)]);
        let a = compute_pod_actions(&p, &st, &none());
        assert_eq!((a.init_to_start.len(), a.containers_to_start.len()), (0, 0));
        // i1 done: i2 next.
        let st = status(true, vec![cstatus(&p, "i1", ContainerState::Exited, 0, 1)]);
        assert_eq!(compute_pod_actions(&p, &st, &none()).init_to_start, vec![1]);
        // Both done: app containers.
        let st = status(
            true,
            vec![
                cstatus(&p, "i2", ContainerState::Exited, 0, 1),
                cstatus(&p, "i1", ContainerState::Exited, 0, 2),
            ],
        );
        let a = compute_pod_actions(&p, &st, &none());
        assert_eq!(
            (a.init_to_start.clone(), a.containers_to_start.clone()),
            (vec![], vec![0])
        );
    }

    #[test]
    fn failed_init_container_retries_or_fails_pod() {
        let p = pod("Always", &["i1"], &["a"]);
        let st = status(true, vec![cstatus(&p, "i1", ContainerState::Exited, 3, 1)]);
        let a = compute_pod_actions(&p, &st, &none());
        assert_eq!(a.init_to_start, vec![0]);
        assert!(!a.kill_pod);
        let p = pod("Never", &["i1"], &["a"]);
        let st = status(true, vec![cstatus(&p, "i1", ContainerState::Exited, 3, 1)]);
        let a = compute_pod_actions(&p, &st, &none());
        assert!(a.kill_pod);
        assert_eq!(a.init_to_start, Vec::<usize>::new());
    }

    #[test]
    fn dead_sandbox_is_recreated_with_next_attempt() {
        let p = pod("Always", &[], &["a"]);
        let mut st = status(true, vec![cstatus(&p, "a", ContainerState::Exited, 0, 1)]);
        st.sandboxes[0].ready = false;
        st.sandboxes[0].attempt = 2;
        let a = compute_pod_actions(&p, &st, &none());
        assert!(a.create_sandbox && a.kill_pod);
        assert_eq!(a.attempt, 3);
        assert_eq!(a.containers_to_start, vec![0]);
    }

    #[test]
    fn finished_never_pod_gets_no_new_sandbox() {
        let p = pod("Never", &[], &["a"]);
        let mut st = status(true, vec![cstatus(&p, "a", ContainerState::Exited, 0, 1)]);
        st.sandboxes[0].ready = false;
        let a = compute_pod_actions(&p, &st, &none());
        assert!(!a.create_sandbox);
        assert!(a.containers_to_start.is_empty());
    }

    #[test]
    fn deleted_pod_starts_nothing() {
        let mut p = pod("Always", &[], &["a"]);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        let st = status(true, vec![cstatus(&p, "a", ContainerState::Exited, 1, 1)]);
        let a = compute_pod_actions(&p, &st, &none());
        assert!(a.containers_to_start.is_empty());
        assert!(a.kill_pod);
    }

    fn with_debugger(mut p: Pod, target: Option<&str>) -> Pod {
        if let Some(spec) = p.spec.as_mut() {
            spec.ephemeral_containers =
                Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                    name: "debugger".into(),
                    image: Some("busybox:1.36".into()),
                    target_container_name: target.map(str::to_string),
                    ..Default::default()
                }]);
        }
        p
    }

    #[test]
    fn ephemeral_container_starts_once_beside_running_pod() {
        let p = with_debugger(pod("Always", &[], &["a"]), Some("a"));
        let st = status(true, vec![cstatus(&p, "a", ContainerState::Running, 0, 1)]);
        let a = compute_pod_actions(&p, &st, &none());
        assert_eq!(a.ephemeral_to_start, vec![0]);
        assert!(!a.kill_pod && a.containers_to_start.is_empty());
        // Running, exited ok or failed: never started again, never killed.
        for (state, exit) in [
            (ContainerState::Running, 0),
            (ContainerState::Exited, 0),
            (ContainerState::Exited, 1),
            (ContainerState::Created, 0),
            (ContainerState::Unknown, 0),
        ] {
            let st = status(
                true,
                vec![
                    cstatus(&p, "debugger", state, exit, 1),
                    cstatus(&p, "a", ContainerState::Running, 0, 2),
                ],
            );
            assert_eq!(
                compute_pod_actions(&p, &st, &none()),
                PodActions {
                    sandbox_id: Some("sb1".into()),
                    ..Default::default()
                },
                "{state:?} {exit}"
            );
        }
    }

    #[test]
    fn ephemeral_container_may_start_during_init() {
        let p = with_debugger(pod("Always", &["i1"], &["a"]), None);
        let st = status(true, vec![cstatus(&p, "i1", ContainerState::Running, 0, 1)]);
        let a = compute_pod_actions(&p, &st, &none());
        assert_eq!(a.ephemeral_to_start, vec![0]);
        assert_eq!(a.init_to_start, Vec::<usize>::new());
    }

    #[test]
    fn new_sandbox_starts_no_ephemeral_container() {
        let p = with_debugger(pod("Always", &[], &["a"]), None);
        let a = compute_pod_actions(&p, &status(false, vec![]), &none());
        assert!(a.create_sandbox);
        assert!(a.ephemeral_to_start.is_empty());
    }

    #[test]
    fn running_ephemeral_container_does_not_keep_a_finished_pod() {
        // The pod's own containers are done: the pod is killed, debugger and all.
        let p = with_debugger(pod("Never", &[], &["a"]), Some("a"));
        let st = status(
            true,
            vec![
                cstatus(&p, "debugger", ContainerState::Running, 0, 1),
                cstatus(&p, "a", ContainerState::Exited, 0, 2),
            ],
        );
        let a = compute_pod_actions(&p, &st, &none());
        assert!(a.kill_pod);
        assert!(a.ephemeral_to_start.is_empty());
    }
}
