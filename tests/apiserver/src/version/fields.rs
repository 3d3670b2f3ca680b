//! Fields an emulated release does not keep on a write.
//!
//! Two mechanisms make a real kube-apiserver silently drop a field a
//! client sends:
//!
//! * the field is newer than the release: the JSON decoder into the Go
//!   type ignores unknown fields (at most a warning), so the stored object
//!   never has it ([`Kept::Unknown`]);
//! * the field exists but its feature gate is off by default: the
//!   strategy's PrepareForCreate/PrepareForUpdate (pkg/api/pod/util.go
//!   `dropDisabledFields` / `dropDisabledPodStatusFields`,
//!   pkg/registry/core/node/strategy.go `dropDisabledFields`) clears it
//!   ([`Kept::GateOff`]).
//!
//! Upstream keeps a gated field the stored object already uses (the
//! `…InUse(old)` checks); an object the double stored at the same emulated
//! release never carries one, so those checks are not modelled.
//!
//! Both drop the field before validation, so [`drop_unserved`] runs on the
//! decoded (or patched) object before the rest of the write.

use super::Version;
use crate::features::{Emulation, FeatureGates};
use crate::resources::ResourceDef;
use serde_json::{Map, Value};

/// Whether a release keeps a field on writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// The release predates the field: the decoder prunes it.
    Unknown,
    /// The field exists, its feature gate is off by default: the strategy
    /// drops it.
    GateOff,
    Yes,
}

/// A field added in 1.`added` behind a gate that is on by default from
/// 1.`on_by_default` (`None`: not by 1.34).
fn kept(v: Version, added: u32, on_by_default: Option<u32>) -> Kept {
    if !v.at_least(added) {
        Kept::Unknown
    } else if on_by_default.is_some_and(|on| v.at_least(on)) {
        Kept::Yes
    } else {
        Kept::GateOff
    }
}

// ---------------------------------------------------------------- pod facts

/// Pod `status.hostIPs`: added in 1.28 behind PodHostIPs (alpha, off),
/// beta and on in 1.29, GA 1.30 (KEP-2681); dropped by
/// dropDisabledPodStatusFields while off.
pub fn host_ips(v: Version) -> Kept {
    kept(v, 28, Some(29))
}

/// Init-container `restartPolicy` (sidecars): added in 1.28 behind
/// SidecarContainers (alpha, off), beta and on in 1.29, GA 1.33
/// (KEP-753); dropDisabledFields clears it while off, so the container is
/// an ordinary init container.
pub fn sidecar_restart_policy(v: Version) -> Kept {
    kept(v, 28, Some(29))
}

/// `spec.ephemeralContainers`: in the API since 1.16 behind
/// EphemeralContainers (alpha and off through 1.22, beta and on in 1.23,
/// GA 1.25; KEP-277); dropDisabledFields clears it while off.
pub fn ephemeral_containers(v: Version) -> Kept {
    kept(v, 16, Some(23))
}

/// Container-status `allocatedResources` and `resources`, `status.resize`
/// and a container's `resizePolicy`: added in 1.27 (kubernetes#102884; the
/// field renamed to allocatedResources by #116450 before 1.27.0) behind
/// InPlacePodVerticalScaling, alpha and off through 1.32, beta and on from
/// 1.33 (KEP-1287); dropDisabledPodStatusFields clears the status fields
/// and dropDisabledFields the spec's `resizePolicy` while off. This is the
/// default gates' answer; [`in_place_resize_with`] takes `--feature-gates`.
pub fn in_place_resize(v: Version) -> Kept {
    in_place_resize_with(v, &FeatureGates::default())
}

/// [`in_place_resize`] with the gates set: kept whenever
/// InPlacePodVerticalScaling is on.
pub fn in_place_resize_with(v: Version, gates: &FeatureGates) -> Kept {
    gated(v, 27, gates.in_place_resize(v))
}

/// Container-status `allocatedResources`: as [`in_place_resize_with`],
/// except that 1.32 also wants InPlacePodVerticalScalingAllocatedStatus
/// (alpha and off; kube_features.go, dropDisabledPodStatusFields).
pub fn allocated_resources_with(v: Version, gates: &FeatureGates) -> Kept {
    gated(v, 27, gates.allocated_resources(v))
}

/// A gated field added in 1.`added` whose gate is `on`.
fn gated(v: Version, added: u32, on: bool) -> Kept {
    match (v.at_least(added), on) {
        (false, _) => Kept::Unknown,
        (true, true) => Kept::Yes,
        (true, false) => Kept::GateOff,
    }
}

