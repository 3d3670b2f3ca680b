//! Status of pods with sidecars (restartable init containers): phase,
//! the sidecar's own status, Initialized and Ready.

use super::*;
use crate::container::SandboxStatus;
use std::time::{Duration, UNIX_EPOCH};

/// Init containers named "s…" are sidecars.
fn pod(policy: &str, inits: &[&str], apps: &[&str]) -> api::Pod {
    let c = |n: &&str| api::Container {
        name: n.to_string(),
        image: Some("busybox:1.36".into()),
        restart_policy: n.starts_with('s').then(|| "Always".to_string()),
        ..Default::default()
    };
    api::Pod {
        spec: Some(api::PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: Some(inits.iter().map(c).collect()),
            containers: apps.iter().map(c).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn inst(name: &str, state: ContainerState, exit: i32, age: u64) -> ContainerStatus {
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
        restart_count: 0,
        reason: String::new(),
        message: String::new(),
        user: None,
    }
}

fn running(name: &str) -> ContainerStatus {
    inst(name, ContainerState::Running, 0, 1)
}

fn exited(name: &str, code: i32) -> ContainerStatus {
    inst(name, ContainerState::Exited, code, 2)
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

/// What the probes say: `started` and `ready` list the containers passing.
struct Probes<'a> {
    started: &'a [&'a str],
    ready: &'a [&'a str],
    waiting: Option<(&'a str, &'a str)>,
}

const ALL_GOOD: Probes<'static> = Probes {
    started: &["s1", "s2", "a"],
    ready: &["s1", "s2", "a"],
    waiting: None,
};

fn gen(p: &api::Pod, st: &PodStatus, probes: &Probes<'_>) -> api::PodStatus {
    let waiting = |_: &str| probes.waiting.map(|(r, m)| (r.to_string(), m.to_string()));
    let is_ready = |c: &str| probes.ready.contains(&c);
    let is_started = |c: &str| probes.started.contains(&c);
    let ctx = StatusContext {
        supports_recursive_read_only: false,
        resize: &Default::default(),
        runtime_name: "containerd",
        host_ip: Some("192.0.2.1"),
        waiting_reason: &waiting,
        is_ready: &is_ready,
        is_started: &is_started,
        pod_is_terminal: false,
        old: None,
        deadline_exceeded: false,
    };
    generate_api_pod_status(p, st, &ctx)
}

fn phase(s: &api::PodStatus) -> &str {
    s.phase.as_deref().unwrap_or_default()
}

fn cond(s: &api::PodStatus, kind: &str) -> (String, Option<String>) {
    let c = s
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == kind)
        .expect("condition");
    (c.status.clone(), c.message.clone())
}

fn init_status<'a>(s: &'a api::PodStatus, name: &str) -> &'a api::ContainerStatus {
    s.init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == name)
        .expect("init container status")
}

#[test]
fn sidecar_not_started_keeps_the_pod_initializing() {
    let p = pod("Always", &["s1"], &["a"]);
    let probes = Probes {
        started: &[],
        ready: &[],
        waiting: None,
    };
    let s = gen(&p, &runtime(vec![running("s1")]), &probes);
    assert_eq!(phase(&s), "Pending");
    let s1 = init_status(&s, "s1");
    assert!(s1.state.as_ref().is_some_and(|st| st.running.is_some()));
    assert_eq!((s1.started, s1.ready), (Some(false), false));
    assert_eq!(
        cond(&s, "Initialized"),
        (
            "False".into(),
            Some("containers with incomplete status: [s1]".into())
        )
    );
}

#[test]
fn started_sidecar_initializes_the_pod_and_counts_for_ready() {
    let p = pod("Always", &["s1"], &["a"]);
    let unready = Probes {
        started: &["s1", "a"],
        ready: &["a"],
        waiting: None,
    };
    // Started, app container not created yet: initialized, still Pending.
    let s = gen(&p, &runtime(vec![running("s1")]), &unready);
    assert_eq!(cond(&s, "Initialized").0, "True");
    assert_eq!(phase(&s), "Pending");
    let s1 = init_status(&s, "s1");
    assert_eq!((s1.started, s1.ready), (Some(true), false));
    // Both running: Running, but not Ready while the sidecar is not.
    let st = runtime(vec![running("a"), running("s1")]);
    let s = gen(&p, &st, &unready);
    assert_eq!(phase(&s), "Running");
    assert_eq!(
        cond(&s, "Ready"),
        (
            "False".into(),
            Some("containers with unready status: [s1]".into())
        )
    );
    let s = gen(&p, &st, &ALL_GOOD);
    assert_eq!(cond(&s, "Ready").0, "True");
    assert_eq!(cond(&s, "ContainersReady").0, "True");
    assert!(init_status(&s, "s1").ready);
}

#[test]
fn finished_app_containers_decide_the_phase_once_sidecars_stop() {
    for (code, want) in [(0, "Succeeded"), (1, "Failed")] {
        let p = pod("Never", &["s1", "s2"], &["a"]);
        // The sidecars still run: the kubelet is about to stop them.
        let st = runtime(vec![exited("a", code), running("s1"), running("s2")]);
        assert_eq!(phase(&gen(&p, &st, &ALL_GOOD)), "Running");
        // Stopped (SIGTERM, 143): their exit codes do not count.
        let st = runtime(vec![exited("a", code), exited("s1", 143), exited("s2", 0)]);
        let s = gen(&p, &st, &ALL_GOOD);
        assert_eq!(phase(&s), want, "app exit {code}");
        assert_eq!(cond(&s, "Initialized").0, "True");
    }
}

#[test]
fn restarting_sidecar_does_not_send_a_running_pod_back_to_pending() {
    let p = pod("Never", &["s1"], &["a"]);
    let st = runtime(vec![
        running("a"),
        exited("s1", 0),
        inst("s1", ContainerState::Exited, 1, 5),
    ]);
    let probes = Probes {
        waiting: Some(("CrashLoopBackOff", "back-off 10s")),
        ..ALL_GOOD
    };
    let s = gen(&p, &st, &probes);
    assert_eq!(phase(&s), "Running");
    assert_eq!(cond(&s, "Initialized").0, "True");
    // It exited 0 under restartPolicy Never, and still it is restarted: the
    // status says why it waits, the exit is its last state.
    let s1 = init_status(&s, "s1");
    let waiting = s1.state.as_ref().and_then(|st| st.waiting.as_ref());
    assert_eq!(
        waiting.and_then(|w| w.reason.as_deref()),
        Some("CrashLoopBackOff")
    );
    let last = s1.last_state.as_ref().and_then(|st| st.terminated.as_ref());
    assert_eq!(last.map(|t| t.exit_code), Some(0));
    assert_eq!((s1.started, s1.ready), (Some(false), false));
    assert_eq!(cond(&s, "Ready").0, "False");
}

#[test]
fn sidecar_not_created_yet_is_pending() {
    let p = pod("Always", &["i1", "s1"], &["a"]);
    let s = gen(&p, &runtime(vec![exited("i1", 0)]), &ALL_GOOD);
    assert_eq!(phase(&s), "Pending");
    assert_eq!(
        cond(&s, "Initialized").1,
        Some("containers with incomplete status: [s1]".into())
    );
}
