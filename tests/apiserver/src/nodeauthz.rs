//! The Node authorizer's graph rules (plugin/pkg/auth/authorizer/node) for
//! the objects pod volumes use, enabled with `--node-authorizer`: a
//! `system:node:<n>` user may read secrets and configmaps (get, or list/watch
//! pinned by `fieldSelector=metadata.name=`), get PVCs and PVs, update/patch
//! PVC status, and create serviceaccount tokens, only for objects that a
//! non-mirror pod bound to node `<n>` references (PVs through the PVC's
//! volumeName). Denials are RBAC-shaped 403s carrying the authorizer's reason.
//! Other resources are not subdivided here (everything is allowed).

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

/// What the pods bound to a node reference: (namespace, name) per kind.
#[derive(Default)]
struct Graph {
    secrets: BTreeSet<Key>,
    configmaps: BTreeSet<Key>,
    pvcs: BTreeSet<Key>,
    pvs: BTreeSet<String>,
    serviceaccounts: BTreeSet<Key>,
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
    for (ns, name) in &gr.pvcs {
        if let Some(pvc) = g.get("persistentvolumeclaims", ns, name) {
            if let Some(pv) = get_str(&pvc, &["spec", "volumeName"]).filter(|s| !s.is_empty()) {
                gr.pvs.insert(pv.to_string());
            }
        }
    }
    // PV → secrets (the CSI secret references, with their own namespaces).
    for pv in &gr.pvs {
        if let Some(o) = g.get("persistentvolumes", "", pv) {
            for r in [
                "nodePublishSecretRef",
                "nodeStageSecretRef",
                "nodeExpandSecretRef",
                "controllerPublishSecretRef",
                "controllerExpandSecretRef",
            ] {
                if let Some(s) = get(&o, &["spec", "csi", r]) {
                    let (n, ns) = (
                        get_str(s, &["name"]).unwrap_or(""),
                        get_str(s, &["namespace"]).unwrap_or(""),
                    );
                    if !n.is_empty() {
                        gr.secrets.insert((ns.to_string(), n.to_string()));
                    }
                }
            }
        }
    }
    gr
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
    let msg = format!(
        "User {:?} cannot {} resource {:?} in API group {:?} {}: {}",
        user.name, info.verb, res, route.def.group, scope, reason
    );
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
    }
    let rule = match (route.def.group, route.def.plural) {
        ("", "secrets") | ("", "configmaps") => Rule::Read,
        ("", "persistentvolumeclaims") if info.sub == "status" => Rule::StatusUpdate,
        ("", "persistentvolumeclaims") | ("", "persistentvolumes") => Rule::Get,
        ("", "serviceaccounts") => Rule::CreateToken,
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
