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

fn inst(name: &str, state: ContainerState, exit: i32, restarts: u32, age: u64) -> ContainerStatus {
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
        user: None,
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
        supports_recursive_read_only: false,
        resize: &Default::default(),
        runtime_name: "containerd",
        host_ip: Some("192.0.2.1"),
        waiting_reason: &waiting,
        is_ready: &|_| true,
        is_started: &|_| true,
        pod_is_terminal: false,
        old: None,
        deadline_exceeded: false,
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

fn with_inits(policy: &str, inits: &[&str], apps: &[&str]) -> api::Pod {
    let mut p = pod(policy, apps);
    let spec = p.spec.as_mut().unwrap();
    spec.init_containers = Some(
        inits
            .iter()
            .map(|n| api::Container {
                name: n.to_string(),
                image: Some("busybox:1.36".into()),
                ..Default::default()
            })
            .collect(),
    );
    p
}

fn gen_ctx(
    p: &api::Pod,
    st: &PodStatus,
    old: Option<&api::PodStatus>,
    deadline_exceeded: bool,
) -> api::PodStatus {
    let ctx = StatusContext {
        supports_recursive_read_only: false,
        resize: &Default::default(),
        runtime_name: "containerd",
        host_ip: Some("192.0.2.1"),
        waiting_reason: &|_| None,
        is_ready: &|_| true,
        is_started: &|_| true,
        pod_is_terminal: false,
        old,
        deadline_exceeded,
    };
    generate_api_pod_status(p, st, &ctx)
}

type Summary = (String, Option<String>, Option<String>);

fn full(s: &api::PodStatus, kind: &str) -> Summary {
    let c = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn sum(status: &str, reason: Option<&str>, message: Option<&str>) -> Summary {
    (
        status.into(),
        reason.map(Into::into),
        message.map(Into::into),
    )
}

fn kinds(s: &api::PodStatus) -> Vec<String> {
    s.conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.clone())
        .collect()
}

fn waiting_reason(c: &api::ContainerStatus) -> Option<String> {
    c.state.as_ref()?.waiting.as_ref()?.reason.clone()
}

#[test]
fn conditions_in_upstream_order_with_ips_and_qos() {
    let p = pod("Always", &["a"]);
    let s = gen(
        &p,
        &runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]),
        None,
    );
    assert_eq!(
        kinds(&s),
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    assert_eq!(
        s.host_ips,
        Some(vec![api::HostIP {
            ip: "192.0.2.1".into()
        }])
    );
    assert_eq!(
        s.pod_ips,
        Some(vec![api::PodIP {
            ip: "10.88.77.5".into()
        }])
    );
    // The API server's qosClass is immutable and wins.
    let mut q = p.clone();
    q.status = Some(api::PodStatus {
        qos_class: Some("Burstable".into()),
        ..Default::default()
    });
    let s = gen(&q, &runtime(vec![]), None);
    assert_eq!(s.qos_class.as_deref(), Some("Burstable"));
}

#[test]
fn image_and_image_id_come_from_the_runtime() {
    let p = pod("Always", &["a"]);
    let mut c = inst("a", ContainerState::Running, 0, 0, 1);
    c.image = "docker.io/library/busybox:1.36".into();
    c.image_ref = "docker.io/library/busybox@sha256:0123".into();
    let s = gen(&p, &runtime(vec![c]), None);
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.image, "docker.io/library/busybox:1.36");
    assert_eq!(cs.image_id, "docker.io/library/busybox@sha256:0123");
    // Before the container exists: the spec's image, no imageID.
    let s = gen(&p, &runtime(vec![]), None);
    let cs = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        (cs.image.as_str(), cs.image_id.as_str()),
        ("busybox:1.36", "")
    );
    assert_eq!(waiting_reason(cs).as_deref(), Some("ContainerCreating"));
}

/// Completed init containers are ready and not started, whatever the
/// restart policy; the app containers then run.
#[test]
fn completed_init_containers_are_ready() {
    for policy in ["Never", "Always", "OnFailure"] {
        let p = with_inits(policy, &["i1", "i2"], &["a"]);
        let st = runtime(vec![
            inst("a", ContainerState::Running, 0, 0, 1),
            inst("i2", ContainerState::Exited, 0, 0, 2),
            inst("i1", ContainerState::Exited, 0, 0, 3),
        ]);
        let s = gen(&p, &st, None);
        let inits = s.init_container_statuses.as_ref().unwrap();
        assert_eq!(
            inits
                .iter()
                .map(|c| (c.name.as_str(), c.ready, c.started))
                .collect::<Vec<_>>(),
            [("i1", true, Some(false)), ("i2", true, Some(false))],
            "{policy}"
        );
        assert_eq!(s.phase.as_deref(), Some("Running"), "{policy}");
        assert_eq!(full(&s, "Initialized"), sum("True", None, None));
        assert_eq!(full(&s, "Ready"), sum("True", None, None));
    }
}

