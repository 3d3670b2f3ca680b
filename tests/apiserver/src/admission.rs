//! The ServiceAccount admission plugin (plugin/pkg/admission/serviceaccount)
//! on pod CREATE, as kube-apiserver 1.34 runs it: mirror pods are only
//! validated; other pods get serviceAccountName "default", the ServiceAccount
//! must exist (else 403), the bound-token projected volume
//! `kube-api-access-XXXXX` is mounted read-only at
//! /var/run/secrets/kubernetes.io/serviceaccount in every init and regular
//! container that has nothing mounted there (unless automountServiceAccountToken
//! is false on the pod, or on the ServiceAccount when the pod does not say),
//! and the ServiceAccount's imagePullSecrets are copied when the pod has none.
//! Ephemeral containers are not touched (they cannot be set on create, and
//! the plugin ignores subresources).

use crate::status::ApiError;
use crate::store::Inner;
use crate::util::{self, get, get_str};
use serde_json::{json, Value};

pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// serviceaccount.WarnOnlyBoundTokenExpirationSeconds: 1 h + 7 s.
pub const WARN_ONLY_EXPIRATION: i64 = 3607;
const ENFORCE_MOUNTABLE: &str = "kubernetes.io/enforce-mountable-secrets";

/// The serviceaccount and root-ca-cert-publisher controllers: every active
/// namespace has ServiceAccount `default` and ConfigMap `kube-root-ca.crt`
/// (recreated when deleted; its `ca.crt` reset when changed).
pub fn namespace_defaults_tick(api: &crate::handlers::Api) {
    let mut g = api.store.lock();
    for ns in g.list("namespaces", None) {
        if get(&ns, &["metadata", "deletionTimestamp"]).is_some() {
            continue;
        }
        let name = util::name_of(&ns).to_string();
        crate::handlers::populate_namespace(&mut g, &name, &api.ca_pem);
        if let Some(cm) = g.get("configmaps", &name, "kube-root-ca.crt") {
            if get_str(&cm, &["data", "ca.crt"]) != Some(api.ca_pem.as_str()) {
                let mut n = (*cm).clone();
                n["data"] = json!({"ca.crt": api.ca_pem});
                g.put("configmaps", n);
            }
        }
    }
}

/// TokenVolumeSource(): the projected source upstream injects.
pub fn token_volume_source() -> Value {
    json!({
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": WARN_ONLY_EXPIRATION}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ]
    })
}

pub fn is_mirror_pod(pod: &Value) -> bool {
    get(pod, &["metadata", "annotations", MIRROR_ANNOTATION]).is_some()
}

/// Runs the plugin's Admit (mutating) and Validate on a pod being created.
/// `display_name` is the name admission errors carry (the pod's name, or its
/// generateName when the name is not generated yet).
pub fn admit_pod_create(
    g: &Inner,
    ns: &str,
    display_name: &str,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let forbidden = |why: String| ApiError::forbidden("pods", display_name, &why);
    if is_mirror_pod(pod) {
        return validate_mirror_pod(pod).map_err(|m| forbidden(m.into()));
    }
    let spec = util::obj_field_mut(pod, "spec");
    let sa_name = match spec.get("serviceAccountName").and_then(|x| x.as_str()) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "default".to_string(),
    };
    spec.insert("serviceAccountName".into(), json!(sa_name));
    spec.insert("serviceAccount".into(), json!(sa_name));
    let Some(sa) = g.get("serviceaccounts", ns, &sa_name) else {
        return Err(forbidden(format!(
            "error looking up service account {}/{}: serviceaccount \"{}\" not found",
            ns, sa_name, sa_name
        )));
    };
    if should_automount(&sa, pod) {
        mount_token(pod);
    }
    let spec = util::obj_field_mut(pod, "spec");
    let has_pull = spec
        .get("imagePullSecrets")
        .and_then(|x| x.as_array())
        .map(|a| !a.is_empty())
        .unwrap_or(false);
    if !has_pull {
        let from_sa: Vec<Value> = sa
            .get("imagePullSecrets")
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
            .map(|r| json!({"name": r.get("name").cloned().unwrap_or(json!(""))}))
            .collect();
        if !from_sa.is_empty() {
            spec.insert("imagePullSecrets".into(), json!(from_sa));
        }
    }
    if enforce_mountable_secrets(&sa) {
        limit_secret_references(&sa, pod).map_err(forbidden)?;
    }
    Ok(())
}

