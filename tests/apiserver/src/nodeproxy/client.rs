//! The double's TLS client of kubelets (upstream pkg/kubelet/client with
//! --kubelet-client-certificate, --kubelet-client-key and
//! --kubelet-certificate-authority).

use super::{Location, CONNECT_TIMEOUT, HEAD_TIMEOUT};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The double's client of kubelets.
pub struct KubeletClient {
    tls: Arc<ClientConfig>,
}

/// Files of the kubelet client (upstream's flags of the same names).
#[derive(Debug, Clone, Default)]
pub struct KubeletClientFiles {
    pub client_certificate: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub certificate_authority: Option<PathBuf>,
}

/// No verification of the kubelet's serving certificate (upstream's kubelet
/// client without a CA); handshake signatures are still checked.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
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

fn read_certs(p: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(p)
        .map_err(|e| format!("read {}: {}", p.display(), e))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("parse {}: {}", p.display(), e))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate", p.display()));
    }
    Ok(certs)
}

impl KubeletClient {
    pub fn new(files: &KubeletClientFiles) -> Result<KubeletClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("kubelet client: tls versions: {}", e))?;
        let b = match &files.certificate_authority {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in read_certs(ca)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("--kubelet-certificate-authority: {}", e))?;
                }
                b.with_root_certificates(roots)
            }
            None => b
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider))),
        };
        let cfg = match (&files.client_certificate, &files.client_key) {
            (Some(c), Some(k)) => {
                let key = PrivateKeyDer::from_pem_file(k)
                    .map_err(|e| format!("--kubelet-client-key {}: {}", k.display(), e))?;
                b.with_client_auth_cert(read_certs(c)?, key)
                    .map_err(|e| format!("kubelet client certificate: {}", e))?
            }
            (None, None) => b.with_no_client_auth(),
            _ => {
                return Err(
                    "--kubelet-client-certificate and --kubelet-client-key go together".into(),
                )
            }
        };
        Ok(KubeletClient { tls: Arc::new(cfg) })
    }

    /// A TLS connection to the kubelet, handshake done.
    pub(super) fn connect(
        &self,
        loc: &Location,
    ) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
        let addrs: Vec<SocketAddr> = (loc.host.as_str(), loc.port).to_socket_addrs()?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut tcp = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = tcp.ok_or(last)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(HEAD_TIMEOUT))?;
        tcp.set_write_timeout(Some(HEAD_TIMEOUT))?;
        let name = ServerName::try_from(loc.host.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = ClientConnection::new(self.tls.clone(), name).map_err(io::Error::other)?;
        let mut s = StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(s)
    }
}