#[test]
fn apps_wait_pod_initializing_while_init_runs() {
    let p = with_inits("Always", &["i1", "i2"], &["a", "b"]);
    let st = runtime(vec![inst("i1", ContainerState::Running, 0, 0, 1)]);
    let s = gen(&p, &st, None);
    let inits = s.init_container_statuses.as_ref().unwrap();
    assert_eq!((inits[0].ready, inits[0].started), (false, Some(true)));
    assert_eq!(
        waiting_reason(&inits[1]).as_deref(),
        Some("PodInitializing")
    );
    for c in s.container_statuses.as_ref().unwrap() {
        assert_eq!(waiting_reason(c).as_deref(), Some("PodInitializing"));
        assert_eq!((c.ready, c.started), (false, Some(false)));
    }
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    assert_eq!(
        full(&s, "Initialized"),
        sum(
            "False",
            Some("ContainersNotInitialized"),
            Some("containers with incomplete status: [i1 i2]")
        )
    );
    assert_eq!(
        full(&s, "Ready"),
        sum(
            "False",
            Some("ContainersNotReady"),
            Some("containers with unready status: [a b]")
        )
    );
}

#[test]
fn failed_init_container_fails_never_pod() {
    let p = with_inits("Never", &["init1"], &["a"]);
    let st = runtime(vec![inst("init1", ContainerState::Exited, 1, 0, 1)]);
    let s = gen(&p, &st, None);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    let init = &s.init_container_statuses.as_ref().unwrap()[0];
    assert!(!init.ready);
    let t = init.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
    let app = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(waiting_reason(app).as_deref(), Some("PodInitializing"));
    assert_eq!(
        full(&s, "Initialized"),
        sum(
            "False",
            Some("ContainersNotInitialized"),
            Some("containers with incomplete status: [init1]")
        )
    );
    assert_eq!(full(&s, "Ready"), sum("False", Some("PodFailed"), None));
    assert_eq!(
        full(&s, "ContainersReady"),
        sum("False", Some("PodFailed"), None)
    );
    // Under Always it is retried: Pending, the init container restarts.
    let p = with_inits("Always", &["init1"], &["a"]);
    assert_eq!(gen(&p, &st, None).phase.as_deref(), Some("Pending"));
}

#[test]
fn readiness_gates_and_foreign_conditions() {
    let mut p = pod("Always", &["a"]);
    p.spec.as_mut().unwrap().readiness_gates = Some(vec![api::PodReadinessGate {
        condition_type: "example.com/gate".into(),
    }]);
    let st = runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]);
    let s = gen(&p, &st, None);
    assert_eq!(
        full(&s, "Ready"),
        sum(
            "False",
            Some("ReadinessGatesNotReady"),
            Some("corresponding condition of pod readiness gate \"example.com/gate\" does not exist.")
        )
    );
    assert_eq!(full(&s, "ContainersReady"), sum("True", None, None));
    let gate = |status: &str| api::PodCondition {
        type_: "example.com/gate".into(),
        status: status.into(),
        last_transition_time: to_time(UNIX_EPOCH),
        ..Default::default()
    };
    let stale_ready = api::PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        ..Default::default()
    };
    p.status = Some(api::PodStatus {
        conditions: Some(vec![stale_ready, gate("False")]),
        ..Default::default()
    });
    let s = gen(&p, &st, None);
    assert_eq!(
        full(&s, "Ready"),
        sum(
            "False",
            Some("ReadinessGatesNotReady"),
            Some(
                "the status of pod readiness gate \"example.com/gate\" is not \"True\", but False"
            )
        )
    );
    // Other writers' conditions come first, untouched; the API's copy of a
    // kubelet condition is replaced by the kubelet's.
    assert_eq!(
        kinds(&s),
        [
            "example.com/gate",
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    assert_eq!(s.conditions.as_ref().unwrap()[0], gate("False"));
    p.status.as_mut().unwrap().conditions = Some(vec![gate("True")]);
    assert_eq!(full(&gen(&p, &st, None), "Ready"), sum("True", None, None));
}

#[test]
fn deadline_exceeded_fails_the_pod_and_keeps_its_reason() {
    let p = pod("Always", &["a"]);
    let st = runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]);
    let s = gen_ctx(&p, &st, None, true);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(s.reason.as_deref(), Some(DEADLINE_EXCEEDED));
    assert_eq!(s.message.as_deref(), Some(DEADLINE_EXCEEDED_MESSAGE));
    assert_eq!(full(&s, "Ready"), sum("False", Some("PodFailed"), None));
    // Once killed, the containers' exit does not change phase or reason.
    let killed = runtime(vec![inst("a", ContainerState::Exited, 137, 0, 1)]);
    let again = gen_ctx(&p, &killed, Some(&s), false);
    assert_eq!(again.phase.as_deref(), Some("Failed"));
    assert_eq!(again.reason.as_deref(), Some(DEADLINE_EXCEEDED));
    assert_eq!(again.message.as_deref(), Some(DEADLINE_EXCEEDED_MESSAGE));
}

