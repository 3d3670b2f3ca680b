//! Routing and the REST verbs: get, list, watch, create, update, patch,
//! delete, deletecollection, and the status/binding/eviction/token/finalize
//! subresources, with the real server's preconditions and error shapes.

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

pub const KUBE_VERSION: &str = "v1.34.0";

pub struct Api {
    pub store: Store,
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
        Target::Version => Ok(Reply::Json(200, version_info())),
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
                "groups": resources::groups().into_iter().map(group_json).collect::<Vec<_>>()
            }),
        )),
        Target::Group(g) => {
            let mut v = group_json(g);
            v["kind"] = json!("APIGroup");
            v["apiVersion"] = json!("v1");
            Ok(Reply::Json(200, v))
        }
        Target::Resources(g, v) => Ok(Reply::Json(200, resource_list(g, v))),
        Target::NotFound | Target::Review(_) => Err(ApiError::path_not_found()),
        Target::Res(route, watch) => {
            authorize(api, user, &route, info, req)?;
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
                ("GET" | "PUT" | "PATCH", true, Some("ephemeralcontainers"))
                    if route.def.is("", "pods") =>
                {
                    match req.method.as_str() {
                        "GET" => get_obj(api, &route),
                        "PUT" => update(api, &route, req, dry_run),
                        _ => patch_obj(api, &route, req, dry_run),
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
                | ("PUT", true, Some("finalize")) => update(api, &route, req, dry_run),
                ("PUT", true, Some("approval")) if route.def.is(csr::GROUP, csr::PLURAL) => {
                    update(api, &route, req, dry_run)
                }
                ("PATCH", true, None) | ("PATCH", true, Some("status")) => {
                    patch_obj(api, &route, req, dry_run)
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
/// the Node authorizer's graph rules with --node-authorizer (nodeauthz.rs)
/// and the NodeRestriction admission limits on the objects a kubelet writes
/// with --node-restriction.
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
    Ok(())
}

pub fn version_info() -> Value {
    json!({
        "major": "1", "minor": "34", "emulationMajor": "1", "emulationMinor": "34",
        "minCompatibilityMajor": "1", "minCompatibilityMinor": "33",
        "gitVersion": KUBE_VERSION, "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2025-08-27T00:00:00Z",
        "goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64"
    })
}

fn group_json(g: &str) -> Value {
    let versions: Vec<&str> = {
        let mut v: Vec<&str> = RESOURCES
            .iter()
            .filter(|r| r.group == g)
            .map(|r| r.version)
            .collect();
        v.dedup();
        v
    };
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{}/{}", g, v), "version": v}))
        .collect();
    json!({"name": g, "versions": gvs, "preferredVersion": gvs.first().cloned().unwrap_or(json!({}))})
}

fn resource_list(g: &str, v: &str) -> Value {
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
    for r in RESOURCES.iter().filter(|r| r.group == g && r.version == v) {
        out.push(
            json!({"name": r.plural, "singularName": r.singular(), "namespaced": r.namespaced,
            "kind": r.kind, "verbs": verbs, "shortNames": r.short_names}),
        );
        if r.status {
            out.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                "kind": r.kind, "verbs": ["get", "patch", "update"]}));
        }
        for s in r.subresources {
            let (kind, verbs, group) = match *s {
                "binding" => ("Binding", json!(["create"]), None),
                "eviction" => ("Eviction", json!(["create"]), Some(("policy", "v1"))),
                "token" => (
                    "TokenRequest",
                    json!(["create"]),
                    Some(("authentication.k8s.io", "v1")),
                ),
                "finalize" => (r.kind, json!(["update"]), None),
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
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out})
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

fn kind_has_generation(def: &ResourceDef) -> bool {
    def.is("", "pods")
}

// ---------------------------------------------------------------- read

fn get_obj(api: &Api, route: &Route) -> Result<Reply, ApiError> {
    let g = api.store.lock();
    let o = g
        .get(route.def.key, ns_of(route), name_in(route))
        .ok_or_else(|| ApiError::not_found(&route.def.qualified(), name_in(route)))?;
    Ok(Reply::Json(200, (*o).clone()))
}

pub fn selection(route: &Route, req: &Request) -> Result<Selection, ApiError> {
    let mut fields = FieldSelector::parse(req.q("fieldSelector").unwrap_or(""), route.def)?;
    if let Some(n) = &route.name {
        fields.terms.push(("metadata.name".into(), true, n.clone()));
    }
    Ok(Selection {
        namespace: route.ns.clone(),
        fields,
        labels: LabelSelector::parse(req.q("labelSelector").unwrap_or(""))?,
    })
}

fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {:?}", s)))
}

/// Waits (up to 3s, like the watch cache) for the store to reach `rv`.
fn wait_for_rv(api: &Api, rv: u64) -> Result<(), ApiError> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut g = api.store.lock();
    while g.rv < rv {
        let now = Instant::now();
        if now >= deadline {
            let mut e = ApiError::new(
                504,
                "Timeout",
                format!("Too large resource version: {}, current: {}", rv, g.rv),
            );
            e.details = Some(
                json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
            );
            return Err(e);
        }
        g = api
            .store
            .cond
            .wait_timeout(g, deadline - now)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
    Ok(())
}

fn strip_type_meta(o: &Value) -> Value {
    let mut v = o.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

fn list(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
    let sel = selection(route, req)?;
    if let Some(rv) = req
        .q("resourceVersion")
        .filter(|s| !s.is_empty() && *s != "0")
    {
        let rv = parse_rv(rv)?;
        if req.q("resourceVersionMatch") == Some("Exact") && rv < api.store.lock().history_start {
            return Err(ApiError::expired(format!(
                "too old resource version: {} ({})",
                rv,
                api.store.lock().history_start
            )));
        }
        wait_for_rv(api, rv)?;
    }
    let limit: usize = req
        .q("limit")
        .and_then(|l| l.parse::<i64>().ok())
        .filter(|l| *l > 0)
        .map(|l| l as usize)
        .unwrap_or(0);
    let (mut list_rv, start_after) = (None, None::<String>);
    let mut start_after = start_after;
    if let Some(tok) = req.q("continue").filter(|s| !s.is_empty()) {
        let bad = || {
            ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        };
        let raw = base64::engine::general_purpose::URL_SAFE
            .decode(tok)
            .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(tok))
            .map_err(|_| bad())?;
        let t: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
        list_rv = t.get("rv").and_then(|x| x.as_u64());
        start_after = Some(
            t.get("start")
                .and_then(|x| x.as_str())
                .ok_or_else(bad)?
                .trim_end_matches('\u{0}')
                .to_string(),
        );
        if list_rv.is_none() {
            return Err(bad());
        }
    }
    let g = api.store.lock();
    let rv = list_rv.unwrap_or(g.rv);
    let all = g.list(route.def.key, route.ns.as_deref());
    let mut items = vec![];
    let mut cont = None;
    let mut remaining = 0u64;
    for o in all.iter() {
        let key = format!("{}/{}", namespace_of(o), name_of(o));
        if let Some(s) = &start_after {
            if key.as_str() <= s.as_str() {
                continue;
            }
        }
        if !sel.matches(o) {
            continue;
        }
        if limit > 0 && items.len() == limit {
            if cont.is_none() {
                let last = items
                    .last()
                    .map(|v: &Value| format!("{}/{}", namespace_of(v), name_of(v)))
                    .unwrap_or_default();
                let t = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{}\u{0}", last)});
                cont = Some(base64::engine::general_purpose::URL_SAFE.encode(t.to_string()));
            }
            remaining += 1;
            continue;
        }
        items.push(strip_type_meta(o));
    }
    drop(g);
    let mut md = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        md["continue"] = json!(c);
        md["remainingItemCount"] = json!(remaining);
    }
    Ok(Reply::Json(
        200,
        json!({
            "kind": format!("{}List", route.def.kind), "apiVersion": route.def.api_version(),
            "metadata": md, "items": items
        }),
    ))
}

