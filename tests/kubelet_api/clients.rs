//! HTTP clients of the kubelet and the double: TLS configs (the kubelet's
//! self-signed serving certificate is not verified), a ureq client with an
//! optional bearer token, and a raw TLS connection.

use super::*;

/// The kubelet's serving certificate is self-signed (written to --cert-dir):
/// like the API server with --kubelet-insecure-tls, do not verify it.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config for the kubelet, optionally with a client certificate.
pub(crate) fn kubelet_tls(client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)));
    Arc::new(match client {
        Some((crt, key)) => b
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(crt).unwrap()],
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    })
}

pub(crate) fn double_tls(dir: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.crt")).unwrap())
        .unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// One HTTP client: base URL, TLS config, optional bearer token.
pub(crate) struct Http {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Http {
    pub(crate) fn new(
        base: String,
        tls: Option<Arc<rustls::ClientConfig>>,
        token: Option<String>,
    ) -> Http {
        let mut b = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(3))
            .timeout(Duration::from_secs(20))
            .redirects(0);
        if let Some(t) = tls {
            b = b.tls_config(t);
        }
        Http {
            agent: b.build(),
            base,
            token,
        }
    }

    pub(crate) fn request(&self, method: &str, path: &str) -> ureq::Request {
        let mut r = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set("User-Agent", "rk-kubelet-api-test/1");
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        r
    }

    /// (status, body text), or the transport error.
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), String> {
        let r = self.request(method, path);
        send(r, method, path, body)
    }

    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        self.call("GET", path, None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub(crate) fn json(&self, method: &str, path: &str, body: Option<&Value>, want: u16) -> Value {
        let (c, t) = self
            .call(method, path, body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c, want, "{method} {path}: {t}");
        serde_json::from_str(&t).unwrap_or_else(|e| panic!("{method} {path}: {e}: {t}"))
    }
}

pub(crate) type Tls = StreamOwned<ClientConnection, TcpStream>;

pub(crate) fn tls_connect(port: u16, cfg: Arc<rustls::ClientConfig>) -> Tls {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let conn =
        ClientConnection::new(cfg, ServerName::try_from("127.0.0.1").unwrap().to_owned()).unwrap();
    StreamOwned::new(conn, tcp)
}
