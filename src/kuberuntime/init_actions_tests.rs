//! compute_pod_actions for pods with sidecars (restartable init containers).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, ExecAction, Pod, PodSpec, Probe};

use crate::container::{ContainerState, ContainerStatus, PodStatus, SandboxStatus};
use crate::kuberuntime::actions::{compute_pod_actions, PodActions, ProbeResults};
use crate::kuberuntime::labels::container_hash;
use crate::prober::ProbeKind;

/// `inits` names starting with "s" are sidecars; `probed` ones among them
/// have a startup probe.
fn pod(policy: &str, inits: &[&str], apps: &[&str], probed: &[&str]) -> Pod {
    let c = |n: &&str| Container {
        name: n.to_string(),
        image: Some("busybox:1.36".into()),
        restart_policy: n.starts_with('s').then(|| "Always".to_string()),
        startup_probe: probed.contains(n).then(|| Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Pod {
        spec: Some(PodSpec {
            restart_policy: Some(policy.into()),
            init_containers: Some(inits.iter().map(c).collect()),
            containers: apps.iter().map(c).collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// One instance of `name`; `age` orders instances (older = larger).
fn inst(p: &Pod, name: &str, state: ContainerState, exit: i32, age: u64) -> ContainerStatus {
    let spec = p
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name);
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
        hash: spec.map(container_hash).unwrap_or_default(),
        restart_count: 0,
        reason: String::new(),
        message: String::new(),
        user: None,
    }
}

fn running(p: &Pod, name: &str) -> ContainerStatus {
    inst(p, name, ContainerState::Running, 0, 1)
}

fn exited(p: &Pod, name: &str, code: i32) -> ContainerStatus {
    inst(p, name, ContainerState::Exited, code, 2)
}

fn status(containers: Vec<ContainerStatus>) -> PodStatus {
    PodStatus {
        sandboxes: vec![SandboxStatus {
            id: "sb1".into(),
            ready: true,
            attempt: 0,
            created_at: SystemTime::UNIX_EPOCH,
            ip: Some("10.0.0.2".into()),
            additional_ips: vec![],
            host_network: false,
        }],
        containers,
        ..Default::default()
    }
}

fn plan(p: &Pod, containers: Vec<ContainerStatus>) -> PodActions {
    compute_pod_actions(p, &status(containers), &ProbeResults::default())
}

fn plan_with(p: &Pod, containers: Vec<ContainerStatus>, probes: &ProbeResults) -> PodActions {
    compute_pod_actions(p, &status(containers), probes)
}

fn ids(list: &[&str]) -> HashSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Containers whose liveness probe failed.
fn liveness_failed(list: &[&str]) -> HashMap<String, ProbeKind> {
    list.iter()
        .map(|s| (s.to_string(), ProbeKind::Liveness))
        .collect()
}

fn killed(a: &PodActions) -> Vec<&str> {
    a.containers_to_kill
        .iter()
        .map(|k| k.name.as_str())
        .collect()
}

#[test]
fn sidecar_starts_first_and_the_next_init_container_once_it_runs() {
    let p = pod("Always", &["s1", "i1"], &["a"], &[]);
    assert_eq!(plan(&p, vec![]).init_to_start, vec![0]);
    // Running without a startup probe is started: on to i1, s1 left alone.
    let a = plan(&p, vec![running(&p, "s1")]);
    assert_eq!(a.init_to_start, vec![1]);
    assert!(a.containers_to_start.is_empty() && a.containers_to_kill.is_empty());
    // i1 running: wait for it, the sidecar keeps running.
    let a = plan(&p, vec![running(&p, "i1"), running(&p, "s1")]);
    assert!(a.init_to_start.is_empty() && a.containers_to_start.is_empty());
    // i1 done: the app container starts beside the running sidecar.
    let a = plan(&p, vec![exited(&p, "i1", 0), running(&p, "s1")]);
    assert!(a.init_to_start.is_empty());
    assert_eq!(a.containers_to_start, vec![0]);
    assert!(!a.kill_pod);
}

#[test]
fn last_init_container_a_sidecar_starts_the_app_containers_at_once() {
    let p = pod("Always", &["i1", "s1"], &["a", "b"], &[]);
    let a = plan(&p, vec![exited(&p, "i1", 0)]);
    assert_eq!(a.init_to_start, vec![1]);
    let a = plan(&p, vec![running(&p, "s1"), exited(&p, "i1", 0)]);
    assert_eq!(a.containers_to_start, vec![0, 1]);
    assert!(a.init_to_start.is_empty());
}

#[test]
fn startup_probe_gates_the_next_init_container() {
    let p = pod("Always", &["s1", "i1"], &["a"], &["s1"]);
    let s1 = running(&p, "s1");
    // No startup result yet: wait.
    let a = plan(&p, vec![s1.clone()]);
    assert!(a.init_to_start.is_empty() && a.containers_to_kill.is_empty());
    // Passed: i1 next.
    let passed = ProbeResults {
        started: ids(&[&s1.id]),
        ..Default::default()
    };
    assert_eq!(
        plan_with(&p, vec![s1.clone()], &passed).init_to_start,
        vec![1]
    );
    // Failed: the sidecar is killed and started again, i1 still waits.
    let failed = ProbeResults {
        failed: liveness_failed(&[&s1.id]),
        ..Default::default()
    };
    let a = plan_with(&p, vec![s1.clone()], &failed);
    assert_eq!(killed(&a), vec!["s1"]);
    assert!(a.containers_to_kill[0].reason.contains("startup probe"));
    assert_eq!(a.init_to_start, vec![0]);
    assert!(!a.kill_pod);
}

#[test]
fn startup_probe_gates_the_app_containers_too() {
    let p = pod("Always", &["s1"], &["a"], &["s1"]);
    let s1 = running(&p, "s1");
    let a = plan(&p, vec![s1.clone()]);
    assert!(a.containers_to_start.is_empty() && !a.kill_pod);
    let passed = ProbeResults {
        started: ids(&[&s1.id]),
        ..Default::default()
    };
    assert_eq!(
        plan_with(&p, vec![s1], &passed).containers_to_start,
        vec![0]
    );
}

#[test]
fn exited_sidecar_restarts_whatever_the_restart_policy() {
    for policy in ["Always", "OnFailure", "Never"] {
        for code in [0, 1] {
            let p = pod(policy, &["s1"], &["a"], &[]);
            let a = plan(&p, vec![running(&p, "a"), exited(&p, "s1", code)]);
            assert_eq!(a.init_to_start, vec![0], "{policy} exit {code}");
            assert!(a.containers_to_start.is_empty(), "{policy} exit {code}");
            assert!(!a.kill_pod && a.containers_to_kill.is_empty());
        }
    }
}

#[test]
fn sidecar_crashing_during_initialization_restarts() {
    let p = pod("Never", &["s1", "i1"], &["a"], &[]);
    let a = plan(&p, vec![exited(&p, "s1", 1)]);
    assert_eq!(a.init_to_start, vec![0]);
    assert!(!a.kill_pod);
    // Exited while i1 runs: restarted beside it.
    let a = plan(&p, vec![running(&p, "i1"), exited(&p, "s1", 1)]);
    assert_eq!(a.init_to_start, vec![0]);
}

#[test]
fn sidecar_gone_from_the_runtime_after_initialization_starts_again() {
    let p = pod("Always", &["i1", "s1"], &["a"], &[]);
    let a = plan(&p, vec![running(&p, "a")]);
    // The regular init container ran before; only the sidecar comes back.
    assert_eq!(a.init_to_start, vec![1]);
}

#[test]
fn sidecar_liveness_failure_or_new_spec_restarts_only_it() {
    let p = pod("Always", &["s1"], &["a"], &[]);
    let s1 = running(&p, "s1");
    let failed = ProbeResults {
        failed: liveness_failed(&[&s1.id]),
        ..Default::default()
    };
    let a = plan_with(&p, vec![running(&p, "a"), s1.clone()], &failed);
    assert_eq!(killed(&a), vec!["s1"]);
    assert!(a.containers_to_kill[0].reason.contains("liveness"));
    assert_eq!(a.init_to_start, vec![0]);
    assert!(a.containers_to_start.is_empty());
    let mut stale = s1;
    stale.hash = "old".into();
    let a = plan(&p, vec![running(&p, "a"), stale]);
    assert_eq!(killed(&a), vec!["s1"]);
    assert_eq!(a.init_to_start, vec![0]);
}

#[test]
fn running_sidecars_do_not_keep_a_finished_pod_alive() {
    for (policy, code) in [("Never", 0), ("Never", 1), ("OnFailure", 0)] {
        let p = pod(policy, &["s1", "s2"], &["a"], &[]);
        let st = vec![exited(&p, "a", code), running(&p, "s2"), running(&p, "s1")];
        let a = plan(&p, st);
        assert!(a.kill_pod, "{policy} exit {code}");
        assert!(a.init_to_start.is_empty() && a.containers_to_start.is_empty());
    }
    // A finished pod whose sidecar also exited: no restart of it either.
    let p = pod("Never", &["s1"], &["a"], &[]);
    let a = plan(&p, vec![exited(&p, "a", 0), exited(&p, "s1", 137)]);
    assert!(a.kill_pod && a.init_to_start.is_empty());
}

#[test]
fn app_container_restarts_beside_running_sidecar() {
    let p = pod("OnFailure", &["s1"], &["a"], &[]);
    let a = plan(&p, vec![exited(&p, "a", 1), running(&p, "s1")]);
    assert_eq!(a.containers_to_start, vec![0]);
    assert!(!a.kill_pod && a.init_to_start.is_empty());
}

#[test]
fn failed_regular_init_container_fails_a_never_pod_with_sidecar() {
    let p = pod("Never", &["s1", "i1"], &["a"], &[]);
    let a = plan(&p, vec![exited(&p, "i1", 2), running(&p, "s1")]);
    assert!(a.kill_pod);
    assert!(a.init_to_start.is_empty());
    // OnFailure: i1 again, the sidecar stays.
    let p = pod("OnFailure", &["s1", "i1"], &["a"], &[]);
    let a = plan(&p, vec![exited(&p, "i1", 2), running(&p, "s1")]);
    assert_eq!(a.init_to_start, vec![1]);
    assert!(!a.kill_pod && a.containers_to_kill.is_empty());
}

#[test]
fn deleted_pod_restarts_no_sidecar() {
    let mut p = pod("Always", &["s1"], &["a"], &[]);
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Default::default(),
    ));
    let a = plan(&p, vec![running(&p, "a"), exited(&p, "s1", 1)]);
    assert!(a.init_to_start.is_empty());
}

#[test]
fn created_but_not_started_init_container_is_started_again() {
    let p = pod("Always", &["i1", "i2"], &["a"], &[]);
    let a = plan(
        &p,
        vec![
            inst(&p, "i2", ContainerState::Created, 0, 1),
            exited(&p, "i1", 0),
        ],
    );
    assert_eq!(a.init_to_start, vec![1]);
}
