//! Unit tests of locations, option checks and response-body reading.

use super::location::{path_enc, qenc, validate_container};
use super::*;
use crate::handlers::{Api, Route};
use crate::http::Request;
use serde_json::Value;
use std::sync::Mutex;

#[test]
fn query_escape_like_go() {
    assert_eq!(qenc("sh -c 'echo hi'"), "sh+-c+%27echo+hi%27");
    assert_eq!(qenc("a&b=c/d"), "a%26b%3Dc%2Fd");
    assert_eq!(path_enc("a b"), "a%20b");
}

#[test]
fn chunked_body_across_reads() {
    let raw = b"5\r\nhello\r\n3\r\n, w\r\n0\r\n\r\n".to_vec();
    // Feed one byte at a time to cross every boundary.
    struct OneByte(Vec<u8>, usize);
    impl Read for OneByte {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            if self.1 >= self.0.len() {
                return Ok(0);
            }
            b[0] = self.0[self.1];
            self.1 += 1;
            Ok(1)
        }
    }
    let mut body = Body {
        r: OneByte(raw, 0),
        pending: Vec::new(),
        mode: BodyMode::Chunked(0),
    };
    let mut out = Vec::new();
    while let Some(p) = body.next().unwrap() {
        out.extend(p);
    }
    assert_eq!(out, b"hello, w");
    let mut len = Body {
        r: io::Cursor::new(b"abcdef".to_vec()),
        pending: b"12".to_vec(),
        mode: BodyMode::Length(5),
    };
    let mut out = Vec::new();
    while let Some(p) = len.next().unwrap() {
        out.extend(p);
    }
    assert_eq!(out, b"12abc");
}

fn api_with(objs: &[(&'static str, Value)]) -> Api {
    let api = Api {
        store: crate::store::Store::new(100, None),
        version: Default::default(),
        gates: Default::default(),
        bookmark_interval: Duration::from_secs(60),
        min_request_timeout: 1800,
        ca_pem: String::new(),
        server_url: Mutex::new(String::new()),
        node_restriction: false,
        node_authorizer: false,
        token_log: Default::default(),
        attach: Default::default(),
    };
    for (k, o) in objs {
        api.store.lock().put(k, o.clone());
    }
    api
}

fn req(method: &str, path: &str, query: &[(&str, &str)]) -> (Request, Route) {
    let r = Request {
        method: method.into(),
        path: path.into(),
        query: query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    let (t, _) = crate::handlers::classify(&r);
    let crate::handlers::Target::Res(route, _) = t else {
        panic!("{path} is not a resource path")
    };
    (r, route)
}

#[test]
fn locations_as_upstream() {
    let node = serde_json::json!({"metadata": {"name": "n1"}, "status": {
        "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 12250}}}});
    let pod = serde_json::json!({"metadata": {"name": "p", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}});
    let unbound = serde_json::json!({"metadata": {"name": "u", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}]}});
    let api = api_with(&[("nodes", node), ("pods", pod), ("pods", unbound)]);
    let call = |method: &str, path: &str, q: &[(&str, &str)], sub: &str| {
        let (r, route) = req(method, path, q);
        pod_call(&api, &route, &r, sub)
    };
    let l = call(
        "GET",
        "/api/v1/namespaces/default/pods/p/log",
        &[
            ("follow", "true"),
            ("tailLines", "5"),
            ("timestamps", "false"),
        ],
        "log",
    )
    .unwrap();
    assert_eq!(
        l,
        KubeletCall::Log {
            loc: Some(Location {
                host: "10.0.0.5".into(),
                port: 12250,
                target: "/containerLogs/default/p/c?follow=true&tailLines=5".into()
            }),
            follow: true,
            pod: "p".into()
        }
    );
    let KubeletCall::Upgrade { loc } = call(
        "POST",
        "/api/v1/namespaces/default/pods/p/exec",
        &[
            ("command", "sh"),
            ("command", "-c"),
            ("command", "echo a b"),
            ("stdin", "true"),
            ("stdout", "true"),
        ],
        "exec",
    )
    .unwrap() else {
        panic!("exec is an upgrade")
    };
    assert_eq!(
        loc.url(),
        "https://10.0.0.5:12250/exec/default/p/c?input=1&output=1&command=sh&command=-c&command=echo+a+b"
    );
    let KubeletCall::Upgrade { loc } = call(
        "GET",
        "/api/v1/namespaces/default/pods/p/portforward",
        &[("ports", "80,8080")],
        "portforward",
    )
    .unwrap() else {
        panic!("portforward is an upgrade")
    };
    assert_eq!(loc.target, "/portForward/default/p?port=80&port=8080");
    // Unbound pods: an empty log, a 400 for exec.
    assert_eq!(
        call("GET", "/api/v1/namespaces/default/pods/u/log", &[], "log").unwrap(),
        KubeletCall::Log {
            loc: None,
            follow: false,
            pod: "u".into()
        }
    );
    let e = call(
        "POST",
        "/api/v1/namespaces/default/pods/u/exec",
        &[("command", "x")],
        "exec",
    )
    .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "pod u does not have a host assigned")
    );
    // Log options are validated; exec needs a command; log is GET only.
    let e = call(
        "GET",
        "/api/v1/namespaces/default/pods/p/log",
        &[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")],
        "log",
    )
    .unwrap_err();
    assert_eq!(e.code, 422, "{}", e.message);
    let e = call(
        "GET",
        "/api/v1/namespaces/default/pods/p/log",
        &[("tailLines", "x")],
        "log",
    )
    .unwrap_err();
    assert_eq!(e.code, 400);
    let e = call(
        "POST",
        "/api/v1/namespaces/default/pods/p/exec",
        &[],
        "exec",
    )
    .unwrap_err();
    assert_eq!(e.code, 422);
    let e = call("POST", "/api/v1/namespaces/default/pods/p/log", &[], "log").unwrap_err();
    assert_eq!(e.code, 405);
    let e = call(
        "GET",
        "/api/v1/namespaces/default/pods/nope/log",
        &[],
        "log",
    )
    .unwrap_err();
    assert_eq!(e.code, 404);
}

#[test]
fn container_defaulting() {
    let pod = serde_json::json!({"spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "i"}]}});
    assert_eq!(validate_container("", &pod, "p").unwrap(), "a");
    assert_eq!(validate_container("i", &pod, "p").unwrap(), "i");
    let e = validate_container("x", &pod, "p").unwrap_err();
    assert_eq!(e.code, 400);
    assert_eq!(e.message, "container x is not valid for pod p");
    let two = serde_json::json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
    let e = validate_container("", &two, "p").unwrap_err();
    assert_eq!(
        e.message,
        "a container name must be specified for pod p, choose one of: [a b]"
    );
}
