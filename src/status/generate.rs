//! The API PodStatus computed from the runtime's view (upstream
//! `generateAPIPodStatus`, `getPhase` and `convertToAPIContainerStatuses`
//! in `kubelet_pods.go`).

use std::time::SystemTime;

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::container::{ContainerState, ContainerStatus, PodStatus};
use crate::kuberuntime::qos;
use crate::podutil::{PodExt, RestartPolicy};

/// What status generation needs besides the pod and its runtime status.
pub struct StatusContext<'a> {
    /// `containerd`, from CRI Version: container IDs are `containerd://<id>`.
    pub runtime_name: &'a str,
    pub host_ip: Option<&'a str>,
    /// Why a container is waiting, as the last sync recorded it.
    pub waiting_reason: &'a dyn Fn(&str) -> Option<(String, String)>,
    /// Whether a running container passes its readiness probe.
    pub is_ready: &'a dyn Fn(&str) -> bool,
    /// Whether a running container passed its startup probe.
    pub is_started: &'a dyn Fn(&str) -> bool,
    /// The kubelet stopped the pod for good: its phase is final.
    pub pod_is_terminal: bool,
}

pub fn generate_api_pod_status(
    pod: &api::Pod,
    status: &PodStatus,
    ctx: &StatusContext<'_>,
) -> api::PodStatus {
    let init_statuses = container_statuses(pod, pod.init_containers(), status, ctx);
    let statuses = container_statuses(pod, pod.containers(), status, ctx);
    let phase = phase(pod, &init_statuses, &statuses, ctx.pod_is_terminal);
    let pod_ips = if pod.is_host_network() {
        ctx.host_ip
            .map(|ip| vec![ip.to_string()])
            .unwrap_or_default()
    } else {
        status.ips()
    };
    let conditions = conditions(pod, status, &init_statuses, &statuses, phase);
    api::PodStatus {
        phase: Some(phase.to_string()),
        conditions: Some(conditions),
        host_ip: ctx.host_ip.map(str::to_string),
        host_ips: ctx
            .host_ip
            .map(|ip| vec![api::HostIP { ip: ip.to_string() }]),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty()).then(|| {
            pod_ips
                .iter()
                .map(|ip| api::PodIP { ip: ip.clone() })
                .collect()
        }),
        init_container_statuses: (!pod.init_containers().is_empty()).then_some(init_statuses),
        container_statuses: Some(statuses),
        qos_class: Some(qos::qos_class(pod).as_str().to_string()),
        ..Default::default()
    }
}

pub fn to_time(t: SystemTime) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(t).ok().map(Time)
}

fn container_statuses(
    pod: &api::Pod,
    specs: &[api::Container],
    status: &PodStatus,
    ctx: &StatusContext<'_>,
) -> Vec<api::ContainerStatus> {
    specs
        .iter()
        .map(|spec| {
            let mut instances = status.containers.iter().filter(|c| c.name == spec.name);
            let newest = instances.next();
            let previous = instances.next();
            let mut s = api::ContainerStatus {
                name: spec.name.clone(),
                image: spec.image.clone().unwrap_or_default(),
                image_id: newest.map(|c| c.image_ref.clone()).unwrap_or_default(),
                container_id: newest.map(|c| format!("{}://{}", ctx.runtime_name, c.id)),
                restart_count: newest.map_or(0, |c| c.restart_count as i32),
                state: Some(newest.map_or_else(|| waiting("ContainerCreating", ""), to_state)),
                last_state: previous
                    .filter(|c| c.state == ContainerState::Exited)
                    .map(to_state),
                ready: false,
                started: Some(false),
                ..Default::default()
            };
            let running = newest.is_some_and(|c| c.state == ContainerState::Running);
            if running {
                s.started = Some((ctx.is_started)(&spec.name));
                s.ready = (ctx.is_ready)(&spec.name);
            }
            // A container the last sync could not (re)start shows why it
            // waits; its finished instance becomes the last state.
            if !running && will_restart(pod, newest) {
                if let Some((reason, message)) = (ctx.waiting_reason)(&spec.name) {
                    if newest.is_some_and(|c| c.state == ContainerState::Exited) {
                        s.last_state = s.state.take();
                    }
                    s.state = Some(waiting(&reason, &message));
                }
            }
            s
        })
        .collect()
}

fn will_restart(pod: &api::Pod, newest: Option<&ContainerStatus>) -> bool {
    if pod.is_being_deleted() {
        return false;
    }
    match newest {
        None => true,
        Some(c) => match (c.state, pod.restart_policy()) {
            (ContainerState::Exited, RestartPolicy::Never) => false,
            (ContainerState::Exited, RestartPolicy::OnFailure) => c.exit_code != 0,
            _ => true,
        },
    }
}

fn waiting(reason: &str, message: &str) -> api::ContainerState {
    api::ContainerState {
        waiting: Some(api::ContainerStateWaiting {
            reason: Some(reason.to_string()),
            message: (!message.is_empty()).then(|| message.to_string()),
        }),
        ..Default::default()
    }
}

