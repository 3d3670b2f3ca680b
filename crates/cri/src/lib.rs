//! The CRI v1 API (generated from the workspace's `protos/api.proto`) and
//! the remote client the kubelet talks to the container runtime through
//! (upstream cri-api and `pkg/kubelet/cri/remote`).

#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/cri/mod.rs"));
}

/// The CRI messages and their gRPC client stubs.
pub use generated::{api, api_grpc};
/// The gRPC health service (`protos/health.proto`) gRPC probes call.
pub use generated::{health, health_grpc};
pub mod core_plugins;
pub mod remote;
pub mod services;

pub use remote::{AsyncStop, CriError, EndpointError, Observer, RemoteRuntime};
pub use services::{image_fs_mountpoint, ImageService, RuntimeService};
