//! TLS for the API client: rustls with the ring provider (the one ureq 2 uses).

use std::net::TcpStream;
use std::sync::{Arc, Mutex, RwLock, Weak};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use rkubelet_util::lock;

/// A client certificate chain with its private key.
pub struct ClientIdentity {
    pub certs: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

/// How the server's certificate is checked.
pub enum ServerTrust {
    /// The CA bundle from the kubeconfig.
    Roots(RootCertStore),
    /// Mozilla's roots, as when a kubeconfig names no CA (client-go uses the system's).
    WebPki,
    /// `insecure-skip-tls-verify`: any certificate is accepted.
    Insecure,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate and key that can be replaced while connections use it:
/// the client certificate every API connection presents (swapped by the
/// certificate manager after a rotation, upstream's rotating transport) and
/// the serving certificate of 10250. A new handshake takes the pair current
/// at that moment; established connections keep theirs.
#[derive(Debug, Default)]
pub struct CertSlot {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl CertSlot {
    /// A slot holding `identity`, checked as [`CertSlot::set`] does.
    pub fn new(identity: ClientIdentity) -> Result<Arc<CertSlot>, rustls::Error> {
        let slot = Arc::new(CertSlot::default());
        slot.set(identity)?;
        Ok(slot)
    }

    /// Replaces the pair; an unusable key, or a key that is not the
    /// certificate's, is refused and the old pair stays.
    pub fn set(&self, identity: ClientIdentity) -> Result<(), rustls::Error> {
        let key = certified_key(identity)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(key));
        Ok(())
    }

    /// Whether the slot holds a pair yet (it is empty while the client TLS
    /// bootstrap waits for its CSR).
    pub fn is_set(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The current leaf certificate, if any.
    pub fn leaf(&self) -> Option<CertificateDer<'static>> {
        let cur = self.current.read().unwrap_or_else(|e| e.into_inner());
        cur.as_ref().and_then(|k| k.cert.first().cloned())
    }

    fn get(&self) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn certified_key(id: ClientIdentity) -> Result<CertifiedKey, rustls::Error> {
    if id.certs.is_empty() {
        return Err(rustls::Error::General("no certificate".into()));
    }
    let key = provider().key_provider.load_private_key(id.key)?;
    let ck = CertifiedKey::new(id.certs, key);
    match ck.keys_match() {
        // A key type whose public key rustls cannot derive is taken on trust.
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(ck),
        Err(e) => Err(e),
    }
}

impl rustls::client::ResolvesClientCert for CertSlot {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        self.get()
    }

    fn has_certs(&self) -> bool {
        true
    }
}

impl rustls::server::ResolvesServerCert for CertSlot {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

/// Builds the rustls config for [`crate::RestConfig::tls`]; with an
/// identity, the certificate is presented from `slot`, which the caller may
/// swap later.
pub fn client_config(
    trust: ServerTrust,
    identity: Option<ClientIdentity>,
) -> Result<(Arc<ClientConfig>, Option<Arc<CertSlot>>), rustls::Error> {
    let builder = trusting(trust)?;
    let (config, slot) = match identity {
        Some(id) => {
            let slot = CertSlot::new(id)?;
            let config = presenting(builder, slot.clone());
            (config, Some(slot))
        }
        None => (builder.with_no_client_auth(), None),
    };
    Ok((Arc::new(config), slot))
}

/// A config presenting the pair in `slot`, without TLS session resumption:
/// a resumed session carries the identity of the handshake it resumes, so
/// after a rotation the server would still see the old certificate (Go's
/// client, upstream's, has no session cache by default either).
fn presenting(builder: WantsClientCert, slot: Arc<CertSlot>) -> ClientConfig {
    let mut config = builder.with_client_cert_resolver(slot);
    config.resumption = rustls::client::Resumption::disabled();
    config
}

/// A config presenting whatever `slot` holds, possibly nothing yet (the
/// kubelet's client while the TLS bootstrap runs in the background).
pub fn client_config_with_slot(
    trust: ServerTrust,
    slot: Arc<CertSlot>,
) -> Result<Arc<ClientConfig>, rustls::Error> {
    Ok(Arc::new(presenting(trusting(trust)?, slot)))
}

type WantsClientCert = rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>;

fn trusting(trust: ServerTrust) -> Result<WantsClientCert, rustls::Error> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    Ok(match trust {
        ServerTrust::Roots(roots) => builder.with_root_certificates(roots),
        ServerTrust::WebPki => builder.with_root_certificates(webpki_roots()),
        ServerTrust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider))),
    })
}

