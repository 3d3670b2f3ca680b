//! A minimal PersistentVolume controller (kube-controller-manager's
//! pkg/controller/volume/persistentvolume, the parts a kubelet test meets):
//! a PV without claimRef becomes Available; a PV whose bound claim is gone
//! becomes Released; a claim that names its volume (spec.volumeName) is
//! bound to it when the PV is free or pre-bound to that claim (matching
//! volumeMode): PV claimRef + `pv.kubernetes.io/bound-by-controller`, PV
//! phase Bound, claim `pv.kubernetes.io/bind-completed`, claim status Bound
//! with the PV's accessModes and capacity, each a separate write as upstream.
//! Not done: matching claims without volumeName to PVs, provisioning,
//! reclaim (Delete/Recycle), Lost claims.

use crate::handlers::Api;
use crate::store::Inner;
use crate::util::{get, get_str, meta_mut, name_of, namespace_of, obj_field_mut, uid_of};
use serde_json::{json, Value};
use std::sync::Arc;

const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

fn phase(v: &Value) -> &str {
    get_str(v, &["status", "phase"]).unwrap_or("")
}

fn set_phase(g: &mut Inner, key: &'static str, obj: &Value, p: &str) {
    if phase(obj) == p {
        return;
    }
    let mut n = obj.clone();
    obj_field_mut(&mut n, "status").insert("phase".into(), json!(p));
    if key == "persistentvolumes" {
        obj_field_mut(&mut n, "status").insert(
            "lastPhaseTransitionTime".into(),
            json!(crate::util::now_rfc3339()),
        );
    }
    g.put(key, n);
}

fn annotate(obj: &mut Value, k: &str) {
    let a = meta_mut(obj).entry("annotations").or_insert(json!({}));
    if !a.is_object() {
        *a = json!({});
    }
    if let Some(m) = a.as_object_mut() {
        m.insert(k.into(), json!("yes"));
    }
}

fn volume_mode(v: &Value) -> &str {
    get_str(v, &["spec", "volumeMode"]).unwrap_or("Filesystem")
}

/// One pass over claims, then volumes.
pub fn tick(api: &Api) {
    let mut g = api.store.lock();
    for claim in g.list("persistentvolumeclaims", None) {
        sync_claim(&mut g, &claim);
    }
    for pv in g.list("persistentvolumes", None) {
        sync_volume(&mut g, &pv);
    }
}

fn sync_claim(g: &mut Inner, claim: &Arc<Value>) {
    if get(claim, &["metadata", "deletionTimestamp"]).is_some() {
        return;
    }
    let (ns, name, uid) = (namespace_of(claim), name_of(claim), uid_of(claim));
    let vol = get_str(claim, &["spec", "volumeName"]).unwrap_or("");
    let pv = if vol.is_empty() {
        // A volume pre-bound to this claim (claimRef without or with its uid).
        g.list("persistentvolumes", None).into_iter().find(|pv| {
            get(pv, &["spec", "claimRef"]).is_some_and(|r| {
                get_str(r, &["namespace"]) == Some(ns)
                    && get_str(r, &["name"]) == Some(name)
                    && matches!(get_str(r, &["uid"]), None | Some(""))
            })
        })
    } else {
        g.get("persistentvolumes", "", vol)
    };
    let Some(pv) = pv else {
        return;
    };
    let claim_bound_by_us = vol.is_empty();
    let cref = get(&pv, &["spec", "claimRef"]).filter(|r| !r.is_null());
    let ours = match cref {
        None => true,
        Some(r) => {
            get_str(r, &["namespace"]) == Some(ns)
                && get_str(r, &["name"]) == Some(name)
                && (matches!(get_str(r, &["uid"]), None | Some(""))
                    || get_str(r, &["uid"]) == Some(uid))
        }
    };
    if !ours || volume_mode(&pv) != volume_mode(claim) {
        return;
    }
    // bindVolumeToClaim
    let mut pv_now = (*pv).clone();
    if cref.and_then(|r| get_str(r, &["uid"])) != Some(uid) {
        if cref.is_none() {
            annotate(&mut pv_now, BOUND_BY_CONTROLLER);
        }
        obj_field_mut(&mut pv_now, "spec").insert(
            "claimRef".into(),
            json!({"kind": "PersistentVolumeClaim", "namespace": ns, "name": name, "uid": uid,
                "apiVersion": "v1", "resourceVersion": crate::util::rv_of(claim)}),
        );
        pv_now = (*g.put("persistentvolumes", pv_now)).clone();
    }
    set_phase(g, "persistentvolumes", &pv_now, "Bound");
    // bindClaimToVolume, then the claim's status
    let mut c = (**claim).clone();
    if get_str(&c, &["metadata", "annotations", BIND_COMPLETED]).is_none() || claim_bound_by_us {
        annotate(&mut c, BIND_COMPLETED);
        if claim_bound_by_us {
            annotate(&mut c, BOUND_BY_CONTROLLER);
            obj_field_mut(&mut c, "spec").insert("volumeName".into(), json!(name_of(&pv)));
        }
        c = (*g.put("persistentvolumeclaims", c)).clone();
    }
    if phase(&c) != "Bound" {
        let st = obj_field_mut(&mut c, "status");
        st.insert("phase".into(), json!("Bound"));
        for (k, from) in [("accessModes", "accessModes"), ("capacity", "capacity")] {
            if let Some(v) = get(&pv_now, &["spec", from]) {
                st.insert(k.into(), v.clone());
            }
        }
        g.put("persistentvolumeclaims", c);
    }
}

fn sync_volume(g: &mut Inner, pv: &Arc<Value>) {
    if get(pv, &["metadata", "deletionTimestamp"]).is_some() {
        return;
    }
    let Some(r) = get(pv, &["spec", "claimRef"]).filter(|r| !r.is_null()) else {
        set_phase(g, "persistentvolumes", pv, "Available");
        return;
    };
    let (ns, name) = (
        get_str(r, &["namespace"]).unwrap_or(""),
        get_str(r, &["name"]).unwrap_or(""),
    );
    let want_uid = get_str(r, &["uid"]).unwrap_or("");
    match g.get("persistentvolumeclaims", ns, name) {
        None if want_uid.is_empty() => set_phase(g, "persistentvolumes", pv, "Available"),
        Some(c) if want_uid.is_empty() || uid_of(&c) == want_uid => {
            if get_str(&c, &["spec", "volumeName"]) != Some(name_of(pv)) {
                // Pre-bound or claim not bound yet: waits for the claim.
                set_phase(g, "persistentvolumes", pv, "Available");
            }
        }
        _ => set_phase(g, "persistentvolumes", pv, "Released"),
    }
}
