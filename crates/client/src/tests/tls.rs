use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{pod_json, CA_CRT, CLIENT_CRT, CLIENT_KEY};
use crate::testing::{tls_server_config, Reply, TestServer};
use crate::{kubeconfig, ApiError, Client, RestConfig, WatchEventType};

/// Writes the PEM files and a kubeconfig using them (relative paths): the
/// directory holding them, and the kubeconfig's path.
fn write_kubeconfig(server: &str, cluster_extra: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-client-tls-").unwrap();
    let dir = tmp.path();
    for (name, pem) in [
        ("ca.crt", CA_CRT),
        ("client.crt", CLIENT_CRT),
        ("client.key", CLIENT_KEY),
    ] {
        std::fs::write(dir.join(name), pem).expect("write");
    }
    let yaml = format!(
        "clusters:\n- name: c\n  cluster:\n    server: {server}\n{cluster_extra}\nusers:\n- name: u\n  user:\n    client-certificate: client.crt\n    client-key: client.key\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
    );
    let path = dir.join("kubelet.conf");
    std::fs::write(&path, yaml).expect("write");
    (tmp, path)
}

fn tls_client(cfg: RestConfig) -> Client {
    let mut cfg = cfg;
    cfg.timeout = Duration::from_secs(5);
    Client::new(cfg, std::sync::Arc::new(())).expect("client")
}

#[test]
fn client_certificate_over_tls() {
    let srv = TestServer::start_tls(tls_server_config(), |_| {
        Reply::json(200, &pod_json("p", "1"))
    });
    let (_dir, path) = write_kubeconfig(&srv.url, "    certificate-authority: ca.crt");
    let c = tls_client(kubeconfig::load(&path).expect("kubeconfig"));
    let pod: Pod = c
        .get("/api/v1/namespaces/default/pods/p")
        .expect("get over TLS");
    assert_eq!(pod.metadata.name.as_deref(), Some("p"));
    assert!(
        srv.requests()[0].client_cert,
        "server saw the client certificate"
    );
}

#[test]
fn insecure_skip_verify_accepts_unknown_ca() {
    let srv = TestServer::start_tls(tls_server_config(), |_| Reply::json(200, &json!({})));
    let (_dir, path) = write_kubeconfig(&srv.url, "    insecure-skip-tls-verify: true");
    let c = tls_client(kubeconfig::load(&path).expect("kubeconfig"));
    let _: serde_json::Value = c.get("/x").expect("insecure get");
}

#[test]
fn unknown_ca_is_refused() {
    let srv = TestServer::start_tls(tls_server_config(), |_| Reply::json(200, &json!({})));
    // Mozilla roots only: the test CA is unknown.
    let err = tls_client(RestConfig::new(&srv.url))
        .get::<serde_json::Value>("/x")
        .expect_err("untrusted");
    assert!(matches!(err, ApiError::Transport(_)), "{err:?}");
    assert!(srv.requests().is_empty());
}

#[test]
fn dropping_a_tls_watch_closes_its_connection() {
    let srv = TestServer::start_tls(tls_server_config(), |_| Reply::Chunks {
        chunks: vec![(
            Duration::ZERO,
            format!(
                "{}\n",
                json!({"type": "ADDED", "object": pod_json("a", "1")})
            )
            .into_bytes(),
        )],
        hold: Duration::from_secs(30),
        truncate: false,
    });
    let (_dir, path) = write_kubeconfig(&srv.url, "    certificate-authority: ca.crt");
    let c = tls_client(kubeconfig::load(&path).expect("kubeconfig"));
    let mut w = c
        .watch("/api/v1/pods?watch=1&timeoutSeconds=30")
        .expect("watch");
    let ev = w.next().expect("event").expect("ok");
    assert_eq!(ev.kind, WatchEventType::Added);
    drop(w);
    let start = Instant::now();
    while srv.closed_streams() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "connection still open"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_empty_certificate_slot_sends_nothing_until_it_is_filled() {
    let srv = TestServer::start_tls(tls_server_config(), |_| {
        Reply::json(200, &pod_json("p", "1"))
    });
    let (_dir, path) = write_kubeconfig(&srv.url, "    certificate-authority: ca.crt");
    let slot = Arc::new(crate::tls::CertSlot::default());
    let cfg = kubeconfig::anonymous_with_cert_slot(&path, slot.clone()).expect("kubeconfig");
    let c = tls_client(cfg);
    assert!(c.waiting_for_cert());
    let err = c
        .get::<Pod>("/api/v1/pods/p")
        .expect_err("no certificate yet");
    assert!(err.to_string().contains(crate::NO_CERT_YET), "{err}");
    assert!(
        srv.requests().is_empty(),
        "nothing is sent without a certificate"
    );

    // The bootstrap's certificate arrives: swapped in, connections closed.
    let id = crate::tls::ClientIdentity {
        certs: crate::tls::parse_certs(CLIENT_CRT.as_bytes()).expect("cert"),
        key: crate::tls::parse_key(CLIENT_KEY.as_bytes()).expect("key"),
    };
    slot.set(id).expect("pair");
    let generation = c.connection_generation();
    c.close_connections();
    assert_eq!(c.connection_generation(), generation + 1);
    assert!(!c.waiting_for_cert());
    let _: Pod = c.get("/api/v1/pods/p").expect("get with the certificate");
    assert!(srv.requests()[0].client_cert);
}
