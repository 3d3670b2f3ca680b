//! rkubelet-apiserver-double: a faithful, synchronous kube-apiserver test
//! double for rkubelet's cluster-mode tests. See README.md.

pub mod admission;
pub mod attachcontroller;
pub mod authn;
pub mod bootstraptoken;
pub mod certs;
pub mod charges;
pub mod control;
pub mod csr;
pub mod defaults;
pub mod ephemeral;
pub mod features;
pub mod handlers;
pub mod http;
pub mod kinds;
pub mod nodeauthz;
pub mod nodeproxy;
pub mod noderestriction;
pub mod patch;
pub mod priority;
pub mod pvcontroller;
pub mod quantity;
pub mod resize;
pub mod resources;
pub mod reviews;
pub mod runtimeclass;
pub mod seccomp;
pub mod selectors;
pub mod server;
pub mod smp;
pub mod status;
pub mod storagekinds;
pub mod store;
pub mod tls;
pub mod tokens;
pub mod util;
pub mod version;
pub mod volumekinds;
pub mod watch;
pub mod zerovalues;

pub use server::{start, Config, Handle};