fn should_automount(sa: &Value, pod: &Value) -> bool {
    if let Some(b) = get(pod, &["spec", "automountServiceAccountToken"]).and_then(|x| x.as_bool()) {
        return b;
    }
    sa.get("automountServiceAccountToken")
        .and_then(|x| x.as_bool())
        .unwrap_or(true)
}

fn mounts_token_path(c: &Value) -> bool {
    c.get("volumeMounts")
        .and_then(|m| m.as_array())
        .into_iter()
        .flatten()
        .any(|m| get_str(m, &["mountPath"]) == Some(TOKEN_MOUNT_PATH))
}

/// mountServiceAccountToken: an existing `kube-api-access-*` volume is
/// reused, otherwise one is generated and added if any container needs it.
fn mount_token(pod: &mut Value) {
    let spec = util::obj_field_mut(pod, "spec");
    let existing = spec
        .get("volumes")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| get_str(v, &["name"]))
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(String::from);
    let has_volume = existing.is_some();
    let vol_name =
        existing.unwrap_or_else(|| format!("{}{}", VOLUME_PREFIX, util::random_suffix(5)));
    let mount = json!({"name": vol_name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(Value::Array(cs)) = spec.get_mut(list) else {
            continue;
        };
        for c in cs.iter_mut() {
            if mounts_token_path(c) {
                continue;
            }
            let Some(cm) = c.as_object_mut() else {
                continue;
            };
            let mounts = cm.entry("volumeMounts").or_insert(json!([]));
            if !mounts.is_array() {
                *mounts = json!([]);
            }
            if let Some(a) = mounts.as_array_mut() {
                a.push(mount.clone());
                needed = true;
            }
        }
    }
    if needed && !has_volume {
        let vols = spec.entry("volumes").or_insert(json!([]));
        if !vols.is_array() {
            *vols = json!([]);
        }
        if let Some(a) = vols.as_array_mut() {
            a.push(json!({"name": vol_name, "projected": token_volume_source()}));
        }
    }
}

/// The secret names a pod references (podutil.VisitPodSecretNames, all containers).
pub fn pod_secret_names(pod: &Value) -> Vec<String> {
    let mut out = vec![];
    let mut push = |v: Option<&str>| {
        if let Some(s) = v.filter(|s| !s.is_empty()) {
            out.push(s.to_string());
        }
    };
    let spec = pod.get("spec").cloned().unwrap_or(json!({}));
    for r in spec
        .get("imagePullSecrets")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        push(get_str(r, &["name"]));
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec
            .get(list)
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            for e in c
                .get("envFrom")
                .and_then(|x| x.as_array())
                .into_iter()
                .flatten()
            {
                push(get_str(e, &["secretRef", "name"]));
            }
            for e in c
                .get("env")
                .and_then(|x| x.as_array())
                .into_iter()
                .flatten()
            {
                push(get_str(e, &["valueFrom", "secretKeyRef", "name"]));
            }
        }
    }
    for v in spec
        .get("volumes")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        push(get_str(v, &["secret", "secretName"]));
        push(get_str(v, &["azureFile", "secretName"]));
        for p in [
            "cephfs",
            "cinder",
            "flexVolume",
            "iscsi",
            "rbd",
            "scaleIO",
            "storageos",
        ] {
            push(get_str(v, &[p, "secretRef", "name"]));
        }
        push(get_str(v, &["csi", "nodePublishSecretRef", "name"]));
        for s in get(v, &["projected", "sources"])
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            push(get_str(s, &["secret", "name"]));
        }
    }
    out
}

fn validate_mirror_pod(pod: &Value) -> Result<(), &'static str> {
    if !get_str(pod, &["spec", "serviceAccountName"])
        .unwrap_or("")
        .is_empty()
    {
        return Err("a mirror pod may not reference service accounts");
    }
    if !pod_secret_names(pod).is_empty() {
        return Err("a mirror pod may not reference secrets");
    }
    let token_projection = get(pod, &["spec", "volumes"])
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
        .filter_map(|v| get(v, &["projected", "sources"]).and_then(|s| s.as_array()))
        .flatten()
        .any(|s| s.get("serviceAccountToken").is_some());
    if token_projection {
        return Err("a mirror pod may not use ServiceAccountToken volume projections");
    }
    Ok(())
}

