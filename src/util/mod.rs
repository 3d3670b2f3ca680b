//! Small shared mechanisms (upstream `pkg/util`, `client-go/util`).

pub mod backoff;
pub mod logging;
pub mod manager;
pub mod quantity;
pub mod strategicpatch;
pub mod worker;
pub mod workqueue;
