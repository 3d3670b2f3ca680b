//! Never weaker isolation than a pod asks for, on real containerd 1.6
//! against the double at v1.34: fields the node cannot honour are refused
//! with upstream's reason, as upstream v1.34 refuses them on the same
//! runtime, and the pod never runs without them. (`hostUsers: false` is in
//! tests/cluster.rs.)
//!
//! Test numbers 27 to 31.

mod common;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

const SLEEPER: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// `supplementalGroupsPolicy: Strict` keeps the image's /etc/group out of
/// the process's groups; containerd 1.6 cannot, the node's status says
/// so (no `features.supplementalGroupsPolicy`), and the pod is rejected at
/// admission, where a `Merge` pod runs.
#[test]
fn strict_supplemental_groups_are_rejected_where_the_runtime_cannot() {
    let mut cl = Cluster::new("strict_supplemental_groups", 27);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let mut strict = api_pod("strict", SLEEPER);
    strict["spec"]["securityContext"] = json!({"supplementalGroupsPolicy": "Strict"});
    let mut merge = api_pod("merge", SLEEPER);
    merge["spec"]["securityContext"] = json!({"supplementalGroupsPolicy": "Merge"});
    cl.api.create_pod(&strict);
    cl.api.create_pod(&merge);
    let rejected = cl.eventually(secs(15), "the Strict pod to be Failed", |api| {
        let p = api.pod("strict")?;
        (phase(&p) == "Failed").then_some(p)
    });
    let st = &rejected["status"];
    assert_eq!(
        st["reason"],
        "SupplementalGroupsPolicyNotSupported",
        "{}",
        pretty_status(&rejected)
    );
    assert_eq!(
        st["message"],
        "Pod was rejected: SupplementalGroupsPolicy=Strict is not supported in this node",
        "{}",
        pretty_status(&rejected)
    );
    cl.eventually(secs(10), "the rejection's event", |api| {
        api.events_for("default", "strict")
            .iter()
            .any(|e| {
                e["reason"] == "SupplementalGroupsPolicyNotSupported" && e["type"] == "Warning"
            })
            .then_some(())
    });
    cl.wait_pod_ready("merge", secs(30));
    let snap = cl.env.snapshot();
    assert!(
        snap.objs.iter().all(|o| o.pod_name() != "strict"),
        "containerd has objects of the rejected pod:\n{}",
        snap.summary()
    );
}

/// A read-only volume mount with `recursiveReadOnly: Enabled` must be
/// read-only below its top too; no runtime handler here offers that, so
/// the container is never created (CreateContainerConfigError, upstream's
/// message), where `IfPossible` is mounted read-only and reported
/// `Disabled`.
#[test]
fn recursive_read_only_enabled_is_refused_where_the_runtime_cannot() {
    let mut cl = Cluster::new("recursive_read_only", 28);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&rro_pod("rro-enabled", "Enabled"));
    cl.api.create_pod(&rro_pod("rro-ifpossible", "IfPossible"));
    let want = "failed to resolve recursive read-only mode: volume \"v\" requested recursive \
                read-only mode, but it is not supported by the runtime";
    let waiting = cl.eventually(secs(20), "CreateContainerConfigError", |api| {
        let p = api.pod("rro-enabled")?;
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerConfigError").then_some(w)
    });
    assert_eq!(waiting["message"], want);
    // Events go out through the recorder's thread: the status can be first.
    cl.eventually(secs(10), "the Failed event", |api| {
        api.events_for("default", "rro-enabled")
            .iter()
            .any(|e| e["reason"] == "Failed" && e["message"] == format!("Error: {want}"))
            .then_some(())
    });
    let ready = cl.wait_pod_ready("rro-ifpossible", secs(30));
    let mounts = &ready["status"]["containerStatuses"][0]["volumeMounts"];
    let v = mounts
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "v"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(v["recursiveReadOnly"], "Disabled", "{mounts}");
    assert_eq!(v["readOnly"], true, "{mounts}");
}

