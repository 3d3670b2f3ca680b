//! The CRI v1 API (generated from `protos/api.proto`) and the remote client
//! the kubelet talks to the container runtime through (upstream
//! `pkg/kubelet/cri/remote`).

#[allow(clippy::all, dead_code, unused_qualifications, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/cri/mod.rs"));
}

pub use generated::api;
/// The gRPC health service (`protos/health.proto`) gRPC probes call.
pub use generated::{health, health_grpc};
pub mod core_plugins;
#[cfg(test)]
pub mod fake;
pub mod remote;
pub mod services;

pub use remote::{AsyncStop, CriError, RemoteRuntime};
pub use services::{image_fs_mountpoint, ImageService, RuntimeService};
