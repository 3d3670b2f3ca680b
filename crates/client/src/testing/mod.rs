//! Test fixtures for this crate's tests and rkubelet's (feature
//! `test-util`): an HTTP(S) server on 127.0.0.1 answering from a handler,
//! a stateful fake apiserver on it, and the test PKI under `testdata/`.

mod fakeapi;
mod server;

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

use crate::{Client, RestConfig};

pub use fakeapi::FakeApi;
pub use server::{Recorded, Reply, TestServer};

pub const CA_CRT: &str = include_str!("../../testdata/ca.crt");
pub const SERVER_CRT: &str = include_str!("../../testdata/server.crt");
pub const SERVER_KEY: &str = include_str!("../../testdata/server.key");
pub const CLIENT_CRT: &str = include_str!("../../testdata/client.crt");
pub const CLIENT_KEY: &str = include_str!("../../testdata/client.key");

/// A client for a plain-http test server: fast timeouts, no rate limit.
pub fn client(url: &str) -> Client {
    let mut cfg = RestConfig::new(url);
    cfg.qps = -1.0;
    cfg.timeout = Duration::from_secs(5);
    Client::new(cfg, Arc::new(())).expect("client")
}

/// A TLS server config that requires a client certificate signed by the
/// test CA. Panics on bad test data, which is this crate's own.
pub fn tls_server_config() -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(CA_CRT.as_bytes()) {
        roots.add(c.expect("ca pem")).expect("ca");
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .expect("verifier");
    let certs: Vec<_> = CertificateDer::pem_slice_iter(SERVER_CRT.as_bytes())
        .collect::<Result<_, _>>()
        .expect("server cert");
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY.as_bytes()).expect("server key");
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .expect("server config");
    Arc::new(cfg)
}
