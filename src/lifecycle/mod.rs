//! Pod lifecycle hooks of the kubelet (upstream `pkg/kubelet/lifecycle`):
//! admission of new pods.

pub mod admission;
