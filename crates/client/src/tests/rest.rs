use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
use serde_json::json;

use super::{client, pod_json};
use crate::testing::{Reply, TestServer};
use crate::{paths, ApiError, Auth, Client, PatchType, RestConfig};

/// A handler answering the first `n` requests with `first`, then `then`.
fn first_n(
    n: usize,
    first: fn() -> Reply,
    then: fn() -> Reply,
) -> impl Fn(&crate::testing::Recorded) -> Reply {
    let seen = Arc::new(AtomicUsize::new(0));
    move |_| {
        if seen.fetch_add(1, Ordering::SeqCst) < n {
            first()
        } else {
            then()
        }
    }
}

#[test]
fn get_decodes_and_ignores_unknown_fields() {
    let srv = TestServer::start(|_| {
        let mut pod = pod_json("p", "7");
        pod["someFutureField"] = json!({"x": 1});
        pod["spec"]["futureSpecField"] = json!(true);
        pod["spec"]["containers"][0]["futureContainerField"] = json!("y");
        Reply::json(200, &pod)
    });
    let mut cfg = RestConfig::new(&srv.url);
    cfg.auth = Auth::Bearer("secret".into());
    cfg.user_agent = "test-agent/1".into();
    let c = Client::new(cfg, std::sync::Arc::new(())).expect("client");
    let pod: Pod = c.get(&paths::pod("default", "p")).expect("get");
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));
    assert_eq!(
        pod.spec.expect("spec").containers[0].image.as_deref(),
        Some("busybox")
    );
    let req = &srv.requests()[0];
    assert_eq!(req.path, "/api/v1/namespaces/default/pods/p");
    assert_eq!(req.header("authorization"), Some("Bearer secret"));
    assert_eq!(req.header("user-agent"), Some("test-agent/1"));
    assert_eq!(req.header("accept"), Some("application/json"));
}

#[test]
fn retries_500_then_succeeds() {
    let srv = TestServer::start(first_n(
        1,
        || Reply::Full {
            status: 500,
            headers: vec![],
            body: b"etcd unavailable".to_vec(),
        },
        || Reply::json(200, &pod_json("p", "1")),
    ));
    let pod: Pod = client(&srv.url)
        .get("/api/v1/namespaces/default/pods/p")
        .expect("get");
    assert_eq!(pod.metadata.resource_version.as_deref(), Some("1"));
    assert_eq!(srv.requests().len(), 2);
}

#[test]
fn gives_up_after_max_attempts() {
    let srv = TestServer::start(|_| Reply::status(503, "ServiceUnavailable", "down"));
    let err = client(&srv.url)
        .get::<Pod>("/api/v1/pods/x")
        .expect_err("fails");
    assert_eq!(err.code(), Some(503));
    assert!(err.is_retryable());
    assert_eq!(srv.requests().len(), 5);
}

#[test]
fn honours_retry_after_on_429() {
    let srv = TestServer::start(first_n(
        1,
        || Reply::Full {
            status: 429,
            headers: vec![("Retry-After".into(), "1".into())],
            body:
                br#"{"kind":"Status","code":429,"reason":"TooManyRequests","message":"slow down"}"#
                    .to_vec(),
        },
        || Reply::json(200, &pod_json("p", "1")),
    ));
    let start = Instant::now();
    let _: Pod = client(&srv.url).get("/api/v1/pods/p").expect("get");
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(srv.requests().len(), 2);
}

#[test]
fn conflict_is_mapped_and_named() {
    let srv = TestServer::start(|_| {
        Reply::status(
            409,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version",
        )
    });
    let err = client(&srv.url)
        .patch::<Pod>(
            &paths::pod_status("default", "x"),
            PatchType::StrategicMerge,
            &json!({"status": {}}),
        )
        .expect_err("conflict");
    assert!(err.is_conflict());
    assert!(!err.is_retryable());
    assert!(
        err.to_string().starts_with("PATCH /api/v1/namespaces/default/pods/x/status: 409 Conflict: the object has been modified"),
        "{err}"
    );
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1, "409 is not retried");
    assert_eq!(
        reqs[0].header("content-type"),
        Some("application/strategic-merge-patch+json")
    );
}

#[test]
fn error_helpers() {
    let srv = TestServer::start(|r| match r.path.as_str() {
        "/nf" => Reply::status(404, "NotFound", "pods \"x\" not found"),
        "/exists" => Reply::status(409, "AlreadyExists", "pods \"x\" already exists"),
        "/gone" => Reply::status(410, "Expired", "too old resource version"),
        "/unauth" => Reply::Full {
            status: 401,
            headers: vec![],
            body: b"Unauthorized".to_vec(),
        },
        "/forbidden" => Reply::status(403, "Forbidden", "nope"),
        _ => Reply::Full {
            status: 400,
            headers: vec![],
            body: b"  plain text problem \n".to_vec(),
        },
    });
    let c = client(&srv.url);
    let get = |p: &str| c.get::<serde_json::Value>(p).expect_err("error");
    assert!(get("/nf").is_not_found());
    let exists = get("/exists");
    assert!(exists.is_already_exists() && !exists.is_conflict());
    assert!(!get("/nf").is_conflict());
    assert!(get("/gone").is_gone());
    let unauth = get("/unauth");
    assert!(unauth.is_unauthorized());
    assert_eq!(
        unauth,
        ApiError::Status {
            code: 401,
            reason: "Unauthorized".into(),
            message: "Unauthorized".into(),
            request: "GET /unauth".into(),
        }
    );
    assert!(get("/forbidden").is_forbidden());
    assert_eq!(
        get("/other").to_string(),
        "GET /other: 400 BadRequest: plain text problem"
    );
}

