//! Small shared mechanisms (upstream `pkg/util`, `client-go/util`).

pub mod backoff;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod logging;
pub mod manager;
pub mod memory;
pub mod quantity;
pub mod sd_notify;
pub mod strategicpatch;
pub mod worker;
pub mod workqueue;
