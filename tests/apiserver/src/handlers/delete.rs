//! delete and deletecollection: options, preconditions, graceful pod
//! deletion and finalizers.

use super::*;

#[derive(Default, Debug, Clone)]
pub struct DeleteOpts {
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub rv: Option<String>,
    pub dry_run: bool,
}

pub(super) fn delete_opts(req: &Request) -> Result<DeleteOpts, ApiError> {
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
pub(super) fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
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

pub(super) fn returns_deleted_object(def: &ResourceDef) -> bool {
    def.group.is_empty() && matches!(def.plural, "pods" | "services" | "namespaces")
}

pub(super) fn delete(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
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

pub(super) fn delete_collection(
    api: &Api,
    route: &Route,
    req: &Request,
) -> Result<Reply, ApiError> {
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
