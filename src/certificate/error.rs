//! The certificate layer's errors: the TLS bootstrap, the CSR it waits on,
//! and the files it writes, each naming the CSR or path involved.

use std::path::PathBuf;

use crate::client::kubeconfig::KubeconfigError;
use crate::client::{ApiError, InvalidServer};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file operation: `what` names it and the path.
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error("error reading existing kubeconfig {}: {error}", .path.display())]
    ExistingKubeconfig {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(transparent)]
    Kubeconfig(KubeconfigError),
    #[error("unable to load bootstrap kubeconfig: {0}")]
    BootstrapKubeconfig(KubeconfigError),
    #[error("API client for the bootstrap kubeconfig: {0}")]
    BootstrapClient(InvalidServer),
    /// Generating a key or building the certificate request.
    #[error("{what}: {error}")]
    Generate {
        what: &'static str,
        error: rcgen::Error,
    },
    /// The API refused the CSR (invalid, unauthorized, forbidden).
    #[error("CSR {name}: {error}")]
    Refused { name: String, error: ApiError },
    #[error("CSR {name}: giving up after {after:?}: {error}")]
    GaveUp {
        name: String,
        after: std::time::Duration,
        error: ApiError,
    },
    #[error("shutting down during the TLS bootstrap")]
    Shutdown,
    #[error("retrieved CSR {0:?} is not compatible: different signer or usages")]
    Incompatible(String),
    #[error("CSR {name:?} changed UIDs (was {was}, now {now})")]
    UidChanged {
        name: String,
        was: String,
        now: String,
    },
    #[error("certificate signing request {name} is denied, reason: {reason}, message: {message}")]
    Denied {
        name: String,
        reason: String,
        message: String,
    },
    #[error("certificate signing request {name} failed, reason: {reason}, message: {message}")]
    Failed {
        name: String,
        reason: String,
        message: String,
    },
    #[error("CSR {name}: status.certificate is not base64: {error}")]
    NotBase64 {
        name: String,
        error: base64::DecodeError,
    },
    #[error("CSR {name}: certificate is not PEM: {error}")]
    NotUtf8 {
        name: String,
        error: std::string::FromUtf8Error,
    },
    #[error("CSR {0} was deleted while waiting")]
    Deleted(String),
    #[error("shutting down while waiting for CSR {0}")]
    ShutdownWaiting(String),
    #[error("timed out waiting for CSR {0} to be issued")]
    Timeout(String),
    /// PEM that does not hold what it should: `what` is "issued
    /// certificate" or "private key".
    #[error("{what}: {error}")]
    Pem { what: &'static str, error: String },
    #[error("no client certificate")]
    NoClientCert,
    #[error("issued certificate: no certificate")]
    NoIssuedCert,
    #[error("issued certificate: {0}")]
    Issued(crate::certificate::x509::Error),
    #[error("the issued certificate does not match its key: {0}")]
    KeyMismatch(rustls::Error),
}

/// Why the stored pair (`<cert-dir>/<pair>-current.pem`) cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", .path.display())]
pub struct StoredPairError {
    pub path: PathBuf,
    pub problem: StoredPairProblem,
}

#[derive(Debug, thiserror::Error)]
pub enum StoredPairProblem {
    #[error("{0}")]
    Read(std::io::Error),
    /// The PEM holds no readable certificate or key.
    #[error("{0}")]
    Pem(String),
    #[error("no certificate")]
    NoCertificate,
    #[error("{0}")]
    X509(crate::certificate::x509::Error),
    #[error("expired")]
    Expired,
    /// The key does not match the certificate.
    #[error("{0}")]
    KeyMismatch(rustls::Error),
}

impl CertError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CertError {
        let what = what.into();
        move |error| CertError::Io { what, error }
    }
}
