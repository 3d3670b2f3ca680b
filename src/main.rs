//! rkubelet: a synchronous, thread-per-module Kubernetes node agent.

mod app;
mod certificate;
mod client;
mod cm;
mod config;
mod configmap;
mod container;
mod credentialprovider;
mod cri;
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
mod nodestatus;
mod oom;
mod pleg;
mod pod;
mod podutil;
mod podworkers;
mod prober;
mod runonce;
mod secret;
mod server;
mod stats;
mod status;
mod token;
mod types;
mod util;
mod volume;
mod volumemanager;

fn main() {
    std::process::exit(app::main());
}
