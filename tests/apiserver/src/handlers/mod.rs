//! Routing and the REST verbs: get, list, watch, create, update, patch,
//! delete, deletecollection, and the status/binding/eviction/token/finalize
//! subresources, with the real server's preconditions and error shapes.
//!
//! This file routes, authorizes and dispatches, and holds the discovery
//! documents and helpers the verbs share; the verbs live in [`read`]
//! (get, list, watch), [`write`] (create, update, patch), [`delete`] and
//! [`subresources`] (binding, eviction).

mod delete;
mod read;
mod subresources;
mod write;

pub use delete::*;
pub use read::*;
use subresources::*;
pub use write::*;

use crate::certs::User;
use crate::csr;
use crate::http::Request;
use crate::kinds;
use crate::patch::{self, JsonPatchError};
use crate::resources::{self, ResourceDef, RESOURCES};
use crate::selectors::{FieldSelector, LabelSelector, Selection};
use crate::status::{success_status, ApiError};
use crate::store::{Inner, Store};
use crate::util::{
    self, get, get_str, meta_mut, name_of, namespace_of, now_rfc3339, rv_of, uid_of,
};
use crate::watch::{WatchReq, WatchStart};
use base64::Engine;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Api {
    pub store: Store,
    /// The control-plane release emulated (`--emulate-version`).
    pub version: crate::version::Version,
    /// The feature gates set away from the release's defaults
    /// (`--feature-gates`).
    pub gates: crate::features::FeatureGates,
    pub bookmark_interval: Duration,
    pub min_request_timeout: u64,
    pub ca_pem: String,
    pub server_url: Mutex<String>,
    /// Enforce NodeRestriction-like limits on system:node:* users.
    pub node_restriction: bool,
    /// The Node authorizer's rules for secrets, configmaps, PVCs, PVs and
    /// serviceaccount tokens (nodeauthz.rs).
    pub node_authorizer: bool,
    /// Every TokenRequest answered (`/__double/tokenrequests`).
    pub token_log: crate::tokens::TokenLog,
    /// The attach/detach controller stand-in (`--attach-controller`,
    /// `/__double/attach`; attachcontroller.rs).
    pub attach: crate::attachcontroller::Settings,
}

impl Api {
    /// The release and gates requests are answered as.
    pub fn emulation(&self) -> crate::features::Emulation {
        crate::features::Emulation::new(self.version, self.gates)
    }
}

pub enum Reply {
    Json(u16, Value),
    Text(u16, String),
    Watch(WatchReq),
    /// pods/log, exec, attach, portforward: served by the kubelet (nodeproxy).
    Kubelet(crate::nodeproxy::KubeletCall),
}

/// What a request is, in the terms of the real server's RequestInfo.
#[derive(Default, Clone, Debug)]
pub struct Info {
    pub verb: String,
    pub resource: String,
    pub sub: String,
    pub ns: String,
    pub name: String,
    pub is_resource: bool,
}

impl Info {
    /// `patch pods/status`, `watch leases.coordination.k8s.io`, `get /healthz`.
    pub fn stats_key(&self) -> String {
        if !self.is_resource {
            return format!("{} {}", self.verb, self.resource);
        }
        if self.sub.is_empty() {
            format!("{} {}", self.verb, self.resource)
        } else {
            format!("{} {}/{}", self.verb, self.resource, self.sub)
        }
    }
}

