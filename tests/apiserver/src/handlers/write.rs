//! create, update and patch, with the real server's preconditions
//! (resourceVersion, name, namespace, dry run) and the namespace's
//! default objects.

use super::*;

pub(super) fn create(
    api: &Api,
    route: &Route,
    req: &Request,
    dry_run: bool,
    user: &User,
) -> Result<Reply, ApiError> {
    let def = route.def;
    let mut obj = decode_body(req, def)?;
    crate::version::fields::drop_unserved_with(&api.emulation(), def, None, &mut obj);
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
        if kind_has_generation(def, api.version) {
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
        crate::priority::admit_pod_create(&admission_name, &mut obj)?;
        crate::runtimeclass::admit_pod_create(&g, &admission_name, &mut obj)?;
        crate::seccomp::version_skew(api.version, &mut obj);
    }
    if let Some(node) = restricted_node(api, user) {
        crate::noderestriction::admit_create(node, def, &obj)?;
    }
    kinds::reset_status_on_create(def, &mut obj);
    let name = name_of(&obj).to_string();
    invalid(def, &name, kinds::validate(def, &obj, None))?;
    invalid(
        def,
        &name,
        crate::storagekinds::validate_release(api.version, def, &obj, None),
    )?;
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
/// generation, validation. Shared by update and patch. `emu` is the
/// release (and gates) whose pod resize rules apply (resize.rs).
pub(super) fn prepare_update(
    emu: &crate::features::Emulation,
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
        Some("resize") => new = crate::resize::prepare(emu, old, &new),
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
    if def.is("", "pods") && sub.is_none() {
        crate::priority::keep_on_update(old, &mut new);
    }
    kinds::apply_defaults(def, &mut new);
    if def.is("", "pods") {
        crate::resize::mark_proposed(emu, sub, old, &mut new);
    }
    // A pod created without one (a release before 1.33) never gets one.
    let generation = get(old, &["metadata", "generation"]).and_then(|x| x.as_i64());
    if let Some(g) = generation.filter(|_| new.get("spec") != old.get("spec")) {
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    let errs = if sub == Some("resize") {
        crate::resize::validate(emu, def, old, &new)
    } else if sub.is_none() && def.is("", "pods") {
        crate::resize::validate_pod_update(emu, def, old, &new)
    } else if sub == Some("ephemeralcontainers") {
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

pub(super) fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        meta_mut(&mut v).remove("resourceVersion");
        v
    };
    strip(a) == strip(b)
}

/// Stores an update; an unchanged object is not written (no new revision, no
/// event), and an object whose deletion was only waiting for finalizers goes.
pub(super) fn commit_update(
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

pub(super) fn check_name_matches(obj: &Value, route: &Route) -> Result<(), ApiError> {
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

/// The node a request's user is, when NodeRestriction applies to it.
fn restricted_node<'a>(api: &Api, user: &'a User) -> Option<&'a str> {
    user.node_name().filter(|_| api.node_restriction)
}

pub(super) fn update(
    api: &Api,
    route: &Route,
    req: &Request,
    dry_run: bool,
    user: &User,
) -> Result<Reply, ApiError> {
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
    let emu = api.emulation();
    crate::version::fields::drop_unserved_with(&emu, def, route.sub.as_deref(), &mut obj);
    if let Some(node) = restricted_node(api, user) {
        crate::noderestriction::admit_update(node, def, &old, &obj)?;
    }
    let new = prepare_update(&emu, def, route.sub.as_deref(), &old, obj)?;
    invalid(
        def,
        name_in(route),
        crate::storagekinds::validate_release(api.version, def, &new, Some(&old)),
    )?;
    Ok(Reply::Json(
        200,
        commit_update(&mut g, def, &old, new, dry_run),
    ))
}

pub(super) fn patch_obj(
    api: &Api,
    route: &Route,
    req: &Request,
    dry_run: bool,
    user: &User,
) -> Result<Reply, ApiError> {
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
    let patched = apply_patch(route, &old, &ct, &patch)?;
    if let Some(node) = restricted_node(api, user) {
        crate::noderestriction::admit_update(node, def, &old, &patched)?;
    }
    let emu = api.emulation();
    let mut new = prepare_update(&emu, def, route.sub.as_deref(), &old, patched)?;
    invalid(
        def,
        name_in(route),
        crate::storagekinds::validate_release(api.version, def, &new, Some(&old)),
    )?;
    // The emulated release's pruning, after validation here (which looks
    // at none of the pruned fields), so patched_object stays release-free.
    crate::version::fields::drop_unserved_with(&emu, def, route.sub.as_deref(), &mut new);
    Ok(Reply::Json(
        200,
        commit_update(&mut g, def, &old, new, dry_run),
    ))
}

/// The object a PATCH of `old` stores (before its new resourceVersion): the
/// patch of content type `ct` applied, then the update path (subresource
/// scoping, defaults, validation) of the newest release with its default
/// gates. Public so that tests can replay patches a real server answered.
pub fn patched_object(
    route: &Route,
    old: &Value,
    ct: &str,
    patch: &Value,
) -> Result<Value, ApiError> {
    patched_object_as(&Default::default(), route, old, ct, patch)
}

/// [`patched_object`] as release (and gates) `emu` would store it.
pub fn patched_object_as(
    emu: &crate::features::Emulation,
    route: &Route,
    old: &Value,
    ct: &str,
    patch: &Value,
) -> Result<Value, ApiError> {
    let patched = apply_patch(route, old, ct, patch)?;
    prepare_update(emu, route.def, route.sub.as_deref(), old, patched)
}

/// The object a client proposes with a PATCH: the patch applied to `old`,
/// with the preconditions and the name/namespace checks (what admission
/// sees, before the strategy).
fn apply_patch(route: &Route, old: &Value, ct: &str, patch: &Value) -> Result<Value, ApiError> {
    let def = route.def;
    let patched = match ct {
        "application/merge-patch+json" => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("Invalid JSON Patch"));
            }
            patch::merge_patch(old, patch)
        }
        "application/strategic-merge-patch+json" => {
            patch::strategic_merge(def.kind, old, patch).map_err(ApiError::bad_request)?
        }
        "application/json-patch+json" => patch::json_patch(old, patch).map_err(|e| match e {
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
    let rv = rv_of(&patched);
    if !rv.is_empty() && rv != rv_of(old) {
        return Err(ApiError::optimistic_lock(&def.qualified(), name_in(route)));
    }
    let mut patched = patched;
    fix_namespace(&mut patched, def, ns_of(route))?;
    check_name_matches(&patched, route)?;
    Ok(patched)
}
