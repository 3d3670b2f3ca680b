//! The Node authorizer (plugin/pkg/auth/authorizer/node), enabled with
//! `--node-authorizer`, for a `system:node:<n>` user:
//!
//! * graph rules: secrets and configmaps (get, or list/watch pinned by
//!   `fieldSelector=metadata.name=`), PVCs, PVs and VolumeAttachments
//!   (get), PVC status (update/patch) and serviceaccount tokens (create),
//!   only for objects related to node `<n>`: referenced by a non-mirror pod
//!   bound to it, a PV whose claimRef names such a PVC (and the secrets
//!   that PV hands the kubelet), a VolumeAttachment whose spec.nodeName is
//!   `<n>`;
//! * CSINodes: get/create/update/patch/delete, only the one named `<n>`
//!   (create is left to NodeRestriction, which sees the name);
//! * CSIDrivers: the static node rules (bootstrappolicy NodeRules):
//!   get, list and watch.
//!
//! Denials are RBAC-shaped 403s carrying the authorizer's reason (none for
//! the static rules). Other resources are not subdivided here (everything
//! is allowed).

use crate::admission::{is_mirror_pod, pod_secret_names};
use crate::certs::User;
use crate::handlers::{Info, Route};
use crate::http::Request;
use crate::selectors::FieldSelector;
use crate::status::ApiError;
use crate::store::Inner;
use crate::util::{get, get_str, name_of, namespace_of};
use serde_json::Value;
use std::collections::BTreeSet;

type Key = (String, String);

/// What is related to a node: (namespace, name) per kind.
#[derive(Default)]
struct Graph {
    secrets: BTreeSet<Key>,
    configmaps: BTreeSet<Key>,
    pvcs: BTreeSet<Key>,
    pvs: BTreeSet<String>,
    serviceaccounts: BTreeSet<Key>,
    volumeattachments: BTreeSet<String>,
}

fn configmap_names(pod: &Value) -> Vec<String> {
    let mut out = vec![];
    let mut push = |v: Option<&str>| {
        if let Some(s) = v.filter(|s| !s.is_empty()) {
            out.push(s.to_string());
        }
    };
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for c in get(pod, &["spec", list])
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
                push(get_str(e, &["configMapRef", "name"]));
            }
            for e in c
                .get("env")
                .and_then(|x| x.as_array())
                .into_iter()
                .flatten()
            {
                push(get_str(e, &["valueFrom", "configMapKeyRef", "name"]));
            }
        }
    }
    for v in get(pod, &["spec", "volumes"])
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        push(get_str(v, &["configMap", "name"]));
        for s in get(v, &["projected", "sources"])
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            push(get_str(s, &["configMap", "name"]));
        }
    }
    out
}

fn graph(g: &Inner, node: &str) -> Graph {
    let mut gr = Graph::default();
    for pod in g.list("pods", None) {
        if get_str(&pod, &["spec", "nodeName"]) != Some(node) || is_mirror_pod(&pod) {
            continue;
        }
        let ns = namespace_of(&pod).to_string();
        let key = |n: String| (ns.clone(), n);
        gr.secrets
            .extend(pod_secret_names(&pod).into_iter().map(key));
        gr.configmaps
            .extend(configmap_names(&pod).into_iter().map(key));
        if let Some(sa) = get_str(&pod, &["spec", "serviceAccountName"]).filter(|s| !s.is_empty()) {
            gr.serviceaccounts.insert(key(sa.to_string()));
        }
        for v in get(&pod, &["spec", "volumes"])
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(c) = get_str(v, &["persistentVolumeClaim", "claimName"]) {
                gr.pvcs.insert(key(c.to_string()));
            }
            if v.get("ephemeral").is_some() {
                let vn = get_str(v, &["name"]).unwrap_or("");
                gr.pvcs.insert(key(format!("{}-{}", name_of(&pod), vn)));
            }
        }
    }
    // pv -> pvc: the graph links a PV to the claim its claimRef names
    // (graph.go AddPV), whatever the claim's volumeName says.
    for pv in g.list("persistentvolumes", None) {
        let Some(r) = get(&pv, &["spec", "claimRef"]).filter(|r| !r.is_null()) else {
            continue;
        };
        let claim = (
            get_str(r, &["namespace"]).unwrap_or("").to_string(),
            get_str(r, &["name"]).unwrap_or("").to_string(),
        );
        if gr.pvcs.contains(&claim) {
            gr.pvs.insert(name_of(&pv).to_string());
            gr.secrets.extend(pv_secret_names(&pv));
        }
    }
    // va -> node (graph.go AddVolumeAttachment).
    for va in g.list("volumeattachments.storage.k8s.io", None) {
        if get_str(&va, &["spec", "nodeName"]) == Some(node) {
            gr.volumeattachments.insert(name_of(&va).to_string());
        }
    }
    gr
}

