//! Pod and Node defaulting, as the real server applies it to every object it
//! decodes (create, update, patch): the v1 `SetDefaults_*` functions of
//! pkg/apis/core/v1/defaults.go (and the `+default` markers that replaced
//! some of them), resource quantities in their canonical form, and the
//! DefaultTolerationSeconds admission plugin. The other mutating admission
//! plugins are in admission.rs (ServiceAccount), priority.rs and
//! runtimeclass.rs; what Go renders for fields nobody set is in
//! zerovalues.rs.

use crate::quantity;
use crate::util::obj_field_mut;
use serde_json::{json, Map, Value};

type Obj = Map<String, Value>;

pub fn set_default(m: &mut Obj, k: &str, v: Value) {
    if m.get(k).is_none_or(Value::is_null) {
        m.insert(k.to_string(), v);
    }
}

/// The objects of the list `key` of `m`.
pub(crate) fn items<'a>(m: &'a mut Obj, key: &str) -> impl Iterator<Item = &'a mut Obj> {
    m.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

pub(crate) fn child<'a>(m: &'a mut Obj, key: &str) -> Option<&'a mut Obj> {
    m.get_mut(key).and_then(Value::as_object_mut)
}

/// The three container lists of a pod spec.
pub const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

// ---------------------------------------------------------------- pod

pub fn pod(obj: &mut Value) {
    let spec = obj_field_mut(obj, "spec");
    pod_spec(spec);
    requests_from_limits(spec);
    set_default(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&json!(true)) {
        host_network_ports(spec);
    }
    service_account_alias(spec);
    default_toleration_seconds(spec);
    for list in CONTAINER_LISTS {
        items(spec, list).for_each(container);
    }
    items(spec, "volumes").for_each(volume);
    if let Some(o) = spec.get_mut("overhead") {
        quantity::canonicalize_list(o);
    }
}

/// SetDefaults_PodSpec.
fn pod_spec(spec: &mut Obj) {
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "schedulerName", json!("default-scheduler"));
}