/// The default TLS config: Mozilla roots, no client certificate.
pub fn default_config() -> Arc<ClientConfig> {
    static DEFAULT: std::sync::OnceLock<Arc<ClientConfig>> = std::sync::OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            // Not input-dependent: ring supports every default protocol version.
            let builder = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default TLS versions");
            Arc::new(
                builder
                    .with_root_certificates(webpki_roots())
                    .with_no_client_auth(),
            )
        })
        .clone()
}

fn webpki_roots() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// All certificates in a PEM bundle; an error when there are none.
pub fn parse_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM CERTIFICATE block found".to_string());
    }
    Ok(certs)
}

/// A PKCS#8, PKCS#1 (RSA) or SEC1 (EC) private key in PEM.
pub fn parse_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM private key found".to_string(),
        e => format!("invalid PEM private key: {e}"),
    })
}

/// A root store of every certificate in a PEM bundle.
pub fn parse_roots(pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in parse_certs(pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("invalid CA certificate: {e}"))?;
    }
    Ok(roots)
}

/// The `insecure-skip-tls-verify` verifier: trusts any certificate, but still
/// checks the handshake signatures so the session keys belong to that certificate.
#[derive(Debug)]
struct AcceptAnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The socket of a watch connection, kept so dropping the stream can shut the
/// connection down and wake its reader thread at once.
pub(crate) type SocketSlot = Arc<Mutex<Option<TcpStream>>>;

/// The open watch connections of one client, so that a certificate rotation
/// can close them (upstream's rotating transport closes every connection;
/// the reflectors reconnect, presenting the new certificate).
#[derive(Default)]
pub(crate) struct ConnTracker {
    slots: Mutex<Vec<Weak<Mutex<Option<TcpStream>>>>>,
}

impl ConnTracker {
    pub(crate) fn track(&self, slot: &SocketSlot) {
        let mut slots = lock(&self.slots);
        slots.retain(|w| w.strong_count() > 0);
        slots.push(Arc::downgrade(slot));
    }

    /// Shuts every tracked socket down; returns how many were open.
    pub(crate) fn close_all(&self) -> usize {
        let slots = std::mem::take(&mut *lock(&self.slots));
        let mut n = 0;
        for slot in slots.iter().filter_map(Weak::upgrade) {
            if let Some(sock) = lock(&slot).as_ref() {
                let _ = sock.shutdown(std::net::Shutdown::Both);
                n += 1;
            }
        }
        n
    }
}

/// ureq's rustls connector, plus a clone of the TCP socket put in `slot`.
/// ureq 2 exposes the socket nowhere else.
pub(crate) struct CapturingConnector {
    pub(crate) tls: Arc<ClientConfig>,
    pub(crate) slot: SocketSlot,
}

impl ureq::TlsConnector for CapturingConnector {
    fn connect(
        &self,
        dns_name: &str,
        io: Box<dyn ureq::ReadWrite>,
    ) -> Result<Box<dyn ureq::ReadWrite>, ureq::Error> {
        if let Some(sock) = io.socket().and_then(|s| s.try_clone().ok()) {
            *lock(&self.slot) = Some(sock);
        }
        ureq::TlsConnector::connect(&self.tls, dns_name, io)
    }
}