fn watch_req(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
    let sel = selection(route, req)?;
    let send_initial = req.q("sendInitialEvents").map(|v| v == "true" || v == "1");
    let start = match req.q("resourceVersion").unwrap_or("") {
        "" | "0" => WatchStart::Now {
            initial_events: send_initial.unwrap_or(true),
        },
        rv => {
            let n = parse_rv(rv)?;
            if send_initial == Some(true) {
                WatchStart::Now {
                    initial_events: true,
                }
            } else {
                WatchStart::After(n)
            }
        }
    };
    let timeout = match req.q("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()) {
        Some(t) if t > 0 => Duration::from_secs(t),
        _ => {
            let base = api.min_request_timeout.max(1);
            let jitter = util::random_bytes(2);
            let extra = (u16::from_le_bytes([jitter[0], jitter[1]]) as u64) % base;
            Duration::from_secs(base + extra)
        }
    };
    let bookmarks = matches!(req.q("allowWatchBookmarks"), Some("true") | Some("1"));
    Ok(Reply::Watch(WatchReq {
        def: route.def,
        sel,
        start,
        bookmarks,
        initial_events_end: send_initial == Some(true) && bookmarks,
        timeout,
        bookmark_interval: api.bookmark_interval,
        truncate: false,
    }))
}

// ---------------------------------------------------------------- write