/// Container-status `volumeMounts` (VolumeMountStatus with its
/// `recursiveReadOnly`) and a container's `volumeMounts[].recursiveReadOnly`:
/// added in 1.30 behind RecursiveReadOnlyMounts (alpha, off), beta and on
/// in 1.31, GA 1.33 (KEP-3857); dropDisabledPodStatusFields clears the
/// whole status list, dropDisabledFields the spec field, while off.
pub fn recursive_read_only(v: Version) -> Kept {
    kept(v, 30, Some(31))
}

/// Pod volumes of type `image`: added in 1.31 behind ImageVolume, alpha
/// and off, beta but still off by default in 1.33 and 1.34 (KEP-4639);
/// dropImageVolumes (pkg/api/pod/util.go) removes them and the mounts that
/// name them while off.
pub fn image_volumes(v: Version) -> Kept {
    image_volumes_with(v, &FeatureGates::default())
}

/// [`image_volumes`] with the gates set: kept while ImageVolume is on.
pub fn image_volumes_with(v: Version, gates: &FeatureGates) -> Kept {
    gated(v, 31, gates.image_volume(v))
}

/// Container-status `user`: added in 1.31 behind SupplementalGroupsPolicy,
/// alpha and off through 1.32, beta and on from 1.33 (KEP-3619);
/// dropDisabledPodStatusFields clears it while off.
pub fn container_user(v: Version) -> Kept {
    kept(v, 31, Some(33))
}

/// Container-status `allocatedResourcesStatus`: added in 1.31 behind
/// ResourceHealthStatus, still alpha and off in 1.34 (beta in 1.36;
/// KEP-4680); dropDisabledPodStatusFields clears it while off.
pub fn allocated_resources_status(v: Version) -> Kept {
    kept(v, 31, None)
}

/// `status.observedGeneration` and pod conditions' `observedGeneration`:
/// added in 1.33 behind PodObservedGenerationTracking (alpha, off), beta
/// and on in 1.34 (KEP-5067); dropDisabledPodStatusFields zeroes them
/// while off.
pub fn observed_generation(v: Version) -> Kept {
    kept(v, 33, Some(34))
}

// ---------------------------------------------------------------- node facts

/// Node `status.runtimeHandlers`: added in 1.30 with KEP-3857; in 1.30 the
/// node strategy's dropDisabledFields clears it while
/// RecursiveReadOnlyMounts is off, on create and on updates of the main
/// resource only (the status strategy kept it). On from 1.31.
pub fn runtime_handlers(v: Version) -> Kept {
    kept(v, 30, Some(31))
}

/// Node `status.features` (NodeFeatures.supplementalGroupsPolicy): added
/// in 1.31 with KEP-3619. No strategy drops it (none was found upstream).
pub fn node_features(v: Version) -> Kept {
    kept(v, 31, Some(31))
}

/// Node `status.declaredFeatures`: added in 1.35 (absent from the 1.34
/// API), so every emulated release prunes it.
pub fn node_declared_features(v: Version) -> Kept {
    kept(v, 35, None)
}

// ---------------------------------------------------------------- pruning

/// Drops from a pod or node about to be written the fields the release,
/// with its default feature gates, does not keep. `sub` is the subresource
/// written (`status`, …).
pub fn drop_unserved(v: Version, def: &ResourceDef, sub: Option<&str>, obj: &mut Value) {
    drop_unserved_with(&Emulation::new(v, FeatureGates::default()), def, sub, obj)
}

/// [`drop_unserved`] with the gates of `--feature-gates`.
pub fn drop_unserved_with(emu: &Emulation, def: &ResourceDef, sub: Option<&str>, obj: &mut Value) {
    match (def.group, def.plural) {
        ("", "pods") => drop_pod_fields(emu, obj),
        ("", "nodes") => drop_node_fields(emu.version, sub, obj),
        _ => {}
    }
}

fn gone(k: Kept) -> bool {
    k != Kept::Yes
}

fn field_mut<'a>(obj: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    obj.get_mut(key).and_then(Value::as_object_mut)
}

/// The objects of the list `key` of `m`.
fn items<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

fn drop_pod_fields(emu: &Emulation, pod: &mut Value) {
    if let Some(spec) = field_mut(pod, "spec") {
        drop_pod_spec_fields(emu, spec);
    }
    if let Some(status) = field_mut(pod, "status") {
        drop_pod_status_fields(emu, status);
    }
}

fn drop_pod_spec_fields(emu: &Emulation, spec: &mut Map<String, Value>) {
    let v = emu.version;
    if gone(in_place_resize_with(v, &emu.gates)) {
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            for c in items(spec, list) {
                c.remove("resizePolicy");
            }
        }
    }
    if gone(ephemeral_containers(v)) {
        spec.remove("ephemeralContainers");
    }
    if gone(sidecar_restart_policy(v)) {
        for c in items(spec, "initContainers") {
            c.remove("restartPolicy");
        }
    }
    match image_volumes_with(v, &emu.gates) {
        Kept::GateOff => drop_image_volumes(spec),
        // The decoder prunes the unknown `image` source; upstream's
        // validation would then refuse the volume as having no type, which
        // the double does not model.
        Kept::Unknown => {
            for vol in items(spec, "volumes") {
                vol.remove("image");
            }
        }
        Kept::Yes => {}
    }
    if gone(recursive_read_only(v)) {
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            for c in items(spec, list) {
                for m in items(c, "volumeMounts") {
                    m.remove("recursiveReadOnly");
                }
            }
        }
    }
}

