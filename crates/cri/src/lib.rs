//! The gRPC APIs rkubelet speaks, generated from the workspace's
//! `protos/`, and the remote client the kubelet talks to the container
//! runtime through (upstream cri-api and `pkg/kubelet/cri/remote`).
//!
//! Besides the CRI v1: the kubelet's plugin APIs of upstream
//! `k8s.io/kubelet/pkg/apis`, under the same paths.

#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/cri/mod.rs"));
}

/// The CRI messages and their gRPC client stubs.
pub use generated::{api, api_grpc};
/// The gRPC health service (`protos/health.proto`) gRPC probes call.
pub use generated::{health, health_grpc};

#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated_deviceplugin_v1beta1 {
    include!(concat!(env!("OUT_DIR"), "/deviceplugin_v1beta1/mod.rs"));
}
#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated_pluginregistration_v1 {
    include!(concat!(env!("OUT_DIR"), "/pluginregistration_v1/mod.rs"));
}

#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated_csi_v1 {
    include!(concat!(env!("OUT_DIR"), "/csi_v1/mod.rs"));
}

/// The Container Storage Interface's node side, which the kubelet dials
/// on each CSI driver's endpoint (`protos/csi/v1`).
pub mod csi {
    /// v1: the Identity and Node services.
    pub mod v1 {
        pub use crate::generated_csi_v1::{csi, csi_grpc};
    }
}

#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated_podresources_v1 {
    include!(concat!(env!("OUT_DIR"), "/podresources_v1/mod.rs"));
}

/// The pod resources API monitoring agents read (upstream
/// `pkg/apis/podresources`).
pub mod podresources {
    /// v1: served by the kubelet on `pod-resources/kubelet.sock`.
    pub mod v1 {
        pub use crate::generated_podresources_v1::{api, api_grpc};
    }
}

/// The device plugin API (upstream `pkg/apis/deviceplugin`).
pub mod deviceplugin {
    /// v1beta1: served by the device manager on `kubelet.sock`, and by
    /// each device plugin on its endpoint.
    pub mod v1beta1 {
        pub use crate::generated_deviceplugin_v1beta1::{api, api_grpc};
    }
}

#[allow(clippy::all, unused_qualifications, missing_docs)]
mod generated_dra_v1 {
    include!(concat!(env!("OUT_DIR"), "/dra_v1/mod.rs"));
}

/// The DRA plugin API (upstream `pkg/apis/dra`): served by each DRA driver
/// on the endpoint it registered.
pub mod dra {
    /// v1; v1beta1 is the same messages under another service name.
    pub mod v1 {
        pub use crate::generated_dra_v1::{api, api_grpc};
    }
}

/// The plugin registration API the plugin manager dials (upstream
/// `pkg/apis/pluginregistration`).
pub mod pluginregistration {
    /// v1, whose proto package is `pluginregistration`.
    pub mod v1 {
        pub use crate::generated_pluginregistration_v1::{api, api_grpc};
    }
}
pub mod core_plugins;
pub mod defaults;
pub mod listing;
pub mod remote;
pub mod services;

pub use remote::{AsyncStop, CriError, EndpointError, Observer, RemoteRuntime};
pub use services::{image_fs_mountpoint, ImageService, RuntimeService};
