//! get, list (with selectors and resourceVersion semantics) and watch.

use super::*;

pub(super) fn get_obj(api: &Api, route: &Route) -> Result<Reply, ApiError> {
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

pub(super) fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {:?}", s)))
}

/// Waits (up to 3s, like the watch cache) for the store to reach `rv`.
pub(super) fn wait_for_rv(api: &Api, rv: u64) -> Result<(), ApiError> {
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

pub(super) fn strip_type_meta(o: &Value) -> Value {
    let mut v = o.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    v
}

pub(super) fn list(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
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

pub(super) fn watch_req(api: &Api, route: &Route, req: &Request) -> Result<Reply, ApiError> {
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
