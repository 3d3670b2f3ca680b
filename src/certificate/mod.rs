//! Kubelet certificates (upstream `pkg/kubelet/certificate`): for now only
//! the client TLS bootstrap ([`bootstrap`], upstream
//! `pkg/kubelet/certificate/bootstrap`), with client-go's
//! `util/certificate/csr` ([`csr`]) and `util/certificate`'s file store
//! ([`store`]). Rotation and the serving certificate are not done yet.

pub mod bootstrap;
mod csr;
mod store;
pub mod x509;