#[derive(Clone)]
pub struct Route {
    pub def: &'static ResourceDef,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

pub enum Target {
    Root,
    Health(String),
    Version,
    ApiVersions,
    Resources(&'static str, &'static str),
    Groups,
    Group(&'static str),
    Res(Route, bool),
    /// POST tokenreviews / subjectaccessreviews (served by the server, which
    /// owns the token table and the authz policy): the plural.
    Review(&'static str),
    NotFound,
}

fn is_watch_param(req: &Request) -> bool {
    matches!(req.q("watch"), Some(v) if v == "1" || v.eq_ignore_ascii_case("true"))
}

/// (plural, namespace, name, subresource) of a resource path.
type Parsed<'a> = (&'a str, Option<String>, Option<String>, Option<String>);

pub fn classify(req: &Request) -> (Target, Info) {
    let segs: Vec<&str> = req.path.split('/').filter(|s| !s.is_empty()).collect();
    let method = req.method.as_str();
    let nonres = |t: Target, path: &str| {
        (
            t,
            Info {
                verb: method.to_ascii_lowercase(),
                resource: path.to_string(),
                ..Default::default()
            },
        )
    };
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        [] => return nonres(Target::Root, "/"),
        ["version"] => return nonres(Target::Version, "/version"),
        [h, ..] if *h == "healthz" || *h == "livez" || *h == "readyz" => {
            return nonres(Target::Health(req.path.clone()), &req.path)
        }
        ["api"] => return nonres(Target::ApiVersions, "/api"),
        ["api", "v1"] => return nonres(Target::Resources("", "v1"), "/api/v1"),
        ["apis"] => return nonres(Target::Groups, "/apis"),
        ["apis", g] => {
            return match resources::groups().into_iter().find(|x| x == g) {
                Some(g) => nonres(Target::Group(g), &req.path),
                None => nonres(Target::NotFound, &req.path),
            }
        }
        ["apis", g, v] => {
            return match RESOURCES.iter().find(|r| r.group == *g && r.version == *v) {
                Some(r) => nonres(Target::Resources(r.group, r.version), &req.path),
                None => nonres(Target::NotFound, &req.path),
            }
        }
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"]
        | ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => {
            let (plural, group) = if segs[1] == "authentication.k8s.io" {
                ("tokenreviews", "authentication.k8s.io")
            } else {
                ("subjectaccessreviews", "authorization.k8s.io")
            };
            let verb = if method == "POST" {
                "create"
            } else {
                "unknown"
            };
            return (
                Target::Review(plural),
                Info {
                    verb: verb.into(),
                    resource: format!("{}.{}", plural, group),
                    is_resource: true,
                    ..Default::default()
                },
            );
        }
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return nonres(Target::NotFound, &req.path),
    };
    let (watch_path, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let owned = |s: &&str| s.to_string();
    // (plural, ns, name, sub)
    let parsed: Option<Parsed> = match rest {
        ["namespaces"] => Some(("namespaces", None, None, None)),
        ["namespaces", n] => Some(("namespaces", None, Some(n.to_string()), None)),
        ["namespaces", n, s] if *s == "status" || *s == "finalize" => {
            Some(("namespaces", None, Some(n.to_string()), Some(s.to_string())))
        }
        ["namespaces", ns, plural, more @ ..] if more.len() <= 2 => Some((
            plural,
            Some(ns.to_string()),
            more.first().map(owned),
            more.get(1).map(owned),
        )),
        [plural, more @ ..] if more.len() <= 2 => Some((
            plural,
            None,
            more.first().map(owned),
            more.get(1).map(owned),
        )),
        _ => None,
    };
    let Some((plural, ns, name, sub)) = parsed else {
        return nonres(Target::NotFound, &req.path);
    };
    let Some(def) = resources::find(group, version, plural) else {
        return nonres(Target::NotFound, &req.path);
    };
    if (!def.namespaced && ns.is_some()) || (def.namespaced && ns.is_none() && name.is_some()) {
        return nonres(Target::NotFound, &req.path);
    }
    let watch = watch_path || is_watch_param(req);
    let verb = match (method, name.is_some(), sub.is_some()) {
        ("GET", _, _) if watch => "watch",
        ("GET", true, _) => "get",
        ("GET", false, _) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => "unknown",
    };
    let info = Info {
        verb: verb.into(),
        resource: def.qualified(),
        sub: sub.clone().unwrap_or_default(),
        ns: ns.clone().unwrap_or_default(),
        name: name.clone().unwrap_or_default(),
        is_resource: true,
    };
    (Target::Res(Route { def, ns, name, sub }, watch), info)
}

// ---------------------------------------------------------------- dispatch

pub fn handle(
    api: &Api,
    req: &Request,
    user: &User,
    target: Target,
    info: &Info,
) -> Result<Reply, ApiError> {
    match target {
        Target::Root => Ok(Reply::Json(
            200,
            json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"]}),
        )),
        Target::Health(_) => Ok(Reply::Text(200, "ok".into())),
        Target::Version => Ok(Reply::Json(200, api.version.info())),
        Target::ApiVersions => Ok(Reply::Json(
            200,
            json!({
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": api.server_url.lock().map(|s| s.trim_start_matches("https://").to_string()).unwrap_or_default()}]
            }),
        )),
        Target::Groups => Ok(Reply::Json(
            200,
            json!({
                "kind": "APIGroupList", "apiVersion": "v1",
                "groups": resources::groups().into_iter().filter_map(|g| group_json(g, api.version)).collect::<Vec<_>>()
            }),
        )),
        Target::Group(g) => {
            let mut v = group_json(g, api.version).ok_or_else(ApiError::path_not_found)?;
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            Ok(Reply::Json(200, v))
        }
        Target::Resources(g, v) => resource_list(g, v, &api.emulation())
            .map(|l| Reply::Json(200, l))
            .ok_or_else(ApiError::path_not_found),
        Target::NotFound | Target::Review(_) => Err(ApiError::path_not_found()),
        Target::Res(route, watch) => {
            // Authorization runs in the filter chain, before the mux finds
            // no handler for what the release does not serve.
            authorize(api, user, &route, info, req)?;
            if !served(&api.emulation(), &route) {
                return Err(ApiError::path_not_found());
            }
            let dry_run = req.q("dryRun").map(|v| v == "All").unwrap_or(false);
            match (
                req.method.as_str(),
                route.name.is_some(),
                route.sub.as_deref(),
            ) {
                ("GET", _, _) if watch => watch_req(api, &route, req),
                (_, true, Some(s @ ("log" | "exec" | "attach" | "portforward")))
                    if route.def.is("", "pods") =>
                {
                    crate::nodeproxy::pod_call(api, &route, req, s).map(Reply::Kubelet)
                }
                ("GET", true, None) | ("GET", true, Some("status")) => get_obj(api, &route),
                // Both take and answer the whole Pod and change only their
                // part of it (ephemeral.rs, resize.rs).
                ("GET" | "PUT" | "PATCH", true, Some("ephemeralcontainers" | "resize"))
                    if route.def.is("", "pods") =>
                {
                    match req.method.as_str() {
                        "GET" => get_obj(api, &route),
                        "PUT" => update(api, &route, req, dry_run, user),
                        _ => patch_obj(api, &route, req, dry_run, user),
                    }
                }
                ("GET", false, None) => list(api, &route, req),
                ("POST", false, None) => create(api, &route, req, dry_run, user),
                ("POST", true, Some("binding")) if route.def.is("", "pods") => {
                    bind(api, &route, req)
                }
                ("POST", true, Some("eviction")) if route.def.is("", "pods") => {
                    evict(api, &route, req)
                }
                ("POST", true, Some("token")) if route.def.is("", "serviceaccounts") => {
                    crate::tokens::token_request(api, &route, req, user)
                }
                ("PUT", true, None)
                | ("PUT", true, Some("status"))
                | ("PUT", true, Some("finalize")) => update(api, &route, req, dry_run, user),
                ("PUT", true, Some("approval")) if route.def.is(csr::GROUP, csr::PLURAL) => {
                    update(api, &route, req, dry_run, user)
                }
                ("PATCH", true, None) | ("PATCH", true, Some("status")) => {
                    patch_obj(api, &route, req, dry_run, user)
                }
                ("DELETE", true, None) => delete(api, &route, req),
                ("DELETE", false, None) => delete_collection(api, &route, req),
                (_, true, Some(s))
                    if !route.def.subresources.contains(&s)
                        && (s != "status" || !route.def.status) =>
                {
                    Err(ApiError::path_not_found())
                }
                _ => Err(ApiError::method_not_allowed()),
            }
        }
    }
}

/// Authorization. Every authenticated user is allowed everything (like a
/// cluster where RBAC grants it), except that a `system:node:<n>` user gets
/// the Node authorizer's rules with --node-authorizer (nodeauthz.rs) and
/// the NodeRestriction admission limits that need only the URL (nodes,
/// leases and CSINodes of another name) with --node-restriction; the
/// limits that need the object are in noderestriction.rs.
fn authorize(
    api: &Api,
    user: &User,
    route: &Route,
    info: &Info,
    req: &Request,
) -> Result<(), ApiError> {
    let group = route.def.group;
    if !csr::bootstrapper_allowed(user, group, route.def.plural, &info.verb) {
        return Err(ApiError::forbidden(
            &route.def.qualified(),
            route.name.as_deref().unwrap_or(""),
            &format!("User {:?} cannot {} this resource", user.name, info.verb),
        ));
    }
    let Some(node) = user.node_name() else {
        return Ok(());
    };
    if api.node_authorizer {
        crate::nodeauthz::authorize(&api.store.lock(), user, node, route, info, req)?;
    }
    if !api.node_restriction {
        return Ok(());
    }
    let mutating = matches!(
        info.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    );
    if !mutating {
        return Ok(());
    }
    let name = route.name.as_deref().unwrap_or("");
    if route.def.is("", "nodes") && !name.is_empty() && name != node {
        return Err(ApiError::forbidden(
            "nodes",
            name,
            &format!("node {:?} is not allowed to modify node {:?}", node, name),
        ));
    }
    if route.def.is("coordination.k8s.io", "leases") && !name.is_empty() && name != node {
        return Err(ApiError::forbidden(
            &route.def.qualified(),
            name,
            "can only access node lease with the same name as the requesting node",
        ));
    }
    // admitCSINode for update, patch and delete (a create is checked on
    // the object, noderestriction.rs).
    if route.def.is("storage.k8s.io", "csinodes") && !name.is_empty() && name != node {
        return Err(ApiError::forbidden(
            &route.def.qualified(),
            name,
            "can only access CSINode with the same name as the requesting node",
        ));
    }
    Ok(())
}

/// Whether the emulated release serves the resource and subresource at all
/// (an older one answers 404 for what it lacks).
fn served(emu: &crate::features::Emulation, route: &Route) -> bool {
    let v = emu.version;
    v.serves_with(&emu.gates, route.def)
        && route
            .sub
            .as_deref()
            .is_none_or(|s| v.serves_subresource_with(&emu.gates, route.def, s))
}

/// The group's discovery document, or None when the release serves none
/// of its versions.
fn group_json(g: &str, release: crate::version::Version) -> Option<Value> {
    let versions: Vec<&str> = {
        let mut v: Vec<&str> = RESOURCES
            .iter()
            .filter(|r| r.group == g && release.serves(r))
            .map(|r| r.version)
            .collect();
        v.dedup();
        v
    };
    if versions.is_empty() {
        return None;
    }
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{}/{}", g, v), "version": v}))
        .collect();
    Some(
        json!({"name": g, "versions": gvs, "preferredVersion": gvs.first().cloned().unwrap_or(json!({}))}),
    )
}

/// The group/version's discovery document, or None when the release
/// serves none of its resources.
fn resource_list(g: &str, v: &str, emu: &crate::features::Emulation) -> Option<Value> {
    let release = emu.version;
    let verbs = json!([
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch"
    ]);
    let mut out = vec![];
    let here = |r: &&ResourceDef| r.group == g && r.version == v && release.serves(r);
    for r in RESOURCES.iter().filter(here) {
        out.push(
            json!({"name": r.plural, "singularName": r.singular(), "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs, "shortNames": r.short_names}),
        );
        if r.status {
            out.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        for s in r.subresources {
            if !release.serves_subresource_with(&emu.gates, r, s) {
                continue;
            }
            let (kind, verbs, group) = match *s {
                "binding" => ("Binding", json!(["create"]), None),
                "eviction" => ("Eviction", json!(["create"]), Some(("policy", "v1"))),
                "token" => (
                    "TokenRequest",
                    json!(["create"]),
                    Some(("authentication.k8s.io", "v1")),
                ),
                "finalize" => (r.kind, json!(["update"]), None),
                // Both have get, update and patch (their REST storages
                // implement Getter and Updater).
                "ephemeralcontainers" | "resize" => {
                    (r.kind, json!(["get", "patch", "update"]), None)
                }
                _ => (r.kind, json!(["get"]), None),
            };
            let mut e = json!({"name": format!("{}/{}", r.plural, s), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
            if let Some((gg, vv)) = group {
                e["group"] = json!(gg);
                e["version"] = json!(vv);
            }
            out.push(e);
        }
    }
    let gv = if g.is_empty() {
        v.to_string()
    } else {
        format!("{}/{}", g, v)
    };
    if out.is_empty() {
        return None;
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}),
    )
}

// ---------------------------------------------------------------- helpers

fn ns_of(route: &Route) -> &str {
    route.ns.as_deref().unwrap_or("")
}

fn name_in(route: &Route) -> &str {
    route.name.as_deref().unwrap_or("")
}

/// Decodes a request body into an object of `def`, as the real decoder does:
/// kind/apiVersion default from the endpoint, and must match when given.
fn decode_body(req: &Request, def: &ResourceDef) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(&req.body).map_err(|e| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {}",
            e
        ))
    })?;
    let Value::Object(mut m) = v else {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: expected a JSON object",
        ));
    };
    match m.get("apiVersion") {
        Some(Value::String(av)) if !av.is_empty() && *av != def.api_version() => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({})",
                av,
                def.api_version()
            )))
        }
        _ => {}
    }
    match m.get("kind") {
        Some(Value::String(k)) if !k.is_empty() && k != def.kind => {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: the object kind does not match",
                k, def.version, def.kind
            )))
        }
        _ => {}
    }
    m.insert("kind".into(), json!(def.kind));
    m.insert("apiVersion".into(), json!(def.api_version()));
    if let Some(md) = m.get("metadata") {
        if !md.is_object() && !md.is_null() {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
    }
    let v = Value::Object(m);
    crate::volumekinds::check_decodable(def, &v).map_err(ApiError::bad_request)?;
    Ok(v)
}

