use super::*;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn pod(uid: &str, cpu: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.uid = Some(uid.into());
    p.spec = Some(PodSpec {
        containers: vec![Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), Quantity(cpu.into()))])),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    });
    p
}

fn cpu_of(p: &Pod) -> String {
    p.containers()[0]
        .resources
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()["cpu"]
        .0
        .clone()
}

#[test]
fn the_allocation_stands_in_for_the_spec_until_a_resize_is_taken() {
    let m = Manager::new(None);
    let first = Arc::new(pod("u", "100m"));
    m.add_pod(&first);
    assert!(!m.needs_resize(&first));
    assert!(
        Arc::ptr_eq(&m.allocated_pod(&first), &first),
        "no copy when equal"
    );

    let resized = Arc::new(pod("u", "300m"));
    assert!(m.needs_resize(&resized));
    assert_eq!(cpu_of(&m.allocated_pod(&resized)), "100m");
    // A second add (the same pod seen again) keeps the allocation.
    m.add_pod(&resized);
    assert_eq!(cpu_of(&m.allocated_pod(&resized)), "100m");

    m.allocate(&resized);
    assert!(!m.needs_resize(&resized));
    assert_eq!(cpu_of(&m.allocated_pod(&resized)), "300m");
}

#[test]
fn pending_reports_only_changes() {
    let m = Manager::new(None);
    let p = PendingResize {
        reason: PendingReason::Deferred,
        message: "m".into(),
    };
    assert!(m.set_pending("u", Some(p.clone())));
    assert!(!m.set_pending("u", Some(p.clone())));
    assert_eq!(m.pending("u"), Some(p));
    assert!(m.set_pending("u", None));
    assert!(!m.set_pending("u", None));
    // Taking the resize clears why it waited.
    m.set_pending(
        "u",
        Some(PendingResize {
            reason: PendingReason::Infeasible,
            message: "x".into(),
        }),
    );
    m.allocate(&pod("u", "1"));
    assert_eq!(m.pending("u"), None);
}

#[test]
fn both_checkpoints_survive_a_restart_and_orphans_go() {
    let dir = std::env::temp_dir().join(format!("rk-alloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    {
        let m = Manager::new(Some(&dir));
        m.add_pod(&pod("u", "100m"));
        m.allocate(&pod("u", "300m"));
        m.add_pod(&pod("gone", "1"));
        m.set_actuated(
            "u",
            "c",
            pod("u", "100m").containers()[0].resources.clone().unwrap(),
        );
    }
    let m = Manager::new(Some(&dir));
    // The spec the restarted kubelet sees first does not replace what
    // was allocated.
    m.add_pod(&pod("u", "100m"));
    assert_eq!(
        cpu_of(&m.allocated_pod(&Arc::new(pod("u", "100m")))),
        "300m"
    );
    let actuated = m.actuated("u", "c").unwrap();
    assert_eq!(actuated.requests.unwrap()["cpu"].0, "100m");
    m.remove_orphans(&HashSet::from(["u".to_string()]));
    let m = Manager::new(Some(&dir));
    assert!(m.container_allocation("gone", "c").is_none());
    assert!(m.container_allocation("u", "c").is_some());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_corrupt_checkpoint_starts_empty() {
    let dir = std::env::temp_dir().join(format!("rk-alloc-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(ALLOCATED_CHECKPOINT),
        b"{\"data\":\"{}\",\"checksum\":1}",
    )
    .unwrap();
    std::fs::write(dir.join(ACTUATED_CHECKPOINT), b"not json").unwrap();
    let m = Manager::new(Some(&dir));
    assert!(m.container_allocation("u", "c").is_none());
    m.add_pod(&pod("u", "1"));
    assert!(m.container_allocation("u", "c").is_some());
    std::fs::remove_dir_all(&dir).ok();
}
