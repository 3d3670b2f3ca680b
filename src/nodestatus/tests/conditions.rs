//! The status setters: Ready and pressure conditions, errors, schedulable
//! events, images, version info and endpoints.

use super::*;

fn with_capacity() -> Node {
    let mut node = named("n");
    node.status = Some(NodeStatus {
        capacity: Some(
            ["cpu", "memory", "pods", "ephemeral-storage"]
                .into_iter()
                .map(|k| (k.to_string(), q("1")))
                .collect(),
        ),
        ..Default::default()
    });
    node
}

#[test]
fn ready_condition_transitions() {
    let now = t(100);
    // New and ready: no event.
    let mut node = with_capacity();
    let mut ev = Vec::new();
    setters::set_ready_condition(&mut node, &now, &[], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            100,
            100
        )]
    );
    assert!(ev.is_empty());

    // Ready, no transition: heartbeat moves, transition kept.
    let mut ev = Vec::new();
    setters::set_ready_condition(&mut node, &t(110), &[], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            100,
            110
        )]
    );
    assert!(ev.is_empty());

    // Transition to not ready, errors aggregated.
    let errs = vec![
        "runtime".to_string(),
        "network".to_string(),
        "runtime".to_string(),
    ];
    setters::set_ready_condition(&mut node, &t(120), &errs, &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "False",
            "KubeletNotReady",
            "[runtime, network]",
            120,
            120
        )]
    );
    assert_eq!(ev, vec![NodeEvent::status("n", "NodeNotReady")]);
    assert_eq!(ev[0].message, "Node n status is now: NodeNotReady");

    // Not ready, message changes, no transition.
    let mut ev = Vec::new();
    setters::set_ready_condition(&mut node, &t(130), &["foo".to_string()], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready("False", "KubeletNotReady", "foo", 120, 130)]
    );
    assert!(ev.is_empty());

    // Back to ready.
    setters::set_ready_condition(&mut node, &t(140), &[], &mut ev);
    assert_eq!(
        conditions(&node),
        vec![ready(
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
            140,
            140
        )]
    );
    assert_eq!(ev, vec![NodeEvent::status("n", "NodeReady")]);

    // Missing capacity.
    let mut bare = named("n");
    setters::set_ready_condition(&mut bare, &now, &[], &mut Vec::new());
    assert_eq!(
        conditions(&bare)[0].message.as_deref(),
        Some("missing node capacity for resources: cpu, memory, pods, ephemeral-storage")
    );
}

#[test]
fn pressure_condition_transitions() {
    let cases = [
        (
            Pressure::Memory,
            "MemoryPressure",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        (
            Pressure::Disk,
            "DiskPressure",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
            "NodeHasNoDiskPressure",
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
        ),
        (
            Pressure::Pid,
            "PIDPressure",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
            "NodeHasSufficientPID",
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
    ];
    for (kind, ty, ok_reason, ok_msg, ok_event, bad_reason, bad_msg, bad_event) in cases {
        let mut node = named("n");
        // New, no pressure: condition False, with an event.
        let mut ev = Vec::new();
        setters::set_pressure_condition(&mut node, &t(0), kind, false, &mut ev);
        let c = conditions(&node)[0].clone();
        assert_eq!((c.type_.as_str(), c.status.as_str()), (ty, "False"));
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some(ok_reason), Some(ok_msg))
        );
        assert_eq!(ev, vec![NodeEvent::status("n", ok_event)]);
        // Same status: only the heartbeat moves.
        let mut ev = Vec::new();
        setters::set_pressure_condition(&mut node, &t(10), kind, false, &mut ev);
        let c = conditions(&node)[0].clone();
        assert_eq!(
            (c.last_transition_time, c.last_heartbeat_time),
            (Some(t(0)), Some(t(10)))
        );
        assert!(ev.is_empty());
        // Pressure: transition.
        setters::set_pressure_condition(&mut node, &t(20), kind, true, &mut ev);
        let c = conditions(&node)[0].clone();
        assert_eq!(c.status, "True");
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some(bad_reason), Some(bad_msg))
        );
        assert_eq!(
            (c.last_transition_time, c.last_heartbeat_time),
            (Some(t(20)), Some(t(20)))
        );
        assert_eq!(ev, vec![NodeEvent::status("n", bad_event)]);
        assert_eq!(conditions(&node).len(), 1);
    }
}

