use std::sync::Mutex;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn pod(name: &str, priority: Option<i32>, grace: Option<i64>) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            priority,
            termination_grace_period_seconds: grace,
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
    pods.iter()
        .map(|p| p.metadata.name.as_deref().unwrap())
        .collect()
}

#[test]
fn the_two_periods_become_a_regular_and_a_critical_group() {
    let g = migrate_config(Duration::from_secs(30), Duration::from_secs(10));
    assert_eq!(
        g,
        vec![
            Group {
                priority: 0,
                grace: Duration::from_secs(20)
            },
            Group {
                priority: SYSTEM_CRITICAL_PRIORITY,
                grace: Duration::from_secs(10)
            },
        ]
    );
    assert!(migrate_config(Duration::ZERO, Duration::ZERO).is_empty());
    assert!(migrate_config(Duration::from_secs(5), Duration::from_secs(6)).is_empty());
}

#[test]
fn pods_go_to_the_highest_group_at_or_below_their_priority() {
    let groups = [
        Group {
            priority: 1,
            grace: Duration::from_secs(1),
        },
        Group {
            priority: 100,
            grace: Duration::from_secs(2),
        },
        Group {
            priority: 1000,
            grace: Duration::from_secs(3),
        },
    ];
    let pods = vec![
        pod("none", None, None),    // 0: below every group -> lowest
        pod("one", Some(1), None),  // boundary -> its own group
        pod("mid", Some(99), None), // between -> the lower
        pod("hundred", Some(100), None),
        pod("top", Some(5000), None), // above every group -> highest
    ];
    let out = group_by_priority(&groups, pods);
    assert_eq!(names(&out[0].1), ["none", "one", "mid"]);
    assert_eq!(names(&out[1].1), ["hundred"]);
    assert_eq!(names(&out[2].1), ["top"]);
}

#[test]
fn a_pods_shorter_termination_grace_wins() {
    assert_eq!(pod_grace(&pod("a", None, Some(3)), 20), 3);
    assert_eq!(pod_grace(&pod("b", None, Some(30)), 20), 20);
    assert_eq!(pod_grace(&pod("c", None, None), 20), 20);
}

#[derive(Default)]
struct FakeDeps {
    pods: Vec<Arc<Pod>>,
    log: Mutex<Vec<String>>,
    /// Pods that stop as soon as they are killed.
    obedient: Vec<&'static str>,
    killed: Mutex<Vec<String>>,
}

impl ShutdownDeps for FakeDeps {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.clone()
    }
    fn kill_pod(&self, pod: &Arc<Pod>, grace: i64) {
        let name = pod.metadata.name.clone().unwrap();
        self.log
            .lock()
            .unwrap()
            .push(format!("kill {name} {grace}"));
        self.killed.lock().unwrap().push(name);
    }
    fn pod_stopped(&self, pod: &Pod) -> bool {
        let name = pod.metadata.name.as_deref().unwrap();
        self.obedient.contains(&name) && self.killed.lock().unwrap().iter().any(|k| k == name)
    }
    fn node_event(&self, message: &str) {
        self.log.lock().unwrap().push(format!("event {message}"));
    }
    fn sync_node_status(&self) {}
}

fn manager(groups: Vec<Group>) -> Manager {
    Manager {
        groups,
        shutting_down: AtomicBool::new(false),
    }
}

#[test]
fn regular_pods_stop_before_critical_ones_each_within_its_period() {
    let m = manager(migrate_config(
        Duration::from_secs(2),
        Duration::from_secs(1),
    ));
    let deps = FakeDeps {
        pods: vec![
            pod("critical", Some(SYSTEM_CRITICAL_PRIORITY), None),
            pod("fast", None, None),
            pod("stubborn", None, Some(30)),
        ],
        obedient: vec!["fast", "critical"],
        ..Default::default()
    };
    let (_keep, rx) = crossbeam_channel::bounded::<()>(0);
    let t0 = Instant::now();
    m.process_shutdown(&deps, &rx);
    let took = t0.elapsed();
    let log = deps.log.lock().unwrap().clone();
    // The regular group (1 s) waits its whole period for the stubborn pod,
    // then the critical group (1 s) ends as soon as its pod stopped.
    assert_eq!(log, ["kill fast 1", "kill stubborn 1", "kill critical 1"]);
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_millis(1800),
        "{took:?}"
    );
}

#[test]
fn admission_and_ready_follow_the_shutdown() {
    let m = manager(migrate_config(
        Duration::from_secs(2),
        Duration::from_secs(1),
    ));
    assert!(m.admit().is_ok());
    assert_eq!(m.shutdown_status(), None);
    m.shutting_down.store(true, Ordering::SeqCst);
    let r = m.admit().unwrap_err();
    assert_eq!(r.reason, "NodeShutdown");
    assert_eq!(r.message, "Pod was rejected as the node is shutting down.");
    assert_eq!(
        m.shutdown_status().as_deref(),
        Some("node is shutting down")
    );
}

#[test]
fn the_requested_period_is_the_sum_of_the_groups() {
    let m = manager(migrate_config(
        Duration::from_secs(30),
        Duration::from_secs(10),
    ));
    assert_eq!(m.period_requested(), Duration::from_secs(30));
    assert!(!manager(Vec::new()).enabled());
}