/// The secrets a PV hands the kubelet (pkg/api/v1/persistentvolume
/// VisitPVSecretNames, kubeletVisible only: not the CSI controller
/// publish/expand secrets). Sources whose secret reference may omit the
/// namespace fall back to the claimRef's.
fn pv_secret_names(pv: &Value) -> Vec<Key> {
    let claim_ns = get_str(pv, &["spec", "claimRef", "namespace"]).unwrap_or("");
    let s = |path: &[&str]| get_str(pv, path).unwrap_or("").to_string();
    let spec = |k: &str| get(pv, &["spec", k]).filter(|v| !v.is_null());
    let mut out: Vec<Key> = vec![];
    let or_claim = |ns: String| {
        if ns.is_empty() {
            claim_ns.to_string()
        } else {
            ns
        }
    };
    if spec("azureFile").is_some() {
        let ns = or_claim(s(&["spec", "azureFile", "secretNamespace"]));
        out.push((ns, s(&["spec", "azureFile", "secretName"])));
    } else if let Some(src) = ["cephfs", "flexVolume", "rbd", "scaleIO", "iscsi"]
        .into_iter()
        .find(|k| spec(k).is_some())
    {
        if get(pv, &["spec", src, "secretRef"]).is_some_and(|r| !r.is_null()) {
            let ns = or_claim(s(&["spec", src, "secretRef", "namespace"]));
            out.push((ns, s(&["spec", src, "secretRef", "name"])));
        }
    } else if let Some(src) = ["cinder", "storageos"]
        .into_iter()
        .find(|k| spec(k).is_some())
    {
        out.push((
            s(&["spec", src, "secretRef", "namespace"]),
            s(&["spec", src, "secretRef", "name"]),
        ));
    } else if spec("csi").is_some() {
        for r in [
            "nodePublishSecretRef",
            "nodeStageSecretRef",
            "nodeExpandSecretRef",
        ] {
            out.push((
                s(&["spec", "csi", r, "namespace"]),
                s(&["spec", "csi", r, "name"]),
            ));
        }
    }
    out.retain(|(_, n)| !n.is_empty());
    out
}

fn deny(user: &User, info: &Info, route: &Route, name: &str, reason: &str) -> ApiError {
    let res = if info.sub.is_empty() {
        route.def.plural.to_string()
    } else {
        format!("{}/{}", route.def.plural, info.sub)
    };
    let scope = if info.ns.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", info.ns)
    };
    let mut msg = format!(
        "User {:?} cannot {} resource {:?} in API group {:?} {}",
        user.name, info.verb, res, route.def.group, scope
    );
    // An authorizer without an opinion and no reason (the static rules):
    // RBAC's message alone.
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    ApiError::forbidden(&route.def.qualified(), name, &msg)
}

