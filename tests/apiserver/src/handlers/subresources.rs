//! The pods' binding and eviction subresources.

use super::*;

pub(super) fn bind(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
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

pub(super) fn evict(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
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
