//! The resize rules of each release, driven through the patch path the
//! server uses (`handlers::patched_object_as`).

use super::*;
use crate::features::FeatureGates;
use crate::handlers::{patched_object_as, Route};
use crate::resources;
use crate::status::ApiError;
use crate::version::Version;

const SMP: &str = "application/strategic-merge-patch+json";

fn pods() -> &'static ResourceDef {
    resources::find("", "v1", "pods").expect("pods")
}

fn emu(minor: u32, gates: &str) -> Emulation {
    Emulation::new(
        Version::new(minor),
        FeatureGates::parse(gates).expect("gates"),
    )
}

fn route(sub: Option<&str>) -> Route {
    Route {
        def: pods(),
        ns: Some("default".into()),
        name: Some("p".into()),
        sub: sub.map(String::from),
    }
}

/// A running pod as the server stores it: container `c` with `resources`,
/// its status reporting `resources` as a kubelet with the feature does.
fn stored(resources: Value) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                     "generation": 1, "labels": {"app": "web"}},
        "spec": {"nodeName": "node-a",
                 "containers": [{"name": "c", "image": "busybox:1.36", "resources": resources}]}});
    kinds::apply_defaults(pods(), &mut p);
    let qos = kinds::qos_class(&p);
    let limits = p["spec"]["containers"][0]["resources"].clone();
    p["status"] = json!({"phase": "Running", "qosClass": qos, "containerStatuses": [
        {"name": "c", "ready": true, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
         "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "resources": limits,
         "allocatedResources": limits.get("requests").cloned().unwrap_or(json!({}))}]});
    kinds::apply_defaults(pods(), &mut p);
    p
}

fn remove(v: &mut Value, key: &str) {
    if let Some(m) = v.as_object_mut() {
        m.remove(key);
    }
}

fn burstable() -> Value {
    stored(json!({"requests": {"cpu": "100m", "memory": "32Mi"},
                  "limits": {"cpu": "200m", "memory": "64Mi"}}))
}

fn resize(e: &Emulation, old: &Value, patch: Value) -> Result<Value, ApiError> {
    patched_object_as(e, &route(Some("resize")), old, SMP, &patch)
}

fn plain(e: &Emulation, old: &Value, patch: Value) -> Result<Value, ApiError> {
    patched_object_as(e, &route(None), old, SMP, &patch)
}

fn patch_c(resources: Value) -> Value {
    json!({"spec": {"containers": [{"name": "c", "resources": resources}]}})
}

/// The (field, message) causes of a 422.
fn causes(r: Result<Value, ApiError>) -> Vec<(String, String)> {
    let e = r.expect_err("refused");
    assert_eq!(e.code, 422, "{}", e.message);
    e.details
        .as_ref()
        .and_then(|d| d["causes"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").into(),
                c["message"].as_str().unwrap_or("").into(),
            )
        })
        .collect()
}