fn enforce_mountable_secrets(sa: &Value) -> bool {
    get_str(sa, &["metadata", "annotations", ENFORCE_MOUNTABLE])
        .map(|v| matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
        .unwrap_or(false)
}

/// limitSecretReferences, for ServiceAccounts annotated
/// kubernetes.io/enforce-mountable-secrets=true.
fn limit_secret_references(sa: &Value, pod: &Value) -> Result<(), String> {
    let sa_name = crate::util::name_of(sa);
    let names = |k: &str| -> Vec<String> {
        sa.get(k)
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
            .filter_map(|r| get_str(r, &["name"]).map(String::from))
            .collect()
    };
    let (mountable, pull) = (names("secrets"), names("imagePullSecrets"));
    let ok = |n: &str| mountable.iter().any(|m| m == n);
    let spec = pod.get("spec").cloned().unwrap_or(json!({}));
    for v in spec
        .get("volumes")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        if let Some(s) = get_str(v, &["secret", "secretName"]) {
            if !ok(s) {
                return Err(format!("volume with secret.secretName=\"{}\" is not allowed because service account {} does not reference that secret", s, sa_name));
            }
        }
    }
    for (list, what) in [
        ("initContainers", "init container"),
        ("containers", "container"),
    ] {
        for c in spec
            .get(list)
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            for e in c
                .get("env")
                .and_then(|x| x.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(s) = get_str(e, &["valueFrom", "secretKeyRef", "name"]) {
                    if !ok(s) {
                        return Err(format!("{} {} with envVar {} referencing secret.secretName=\"{}\" is not allowed because service account {} does not reference that secret",
                            what, get_str(c, &["name"]).unwrap_or(""), get_str(e, &["name"]).unwrap_or(""), s, sa_name));
                    }
                }
            }
        }
    }
    for (i, r) in spec
        .get("imagePullSecrets")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
        .enumerate()
    {
        let n = get_str(r, &["name"]).unwrap_or("");
        if !pull.iter().any(|p| p == n) {
            return Err(format!("imagePullSecrets[{}].name=\"{}\" is not allowed because service account {} does not reference that imagePullSecret", i, n, sa_name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_in_containers_without_the_path() {
        let mut p = json!({"spec": {"initContainers": [{"name": "i"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [{"name": "x", "mountPath": TOKEN_MOUNT_PATH}]}],
            "volumes": [{"name": "x", "emptyDir": {}}]}});
        mount_token(&mut p);
        let vols = p["spec"]["volumes"].as_array().unwrap();
        assert_eq!(vols.len(), 2);
        let name = vols[1]["name"].as_str().unwrap();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5);
        assert_eq!(vols[1]["projected"], token_volume_source());
        assert_eq!(
            p["spec"]["initContainers"][0]["volumeMounts"][0]["name"],
            name
        );
        assert_eq!(
            p["spec"]["containers"][0]["volumeMounts"][0]["readOnly"],
            true
        );
        assert_eq!(
            p["spec"]["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // Every container already mounts the path: no volume.
        let mut q = json!({"spec": {"containers": [{"name": "b", "volumeMounts": [{"name": "x", "mountPath": TOKEN_MOUNT_PATH}]}]}});
        mount_token(&mut q);
        assert!(q["spec"].get("volumes").is_none());
    }

    #[test]
    fn mirror_pod_rules() {
        let p = json!({"spec": {"containers": [{"name": "a", "env": [{"name": "e", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}});
        assert_eq!(
            validate_mirror_pod(&p),
            Err("a mirror pod may not reference secrets")
        );
        let p = json!({"spec": {"serviceAccountName": "x", "containers": []}});
        assert!(validate_mirror_pod(&p).is_err());
        let p = json!({"spec": {"containers": [], "volumes": [{"name": "v", "projected": token_volume_source()}]}});
        assert!(validate_mirror_pod(&p).is_err());
    }
}