fn create(
    api: &Api,
    route: &Route,
    req: &Request,
    dry_run: bool,
    user: &User,
) -> Result<Reply, ApiError> {
    let def = route.def;
    let mut obj = decode_body(req, def)?;
    let ns = ns_of(route).to_string();
    fix_namespace(&mut obj, def, &ns)?;
    let mut g = api.store.lock();
    check_namespace_usable(&g, def, &ns)?;
    {
        let m = meta_mut(&mut obj);
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
            "generation",
        ] {
            m.remove(k);
        }
        m.insert("uid".into(), json!(util::uuid4()));
        m.insert("creationTimestamp".into(), json!(now_rfc3339()));
        if kind_has_generation(def) {
            m.insert("generation".into(), json!(1));
        }
    }
    let gen_name = get_str(&obj, &["metadata", "generateName"])
        .unwrap_or("")
        .to_string();
    // Admission sees the object before the name is generated.
    let admission_name = if name_of(&obj).is_empty() {
        gen_name.clone()
    } else {
        name_of(&obj).to_string()
    };
    if name_of(&obj).is_empty() && !gen_name.is_empty() {
        let mut name = format!("{}{}", gen_name, util::random_suffix(5));
        for _ in 0..8 {
            if g.get(def.key, &ns, &name).is_none() {
                break;
            }
            name = format!("{}{}", gen_name, util::random_suffix(5));
        }
        meta_mut(&mut obj).insert("name".into(), json!(name));
    }
    kinds::apply_defaults(def, &mut obj);
    if def.is("", "pods") {
        crate::admission::admit_pod_create(&g, &ns, &admission_name, &mut obj)?;
        crate::runtimeclass::admit_pod_create(&g, &admission_name, &mut obj)?;
    }
    kinds::reset_status_on_create(def, &mut obj);
    let name = name_of(&obj).to_string();
    invalid(def, &name, kinds::validate(def, &obj, None))?;
    if def.is(csr::GROUP, csr::PLURAL) {
        invalid(def, &name, csr::prepare_create(&mut obj, user))?;
    }
    if g.get(def.key, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&def.qualified(), &name));
    }
    if dry_run {
        return Ok(Reply::Json(201, obj));
    }
    let stored = g.put(def.key, obj);
    if def.is("", "namespaces") {
        populate_namespace(&mut g, &name, &api.ca_pem);
    }
    Ok(Reply::Json(201, (*stored).clone()))
}