/// SetDefaults_Pod: a container's requests default to its limits (init and
/// regular containers; ephemeral containers have no resources).
fn requests_from_limits(spec: &mut Obj) {
    for list in ["initContainers", "containers"] {
        for c in items(spec, list) {
            let Some(r) = child(c, "resources") else {
                continue;
            };
            let Some(Value::Object(limits)) = r.get("limits").cloned() else {
                continue;
            };
            let req = r.entry("requests").or_insert(json!({}));
            if let Some(req) = req.as_object_mut() {
                for (k, v) in limits {
                    req.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// SetDefaults_Pod: with host networking every container port is a host port.
fn host_network_ports(spec: &mut Obj) {
    for list in ["initContainers", "containers"] {
        for c in items(spec, list) {
            for p in items(c, "ports") {
                if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                    if let Some(cp) = p.get("containerPort").cloned() {
                        p.insert("hostPort".into(), cp);
                    }
                }
            }
        }
    }
}

/// v1 conversion: the deprecated `serviceAccount` mirrors
/// `serviceAccountName` (the ServiceAccount admission plugin, admission.rs,
/// sets both on create).
fn service_account_alias(spec: &mut Obj) {
    let sa = [spec.get("serviceAccountName"), spec.get("serviceAccount")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|s| !s.is_empty())
        .map(String::from);
    match sa {
        Some(sa) => {
            spec.insert("serviceAccountName".into(), json!(sa));
            spec.insert("serviceAccount".into(), json!(sa));
        }
        None => {
            spec.remove("serviceAccountName");
            spec.remove("serviceAccount");
        }
    }
}

/// The DefaultTolerationSeconds admission plugin (pod create and update):
/// unless a toleration already covers it, the pod tolerates the not-ready
/// and unreachable NoExecute taints for 300 s. A toleration covers a taint
/// when its key is the taint's or empty, and its effect NoExecute or empty.
fn default_toleration_seconds(spec: &mut Obj) {
    let tolerations = spec.entry("tolerations").or_insert(json!([]));
    let Some(t) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = t.iter().any(|x| {
            let k = x.get("key").and_then(Value::as_str).unwrap_or("");
            let e = x.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        });
        if !covered {
            t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

// ---------------------------------------------------------------- containers

/// SetDefaults_Container (also for ephemeral containers), and the defaults
/// of what a container holds: ports, probes, lifecycle handlers, env.
fn container(c: &mut Obj) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    let pull = if image_tag(image) == "latest" {
        "Always"
    } else {
        "IfNotPresent"
    };
    set_default(c, "imagePullPolicy", json!(pull));
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    for p in items(c, "ports") {
        set_default(p, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = child(c, probe) {
            self::probe(p);
        }
    }
    if let Some(l) = child(c, "lifecycle") {
        for h in ["postStart", "preStop"] {
            if let Some(h) = child(l, h) {
                handler(h);
            }
        }
    }
    for e in items(c, "env") {
        if let Some(from) = child(e, "valueFrom") {
            field_ref(from);
            resource_field_ref(from);
        }
    }
    if let Some(r) = child(c, "resources") {
        for k in ["limits", "requests"] {
            if let Some(l) = r.get_mut(k) {
                quantity::canonicalize_list(l);
            }
        }
    }
}

/// SetDefaults_Probe.
fn probe(p: &mut Obj) {
    set_default(p, "timeoutSeconds", json!(1));
    set_default(p, "periodSeconds", json!(10));
    set_default(p, "successThreshold", json!(1));
    set_default(p, "failureThreshold", json!(3));
    handler(p);
}

/// The handlers of probes and lifecycle hooks: SetDefaults_HTTPGetAction,
/// and GRPCAction's `service` (`+default=""`).
fn handler(h: &mut Obj) {
    if let Some(g) = child(h, "httpGet") {
        set_default(g, "path", json!("/"));
        set_default(g, "scheme", json!("HTTP"));
    }
    if let Some(g) = child(h, "grpc") {
        set_default(g, "service", json!(""));
    }
}

/// SetDefaults_ObjectFieldSelector, wherever a `fieldRef` is.
fn field_ref(holder: &mut Obj) {
    if let Some(f) = child(holder, "fieldRef") {
        set_default(f, "apiVersion", json!("v1"));
    }
}

/// A ResourceFieldSelector's divisor is a Quantity (its zero value, "0",
/// is added by zerovalues.rs).
fn resource_field_ref(holder: &mut Obj) {
    if let Some(d) = child(holder, "resourceFieldRef").and_then(|r| r.get_mut("divisor")) {
        quantity::canonicalize(d);
    }
}

/// The tag parsers.ParseImageName finds: `latest` when the image names
/// neither a tag nor a digest, "" for a digest alone or a reference it
/// cannot parse.
pub fn image_tag(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let path_start = name.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (repo, tag) = match name[path_start..].rfind(':') {
        Some(i) => (&name[..path_start + i], Some(&name[path_start + i + 1..])),
        None => (name, None),
    };
    let valid =
        valid_repository(repo) && tag.is_none_or(valid_tag) && digest.is_none_or(valid_digest);
    match (valid, tag, digest) {
        (false, _, _) => String::new(),
        (true, Some(t), _) => t.to_string(),
        (true, None, None) => "latest".into(),
        (true, None, Some(_)) => String::new(),
    }
}

/// A repository: an optional registry host (it has a '.' or ':', is
/// `localhost` or has upper case) and lower-case path components.
fn valid_repository(repo: &str) -> bool {
    let mut parts: Vec<&str> = repo.split('/').collect();
    let first = parts[0];
    let is_domain = parts.len() > 1
        && (first.contains(['.', ':'])
            || first == "localhost"
            || first.chars().any(|c| c.is_ascii_uppercase()));
    if is_domain {
        let ok = first
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':'));
        if !ok || first.is_empty() {
            return false;
        }
        parts.remove(0);
    }
    parts.iter().all(|p| {
        let edge_ok =
            |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        edge_ok(p.chars().next())
            && edge_ok(p.chars().last())
            && p.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
            })
    })
}

fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 128
        && !t.starts_with(['.', '-'])
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn valid_digest(d: &str) -> bool {
    d.split_once(':').is_some_and(|(alg, hex)| {
        !alg.is_empty() && hex.len() >= 32 && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

// ---------------------------------------------------------------- volumes

/// The volume source keys of a v1.Volume (everything but `name`).
fn has_source(v: &Obj) -> bool {
    v.iter().any(|(k, x)| k != "name" && !x.is_null())
}

/// SetDefaults_Volume and the defaulters of the volume sources.
fn volume(v: &mut Obj) {
    if !has_source(v) {
        v.insert("emptyDir".into(), json!({}));
    }
    for src in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = child(v, src) {
            set_default(s, "defaultMode", json!(420));
        }
    }
    if let Some(d) = child(v, "downwardAPI") {
        downward_api_items(d);
    }
    if let Some(p) = child(v, "projected") {
        projected_sources(p);
    }
    if let Some(e) = child(v, "emptyDir").and_then(|e| e.get_mut("sizeLimit")) {
        quantity::canonicalize(e);
    }
    if let Some(h) = child(v, "hostPath") {
        set_default(h, "type", json!(""));
    }
    if let Some(t) = v
        .get_mut("ephemeral")
        .and_then(|e| e.get_mut("volumeClaimTemplate"))
    {
        claim_spec(obj_field_mut(t, "spec"));
    }
    legacy_volume_sources(v);
}

fn downward_api_items(d: &mut Obj) {
    for item in items(d, "items") {
        field_ref(item);
        resource_field_ref(item);
    }
}

/// SetDefaults_ServiceAccountTokenProjection (1 h) and the projected
/// downward API items.
fn projected_sources(p: &mut Obj) {
    for s in items(p, "sources") {
        if let Some(t) = child(s, "serviceAccountToken") {
            set_default(t, "expirationSeconds", json!(3600));
        }
        if let Some(d) = child(s, "downwardAPI") {
            downward_api_items(d);
        }
    }
}

/// SetDefaults_PersistentVolumeClaimSpec (and the claim's ResourceLists).
fn claim_spec(spec: &mut Obj) {
    set_default(spec, "volumeMode", json!("Filesystem"));
    if let Some(r) = child(spec, "resources") {
        for k in ["limits", "requests"] {
            if let Some(l) = r.get_mut(k) {
                quantity::canonicalize_list(l);
            }
        }
    }
}

/// The in-tree sources' defaulters (ISCSI, RBD, AzureDisk, ScaleIO).
fn legacy_volume_sources(v: &mut Obj) {
    if let Some(s) = child(v, "iscsi") {
        set_default(s, "iscsiInterface", json!("default"));
    }
    if let Some(s) = child(v, "rbd") {
        set_default(s, "pool", json!("rbd"));
        set_default(s, "user", json!("admin"));
        set_default(s, "keyring", json!("/etc/ceph/keyring"));
    }
    if let Some(s) = child(v, "azureDisk") {
        set_default(s, "cachingMode", json!("ReadWrite"));
        set_default(s, "fsType", json!("ext4"));
        set_default(s, "readOnly", json!(false));
        set_default(s, "kind", json!("Shared"));
    }
    if let Some(s) = child(v, "scaleIO") {
        set_default(s, "storageMode", json!("ThinProvisioned"));
        set_default(s, "fsType", json!("xfs"));
    }
}

// ---------------------------------------------------------------- node

/// SetDefaults_NodeStatus (allocatable defaults to capacity) and the
/// ResourceLists' canonical quantities.
pub fn node(obj: &mut Value) {
    let st = obj_field_mut(obj, "status");
    for k in ["capacity", "allocatable"] {
        if let Some(l) = st.get_mut(k) {
            quantity::canonicalize_list(l);
        }
    }
    if st.get("allocatable").is_none_or(Value::is_null) {
        if let Some(c) = st.get("capacity").cloned() {
            st.insert("allocatable".into(), c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_tags_as_parse_image_name_finds_them() {
        for (image, tag) in [
            ("busybox", "latest"),
            ("busybox:latest", "latest"),
            ("busybox:1.36", "1.36"),
            ("k8s.gcr.io/e2e-test-images/busybox:1.29-1", "1.29-1"),
            ("localhost:5000/app", "latest"),
            ("registry.example.com:5000/team/app", "latest"),
            (
                "registry.example.com:5000/team/app@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "",
            ),
            (
                "busybox:latest@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "latest",
            ),
            ("Busybox", ""),
            ("", ""),
            ("busybox@sha256:short", ""),
        ] {
            assert_eq!(image_tag(image), tag, "{}", image);
        }
    }

    #[test]
    fn pod_defaults() {
        let mut p = json!({"spec": {
            "hostNetwork": true,
            "containers": [{"name": "c", "image": "busybox:1.36",
                "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "0.5", "memory": 1000}},
                "livenessProbe": {"grpc": {"port": 9}},
                "lifecycle": {"preStop": {"httpGet": {"port": 80}}},
                "env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0.001"}}}]}],
            "volumes": [{"name": "e"}, {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                {"name": "r", "rbd": {"monitors": ["m"], "image": "i"}},
                {"name": "t", "ephemeral": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1024Mi"}}}}}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "operator": "Exists"}, {"key": "node.kubernetes.io/unreachable", "operator": "Exists"}]}});
        pod(&mut p);
        let s = &p["spec"];
        let c = &s["containers"][0];
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            c["ports"][0],
            json!({"containerPort": 80, "hostPort": 80, "protocol": "TCP"})
        );
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1k"})
        );
        assert_eq!(c["livenessProbe"]["grpc"]["service"], "");
        assert_eq!(c["lifecycle"]["preStop"]["httpGet"]["scheme"], "HTTP");
        assert_eq!(
            c["env"][0]["valueFrom"]["resourceFieldRef"]["divisor"],
            "1m"
        );
        assert_eq!(s["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(
            s["volumes"][1]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3600
        );
        assert_eq!(s["volumes"][2]["rbd"]["pool"], "rbd");
        let t = &s["volumes"][3]["ephemeral"]["volumeClaimTemplate"]["spec"];
        assert_eq!(t["volumeMode"], "Filesystem");
        assert_eq!(t["resources"]["requests"]["storage"], "1Gi");
        // A NoSchedule toleration does not cover the NoExecute taint; an
        // effect-less one does.
        let keys: Vec<&Value> = s["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["key"])
            .collect();
        assert_eq!(
            keys,
            vec![
                "node.kubernetes.io/not-ready",
                "node.kubernetes.io/unreachable",
                "node.kubernetes.io/not-ready"
            ]
        );
        assert_eq!(s["enableServiceLinks"], true);
        assert_eq!(s["dnsPolicy"], "ClusterFirst");
    }
}