#[test]
fn aggregate_error_format() {
    assert_eq!(setters::aggregate_errors(&[]), None);
    assert_eq!(
        setters::aggregate_errors(&["a".into()]).as_deref(),
        Some("a")
    );
    assert_eq!(
        setters::aggregate_errors(&["a".into(), "a".into()]).as_deref(),
        Some("a")
    );
    assert_eq!(
        setters::aggregate_errors(&["a".into(), "b".into()]).as_deref(),
        Some("[a, b]")
    );
}

#[test]
fn schedulable_events() {
    let mut node = named("n");
    let mut last = false;
    let mut ev = Vec::new();
    setters::record_schedulable_event(&node, &mut last, &mut ev);
    assert!(ev.is_empty());
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    setters::record_schedulable_event(&node, &mut last, &mut ev);
    setters::record_schedulable_event(&node, &mut last, &mut ev);
    assert_eq!(ev, vec![NodeEvent::status("n", "NodeNotSchedulable")]);
}

#[test]
fn images_sorted_cut_and_names_capped() {
    let images: Vec<ImageInfo> = (1..=4)
        .map(|i| ImageInfo {
            names: (0..7).map(|n| format!("img{i}:{n}")).collect(),
            size_bytes: i * 100,
        })
        .collect();
    let mut node = named("n");
    setters::set_images(&mut node, 2, &images);
    let list = node.status.clone().unwrap().images.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].size_bytes, Some(400));
    assert_eq!(list[1].size_bytes, Some(300));
    assert_eq!(
        list[0].names.as_ref().unwrap().len(),
        setters::MAX_NAMES_PER_IMAGE
    );
    setters::set_images(&mut node, -1, &images);
    assert_eq!(node.status.clone().unwrap().images.unwrap().len(), 4);
    setters::set_images(&mut node, 50, &[]);
    assert!(node.status.unwrap().images.is_none());
}

/// Images of one size come in the same order whatever order the runtime
/// lists them in: an unchanged node sends no new status.
#[test]
fn equal_sized_images_keep_one_order() {
    let img = |name: &str| ImageInfo {
        names: vec![name.to_string()],
        size_bytes: 100,
    };
    let listed = [img("b"), img("a"), img("c")];
    let mut reversed = listed.clone();
    reversed.reverse();
    let order = |images: &[ImageInfo]| {
        let mut node = named("n");
        setters::set_images(&mut node, -1, images);
        node.status.unwrap().images.unwrap()
    };
    assert_eq!(order(&listed), order(&reversed));
    assert_eq!(order(&listed)[0].names, Some(vec!["a".to_string()]));
}

#[test]
fn version_info_and_endpoints() {
    let mut node = named("n");
    setters::set_version_info(
        &mut node,
        "6.1.0",
        "Debian 12",
        Some("containerd"),
        Some("1.7.24"),
        "v1.34.0",
    );
    setters::set_daemon_endpoints(&mut node, 10250);
    setters::set_go_runtime(&mut node);
    let v = serde_json::to_value(node.status.as_ref().unwrap()).unwrap();
    assert_eq!(
        v["nodeInfo"]["containerRuntimeVersion"],
        "containerd://1.7.24"
    );
    assert_eq!(v["nodeInfo"]["kubeletVersion"], "v1.34.0");
    assert_eq!(v["nodeInfo"]["kernelVersion"], "6.1.0");
    assert_eq!(v["nodeInfo"]["osImage"], "Debian 12");
    assert_eq!(v["nodeInfo"]["operatingSystem"], "linux");
    assert_eq!(
        v["daemonEndpoints"],
        json!({"kubeletEndpoint": {"Port": 10250}})
    );
    setters::set_version_info(
        &mut node,
        "6.1.0",
        "Debian 12",
        Some("containerd"),
        None,
        "v1.34.0",
    );
    let v = serde_json::to_value(node.status.as_ref().unwrap()).unwrap();
    assert_eq!(
        v["nodeInfo"]["containerRuntimeVersion"],
        "containerd://Unknown"
    );
}
