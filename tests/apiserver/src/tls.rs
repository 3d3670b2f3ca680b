//! rustls server configuration: TLS 1.2/1.3 with the ring provider, HTTP/1.1
//! via ALPN, and *optional* client certificates verified against the CA (like
//! kube-apiserver's --client-ca-file: a presented certificate must verify, but
//! bearer-token clients need not present one).

use crate::certs::Pki;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::sync::Arc;

pub fn server_config(pki: &Pki) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots
        .add(pki.ca_der.clone())
        .map_err(|e| format!("ca: {}", e))?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| format!("client verifier: {}", e))?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls versions: {}", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(pki.server_chain.clone(), pki.server_key.clone_key())
        .map_err(|e| format!("server cert: {}", e))?;
    // Only HTTP/1.1 is served (the real server prefers h2 when offered).
    cfg.alpn_protocols = vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    Ok(Arc::new(cfg))
}