#[test]
fn accepted_resize_changes_only_resources_and_bumps_generation() {
    let old = burstable();
    let patch = json!({"metadata": {"labels": {"x": "y"}},
        "spec": {"activeDeadlineSeconds": 5, "containers": [{"name": "c", "image": "nginx",
            "resources": {"requests": {"cpu": "150m", "memory": "48Mi"},
                          "limits": {"cpu": "300m", "memory": "96Mi"}}}]},
        "status": {"phase": "Failed"}});
    let new = resize(&emu(34, ""), &old, patch).expect("accepted");
    let c = &new["spec"]["containers"][0];
    assert_eq!(
        c["resources"]["limits"],
        json!({"cpu": "300m", "memory": "96Mi"})
    );
    assert_eq!(c["image"], "busybox:1.36", "only resources change");
    assert!(new["spec"].get("activeDeadlineSeconds").is_none());
    assert_eq!(new["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(new["status"], old["status"]);
    assert_eq!(new["metadata"]["generation"], 2, "as the v1.34 capture");
    assert!(
        new["status"].get("resize").is_none(),
        "no Proposed from 1.33"
    );
}

#[test]
fn qos_class_change_is_refused() {
    let guaranteed = patch_c(json!({"requests": {"cpu": "200m", "memory": "64Mi"}}));
    assert_eq!(
        causes(resize(&emu(34, ""), &burstable(), guaranteed)),
        [(
            "spec".into(),
            "Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing"
                .into()
        )]
    );
}

#[test]
fn only_cpu_and_memory_may_change() {
    let more = patch_c(json!({"limits": {"ephemeral-storage": "1Gi"}}));
    assert_eq!(
        causes(resize(&emu(34, ""), &burstable(), more)),
        [(
            "spec".into(),
            "Forbidden: only cpu and memory resources are mutable".into()
        )]
    );
    let policy = json!({"spec": {"containers": [{"name": "c",
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]}]}});
    assert_eq!(causes(resize(&emu(34, ""), &burstable(), policy)).len(), 1);
}

#[test]
fn requests_and_limits_cannot_be_removed() {
    // A request with a limit of its name would come back by defaulting.
    let old =
        stored(json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m"}}));
    let gone = patch_c(json!({"requests": {"memory": null}, "limits": {"cpu": null}}));
    let got = causes(resize(&emu(34, ""), &old, gone));
    assert!(
        got.contains(&(
            "spec.containers[0].resources.requests".into(),
            "Forbidden: resource requests cannot be removed".into()
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&(
            "spec.containers[0].resources.limits".into(),
            "Forbidden: resource limits cannot be removed".into()
        )),
        "{got:?}"
    );
}

#[test]
fn running_container_without_status_resources_is_refused() {
    let mut old = burstable();
    remove(&mut old["status"]["containerStatuses"][0], "resources");
    let up = patch_c(json!({"limits": {"cpu": "250m"}}));
    for e in [
        emu(34, ""),
        emu(33, ""),
        emu(32, "InPlacePodVerticalScaling=true"),
    ] {
        assert_eq!(
            causes(resize(&e, &old, up.clone())),
            [(
                "spec".into(),
                "Forbidden: Pod running on node without support for resize".into()
            )],
            "{:?}",
            e.version
        );
    }
    // Not running yet: the server cannot tell, and lets it through.
    old["status"]["containerStatuses"][0]["state"] =
        json!({"waiting": {"reason": "ContainerCreating"}});
    assert!(resize(&emu(34, ""), &old, up).is_ok());
}

#[test]
fn memory_limit_decrease_is_refused_in_1_33_only() {
    let down = patch_c(json!({"limits": {"memory": "48Mi"}}));
    assert_eq!(
        causes(resize(&emu(33, ""), &burstable(), down.clone())),
        [(
            "spec.containers[0].resources.limits[memory]".into(),
            "Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"
                .into()
        )]
    );
    assert!(resize(&emu(34, ""), &burstable(), down.clone()).is_ok());
    let mut restarting = burstable();
    restarting["spec"]["containers"][0]["resizePolicy"] =
        json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
    assert!(resize(&emu(33, ""), &restarting, down).is_ok());
    let cpu_only =
        stored(json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "200m"}}));
    let added = causes(resize(
        &emu(33, ""),
        &cpu_only,
        patch_c(json!({"limits": {"memory": "1Gi"}})),
    ));
    assert_eq!(
        added[0].1,
        "Forbidden: memory limits cannot be added unless resizePolicy is RestartContainer"
    );
}