#[test]
fn terminal_phase_is_final() {
    let p = pod("Always", &["a"]);
    let old = api::PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    };
    let st = runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]);
    assert_eq!(
        gen_ctx(&p, &st, Some(&old), false).phase.as_deref(),
        Some("Succeeded")
    );
    // Reason and message follow the phase: gone when it changes.
    let pending = api::PodStatus {
        phase: Some("Pending".into()),
        reason: Some("Something".into()),
        ..Default::default()
    };
    let s = gen_ctx(&p, &st, Some(&pending), false);
    assert_eq!(
        (s.phase.as_deref(), s.reason.as_deref()),
        (Some("Running"), None)
    );
}

#[test]
fn finished_container_gone_from_runtime_keeps_old_status() {
    let p = pod("Never", &["a"]);
    let done = runtime(vec![inst("a", ContainerState::Exited, 0, 0, 1)]);
    let first = gen(&p, &done, None);
    let later = gen_ctx(&p, &runtime(vec![]), Some(&first), false);
    assert_eq!(later.container_statuses, first.container_statuses);
    assert_eq!(later.phase.as_deref(), Some("Succeeded"));
}

#[test]
fn volume_mounts_reported_with_recursive_read_only_disabled() {
    let mut p = pod("Always", &["a"]);
    p.spec.as_mut().unwrap().containers[0].volume_mounts = Some(vec![
        api::VolumeMount {
            name: "token".into(),
            mount_path: "/var/run/secrets".into(),
            read_only: Some(true),
            ..Default::default()
        },
        api::VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        },
    ]);
    let s = gen(&p, &runtime(vec![]), None);
    let c = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(
        c.volume_mounts,
        Some(vec![
            api::VolumeMountStatus {
                name: "token".into(),
                mount_path: "/var/run/secrets".into(),
                read_only: Some(true),
                recursive_read_only: Some("Disabled".into()),
            },
            api::VolumeMountStatus {
                name: "data".into(),
                mount_path: "/data".into(),
                read_only: None,
                recursive_read_only: None,
            },
        ])
    );
}

#[test]
fn dead_pod_keeps_its_ips() {
    let p = pod("Never", &["a"]);
    let first = gen(
        &p,
        &runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]),
        None,
    );
    let mut dead = runtime(vec![inst("a", ContainerState::Exited, 0, 0, 1)]);
    dead.sandboxes[0].ready = false;
    dead.sandboxes[0].ip = None;
    let later = gen_ctx(&p, &dead, Some(&first), false);
    assert_eq!(later.pod_ip.as_deref(), Some("10.88.77.5"));
    assert_eq!(later.pod_ips, first.pod_ips);
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
    // Both terminated states name their instance as the status does,
    // with the runtime's scheme (fidelity capture, upstream-v1.22).
    let id = |st: &Option<api::ContainerState>| {
        st.as_ref()
            .and_then(|x| x.terminated.as_ref())
            .and_then(|t| t.container_id.clone())
    };
    assert_eq!(id(&c.state), c.container_id);
    let last = id(&c.last_state).unwrap_or_default();
    assert!(last.starts_with("containerd://"), "{last}");
    assert_ne!(id(&c.state).as_deref(), Some(last.as_str()));
}

fn with_debugger(mut p: api::Pod) -> api::Pod {
    if let Some(spec) = p.spec.as_mut() {
        spec.ephemeral_containers = Some(vec![api::EphemeralContainer {
            name: "debugger".into(),
            image: Some("busybox:1.36".into()),
            target_container_name: Some("a".into()),
            ..Default::default()
        }]);
    }
    p
}

