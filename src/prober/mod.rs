//! Container probes (upstream `pkg/kubelet/prober` and its `results`
//! package): liveness, readiness and startup probes for every container.
//!
//! Upstream runs one goroutine per probe. Here one scheduler thread
//! ("prober") keeps every probe in a deadline queue and hands due checks to a
//! fixed pool ("probe-worker-0..N") over a bounded channel; a worker applies
//! its check's result to the shared state itself and wakes the scheduler only
//! when the result changed or checks wait for a worker. 110 pods × 3 probes
//! cost N + 1 threads.
//!
//! Each check is bounded by its own timeoutSeconds, and a probe has at most
//! one check in flight (a tick that finds it still running is skipped, as a
//! Go ticker drops ticks). So a hung HTTP server or command fails by its
//! timeout and never blocks the scheduler; while every worker is busy with
//! hung checks, other due checks wait in the queue, delayed by at most those
//! checks' timeouts (N hung checks of timeout T delay the rest by ≤ T).
//!
//! Result changes go to the kubelet as [`ResultUpdate`]s, sent only by the
//! scheduler thread and never under the state lock, so a sync loop that
//! calls into the manager while its channel is full cannot deadlock.

mod core;
pub mod handlers;
mod manager;
mod results;
mod spec;
mod worker;

#[cfg(test)]
mod tests;

use std::fmt;
use std::time::{Duration, SystemTime};

pub use manager::ProberManager;

use crate::cri::CriError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    Success,
    Failure,
    /// Not known yet; from a handler, the check could not be run at all (a
    /// probe error: unresolvable port, no pod IP, runtime error).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Readiness,
        ProbeKind::Liveness,
    ];

    /// The result a container starts with (upstream worker initialValue):
    /// live until proven otherwise, not ready, startup unknown.
    pub fn initial_result(self) -> ProbeResult {
        match self {
            ProbeKind::Liveness => ProbeResult::Success,
            ProbeKind::Readiness => ProbeResult::Failure,
            ProbeKind::Startup => ProbeResult::Unknown,
        }
    }
}

impl fmt::Display for ProbeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        })
    }
}

/// A probe's verdict changed for one container. Liveness and startup
/// `Failure`s mean the container must be restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultUpdate {
    pub pod_uid: String,
    pub container_id: String,
    pub container_name: String,
    pub kind: ProbeKind,
    pub result: ProbeResult,
}

/// One container of a pod as the runtime reports it (the input upstream
/// UpdatePodStatus reads from the container statuses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub name: String,
    /// Runtime container ID; empty when the container was not created yet.
    pub id: String,
    pub running: bool,
    /// When this instance started (wall clock).
    pub started_at: Option<SystemTime>,
}

/// What ExecSync answered: exit code, stdout, stderr.
pub type ExecReply = (i32, Vec<u8>, Vec<u8>);

/// CRI ExecSync, implemented by the kubelet.
///
/// The implementation must return within about `timeout`; a timed-out
/// command is reported as a DeadlineExceeded error (or simply any error
/// after `timeout` has elapsed).
pub trait ContainerExec: Send + Sync {
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecReply, CriError>;

    /// The same without holding the caller: `done` gets the reply, on
    /// whatever thread completes the call. By default it runs here.
    fn exec_async(&self, container_id: &str, cmd: &[String], timeout: Duration, done: ExecDone) {
        done(self.exec_sync(container_id, cmd, timeout));
    }
}

/// Told an async exec's reply: exit code, stdout, stderr, or the error.
pub type ExecDone = Box<dyn FnOnce(Result<ExecReply, CriError>) + Send>;
