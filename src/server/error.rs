//! Why a kubelet server did not start: its settings, its certificate, or
//! its socket, each with what was being done when it failed.

use std::num::TryFromIntError;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("address {value:?}: {error}")]
    Address {
        value: String,
        error: std::net::AddrParseError,
    },
    /// `field` is "port" or "readOnlyPort".
    #[error("{field} {value}: {error}")]
    Port {
        field: &'static str,
        value: i32,
        error: TryFromIntError,
    },
    #[error("unsupported authorization mode {0:?}")]
    AuthorizationMode(String),
    #[error(transparent)]
    TlsOptions(#[from] crate::server::kubelet::tls_options::TlsOptionsError),
    #[error("tlsCertFile and tlsPrivateKeyFile must be set together")]
    CertWithoutKey,
    /// A webhook configured without an API client, as upstream refuses.
    #[error("no client provided, cannot use webhook {0}")]
    NoClient(&'static str),
    /// A file or socket operation: `what` names it and the path or address.
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    /// A PEM file that does not hold what it should.
    #[error("{what}: {error}")]
    Pem { what: String, error: String },
    #[error("{what}: {error}")]
    Tls {
        what: &'static str,
        error: rustls::Error,
    },
    #[error("client certificate verifier: {0}")]
    Verifier(rustls::server::VerifierBuilderError),
    /// Generating the self-signed serving certificate.
    #[error("{what}: {error}")]
    Generate {
        what: &'static str,
        error: rcgen::Error,
    },
    #[error(transparent)]
    X509(#[from] crate::certificate::x509::Error),
}

impl ServerError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
        let what = what.into();
        move |error| ServerError::Io { what, error }
    }
}