/// What the serviceaccount and root-ca-cert-publisher controllers create in
/// every namespace.
pub fn populate_namespace(g: &mut Inner, ns: &str, ca_pem: &str) {
    let mk = |kind: &str, name: &str, extra: Value| {
        let mut o = json!({"kind": kind, "apiVersion": "v1", "metadata": {"name": name, "namespace": ns,
            "uid": util::uuid4(), "creationTimestamp": now_rfc3339()}});
        if let (Some(m), Value::Object(e)) = (o.as_object_mut(), extra) {
            m.extend(e);
        }
        o
    };
    if g.get("serviceaccounts", ns, "default").is_none() {
        g.put(
            "serviceaccounts",
            mk("ServiceAccount", "default", json!({})),
        );
    }
    if g.get("configmaps", ns, "kube-root-ca.crt").is_none() {
        let mut cm = mk(
            "ConfigMap",
            "kube-root-ca.crt",
            json!({"data": {"ca.crt": ca_pem}}),
        );
        meta_mut(&mut cm).insert("annotations".into(), json!({"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}));
        g.put("configmaps", cm);
    }
}

/// Turns the client's proposed object into the object to store, given the
/// stored one: subresource scoping, system fields carried over, defaults,
/// generation, validation. Shared by update and patch.
fn prepare_update(
    def: &ResourceDef,
    sub: Option<&str>,
    old: &Value,
    mut new: Value,
) -> Result<Value, ApiError> {
    let name = name_of(old).to_string();
    if let Some(m) = new.as_object_mut() {
        m.insert("kind".into(), json!(def.kind));
        m.insert("apiVersion".into(), json!(def.api_version()));
    }
    match sub {
        Some("status") => {
            // Only status changes through /status (metadata too, except owner refs for pods).
            for k in ["spec"] {
                match old.get(k) {
                    Some(v) => new[k] = v.clone(),
                    None => {
                        new.as_object_mut().map(|m| m.remove(k));
                    }
                }
            }
            if def.is("", "pods") {
                match get(old, &["metadata", "ownerReferences"]) {
                    Some(v) => {
                        meta_mut(&mut new).insert("ownerReferences".into(), v.clone());
                    }
                    None => {
                        meta_mut(&mut new).remove("ownerReferences");
                    }
                }
            }
            crate::volumekinds::prepare_status_update(def, old, &mut new);
            if def.is(csr::GROUP, csr::PLURAL) {
                csr::prepare_status(old, &mut new);
            }
        }
        Some("ephemeralcontainers") => new = crate::ephemeral::prepare(old, &new),
        Some("approval") => {
            new = csr::prepare_approval(old, &new);
            invalid(def, &name, csr::validate_conditions(&new))?;
        }
        Some("finalize") => {
            // namespaces/finalize: only spec.finalizers changes.
            let fin = get(&new, &["spec", "finalizers"]).cloned();
            let mut n = old.clone();
            util::obj_field_mut(&mut n, "spec")
                .insert("finalizers".into(), fin.unwrap_or(json!([])));
            n["metadata"]["resourceVersion"] = new["metadata"]["resourceVersion"].clone();
            new = n;
        }
        _ => {
            if def.status {
                match old.get("status") {
                    Some(v) => new["status"] = v.clone(),
                    None => {
                        new.as_object_mut().map(|m| m.remove("status"));
                    }
                }
            }
        }
    }
    let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
    let new_uid = uid_of(&new).to_string();
    if !new_uid.is_empty() && new_uid != uid_of(old) {
        return Err(ApiError::invalid(
            def.kind,
            def.group,
            &name,
            &[(
                "metadata.uid".into(),
                "FieldValueInvalid",
                format!("Invalid value: {:?}: field is immutable", new_uid),
            )],
        ));
    }
    let m = meta_mut(&mut new);
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(k) {
            Some(v) => {
                m.insert(k.into(), v.clone());
            }
            None => {
                m.remove(k);
            }
        }
    }
    m.remove("selfLink");
    m.remove("managedFields");
    kinds::apply_defaults(def, &mut new);
    if kind_has_generation(def) && new.get("spec") != old.get("spec") {
        let g = get(old, &["metadata", "generation"])
            .and_then(|x| x.as_i64())
            .unwrap_or(0);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    let errs = if sub == Some("ephemeralcontainers") {
        // The pod's own rules, judged as if its ephemeral containers were
        // already there, then the subresource's.
        let mut base = old.clone();
        match get(&new, &["spec", "ephemeralContainers"]) {
            Some(v) => {
                util::obj_field_mut(&mut base, "spec")
                    .insert("ephemeralContainers".into(), v.clone());
            }
            None => {
                util::obj_field_mut(&mut base, "spec").remove("ephemeralContainers");
            }
        }
        let mut errs = kinds::validate(def, &new, Some(&base));
        errs.extend(crate::ephemeral::validate_update(&new, old));
        errs
    } else {
        kinds::validate(def, &new, Some(old))
    };
    invalid(def, &name, errs)?;
    Ok(new)
}

fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        meta_mut(&mut v).remove("resourceVersion");
        v
    };
    strip(a) == strip(b)
}

/// Stores an update; an unchanged object is not written (no new revision, no
/// event), and an object whose deletion was only waiting for finalizers goes.
fn commit_update(
    g: &mut Inner,
    def: &ResourceDef,
    old: &Arc<Value>,
    new: Value,
    dry_run: bool,
) -> Value {
    if same_ignoring_rv(old, &new) || dry_run {
        return if dry_run { new } else { (**old).clone() };
    }
    let deleting = get(&new, &["metadata", "deletionTimestamp"]).is_some();
    let finalizers_left = get(&new, &["metadata", "finalizers"])
        .and_then(|f| f.as_array())
        .map(|f| !f.is_empty())
        .unwrap_or(false);
    let grace = get(&new, &["metadata", "deletionGracePeriodSeconds"])
        .and_then(|x| x.as_i64())
        .unwrap_or(0);
    let ns_pending = def.is("", "namespaces");
    let stored = g.put(def.key, new);
    if deleting && !finalizers_left && grace == 0 && !ns_pending {
        g.remove(def.key, namespace_of(&stored), name_of(&stored));
    }
    (*stored).clone()
}

fn check_name_matches(obj: &Value, route: &Route) -> Result<(), ApiError> {
    let n = name_of(obj);
    if n != name_in(route) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            n,
            name_in(route)
        )));
    }
    Ok(())
}