/// Decides a request of node `node`'s identity; Ok when allowed.
pub fn authorize(
    g: &Inner,
    user: &User,
    node: &str,
    route: &Route,
    info: &Info,
    req: &Request,
) -> Result<(), ApiError> {
    enum Rule {
        Read,
        Get,
        StatusUpdate,
        CreateToken,
        CsiNode,
        ResourceSlice,
        /// Not subdivided: the static node rules (bootstrappolicy
        /// NodeRules) for the resource, these verbs, no subresource.
        Static(&'static [&'static str]),
    }
    let rule = match (route.def.group, route.def.plural) {
        ("", "secrets") | ("", "configmaps") => Rule::Read,
        ("", "persistentvolumeclaims") if info.sub == "status" => Rule::StatusUpdate,
        ("", "persistentvolumeclaims") | ("", "persistentvolumes") => Rule::Get,
        ("storage.k8s.io", "volumeattachments") => Rule::Get,
        ("", "serviceaccounts") => Rule::CreateToken,
        ("storage.k8s.io", "csinodes") => Rule::CsiNode,
        ("resource.k8s.io", "resourceslices") => Rule::ResourceSlice,
        ("storage.k8s.io", "csidrivers") => Rule::Static(&["get", "list", "watch"]),
        _ => return Ok(()),
    };
    // RequestInfo: list/watch take their name from fieldSelector=metadata.name=.
    let mut name = info.name.clone();
    if name.is_empty() && (info.verb == "list" || info.verb == "watch") {
        if let Ok(fs) = FieldSelector::parse(req.q("fieldSelector").unwrap_or(""), route.def) {
            name = fs.exact_name().unwrap_or("").to_string();
        }
    }
    let verb = info.verb.as_str();
    let fail = |why: &str| Err(deny(user, info, route, &name, why));
    match rule {
        Rule::Read => {
            if !matches!(verb, "get" | "list" | "watch") {
                return fail("can only read resources of this type");
            }
            if !info.sub.is_empty() {
                return fail("cannot read subresource");
            }
            if info.ns.is_empty() {
                return fail("can only read namespaced object of this type");
            }
        }
        Rule::Get => {
            if verb != "get" {
                return fail("can only get individual resources of this type");
            }
            if !info.sub.is_empty() {
                return fail("cannot get subresource");
            }
        }
        Rule::StatusUpdate => {
            if !matches!(verb, "update" | "patch") {
                return fail("can only get/update/patch this type");
            }
        }
        Rule::CreateToken => {
            if verb != "create" || name.is_empty() {
                return fail("can only create tokens for individual service accounts");
            }
            if info.sub != "token" {
                return fail("can only create token subresource of serviceaccount");
            }
        }
        Rule::CsiNode => {
            if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
                return fail("can only get, create, update, patch, or delete a CSINode");
            }
            if !info.sub.is_empty() {
                return fail("cannot authorize CSINode subresources");
            }
            // No name on create: NodeRestriction checks the object's.
            if verb != "create" && name != node {
                return fail("can only access CSINode with the same name as the requesting node");
            }
            return Ok(());
        }
        // upstream authorizeResourceSlice: a collection only through the
        // node's own field selector (single objects by their graph edge,
        // which the double does not keep: allowed).
        Rule::ResourceSlice => {
            if matches!(verb, "list" | "watch" | "deletecollection") {
                let own = FieldSelector::parse(req.q("fieldSelector").unwrap_or(""), route.def)
                    .is_ok_and(|fs| {
                        fs.terms
                            .iter()
                            .any(|(k, eq, v)| k == "spec.nodeName" && *eq && v == node)
                    });
                if !own {
                    return fail(
                        "can only list/watch/deletecollection resourceslices with nodeName field selector",
                    );
                }
            }
            return Ok(());
        }
        Rule::Static(verbs) => {
            if !info.sub.is_empty() || !verbs.contains(&verb) {
                return fail("");
            }
            return Ok(());
        }
    }
    if name.is_empty() {
        return fail("No Object name found");
    }
    let gr = graph(g, node);
    let key = (info.ns.clone(), name.clone());
    let related = match (route.def.plural, rule) {
        ("secrets", _) => gr.secrets.contains(&key),
        ("configmaps", _) => gr.configmaps.contains(&key),
        ("persistentvolumeclaims", _) => gr.pvcs.contains(&key),
        ("persistentvolumes", _) => gr.pvs.contains(&name),
        ("serviceaccounts", _) => gr.serviceaccounts.contains(&key),
        ("volumeattachments", _) => gr.volumeattachments.contains(&name),
        _ => true,
    };
    if related {
        Ok(())
    } else {
        fail(&format!(
            "no relationship found between node '{}' and this object",
            node
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::{classify, Target};
    use serde_json::json;

    fn node_user(n: &str) -> User {
        User {
            name: format!("system:node:{}", n),
            groups: vec!["system:nodes".into(), "system:authenticated".into()],
        }
    }

    /// Authorizes `method path?query` for node-a against the objects `objs`.
    fn check(
        objs: &[(&'static str, serde_json::Value)],
        method: &str,
        path: &str,
    ) -> Result<(), String> {
        let store = crate::store::Store::new(100, None);
        {
            let mut g = store.lock();
            for (k, o) in objs {
                g.put(k, o.clone());
            }
        }
        let (p, q) = path.split_once('?').unwrap_or((path, ""));
        let req = Request {
            method: method.into(),
            path: p.into(),
            query: q
                .split('&')
                .filter(|s| !s.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (k.to_string(), crate::util::percent_decode(v, true))
                })
                .collect(),
            ..Default::default()
        };
        let (Target::Res(route, _), info) = classify(&req) else {
            panic!("{} is not a resource path", path)
        };
        let g = store.lock();
        authorize(&g, &node_user("node-a"), "node-a", &route, &info, &req).map_err(|e| e.message)
    }

    const VA: &str = "/apis/storage.k8s.io/v1/volumeattachments";
    const CSIN: &str = "/apis/storage.k8s.io/v1/csinodes";
    const DRIVERS: &str = "/apis/storage.k8s.io/v1/csidrivers";

    fn va(name: &str, node: &str) -> (&'static str, serde_json::Value) {
        (
            "volumeattachments.storage.k8s.io",
            json!({"metadata": {"name": name}, "spec": {"attacher": "d", "nodeName": node,
                "source": {"persistentVolumeName": "pv"}}}),
        )
    }

    #[test]
    fn volume_attachments_by_node_name() {
        let objs = [va("mine", "node-a"), va("theirs", "node-b")];
        assert_eq!(check(&objs, "GET", &format!("{}/mine", VA)), Ok(()));
        let no_rel = "volumeattachments.storage.k8s.io \"theirs\" is forbidden: User \"system:node:node-a\" cannot get resource \"volumeattachments\" in API group \"storage.k8s.io\" at the cluster scope: no relationship found between node 'node-a' and this object";
        assert_eq!(
            check(&objs, "GET", &format!("{}/theirs", VA)),
            Err(no_rel.into())
        );
        // A missing attachment is no vertex of the graph: 403, not 404.
        assert!(check(&objs, "GET", &format!("{}/missing", VA))
            .unwrap_err()
            .ends_with("no relationship found between node 'node-a' and this object"));
        // Only get: no list, no watch (even of one name), no status, no writes.
        assert_eq!(
            check(&objs, "GET", &format!("{}?watch=1&fieldSelector=metadata.name%3Dmine", VA)),
            Err("volumeattachments.storage.k8s.io \"mine\" is forbidden: User \"system:node:node-a\" cannot watch resource \"volumeattachments\" in API group \"storage.k8s.io\" at the cluster scope: can only get individual resources of this type".into())
        );
        assert!(check(&objs, "GET", VA)
            .unwrap_err()
            .ends_with("can only get individual resources of this type"));
        assert!(check(&objs, "GET", &format!("{}/mine/status", VA))
            .unwrap_err()
            .ends_with(": cannot get subresource"));
        assert!(check(&objs, "POST", VA).is_err());
        assert!(check(&objs, "PATCH", &format!("{}/mine/status", VA)).is_err());
        assert!(check(&objs, "DELETE", &format!("{}/mine", VA)).is_err());
    }

    #[test]
    fn csinodes_only_its_own() {
        assert_eq!(check(&[], "GET", &format!("{}/node-a", CSIN)), Ok(()));
        for m in ["PUT", "PATCH", "DELETE"] {
            assert_eq!(check(&[], m, &format!("{}/node-a", CSIN)), Ok(()), "{}", m);
        }
        // The name of a create is checked by NodeRestriction.
        assert_eq!(check(&[], "POST", CSIN), Ok(()));
        assert_eq!(
            check(&[], "GET", &format!("{}/node-b", CSIN)),
            Err("csinodes.storage.k8s.io \"node-b\" is forbidden: User \"system:node:node-a\" cannot get resource \"csinodes\" in API group \"storage.k8s.io\" at the cluster scope: can only access CSINode with the same name as the requesting node".into())
        );
        assert!(check(&[], "PUT", &format!("{}/node-b", CSIN)).is_err());
        for p in [CSIN.to_string(), format!("{}?watch=true", CSIN)] {
            assert!(check(&[], "GET", &p)
                .unwrap_err()
                .ends_with(": can only get, create, update, patch, or delete a CSINode"));
        }
        assert!(check(&[], "DELETE", CSIN).is_err());
    }

    #[test]
    fn resourceslice_collections_only_through_the_nodes_selector() {
        const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";
        for (m, q) in [
            ("DELETE", "fieldSelector=spec.nodeName%3Dnode-a"),
            (
                "DELETE",
                "fieldSelector=spec.nodeName%3Dnode-a%2Cspec.driver%3Dd",
            ),
            ("GET", "fieldSelector=spec.nodeName%3Dnode-a&watch=1"),
        ] {
            assert_eq!(check(&[], m, &format!("{SLICES}?{q}")), Ok(()), "{m} {q}");
        }
        for q in [
            "",
            "fieldSelector=spec.nodeName%3Dnode-b",
            "fieldSelector=spec.driver%3Dd",
        ] {
            assert_eq!(
                check(&[], "DELETE", &format!("{SLICES}?{q}")),
                Err("resourceslices.resource.k8s.io is forbidden: User \"system:node:node-a\" \
                     cannot deletecollection resource \"resourceslices\" in API group \
                     \"resource.k8s.io\" at the cluster scope: can only list/watch/deletecollection \
                     resourceslices with nodeName field selector"
                    .into()),
                "{q}"
            );
        }
        assert_eq!(check(&[], "DELETE", &format!("{SLICES}/s")), Ok(()));
    }

    #[test]
    fn csidrivers_read_only() {
        for p in [
            format!("{}/d", DRIVERS),
            DRIVERS.to_string(),
            format!("{}?watch=1", DRIVERS),
        ] {
            assert_eq!(check(&[], "GET", &p), Ok(()), "{}", p);
        }
        // The static rules give no reason: RBAC's message alone.
        assert_eq!(
            check(&[], "POST", DRIVERS),
            Err("csidrivers.storage.k8s.io is forbidden: User \"system:node:node-a\" cannot create resource \"csidrivers\" in API group \"storage.k8s.io\" at the cluster scope".into())
        );
        assert!(check(&[], "DELETE", &format!("{}/d", DRIVERS)).is_err());
    }

    #[test]
    fn persistent_volumes_through_their_claim_ref() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "node-a",
            "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]}});
        let pvc =
            json!({"metadata": {"name": "c", "namespace": "ns"}, "spec": {"volumeName": "pv1"}});
        let unbound = json!({"metadata": {"name": "pv1"}, "spec": {"csi": {"driver": "d", "volumeHandle": "h",
            "nodePublishSecretRef": {"name": "pub", "namespace": "s"},
            "controllerPublishSecretRef": {"name": "ctl", "namespace": "s"}}}});
        let mut bound = unbound.clone();
        bound["spec"]["claimRef"] = json!({"namespace": "ns", "name": "c"});
        let objs = |pv: &serde_json::Value| {
            [
                ("pods", pod.clone()),
                ("persistentvolumeclaims", pvc.clone()),
                ("persistentvolumes", pv.clone()),
            ]
        };
        assert_eq!(
            check(
                &objs(&bound),
                "GET",
                "/api/v1/namespaces/ns/persistentvolumeclaims/c"
            ),
            Ok(())
        );
        // The claim's volumeName alone relates nothing: the PV's claimRef does.
        assert!(check(&objs(&unbound), "GET", "/api/v1/persistentvolumes/pv1").is_err());
        assert_eq!(
            check(&objs(&bound), "GET", "/api/v1/persistentvolumes/pv1"),
            Ok(())
        );
        // Its node secrets, not the controller's.
        assert_eq!(
            check(&objs(&bound), "GET", "/api/v1/namespaces/s/secrets/pub"),
            Ok(())
        );
        assert!(check(&objs(&bound), "GET", "/api/v1/namespaces/s/secrets/ctl").is_err());
    }
}
