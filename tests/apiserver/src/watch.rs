//! Watch streams: newline-delimited JSON events in a chunked response, with
//! the watch cache's semantics — replay from the bounded history, 410 Expired
//! as an ERROR event when the resourceVersion is too old, synthetic ADDED
//! events for resourceVersion ""/"0", selector transitions (an object leaving
//! the selector is DELETED, entering it is ADDED), periodic BOOKMARKs, and the
//! stream ends after timeoutSeconds.

use crate::handlers::Api;
use crate::http::{end_chunks, write_chunk, write_chunked_head};
use crate::resources::ResourceDef;
use crate::selectors::Selection;
use crate::status::ApiError;
use crate::store::{Event, EventType};
use serde_json::json;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIVENESS_CHECK: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub enum WatchStart {
    /// From the current revision; with ADDED events for the existing objects first.
    Now { initial_events: bool },
    /// Events after this revision.
    After(u64),
}

#[derive(Debug)]
pub struct WatchReq {
    pub def: &'static ResourceDef,
    pub sel: Selection,
    pub start: WatchStart,
    pub bookmarks: bool,
    /// sendInitialEvents=true: a BOOKMARK annotated k8s.io/initial-events-end after the initial ADDED events.
    pub initial_events_end: bool,
    pub timeout: Duration,
    pub bookmark_interval: Duration,
    /// Fault injection: send one malformed line, then cut the connection.
    pub truncate: bool,
}

fn event_line(etype: &str, obj_json: &str) -> Vec<u8> {
    let mut s = String::with_capacity(obj_json.len() + 32);
    s.push_str("{\"type\":\"");
    s.push_str(etype);
    s.push_str("\",\"object\":");
    s.push_str(obj_json);
    s.push_str("}\n");
    s.into_bytes()
}