/// EnsureObjectNamespaceMatchesRequestNamespace.
fn fix_namespace(obj: &mut Value, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
    let m = meta_mut(obj);
    let given = m
        .get("namespace")
        .and_then(|x| x.as_str())
        .unwrap_or("")
        .to_string();
    if def.namespaced {
        if !given.is_empty() && given != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        m.insert("namespace".into(), json!(ns));
    } else {
        if !given.is_empty() {
            return Err(ApiError::bad_request(
                "not allowed to set namespace on a cluster-scoped resource",
            ));
        }
        m.remove("namespace");
    }
    Ok(())
}

fn check_namespace_usable(g: &Inner, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
    if !def.namespaced {
        return Ok(());
    }
    match g.get("namespaces", "", ns) {
        None => Err(ApiError::not_found("namespaces", ns)),
        Some(n) if get(&n, &["metadata", "deletionTimestamp"]).is_some() => {
            let mut e = ApiError::forbidden(
                &def.qualified(),
                "",
                &format!(
                    "unable to create new content in namespace {} because it is being terminated",
                    ns
                ),
            );
            e.details = Some(
                json!({"kind": def.plural, "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {} is being terminated", ns), "field": "metadata.namespace"}]}),
            );
            Err(e)
        }
        _ => Ok(()),
    }
}