fn rro_pod(name: &str, mode: &str) -> Value {
    let mut p = api_pod(name, SLEEPER);
    p["spec"]["volumes"] = json!([{"name": "v", "emptyDir": {}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{
        "name": "v", "mountPath": "/v", "readOnly": true, "recursiveReadOnly": mode,
    }]);
    p
}

/// A pod whose containers all run as one user gets its service-account
/// token readable by that user only (upstream's fsUser: 0600, owned by
/// it); a `subPathExpr` gives the container only its subdirectory, and
/// one naming an unset variable is refused rather than mounting the whole
/// volume.
#[test]
fn token_for_one_user_and_sub_path_expr_never_give_more() {
    let mut cl = Cluster::new("token_and_sub_path_expr", 29);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let mut one_user = api_pod("one-user", SLEEPER);
    one_user["spec"]["securityContext"] = json!({"runAsUser": 1000});
    cl.api.create_pod(&one_user);
    let mut sub = api_pod(
        "sub",
        "echo hi > /data/f; trap 'exit 0' TERM; while true; do sleep 1; done",
    );
    sub["spec"]["volumes"] = json!([{"name": "v", "emptyDir": {}}]);
    sub["spec"]["containers"][0]["env"] = json!([
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]);
    sub["spec"]["containers"][0]["volumeMounts"] = json!([
        {"name": "v", "mountPath": "/data", "subPathExpr": "$(POD)"}]);
    cl.api.create_pod(&sub);
    let mut missing = sub.clone();
    missing["metadata"]["name"] = json!("sub-missing");
    missing["spec"]["containers"][0]["volumeMounts"][0]["subPathExpr"] = json!("$(NOPE)");
    cl.api.create_pod(&missing);

    let one_user = cl.wait_pod_ready("one-user", secs(30));
    let uid = |p: &Value| {
        p["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let projected = cl
        .env
        .root
        .join("pods")
        .join(uid(&one_user))
        .join("volumes/kubernetes.io~projected");
    let token = std::fs::read_dir(&projected)
        .ok()
        .and_then(|mut d| d.next())
        .and_then(Result::ok)
        .map(|e| e.path().join("token"))
        .expect("a projected volume");
    let meta = std::fs::metadata(&token).expect("the token file");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "{}",
        token.display()
    );
    assert_eq!(meta.uid(), 1000, "{}", token.display());

    let sub = cl.wait_pod_ready("sub", secs(30));
    let empty_dir = cl
        .env
        .root
        .join("pods")
        .join(uid(&sub))
        .join("volumes/kubernetes.io~empty-dir/v");
    let written = std::fs::read_to_string(empty_dir.join("sub/f"));
    assert_eq!(
        written.ok().as_deref(),
        Some("hi\n"),
        "the write went to v/sub/f"
    );
    assert!(
        !empty_dir.join("f").exists(),
        "the container saw the whole volume"
    );

    let waiting = cl.eventually(secs(20), "CreateContainerConfigError", |api| {
        let p = api.pod("sub-missing")?;
        let w = p["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerConfigError").then_some(w)
    });
    assert_eq!(waiting["message"], "missing value for NOPE");
}

/// A pod that claims devices through dynamic resource allocation never
/// runs without them: while its claim cannot be had (here it does not
/// exist) its sandbox is not made, and the event says why in upstream's
/// words. The DRA suite proper is tests/dra.rs.
#[test]
fn a_pod_with_resource_claims_waits_for_its_devices() {
    let mut cl = Cluster::new("resource_claims_wait", 30);
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    let mut p = api_pod("claims", SLEEPER);
    p["spec"]["resourceClaims"] = json!([{"name": "gpu", "resourceClaimName": "one-gpu"}]);
    p["spec"]["containers"][0]["resources"] = json!({"claims": [{"name": "gpu"}]});
    cl.api.create_pod(&p);
    cl.api.create_pod(&api_pod("plain", SLEEPER));
    cl.wait_pod_ready("plain", secs(30));
    let event = cl.eventually(secs(20), "FailedPrepareDynamicResources", |api| {
        api.events_for("default", "claims")
            .into_iter()
            .find(|e| e["reason"] == "FailedPrepareDynamicResources")
    });
    let message = event["message"].as_str().unwrap_or_default();
    assert_eq!(
        message,
        "Failed to prepare dynamic resources: fetch ResourceClaim one-gpu: \
         resourceclaims.resource.k8s.io \"one-gpu\" not found"
    );
    assert_eq!(event["type"], "Warning");
    let pod = cl.api.pod("claims").expect("the pod stays");
    assert_eq!(phase(&pod), "Pending", "{}", pretty_status(&pod));
    let snap = cl.env.snapshot();
    assert!(
        snap.objs.iter().all(|o| o.pod_name() != "claims"),
        "containerd has objects of the pod whose claims were not prepared:\n{}",
        snap.summary()
    );
}

/// An `image` volume (the server's ImageVolume gate on, so the volume
/// arrives). With the kubelet's gate off, its default in v1.34, upstream's
/// stub plugin has no path and the container is refused
/// (CreateContainerConfigError `path is empty *image.imagePlugin`). With it
/// on, the image is pulled and the mount names it; containerd 1.6 knows no
/// image mounts and refuses the container (CreateContainerError with its
/// own message). Either way no container of the pod is ever created, and
/// no empty directory stands in for the volume.
#[test]
fn image_volumes_are_refused_where_the_runtime_cannot_mount_images() {
    let mut cl = Cluster::with_gates("image_volumes", 31, "1.34", "ImageVolume=true");
    cl.start_kubelet();
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&image_volume_pod("iv-gate-off"));
    let want = "path is empty *image.imagePlugin";
    let waiting = cl.eventually(secs(30), "CreateContainerConfigError", |api| {
        let w =
            api.pod("iv-gate-off")?["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerConfigError").then_some(w)
    });
    assert_eq!(waiting["message"], want);
    cl.eventually(secs(10), "the Failed event", |api| {
        api.events_for("default", "iv-gate-off")
            .iter()
            .any(|e| e["reason"] == "Failed" && e["message"] == format!("Error: {want}"))
            .then_some(())
    });

    // The kubelet's gate on: pulled (present here), then refused by the runtime.
    cl.env.kill_kubelet();
    let mut args = cl.kubelet_args();
    args.push("--feature-gates=ImageVolume=true".into());
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(20));
    cl.api.create_pod(&image_volume_pod("iv-gate-on"));
    let waiting = cl.eventually(secs(30), "CreateContainerError", |api| {
        let w =
            api.pod("iv-gate-on")?["status"]["containerStatuses"][0]["state"]["waiting"].clone();
        (w["reason"] == "CreateContainerError").then_some(w)
    });
    let message = waiting["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains("failed to mkdir \"\""),
        "containerd's refusal: {message}"
    );
    cl.eventually(secs(10), "the pod's Pulled event for the volume", |api| {
        api.events_for("default", "iv-gate-on")
            .iter()
            .any(|e| {
                e["reason"] == "Pulled"
                    && e["involvedObject"].get("fieldPath").is_none()
                    && e["message"]
                        == format!("Container image \"{BUSYBOX}\" already present on machine")
            })
            .then_some(())
    });
    let snap = cl.env.snapshot();
    for pod in ["iv-gate-off", "iv-gate-on"] {
        assert!(
            snap.containers(pod).is_empty(),
            "{pod} has containers:\n{}",
            snap.summary()
        );
    }
}

fn image_volume_pod(name: &str) -> Value {
    let mut p = api_pod(name, SLEEPER);
    p["spec"]["volumes"] =
        json!([{"name": "iv", "image": {"reference": BUSYBOX, "pullPolicy": "IfNotPresent"}}]);
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "iv", "mountPath": "/iv"}]);
    p
}