fn bookmark(def: &ResourceDef, rv: u64, initial_end: bool) -> Vec<u8> {
    let mut obj = json!({"kind": def.kind, "apiVersion": def.api_version(),
        "metadata": {"resourceVersion": rv.to_string(), "creationTimestamp": null}});
    if initial_end {
        obj["metadata"]["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    if def.is("", "pods") {
        // What the real server's zero-valued Pod serialises to.
        obj["spec"] = json!({"containers": null});
        obj["status"] = json!({});
    }
    event_line("BOOKMARK", &obj.to_string())
}

fn error_event(e: &ApiError) -> Vec<u8> {
    event_line("ERROR", &e.to_status().to_string())
}

/// What a watcher with `sel` sees of `ev` (selector transitions included).
fn visible(ev: &Event, key: &str, sel: &Selection) -> Option<&'static str> {
    if ev.key != key {
        return None;
    }
    let now = sel.matches(&ev.obj);
    match ev.etype {
        EventType::Added => now.then_some("ADDED"),
        EventType::Deleted => now.then_some("DELETED"),
        EventType::Modified => {
            let before = ev.prev.as_ref().map(|p| sel.matches(p)).unwrap_or(false);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

/// Serves a watch on `w` until timeout, client disconnect or an error.
pub fn serve<W: Write>(
    w: &mut W,
    api: &Api,
    wr: &WatchReq,
    extra_headers: &[(String, String)],
    alive: &dyn Fn() -> bool,
) -> io::Result<()> {
    let mut headers = vec![
        ("Content-Type".to_string(), "application/json".to_string()),
        ("Cache-Control".to_string(), "no-cache, private".to_string()),
    ];
    headers.extend_from_slice(extra_headers);
    let started = Instant::now();
    let deadline = started + wr.timeout;
    let key = wr.def.key;

    // Resolve the starting point under the lock, before answering.
    let mut initial: Vec<Vec<u8>> = vec![];
    let mut last_rv;
    let epoch;
    {
        let mut g = api.store.lock();
        match wr.start {
            WatchStart::Now { initial_events } => {
                last_rv = g.rv;
                if initial_events {
                    for o in g.list(key, wr.sel.namespace.as_deref()) {
                        if wr.sel.matches(&o) {
                            initial.push(event_line("ADDED", &o.to_string()));
                        }
                    }
                }
                if wr.initial_events_end {
                    initial.push(bookmark(wr.def, last_rv, true));
                }
            }
            WatchStart::After(rv) => {
                // A revision from the future: wait up to 3s for it, like the watch cache.
                let wait_until = Instant::now() + Duration::from_secs(3);
                while g.rv < rv && Instant::now() < wait_until {
                    let left = wait_until.saturating_duration_since(Instant::now());
                    g = api
                        .store
                        .cond
                        .wait_timeout(g, left)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                if g.rv < rv {
                    let mut e = ApiError::new(
                        504,
                        "Timeout",
                        format!("Too large resource version: {}, current: {}", rv, g.rv),
                    );
                    e.details = Some(
                        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
                    );
                    drop(g);
                    write_chunked_head(w, 200, &headers)?;
                    write_chunk(w, &error_event(&e))?;
                    return end_chunks(w);
                }
                if let Err(oldest) = g.events_after(rv).map(|_| ()) {
                    let e =
                        ApiError::expired(format!("too old resource version: {} ({})", rv, oldest));
                    drop(g);
                    write_chunked_head(w, 200, &headers)?;
                    write_chunk(w, &error_event(&e))?;
                    return end_chunks(w);
                }
                last_rv = rv;
            }
        }
        epoch = g.epoch;
    }

    write_chunked_head(w, 200, &headers)?;
    if wr.truncate {
        let line = b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"trunc";
        write_chunk(w, line)?;
        return Err(io::Error::other("truncated watch (fault injection)"));
    }
    for line in initial {
        write_chunk(w, &line)?;
    }

    let mut next_bookmark = Instant::now() + wr.bookmark_interval;
    // Like the cacher, one bookmark shortly before the deadline.
    let mut deadline_bookmark =
        (wr.timeout > Duration::from_secs(4)).then(|| deadline - Duration::from_secs(2));
    loop {
        let mut out: Vec<Vec<u8>> = vec![];
        let ended;
        {
            let mut g = api.store.lock();
            let check_alive_at = Instant::now() + LIVENESS_CHECK;
            loop {
                if g.rv > last_rv || g.epoch != epoch {
                    break;
                }
                let now = Instant::now();
                let mut wake = deadline.min(check_alive_at);
                if wr.bookmarks {
                    wake = wake.min(next_bookmark);
                    if let Some(d) = deadline_bookmark {
                        wake = wake.min(d);
                    }
                }
                if now >= wake {
                    break;
                }
                g = api
                    .store
                    .cond
                    .wait_timeout(g, wake - now)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            ended = g.epoch != epoch || !alive();
            if g.rv > last_rv {
                match g.events_after(last_rv) {
                    Ok(evs) => {
                        let evs: Vec<Arc<Event>> = evs.cloned().collect();
                        for ev in evs.iter() {
                            if let Some(t) = visible(ev, key, &wr.sel) {
                                out.push(event_line(t, ev.obj_json()));
                            }
                        }
                    }
                    // Fell out of the history window (a too-slow watcher): the
                    // real server terminates such watches.
                    Err(_) => return end_chunks(w),
                }
                last_rv = g.rv;
            }
        }
        for line in out {
            write_chunk(w, &line)?;
        }
        if ended {
            return end_chunks(w);
        }
        let now = Instant::now();
        if now >= deadline {
            return end_chunks(w);
        }
        if wr.bookmarks {
            let due_deadline = deadline_bookmark.map(|d| now >= d).unwrap_or(false);
            if now >= next_bookmark || due_deadline {
                write_chunk(w, &bookmark(wr.def, last_rv, false))?;
                next_bookmark = now + wr.bookmark_interval;
                if due_deadline {
                    deadline_bookmark = None;
                }
            }
        }
    }
}