fn update(api: &Api, route: &Route, req: &Request, dry_run: bool) -> Result<Reply, ApiError> {
    let def = route.def;
    let mut obj = decode_body(req, def)?;
    fix_namespace(&mut obj, def, ns_of(route))?;
    check_name_matches(&obj, route)?;
    let mut g = api.store.lock();
    let old = g
        .get(def.key, ns_of(route), name_in(route))
        .ok_or_else(|| ApiError::not_found(&def.qualified(), name_in(route)))?;
    let q = def.qualified();
    let uid = uid_of(&obj);
    if !uid.is_empty() && uid != uid_of(&old) {
        return Err(ApiError::conflict(
            &q,
            name_in(route),
            &format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                uid,
                uid_of(&old)
            ),
        ));
    }
    let rv = rv_of(&obj);
    if !rv.is_empty() {
        parse_rv(rv).map_err(|_| {
            ApiError::invalid(
                def.kind,
                def.group,
                name_in(route),
                &[(
                    "metadata.resourceVersion".into(),
                    "FieldValueInvalid",
                    format!("Invalid value: {:?}: must be a valid resourceVersion", rv),
                )],
            )
        })?;
        if rv != rv_of(&old) {
            return Err(ApiError::optimistic_lock(&q, name_in(route)));
        }
    }
    let new = prepare_update(def, route.sub.as_deref(), &old, obj)?;
    Ok(Reply::Json(
        200,
        commit_update(&mut g, def, &old, new, dry_run),
    ))
}

fn patch_obj(api: &Api, route: &Route, req: &Request, dry_run: bool) -> Result<Reply, ApiError> {
    let def = route.def;
    let ct = req
        .header("content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let patch: Value = serde_json::from_slice(&req.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {}", e)))?;
    let mut g = api.store.lock();
    let old = g
        .get(def.key, ns_of(route), name_in(route))
        .ok_or_else(|| ApiError::not_found(&def.qualified(), name_in(route)))?;
    let patched = match ct.as_str() {
        "application/merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("Invalid JSON Patch"));
            }
            patch::merge_patch(&old, &patch)
        }
        "application/strategic-merge-patch+json" => {
            patch::strategic_merge(def.kind, &old, &patch).map_err(ApiError::bad_request)?
        }
        "application/json-patch+json" => patch::json_patch(&old, &patch).map_err(|e| match e {
            JsonPatchError::Bad(m) => ApiError::bad_request(m),
            JsonPatchError::Apply(m) => ApiError::new(422, "", m),
        })?,
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                "server-side apply is not supported by the apiserver double",
            ))
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patch did not produce an object"));
    }
    crate::volumekinds::check_decodable(def, &patched).map_err(ApiError::bad_request)?;
    let q = def.qualified();
    let rv = rv_of(&patched);
    if !rv.is_empty() && rv != rv_of(&old) {
        return Err(ApiError::optimistic_lock(&q, name_in(route)));
    }
    let mut patched = patched;
    fix_namespace(&mut patched, def, ns_of(route))?;
    check_name_matches(&patched, route)?;
    let new = prepare_update(def, route.sub.as_deref(), &old, patched)?;
    Ok(Reply::Json(
        200,
        commit_update(&mut g, def, &old, new, dry_run),
    ))
}

// ---------------------------------------------------------------- delete

#[derive(Default, Debug, Clone)]
pub struct DeleteOpts {
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub rv: Option<String>,
    pub dry_run: bool,
}