fn invalid(def: &ResourceDef, name: &str, errs: kinds::FieldErrs) -> Result<(), ApiError> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(def.kind, def.group, name, &errs))
    }
}

/// Pods carry `metadata.generation` from 1.33 (kubernetes#130181): the
/// v1.22 and v1.32 captures store none.
fn kind_has_generation(def: &ResourceDef, version: crate::version::Version) -> bool {
    def.is("", "pods") && version.minor >= 33
}

// ---------------------------------------------------------------- controllers

/// One pass of the namespace controller: content of terminating namespaces is
/// deleted (pods gracefully), and an empty terminating namespace goes away.
pub fn namespace_controller_tick(api: &Api) {
    let mut g = api.store.lock();
    let terminating: Vec<String> = g
        .list("namespaces", None)
        .iter()
        .filter(|n| get(n, &["metadata", "deletionTimestamp"]).is_some())
        .map(|n| name_of(n).to_string())
        .collect();
    for ns in terminating {
        let mut left = 0;
        for def in RESOURCES
            .iter()
            .filter(|d| d.namespaced && d.version == "v1")
        {
            for o in g.list(def.key, Some(&ns)) {
                left += 1;
                if get(&o, &["metadata", "deletionTimestamp"]).is_some() {
                    continue;
                }
                let _ = delete_object(&mut g, def, &ns, name_of(&o), &DeleteOpts::default());
            }
        }
        if left == 0 {
            g.remove("namespaces", "", &ns);
        }
    }
}