#[test]
fn ephemeral_container_statuses_as_upstream() {
    let p = with_debugger(pod("Always", &["a"]));
    // Not started yet: waiting to be created, with the spec's image.
    let s = gen(
        &p,
        &runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]),
        None,
    );
    let e = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
    assert_eq!(e.name, "debugger");
    assert_eq!(e.image, "busybox:1.36");
    assert_eq!(waiting_reason(e).as_deref(), Some("ContainerCreating"));
    assert!(!e.ready && e.started.is_none() && e.restart_count == 0);

    // Running: its instance, never ready, `started` unset (the prober leaves
    // ephemeral containers alone); phase and Ready follow the app only.
    let mut dbg = inst("debugger", ContainerState::Running, 0, 0, 0);
    dbg.image = "docker.io/library/busybox:1.36".into();
    let st = runtime(vec![dbg, inst("a", ContainerState::Running, 0, 0, 1)]);
    let s = gen(&p, &st, None);
    let e = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
    assert_eq!(e.container_id.as_deref(), Some("containerd://debugger0"));
    assert_eq!(e.image, "docker.io/library/busybox:1.36");
    assert_eq!(e.image_id, "sha256:abc");
    assert!(e.state.as_ref().unwrap().running.is_some());
    assert_eq!(e.last_state, Some(api::ContainerState::default()));
    assert!(!e.ready && e.started.is_none() && e.restart_count == 0);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(cond(&s, "Ready"), "True");
    assert_eq!(s.container_statuses.as_ref().unwrap().len(), 1);

    // Exited with an error: terminated, and the pod is still Running.
    let st = runtime(vec![
        inst("debugger", ContainerState::Exited, 1, 0, 0),
        inst("a", ContainerState::Running, 0, 0, 1),
    ]);
    let s = gen(&p, &st, None);
    let e = &s.ephemeral_container_statuses.as_ref().unwrap()[0];
    let t = e.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (1, Some("Error")));
    assert_eq!(s.phase.as_deref(), Some("Running"));
}

#[test]
fn no_ephemeral_containers_no_ephemeral_statuses() {
    let p = pod("Always", &["a"]);
    let s = gen(
        &p,
        &runtime(vec![inst("a", ContainerState::Running, 0, 0, 1)]),
        None,
    );
    assert_eq!(s.ephemeral_container_statuses, None);
}

/// As the v1.34 capture: a container with an instance reports its
/// resources (`{}` when it has none) and its requests as allocated; one
/// never created reports neither.
#[test]
fn created_containers_report_their_resources() {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let mut p = pod("Always", &["a", "b", "c"]);
    let q = |v: &str| Quantity(v.into());
    if let Some(spec) = p.spec.as_mut() {
        spec.containers[0].resources = Some(api::ResourceRequirements {
            limits: Some(
                [
                    ("cpu".to_string(), q("500m")),
                    ("memory".to_string(), q("64Mi")),
                ]
                .into(),
            ),
            requests: Some(
                [
                    ("cpu".to_string(), q("250m")),
                    ("memory".to_string(), q("33554432")),
                ]
                .into(),
            ),
            ..Default::default()
        });
    }
    let st = runtime(vec![
        inst("a", ContainerState::Running, 0, 0, 5),
        inst("b", ContainerState::Exited, 1, 0, 5),
    ]);
    let s = gen(&p, &st, None);
    let by = |n: &str| {
        s.container_statuses
            .iter()
            .flatten()
            .find(|c| c.name == n)
            .cloned()
            .unwrap()
    };
    let a = by("a");
    let want = p.spec.as_ref().unwrap().containers[0]
        .resources
        .clone()
        .unwrap();
    assert_eq!(a.resources.as_ref(), Some(&want));
    assert_eq!(a.allocated_resources, want.requests);
    let b = by("b");
    assert_eq!(b.resources, Some(api::ResourceRequirements::default()));
    assert_eq!(b.allocated_resources, None);
    let c = by("c");
    assert_eq!((c.resources, c.allocated_resources), (None, None));
}

/// The runtime's report of the newest instance's identity is the
/// status's `user` (upstream convertContainerStatusUser); none reported,
/// none shown.
#[test]
fn container_user_is_what_the_runtime_reports() {
    use crate::container::{ContainerUser, LinuxContainerUser};
    let p = pod("Always", &["a", "b"]);
    let mut a = inst("a", ContainerState::Running, 0, 0, 1);
    a.user = Some(ContainerUser {
        linux: Some(LinuxContainerUser {
            uid: 1000,
            gid: 3000,
            supplemental_groups: vec![3000, 4000],
        }),
    });
    let b = inst("b", ContainerState::Running, 0, 0, 1);
    let s = gen(&p, &runtime(vec![a, b]), None);
    let json = serde_json::to_value(s.container_statuses.expect("statuses")).expect("json");
    assert_eq!(
        json[0]["user"],
        serde_json::json!({"linux": {"uid": 1000, "gid": 3000, "supplementalGroups": [3000, 4000]}})
    );
    assert_eq!(json[1].get("user"), None);
}
