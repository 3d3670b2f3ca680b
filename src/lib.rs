//! rkubelet: a synchronous, thread-per-module Kubernetes node agent.
//!
//! The binary (src/main.rs) only calls [`main`]; the modules stay private
//! to the crate. With the `fuzzing` feature, [`fuzzing`] exposes the
//! parsers of outside input to the fuzz targets in fuzz/.

mod allocation;
mod apis;
mod app;
mod apparmor;
mod certificate;
mod checkpointmanager;
// The API client lives in crates/client (rkubelet-client).
use rkubelet_client as client;
mod cm;
mod config;
mod configmap;
mod container;
mod credentialprovider;
// The CRI API and remote client live in crates/cri (rkubelet-cri).
use rkubelet_cri as cri;
mod envvars;
mod events;
mod eviction;
mod fieldpath;
mod images;
mod kubelet;
mod kubeletconfig;
mod kuberuntime;
mod lifecycle;
mod logs;
mod metrics;
mod nodelease;
mod nodeshutdown;
mod nodestatus;
mod oom;
mod pleg;
mod pluginmanager;
mod pod;
mod podutil;
mod podworkers;
mod preemption;
mod prober;
mod runonce;
mod runtimeclass;
mod secret;
mod server;
mod stats;
mod status;
mod sysctl;
mod token;
mod types;
mod userns;
mod util;
mod volume;
mod volumemanager;
mod watchdog;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

/// Runs the kubelet: flags, configuration, then every module until a
/// signal or a fatal error; the process's exit code.
pub fn main() -> i32 {
    app::main()
}
