//! Kubelet certificates (upstream `pkg/kubelet/certificate`): the client
//! TLS bootstrap ([`bootstrap`], upstream `pkg/kubelet/certificate/bootstrap`),
//! the rotation of the client and serving certificates ([`manager`], upstream
//! client-go `util/certificate`'s Manager as `kubelet.go` sets it up), with
//! client-go's `util/certificate/csr` ([`csr`]) and `util/certificate`'s
//! file store ([`store`]).

pub mod bootstrap;
mod csr;
mod error;
pub mod manager;
pub mod store;
pub mod x509;

pub use error::{CertError, StoredPairError, StoredPairProblem};