/// Pre-creates the namespaces every cluster has.
pub fn bootstrap(api: &Api) {
    let mut g = api.store.lock();
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        if g.get("namespaces", "", ns).is_none() {
            let mut o = json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns, "uid": util::uuid4(), "creationTimestamp": now_rfc3339()}});
            let def = resources::find("", "v1", "namespaces").expect("namespaces");
            kinds::apply_defaults(def, &mut o);
            g.put("namespaces", o);
        }
        populate_namespace(&mut g, ns, &api.ca_pem);
    }
    if g.get("services", "default", "kubernetes").is_none() {
        let port: u16 = api
            .server_url
            .lock()
            .ok()
            .and_then(|u| u.rsplit(':').next().and_then(|p| p.parse().ok()))
            .unwrap_or(6443);
        let o = json!({"kind": "Service", "apiVersion": "v1", "metadata": {"name": "kubernetes", "namespace": "default",
            "uid": util::uuid4(), "creationTimestamp": now_rfc3339(), "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}], "clusterIP": "10.96.0.1",
                "clusterIPs": ["10.96.0.1"], "type": "ClusterIP", "sessionAffinity": "None", "ipFamilies": ["IPv4"],
                "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"},
            "status": {"loadBalancer": {}}});
        g.put("services", o);
    }
}
