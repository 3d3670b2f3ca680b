//! The kubelet's HTTP servers (upstream `pkg/kubelet/server`).

pub mod healthz;