fn to_state(c: &ContainerStatus) -> api::ContainerState {
    match c.state {
        ContainerState::Running => api::ContainerState {
            running: Some(api::ContainerStateRunning {
                started_at: c.started_at.and_then(to_time),
            }),
            ..Default::default()
        },
        ContainerState::Exited => api::ContainerState {
            terminated: Some(api::ContainerStateTerminated {
                exit_code: c.exit_code,
                reason: Some(if c.reason.is_empty() {
                    if c.exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    }
                    .to_string()
                } else {
                    c.reason.clone()
                }),
                message: (!c.message.is_empty()).then(|| c.message.clone()),
                started_at: c.started_at.and_then(to_time),
                finished_at: c.finished_at.and_then(to_time),
                container_id: Some(c.id.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ContainerState::Created | ContainerState::Unknown => waiting("ContainerCreating", ""),
    }
}

fn is_running(s: &api::ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn terminated_exit(s: &api::ContainerStatus) -> Option<i32> {
    s.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

fn last_terminated_exit(s: &api::ContainerStatus) -> Option<i32> {
    s.last_state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

/// Upstream `getPhase`.
fn phase(
    pod: &api::Pod,
    inits: &[api::ContainerStatus],
    apps: &[api::ContainerStatus],
    terminal: bool,
) -> &'static str {
    let (mut pending_init, mut failed_init) = (0, 0);
    for s in inits {
        match (terminated_exit(s), last_terminated_exit(s)) {
            _ if is_running(s) => pending_init += 1,
            (Some(code), _) => failed_init += usize::from(code != 0),
            (None, Some(code)) if s.state.as_ref().is_some_and(|st| st.waiting.is_some()) => {
                failed_init += usize::from(code != 0)
            }
            _ => pending_init += 1,
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded, mut unknown) = (0, 0, 0, 0, 0);
    for s in apps {
        if is_running(s) {
            running += 1;
        } else if let Some(code) = terminated_exit(s) {
            stopped += 1;
            succeeded += usize::from(code == 0);
        } else if s.state.as_ref().is_some_and(|st| st.waiting.is_some()) {
            if last_terminated_exit(s).is_some() {
                stopped += 1;
            } else {
                waiting += 1;
            }
        } else {
            unknown += 1;
        }
    }
    let policy = pod.restart_policy();
    if failed_init > 0 && policy == RestartPolicy::Never {
        return "Failed";
    }
    if pending_init > 0 || failed_init > 0 || waiting > 0 {
        return "Pending";
    }
    if running > 0 && unknown == 0 {
        return "Running";
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if terminal {
            return if stopped == succeeded {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        return match policy {
            RestartPolicy::Always => "Running",
            RestartPolicy::OnFailure if stopped == succeeded => "Succeeded",
            RestartPolicy::OnFailure => "Running",
            RestartPolicy::Never if stopped == succeeded => "Succeeded",
            RestartPolicy::Never => "Failed",
        };
    }
    "Pending"
}

fn condition(kind: &str, ok: bool, reason: Option<&str>) -> api::PodCondition {
    api::PodCondition {
        type_: kind.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: if ok { None } else { reason.map(str::to_string) },
        last_transition_time: to_time(SystemTime::now()),
        ..Default::default()
    }
}

fn conditions(
    pod: &api::Pod,
    status: &PodStatus,
    inits: &[api::ContainerStatus],
    apps: &[api::ContainerStatus],
    phase: &str,
) -> Vec<api::PodCondition> {
    let sandbox_ready = status.sandboxes.first().is_some_and(|s| s.ready);
    let initialized = inits.iter().all(|s| terminated_exit(s) == Some(0))
        || apps
            .iter()
            .any(|s| is_running(s) || terminated_exit(s).is_some());
    let terminal = phase == "Succeeded" || phase == "Failed";
    let containers_ready = !terminal && apps.iter().all(|s| s.ready);
    let not_ready_reason = if terminal {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    vec![
        condition("PodReadyToStartContainers", sandbox_ready, None),
        condition(
            "Initialized",
            initialized,
            Some(if terminal {
                "PodCompleted"
            } else {
                "ContainersNotInitialized"
            }),
        ),
        condition("Ready", containers_ready, Some(not_ready_reason)),
        condition("ContainersReady", containers_ready, Some(not_ready_reason)),
        condition("PodScheduled", true, None),
    ]
    .into_iter()
    .filter(|_| !pod.containers().is_empty())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::SandboxStatus;
    use std::time::{Duration, UNIX_EPOCH};

    fn pod(policy: &str, names: &[&str]) -> api::Pod {
        api::Pod {
            spec: Some(api::PodSpec {
                restart_policy: Some(policy.into()),
                containers: names
                    .iter()
                    .map(|n| api::Container {
                        name: n.to_string(),
                        image: Some("busybox:1.36".into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn inst(
        name: &str,
        state: ContainerState,
        exit: i32,
        restarts: u32,
        age: u64,
    ) -> ContainerStatus {
        ContainerStatus {
            id: format!("{name}{age}"),
            name: name.into(),
            state,
            created_at: UNIX_EPOCH + Duration::from_secs(1000 - age),
            started_at: Some(UNIX_EPOCH + Duration::from_secs(1000 - age)),
            finished_at: (state == ContainerState::Exited)
                .then(|| UNIX_EPOCH + Duration::from_secs(1001 - age)),
            exit_code: exit,
            image: String::new(),
            image_ref: "sha256:abc".into(),
            hash: String::new(),
            restart_count: restarts,
            reason: String::new(),
            message: String::new(),
        }
    }

    fn runtime(containers: Vec<ContainerStatus>) -> PodStatus {
        PodStatus {
            sandboxes: vec![SandboxStatus {
                id: "sb".into(),
                ready: true,
                attempt: 0,
                created_at: UNIX_EPOCH,
                ip: Some("10.88.77.5".into()),
                additional_ips: vec![],
                host_network: false,
            }],
            containers,
            ..Default::default()
        }
    }

    fn gen(p: &api::Pod, st: &PodStatus, reason: Option<(&str, &str)>) -> api::PodStatus {
        let r = reason.map(|(a, b)| (a.to_string(), b.to_string()));
        let waiting = move |_: &str| r.clone();
        let ctx = StatusContext {
            runtime_name: "containerd",
            host_ip: Some("192.0.2.1"),
            waiting_reason: &waiting,
            is_ready: &|_| true,
            is_started: &|_| true,
            pod_is_terminal: false,
        };
        generate_api_pod_status(p, st, &ctx)
    }

    fn cond(s: &api::PodStatus, kind: &str) -> String {
        s.conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == kind)
            .unwrap()
            .status
            .clone()
    }

    #[test]
    fn running_pod_is_ready_with_ips() {
        let p = pod("Always", &["a"]);
        let s = gen(
            &p,
            &runtime(vec![inst("a", ContainerState::Running, 0, 2, 1)]),
            None,
        );
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.88.77.5"));
        assert_eq!(s.host_ip.as_deref(), Some("192.0.2.1"));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 2);
        assert!(c.ready);
        assert_eq!(c.container_id.as_deref(), Some("containerd://a1"));
        assert_eq!(cond(&s, "Ready"), "True");
        assert_eq!(s.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn crash_loop_shows_waiting_with_last_state() {
        let p = pod("Always", &["a"]);
        let st = runtime(vec![
            inst("a", ContainerState::Exited, 1, 3, 1),
            inst("a", ContainerState::Exited, 1, 2, 5),
        ]);
        let s = gen(&p, &st, Some(("CrashLoopBackOff", "back-off 40s")));
        let c = &s.container_statuses.as_ref().unwrap()[0];
        let w = c.state.as_ref().unwrap().waiting.as_ref().unwrap();
        assert_eq!(w.reason.as_deref(), Some("CrashLoopBackOff"));
        assert_eq!(
            c.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            1
        );
        assert_eq!(c.restart_count, 3);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready"), "False");
    }

    #[test]
    fn termination_messages_reach_state_and_last_state() {
        let p = pod("Always", &["a"]);
        let mut newest = inst("a", ContainerState::Exited, 1, 1, 1);
        newest.message = "line 1\nline 2\n".into();
        let mut older = inst("a", ContainerState::Exited, 0, 0, 5);
        older.message = "bye".into();
        let s = gen(&p, &runtime(vec![newest, older]), None);
        let c = &s.container_statuses.as_ref().unwrap()[0];
        let term = |st: &Option<api::ContainerState>| {
            st.as_ref()
                .and_then(|x| x.terminated.as_ref())
                .and_then(|t| t.message.clone())
        };
        assert_eq!(term(&c.state).as_deref(), Some("line 1\nline 2\n"));
        assert_eq!(term(&c.last_state).as_deref(), Some("bye"));
    }

    #[test]
    fn never_policy_phases() {
        let p = pod("Never", &["a", "b"]);
        let ok = runtime(vec![
            inst("a", ContainerState::Exited, 0, 0, 1),
            inst("b", ContainerState::Exited, 0, 0, 2),
        ]);
        assert_eq!(gen(&p, &ok, None).phase.as_deref(), Some("Succeeded"));
        let bad = runtime(vec![
            inst("a", ContainerState::Exited, 0, 0, 1),
            inst("b", ContainerState::Exited, 2, 0, 2),
        ]);
        assert_eq!(gen(&p, &bad, None).phase.as_deref(), Some("Failed"));
        let new = runtime(vec![]);
        assert_eq!(gen(&p, &new, None).phase.as_deref(), Some("Pending"));
    }
}
