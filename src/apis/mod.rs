//! The kubelet's own gRPC APIs (upstream `pkg/kubelet/apis`).

pub mod podresources;
