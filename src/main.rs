//! rkubelet: a synchronous, thread-per-module Kubernetes node agent (the
//! crate is src/lib.rs).

fn main() {
    std::process::exit(rkubelet::main());
}