#[test]
fn init_containers_and_reordering() {
    let mut old = burstable();
    old["spec"]["initContainers"] = json!([
        {"name": "side", "image": "busybox", "restartPolicy": "Always", "resources": {"requests": {"cpu": "10m"}}},
        {"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}]);
    kinds::apply_defaults(pods(), &mut old);
    let sidecar = json!({"spec": {"initContainers": [{"name": "side", "resources": {"requests": {"cpu": "20m"}}}]}});
    let new = resize(&emu(34, ""), &old, sidecar).expect("sidecars resize");
    assert_eq!(
        new["spec"]["initContainers"][0]["resources"]["requests"]["cpu"],
        "20m"
    );
    let init = json!({"spec": {"initContainers": [{"name": "init", "resources": {"requests": {"cpu": "20m"}}}]}});
    assert_eq!(
        causes(resize(&emu(34, ""), &old, init.clone())),
        [(
            "spec".into(),
            "Forbidden: resources for non-sidecar init containers are immutable".into()
        )]
    );
    // 1.32 copies sidecars only: the change is dropped, not refused.
    let gate = emu(32, "InPlacePodVerticalScaling=true");
    let kept = resize(&gate, &old, init).expect("1.32 drops it");
    assert_eq!(
        kept["spec"]["initContainers"][1]["resources"]["requests"]["cpu"],
        "10m"
    );

    let mut two = burstable();
    let second = json!({"name": "d", "image": "nginx"});
    if let Some(a) = two["spec"]["containers"].as_array_mut() {
        a.push(second);
    }
    kinds::apply_defaults(pods(), &mut two);
    let swapped = json!({"spec": {"$setElementOrder/containers": [{"name": "d"}, {"name": "c"}]}});
    assert_eq!(
        causes(resize(&emu(34, ""), &two, swapped)),
        [
            (
                "spec.containers[0].name".into(),
                "Forbidden: containers may not be renamed or reordered on resize".into()
            ),
            (
                "spec.containers[1].name".into(),
                "Forbidden: containers may not be renamed or reordered on resize".into()
            )
        ]
    );
}

#[test]
fn pods_that_cannot_be_resized() {
    let mut mirror = burstable();
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    let up = patch_c(json!({"limits": {"cpu": "250m"}}));
    assert_eq!(
        causes(resize(&emu(34, ""), &mirror, up.clone())),
        [("".into(), "Forbidden: static pods cannot be resized".into())]
    );
    let mut pod_level = burstable();
    pod_level["spec"]["resources"] = json!({"limits": {"cpu": "1"}});
    assert_eq!(
        causes(resize(&emu(34, ""), &pod_level, up)),
        [(
            "".into(),
            "Forbidden: pods with pod-level resources cannot be resized".into()
        )]
    );
}

#[test]
fn release_1_32_marks_proposed_without_generation() {
    let mut old = burstable();
    remove(&mut old["metadata"], "generation");
    let gate = emu(32, "InPlacePodVerticalScaling=true");
    let new = resize(&gate, &old, patch_c(json!({"requests": {"cpu": "150m"}}))).expect("accepted");
    assert_eq!(
        new["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "150m"
    );
    assert_eq!(new["status"]["resize"], "Proposed");
    assert!(new["metadata"].get("generation").is_none());
}

#[test]
fn plain_update_resizes_in_1_27_with_the_gate_on() {
    let mut old = burstable();
    remove(&mut old["metadata"], "generation");
    let up = patch_c(json!({"requests": {"cpu": "150m"}, "limits": {"cpu": "300m"}}));
    let new =
        plain(&emu(27, "InPlacePodVerticalScaling=true"), &old, up.clone()).expect("alpha gate on");
    assert_eq!(
        new["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "300m"
    );
    assert_eq!(new["status"]["resize"], "Proposed");

    // Gate off (1.27's default) or 1.32+: resources are immutable.
    for e in [
        emu(27, ""),
        emu(32, "InPlacePodVerticalScaling=true"),
        emu(34, ""),
    ] {
        let got = causes(plain(&e, &old, up.clone()));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0]
                .1
                .starts_with("Forbidden: pod updates may not change fields"),
            "{got:?}"
        );
    }
    // 1.27–1.31 refuse a QoS change on a plain update, gate or not.
    let guaranteed = patch_c(json!({"requests": {"cpu": "200m", "memory": "64Mi"}}));
    let got = causes(plain(
        &emu(27, "InPlacePodVerticalScaling=true"),
        &old,
        guaranteed,
    ));
    assert_eq!(
        got,
        [(
            "metadata".into(),
            "Invalid value: \"Burstable\": Pod QoS is immutable".into()
        )]
    );
}

#[test]
fn node_support_reads_the_first_running_container() {
    let p = |statuses: Value| json!({"status": {"containerStatuses": statuses}});
    assert!(node_supports_resize(&json!({})));
    assert!(!node_supports_resize(&p(
        json!([{"name": "a", "state": {"running": {}}}])
    )));
    assert!(node_supports_resize(&p(
        json!([{"name": "a", "state": {"running": {}}, "resources": {}}])
    )));
    assert!(node_supports_resize(&p(
        json!([{"name": "a", "state": {"waiting": {}}}])
    )));
}