/// dropImageVolumes: the image volumes, and every container's mounts of
/// them.
fn drop_image_volumes(spec: &mut Map<String, Value>) {
    let mut names = Vec::new();
    if let Some(Value::Array(vols)) = spec.get_mut("volumes") {
        vols.retain(|vol| match vol.get("image") {
            Some(_) => {
                names.extend(vol.get("name").and_then(Value::as_str).map(String::from));
                false
            }
            None => true,
        });
    }
    if names.is_empty() {
        return;
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in items(spec, list) {
            if let Some(Value::Array(mounts)) = c.get_mut("volumeMounts") {
                mounts.retain(|m| {
                    let name = m.get("name").and_then(Value::as_str).unwrap_or("");
                    !names.iter().any(|n| n == name)
                });
            }
        }
    }
}

fn drop_pod_status_fields(emu: &Emulation, status: &mut Map<String, Value>) {
    let v = emu.version;
    if gone(host_ips(v)) {
        status.remove("hostIPs");
    }
    if gone(in_place_resize_with(v, &emu.gates)) {
        status.remove("resize");
    }
    if gone(observed_generation(v)) {
        status.remove("observedGeneration");
        for c in items(status, "conditions") {
            c.remove("observedGeneration");
        }
    }
    for list in [
        "initContainerStatuses",
        "containerStatuses",
        "ephemeralContainerStatuses",
    ] {
        for cs in items(status, list) {
            drop_container_status_fields(emu, cs);
        }
    }
}

fn drop_container_status_fields(emu: &Emulation, cs: &mut Map<String, Value>) {
    let (v, gates) = (emu.version, &emu.gates);
    let drops = [
        ("allocatedResources", allocated_resources_with(v, gates)),
        ("resources", in_place_resize_with(v, gates)),
        ("volumeMounts", recursive_read_only(v)),
        ("user", container_user(v)),
        ("allocatedResourcesStatus", allocated_resources_status(v)),
    ];
    for (key, k) in drops {
        if gone(k) {
            cs.remove(key);
        }
    }
}