fn delete_opts(req: &Request) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts {
        grace: req.q("gracePeriodSeconds").and_then(|g| g.parse().ok()),
        dry_run: req.q("dryRun") == Some("All"),
        ..Default::default()
    };
    if req.body.iter().any(|b| !b.is_ascii_whitespace()) {
        let v: Value = serde_json::from_slice(&req.body).map_err(|e| {
            ApiError::bad_request(format!(
                "couldn't get version/kind; json parse error: {}",
                e
            ))
        })?;
        if !v.is_object() {
            return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
        }
        if let Some(g) = v.get("gracePeriodSeconds").and_then(|x| x.as_i64()) {
            o.grace = Some(g);
        }
        o.uid = get_str(&v, &["preconditions", "uid"]).map(String::from);
        o.rv = get_str(&v, &["preconditions", "resourceVersion"]).map(String::from);
        if let Some(Value::Array(d)) = v.get("dryRun") {
            o.dry_run |= d.iter().any(|x| x == "All");
        }
    }
    Ok(o)
}

pub enum Deleted {
    /// Graceful deletion or finalizers pending: the object is still there.
    Pending(Value),
    /// Gone; the last stored state.
    Gone(Value),
}

/// The pod strategy's CheckGracefulDelete.
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let mut g = requested
        .or_else(|| get(pod, &["spec", "terminationGracePeriodSeconds"]).and_then(|x| x.as_i64()))
        .unwrap_or(30);
    if get_str(pod, &["spec", "nodeName"]).unwrap_or("").is_empty() {
        g = 0;
    }
    if matches!(
        get_str(pod, &["status", "phase"]),
        Some("Succeeded") | Some("Failed")
    ) {
        g = 0;
    }
    if g < 0 {
        g = 1;
    }
    g
}

pub fn delete_object(
    g: &mut Inner,
    def: &'static ResourceDef,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    let q = def.qualified();
    let old = g
        .get(def.key, ns, name)
        .ok_or_else(|| ApiError::not_found(&q, name))?;
    if let Some(uid) = &opts.uid {
        if uid != uid_of(&old) {
            return Err(ApiError::conflict(
                &q,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    uid,
                    uid_of(&old)
                ),
            ));
        }
    }
    if let Some(rv) = &opts.rv {
        if rv != rv_of(&old) {
            return Err(ApiError::conflict(&q, name, &format!(
                "Precondition failed: ResourceVersion in precondition: {}, ResourceVersion in object meta: {}", rv, rv_of(&old))));
        }
    }
    let deleting = get(&old, &["metadata", "deletionTimestamp"]).is_some();
    if def.is("", "namespaces") {
        if ["default", "kube-system", "kube-public"].contains(&name) {
            return Err(ApiError::forbidden(
                "namespaces",
                name,
                "this namespace may not be deleted",
            ));
        }
        if deleting || opts.dry_run {
            return Ok(Deleted::Pending((*old).clone()));
        }
        let mut n = (*old).clone();
        let m = meta_mut(&mut n);
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        util::obj_field_mut(&mut n, "status").insert("phase".into(), json!("Terminating"));
        return Ok(Deleted::Pending((*g.put(def.key, n)).clone()));
    }
    let finalizers = get(&old, &["metadata", "finalizers"])
        .and_then(|f| f.as_array())
        .map(|f| !f.is_empty())
        .unwrap_or(false);
    let grace = if def.is("", "pods") {
        pod_grace(&old, opts.grace)
    } else {
        0
    };
    if opts.dry_run {
        return Ok(Deleted::Pending((*old).clone()));
    }
    if grace == 0 && !finalizers {
        let gone = g
            .remove(def.key, ns, name)
            .map(|o| (*o).clone())
            .unwrap_or_default();
        return Ok(Deleted::Gone(gone));
    }
    if deleting {
        let current = get(&old, &["metadata", "deletionGracePeriodSeconds"])
            .and_then(|x| x.as_i64())
            .unwrap_or(0);
        if grace >= current {
            // Deletion can only be shortened.
            return Ok(Deleted::Pending((*old).clone()));
        }
    }
    let mut n = (*old).clone();
    let new_ts = util::unix_now() + grace;
    let old_ts = get_str(&old, &["metadata", "deletionTimestamp"]).and_then(util::parse_rfc3339);
    let m = meta_mut(&mut n);
    if old_ts.map(|t| new_ts < t).unwrap_or(true) {
        m.insert("deletionTimestamp".into(), json!(util::rfc3339(new_ts)));
    }
    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
    if let Some(gen) = m
        .get("generation")
        .and_then(|x| x.as_i64())
        .filter(|g| *g > 0)
    {
        m.insert("generation".into(), json!(gen + 1));
    }
    Ok(Deleted::Pending((*g.put(def.key, n)).clone()))
}

