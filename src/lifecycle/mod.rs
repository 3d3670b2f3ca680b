//! Pod lifecycle hooks of the kubelet (upstream `pkg/kubelet/lifecycle`):
//! admission of new pods, and the runner of the hooks that have no async
//! CRI form.

pub mod admission;
pub mod fit;
pub mod handler_runner;
pub mod handlers;