/// On create every field goes through the node strategy; writes through
/// `nodes/status` use the status strategy, which drops only unknown fields.
fn drop_node_fields(v: Version, sub: Option<&str>, node: &mut Value) {
    let status_write = sub == Some("status");
    let Some(status) = field_mut(node, "status") else {
        return;
    };
    let drops = [
        ("runtimeHandlers", runtime_handlers(v)),
        ("features", node_features(v)),
        ("declaredFeatures", node_declared_features(v)),
    ];
    for (key, k) in drops {
        let dropped = match k {
            Kept::Unknown => true,
            Kept::GateOff => !status_write,
            Kept::Yes => false,
        };
        if dropped {
            status.remove(key);
        }
    }
    // nodeInfo.swap (NodeSwap, KEP-2400): new in 1.33, whose decoder is
    // the first to keep it.
    if !v.at_least(33) {
        if let Some(info) = status.get_mut("nodeInfo").and_then(Value::as_object_mut) {
            info.remove("swap");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;
    use serde_json::json;

    fn pod() -> Value {
        json!({
            "spec": {
                "initContainers": [{"name": "s", "restartPolicy": "Always",
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "recursiveReadOnly": "Disabled"}]}],
                "containers": [{"name": "c"}],
                "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]
            },
            "status": {
                "hostIPs": [{"ip": "10.0.0.1"}],
                "observedGeneration": 1,
                "resize": "InProgress",
                "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}],
                "containerStatuses": [{"name": "c", "user": {"linux": {"uid": 0, "gid": 0}},
                    "allocatedResources": {"cpu": "1"}, "resources": {},
                    "allocatedResourcesStatus": [],
                    "volumeMounts": [{"name": "v", "mountPath": "/v", "recursiveReadOnly": "Disabled"}]}]
            }
        })
    }

    fn pruned(minor: u32) -> Value {
        let mut p = pod();
        let def = resources::find("", "v1", "pods").expect("pods");
        drop_unserved(Version::new(minor), def, Some("status"), &mut p);
        p
    }

    #[test]
    fn releases_keep_what_they_know() {
        let old = pruned(22);
        assert!(old["spec"].get("ephemeralContainers").is_none());
        assert!(old["spec"]["initContainers"][0]
            .get("restartPolicy")
            .is_none());
        assert!(old["status"].get("hostIPs").is_none());
        assert!(old["status"]["conditions"][0]
            .get("observedGeneration")
            .is_none());
        assert_eq!(
            old["status"]["containerStatuses"][0],
            json!({"name": "c"}),
            "{old}"
        );

        let mid = pruned(28);
        assert!(mid["spec"].get("ephemeralContainers").is_some());
        assert!(mid["status"].get("hostIPs").is_none(), "gate off in 1.28");
        assert!(mid["spec"]["initContainers"][0]
            .get("restartPolicy")
            .is_none());
        assert!(pruned(29)["status"].get("hostIPs").is_some());
        assert!(pruned(30)["status"]["containerStatuses"][0]
            .get("volumeMounts")
            .is_none());
        assert!(pruned(31)["status"]["containerStatuses"][0]
            .get("volumeMounts")
            .is_some());

        let new = pruned(34);
        assert_eq!(new["status"]["conditions"][0]["observedGeneration"], 1);
        assert_eq!(new["status"]["resize"], "InProgress");
        let cs = &new["status"]["containerStatuses"][0];
        assert!(cs.get("user").is_some() && cs.get("allocatedResources").is_some());
        assert!(
            cs.get("allocatedResourcesStatus").is_none(),
            "alpha in 1.34"
        );
    }

    #[test]
    fn in_place_resize_fields_follow_the_gate() {
        let def = resources::find("", "v1", "pods").expect("pods");
        let run = |minor, gates: &str| {
            let mut p = pod();
            p["spec"]["containers"][0]["resizePolicy"] =
                json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
            let g = FeatureGates::parse(gates).expect("gates");
            drop_unserved_with(&Emulation::new(Version::new(minor), g), def, None, &mut p);
            p
        };
        let off = run(27, "");
        assert!(off["status"].get("resize").is_none());
        assert!(off["spec"]["containers"][0].get("resizePolicy").is_none());
        let on = run(27, "InPlacePodVerticalScaling=true");
        assert_eq!(on["status"]["resize"], "InProgress");
        assert!(on["spec"]["containers"][0].get("resizePolicy").is_some());
        let cs = &on["status"]["containerStatuses"][0];
        assert!(cs.get("resources").is_some() && cs.get("allocatedResources").is_some());
        // 1.32 keeps allocatedResources only with its own alpha gate too.
        let cs =
            run(32, "InPlacePodVerticalScaling=true")["status"]["containerStatuses"][0].clone();
        assert!(cs.get("resources").is_some() && cs.get("allocatedResources").is_none());
        let both = "InPlacePodVerticalScaling=true,InPlacePodVerticalScalingAllocatedStatus=true";
        let cs = run(32, both)["status"]["containerStatuses"][0].clone();
        assert!(cs.get("allocatedResources").is_some());
        // Beta and on from 1.33, unless turned off.
        assert!(run(34, "InPlacePodVerticalScaling=false")["status"]
            .get("resize")
            .is_none());
    }

    #[test]
    fn image_volumes_and_their_mounts_are_dropped_while_the_gate_is_off() {
        let def = resources::find("", "v1", "pods").expect("pods");
        let mut p = json!({"spec": {
            "containers": [{"name": "c", "volumeMounts": [
                {"name": "iv", "mountPath": "/iv"}, {"name": "e", "mountPath": "/e"}]}],
            "volumes": [{"name": "iv", "image": {"reference": "busybox"}},
                {"name": "e", "emptyDir": {}}]}});
        drop_unserved(Version::new(34), def, None, &mut p);
        assert_eq!(p["spec"]["volumes"], json!([{"name": "e", "emptyDir": {}}]));
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "e", "mountPath": "/e"}])
        );
    }

    #[test]
    fn node_runtime_handlers_in_1_30_only_survive_status_writes() {
        let def = resources::find("", "v1", "nodes").expect("nodes");
        let node = json!({"status": {"runtimeHandlers": [{"name": "runc"}],
            "features": {"supplementalGroupsPolicy": true}, "declaredFeatures": ["x"]}});
        let run = |minor, sub| {
            let mut n = node.clone();
            drop_unserved(Version::new(minor), def, sub, &mut n);
            n["status"].clone()
        };
        assert_eq!(run(29, Some("status")), json!({}));
        assert_eq!(run(30, None), json!({}), "create drops the gated field");
        assert_eq!(
            run(30, Some("status")),
            json!({"runtimeHandlers": [{"name": "runc"}]})
        );
        assert_eq!(
            run(34, None),
            json!({"runtimeHandlers": [{"name": "runc"}],
                "features": {"supplementalGroupsPolicy": true}})
        );
    }
}