#[test]
fn post_is_not_retried_after_the_request_was_sent() {
    let srv = TestServer::start(|_| Reply::Close);
    let c = client(&srv.url);
    let err = c
        .create(&paths::events("default"), &json!({"a": 1}))
        .expect_err("closed");
    assert!(matches!(err, ApiError::Transport(_)), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("POST /api/v1/namespaces/default/events: "),
        "{err}"
    );
    assert_eq!(srv.count(|r| r.method == "POST"), 1);

    // The same failure on a GET is retried.
    let _ = c
        .get::<serde_json::Value>("/api/v1/pods")
        .expect_err("closed");
    assert_eq!(srv.count(|r| r.method == "GET"), 5);
}

#[test]
fn post_is_retried_on_503_and_on_connect_failure() {
    let srv = TestServer::start(first_n(
        1,
        || Reply::status(503, "ServiceUnavailable", "starting"),
        || Reply::json(201, &json!({"a": 1})),
    ));
    let got: serde_json::Value = client(&srv.url)
        .create("/x", &json!({"a": 1}))
        .expect("create");
    assert_eq!(got, json!({"a": 1}));
    assert_eq!(srv.requests().len(), 2);

    // Nothing listens: every try fails to connect (retried, then reported).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let start = Instant::now();
    let err = client(&format!("http://127.0.0.1:{port}"))
        .create("/x", &json!({}))
        .expect_err("refused");
    assert!(matches!(err, ApiError::Transport(_)), "{err:?}");
    // 4 backoffs of 100, 200, 400, 800 ms (+ up to 20% jitter).
    assert!(
        start.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn verbs_bodies_and_content_types() {
    let srv = TestServer::start(|r| match r.method.as_str() {
        "DELETE" => Reply::status(200, "", "deleted"),
        _ => Reply::Full {
            status: 200,
            headers: vec![],
            body: r.body.clone(),
        },
    });
    let c = client(&srv.url);
    let pod: Pod = serde_json::from_value(pod_json("p", "3")).expect("pod");
    let back: Pod = c.replace(&paths::pod("default", "p"), &pod).expect("put");
    assert_eq!(back, pod);
    let _: serde_json::Value = c
        .patch("/m", PatchType::Merge, &json!({"a": null}))
        .expect("patch");
    let _: serde_json::Value = c
        .patch(
            "/j",
            PatchType::Json,
            &json!([{"op": "add", "path": "/a", "value": 1}]),
        )
        .expect("patch");
    let opts = DeleteOptions {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some("uid-p".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    c.delete(&paths::pod("default", "p"), &opts)
        .expect("delete");

    let reqs = srv.requests();
    assert_eq!(reqs[0].method, "PUT");
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    assert_eq!(
        reqs[1].header("content-type"),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        reqs[2].header("content-type"),
        Some("application/json-patch+json")
    );
    assert_eq!(reqs[3].method, "DELETE");
    let body: serde_json::Value = serde_json::from_slice(&reqs[3].body).expect("json");
    assert_eq!(body["gracePeriodSeconds"], 0);
    assert_eq!(body["preconditions"]["uid"], "uid-p");
}

#[test]
fn decode_error_names_request() {
    let srv = TestServer::start(|_| Reply::Full {
        status: 200,
        headers: vec![],
        body: b"{not json".to_vec(),
    });
    let err = client(&srv.url)
        .get::<Pod>("/api/v1/nodes/n")
        .expect_err("bad json");
    assert!(matches!(err, ApiError::Decode(_)));
    assert!(
        err.to_string()
            .starts_with("GET /api/v1/nodes/n: decoding response: "),
        "{err}"
    );
}

#[test]
fn rate_limit_is_shared_by_clones_but_not_with_rate_limit() {
    let srv = TestServer::start(|_| Reply::json(200, &json!({})));
    let mut cfg = RestConfig::new(&srv.url);
    cfg.qps = 10.0;
    cfg.burst = 1;
    let a = Client::new(cfg, std::sync::Arc::new(())).expect("client");
    let b = a.clone();
    let start = Instant::now();
    for c in [&a, &b, &a, &b] {
        let _: serde_json::Value = c.get("/x").expect("get");
    }
    // Burst 1 then 3 more tokens at 10/s.
    assert!(
        start.elapsed() >= Duration::from_millis(280),
        "{:?}",
        start.elapsed()
    );

    let fast = a.with_rate_limit(1000.0, 100);
    let start = Instant::now();
    for _ in 0..4 {
        let _: serde_json::Value = fast.get("/x").expect("get");
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn request_timeout_bounds_a_silent_server() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Accepts (via the backlog) but never answers.
    let mut cfg = RestConfig::new(&url);
    cfg.qps = -1.0;
    cfg.timeout = Duration::from_millis(500);
    let start = Instant::now();
    let err = Client::new(cfg, std::sync::Arc::new(()))
        .expect("client")
        .get::<Pod>("/x")
        .expect_err("timeout");
    assert!(matches!(err, ApiError::Transport(_)), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    drop(listener);
}
