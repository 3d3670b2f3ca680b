//! The kubelet's HTTP servers (upstream `pkg/kubelet/server`).

mod error;
pub mod healthz;
pub mod host;
pub mod kubelet;
pub mod stats;
pub mod streaming;

pub use error::ServerError;
