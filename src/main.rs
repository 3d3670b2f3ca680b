//! rkubelet: a synchronous, thread-per-module Kubernetes node agent.

mod app;
mod config;
mod container;
mod cri;
mod events;
mod kubelet;
mod kubeletconfig;
mod kuberuntime;
mod pleg;
mod podutil;
mod podworkers;
mod prober;
mod runonce;
mod server;
mod status;
mod types;
mod util;

fn main() {
    std::process::exit(app::main());
}