fn returns_deleted_object(def: &ResourceDef) -> bool {
    def.group.is_empty() && matches!(def.plural, "pods" | "services" | "namespaces")
}

fn delete(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
    let opts = delete_opts(req)?;
    let def = route.def;
    let mut g = api.store.lock();
    match delete_object(&mut g, def, ns_of(route), name_in(route), &opts)? {
        Deleted::Pending(o) => Ok(Reply::Json(200, o)),
        Deleted::Gone(o) => {
            if returns_deleted_object(def) {
                Ok(Reply::Json(200, o))
            } else {
                Ok(Reply::Json(
                    200,
                    success_status(&def.qualified(), name_of(&o), uid_of(&o)),
                ))
            }
        }
    }
}

fn delete_collection(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
    let opts = delete_opts(req)?;
    let sel = selection(route, req)?;
    let def = route.def;
    let mut g = api.store.lock();
    let targets: Vec<Arc<Value>> = g
        .list(def.key, route.ns.as_deref())
        .into_iter()
        .filter(|o| sel.matches(o))
        .collect();
    let mut items = vec![];
    for o in targets {
        match delete_object(&mut g, def, namespace_of(&o), name_of(&o), &opts) {
            Ok(Deleted::Pending(v)) | Ok(Deleted::Gone(v)) => items.push(strip_type_meta(&v)),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = g.rv;
    Ok(Reply::Json(
        200,
        json!({"kind": format!("{}List", def.kind), "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}

// ---------------------------------------------------------------- subresources

fn bind(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
    let b: Value = serde_json::from_slice(&req.body).map_err(|e| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {}",
            e
        ))
    })?;
    let node = get_str(&b, &["target", "name"]).unwrap_or("").to_string();
    let name = name_in(route);
    if node.is_empty() {
        return Err(ApiError::invalid(
            "Binding",
            "",
            name,
            &[(
                "target.name".into(),
                "FieldValueRequired",
                "Required value".into(),
            )],
        ));
    }
    let mut g = api.store.lock();
    let old = g
        .get("pods", ns_of(route), name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    if let Some(uid) = get_str(&b, &["metadata", "uid"]).filter(|u| !u.is_empty()) {
        if uid != uid_of(&old) {
            return Err(ApiError::conflict(
                "pods",
                name,
                &format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    uid,
                    uid_of(&old)
                ),
            ));
        }
    }
    if get(&old, &["metadata", "deletionTimestamp"]).is_some() {
        return Err(ApiError::conflict(
            "pods",
            name,
            &format!(
                "pod {} is being deleted, cannot be assigned to a host",
                name
            ),
        ));
    }
    let cur = get_str(&old, &["spec", "nodeName"]).unwrap_or("");
    if !cur.is_empty() {
        return Err(ApiError::conflict(
            "pods",
            name,
            &format!("pod {} is already assigned to node {:?}", name, cur),
        ));
    }
    let mut n = (*old).clone();
    util::obj_field_mut(&mut n, "spec").insert("nodeName".into(), json!(node));
    if let Some(Value::Object(a)) = get(&b, &["metadata", "annotations"]) {
        let ann = meta_mut(&mut n).entry("annotations").or_insert(json!({}));
        if let Some(am) = ann.as_object_mut() {
            am.extend(a.clone());
        }
    }
    let st = util::obj_field_mut(&mut n, "status");
    let conds = st.entry("conditions").or_insert(json!([]));
    if let Some(c) = conds.as_array_mut() {
        c.retain(|x| x.get("type").and_then(|t| t.as_str()) != Some("PodScheduled"));
        c.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()}));
    }
    g.put("pods", n);
    Ok(Reply::Json(
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

fn evict(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
    let v: Value = serde_json::from_slice(&req.body).map_err(|e| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {}",
            e
        ))
    })?;
    let d = v.get("deleteOptions").cloned().unwrap_or(json!({}));
    let opts = DeleteOpts {
        grace: d.get("gracePeriodSeconds").and_then(|x| x.as_i64()),
        uid: get_str(&d, &["preconditions", "uid"]).map(String::from),
        rv: get_str(&d, &["preconditions", "resourceVersion"]).map(String::from),
        dry_run: false,
    };
    let mut g = api.store.lock();
    delete_object(&mut g, route.def, ns_of(route), name_in(route), &opts)?;
    Ok(Reply::Json(
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
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
