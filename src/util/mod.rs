//! Small shared mechanisms (upstream `pkg/util`, `client-go/util`).

// The back-off lives in crates/util (rkubelet-util), with the shared
// lock helper; this keeps `crate::util::backoff` paths working.
pub use rkubelet_util::backoff;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod grpc;
pub mod logging;
pub mod manager;
pub mod memory;
pub mod quantity;
pub mod sd_notify;
pub mod strategicpatch;
#[cfg(test)]
pub mod testing;
pub mod worker;
pub mod workqueue;
