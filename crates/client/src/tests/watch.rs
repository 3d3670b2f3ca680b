use std::io::Cursor;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{client, pod_json};
use crate::testing::{Reply, TestServer};
use crate::watch::MAX_EVENT_LINE;
use crate::{ApiError, WatchEventType, WatchStream};

fn stream_of(text: &str) -> WatchStream {
    WatchStream::from_reader(Cursor::new(text.as_bytes().to_vec()), "GET /w".into())
        .expect("stream")
}

fn kinds(stream: WatchStream) -> Vec<Result<WatchEventType, ApiError>> {
    stream.map(|r| r.map(|e| e.kind)).collect()
}

#[test]
fn parses_events_and_bookmarks() {
    let text = format!(
        "{}\n{}\n\n{}\n{}\n",
        json!({"type": "ADDED", "object": pod_json("a", "1")}),
        json!({"type": "MODIFIED", "object": pod_json("a", "2")}),
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}}}),
        json!({"type": "DELETED", "object": pod_json("a", "6")}),
    );
    let mut s = stream_of(&text);
    let first = s.next().expect("event").expect("ok");
    assert_eq!(first.kind, WatchEventType::Added);
    assert_eq!(first.resource_version(), Some("1"));
    assert_eq!(first.object["metadata"]["name"], "a");
    let rest: Vec<_> = s
        .map(|e| e.expect("ok"))
        .map(|e| (e.kind, e.resource_version().map(String::from)))
        .collect();
    assert_eq!(
        rest,
        vec![
            (WatchEventType::Modified, Some("2".into())),
            (WatchEventType::Bookmark, Some("5".into())),
            (WatchEventType::Deleted, Some("6".into())),
        ]
    );
}

#[test]
fn truncated_line_is_a_decode_error_and_ends_the_stream() {
    let text = format!(
        "{}\n{{\"type\":\"ADDED\",\"object\":{{\"metad",
        json!({"type": "ADDED", "object": pod_json("a", "1")})
    );
    let got: Vec<_> = stream_of(&text).collect();
    assert_eq!(got.len(), 2);
    assert!(got[0].is_ok());
    let err = got[1].as_ref().expect_err("decode error");
    assert!(matches!(err, ApiError::Decode(_)), "{err:?}");
    assert!(
        err.to_string().starts_with("GET /w: truncated watch event"),
        "{err}"
    );
}

#[test]
fn malformed_line_ends_the_stream() {
    let text = format!("not json\n{}\n", json!({"type": "ADDED", "object": {}}));
    let got = kinds(stream_of(&text));
    assert_eq!(got.len(), 1);
    assert!(matches!(got[0], Err(ApiError::Decode(_))));

    let got = kinds(stream_of("{\"type\":\"SOMETHING\",\"object\":{}}\n"));
    assert!(matches!(&got[..], [Err(ApiError::Decode(m))] if m.contains("SOMETHING")));
}

#[test]
fn error_event_with_410_is_gone() {
    let text = format!(
        "{}\n",
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 1 (200)", "reason": "Expired", "code": 410}})
    );
    let got: Vec<_> = stream_of(&text).collect();
    let err = got[0].as_ref().expect_err("error event");
    assert!(err.is_gone(), "{err:?}");
    assert_eq!(got.len(), 1);
}

#[test]
fn overlong_line_is_refused() {
    let mut text = "x".repeat(MAX_EVENT_LINE + 10);
    text.push('\n');
    let got = kinds(stream_of(&text));
    assert!(
        matches!(&got[..], [Err(ApiError::Decode(m))] if m.contains("longer than")),
        "{got:?}"
    );
}

#[test]
fn watch_over_chunked_http() {
    let srv = TestServer::start(|_| {
        let a = format!(
            "{}\n",
            json!({"type": "ADDED", "object": pod_json("a", "1")})
        );
        let b = format!(
            "{}\n",
            json!({"type": "MODIFIED", "object": pod_json("a", "2")})
        );
        let c = format!(
            "{}\n",
            json!({"type": "DELETED", "object": pod_json("a", "3")})
        );
        // An event split across chunks, and two events in one chunk.
        let (a1, a2) = a.split_at(10);
        Reply::Chunks {
            chunks: vec![
                (Duration::ZERO, a1.into()),
                (Duration::from_millis(50), format!("{a2}{b}").into_bytes()),
                (Duration::from_millis(50), c.into_bytes()),
            ],
            hold: Duration::ZERO,
            truncate: false,
        }
    });
    let s = client(&srv.url)
        .watch("/api/v1/pods?watch=1&resourceVersion=0&timeoutSeconds=10")
        .expect("watch");
    let got = kinds(s);
    assert_eq!(
        got,
        vec![
            Ok(WatchEventType::Added),
            Ok(WatchEventType::Modified),
            Ok(WatchEventType::Deleted)
        ]
    );
    assert_eq!(
        srv.requests()[0].header("accept-encoding"),
        Some("identity")
    );
}

#[test]
fn connection_cut_mid_event_is_an_error() {
    let srv = TestServer::start(|_| Reply::Chunks {
        chunks: vec![(Duration::ZERO, b"{\"type\":\"ADDED\",\"obj".to_vec())],
        hold: Duration::ZERO,
        truncate: true,
    });
    let start = Instant::now();
    let got = kinds(client(&srv.url).watch("/w?watch=1").expect("watch"));
    assert_eq!(got.len(), 1);
    assert!(got[0].is_err(), "{got:?}");
    assert!(start.elapsed() < Duration::from_secs(3));
}

#[test]
fn watch_start_error_is_mapped() {
    let srv = TestServer::start(|_| Reply::status(410, "Expired", "too old resource version"));
    let err = client(&srv.url)
        .watch("/w?watch=1&resourceVersion=1")
        .err()
        .expect("error");
    assert!(err.is_gone());
}

#[test]
fn silent_stream_fails_after_the_idle_timeout() {
    let srv = TestServer::start(|_| {
        let ev = |rv| {
            format!(
                "{}\n",
                json!({"type": "ADDED", "object": pod_json("a", rv)})
            )
            .into_bytes()
        };
        Reply::Chunks {
            chunks: vec![(Duration::ZERO, ev("1")), (Duration::from_secs(3), ev("2"))],
            hold: Duration::ZERO,
            truncate: false,
        }
    });
    let c = client(&srv.url);
    let start = Instant::now();
    let got = kinds(
        c.watch_with_idle_timeout("/w?watch=1", Duration::from_millis(300))
            .expect("watch"),
    );
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], Ok(WatchEventType::Added));
    assert!(
        matches!(&got[1], Err(ApiError::Transport(m)) if m.contains("idle")),
        "{got:?}"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn client_and_stream_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<crate::Client>();
    send::<WatchStream>();
}
