//! What a pool worker does with a due check (upstream prober.probe): run the
//! handler, retry probe errors, and record the Warning events.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use super::core::Job;
use super::handlers::{self, truncate, Outcome};
use super::spec::Check;
use super::{ContainerExec, ProbeResult};
use crate::events::{EventRecorder, EventType, CONTAINER_UNHEALTHY};

/// Upstream runs a check up to 3 times while it errors.
const MAX_PROBE_RETRIES: usize = 3;

/// Event messages carry at most this much probe output.
const MAX_EVENT_OUTPUT: usize = 1024;

const CONTAINER_PROBE_WARNING: &str = "ProbeWarning";

/// Runs an exec check without holding the caller: the reply comes back
/// through `exec_async`, a probe error is retried the same number of times,
/// and `finish` gets the outcome on the completing thread.
pub(crate) fn execute_exec_async(
    exec: Arc<dyn ContainerExec>,
    job: Job,
    cmd: Vec<String>,
    attempt: usize,
    finish: Box<dyn FnOnce(Job, Outcome) + Send>,
) {
    let started = Instant::now();
    let (id, timeout) = (job.container_id.clone(), job.timeout);
    let again = Arc::clone(&exec);
    exec.exec_async(
        &id,
        &cmd.clone(),
        timeout,
        Box::new(move |reply| {
            let outcome: Outcome =
                handlers::exec_verdict(reply, &cmd, started.elapsed(), timeout).into();
            if outcome.result == ProbeResult::Unknown && attempt + 1 < MAX_PROBE_RETRIES {
                return execute_exec_async(again, job, cmd, attempt + 1, finish);
            }
            finish(job, outcome);
        }),
    );
}

pub(crate) fn execute(exec: &dyn ContainerExec, job: &Job) -> Outcome {
    let mut outcome = run_once(exec, job);
    for _ in 1..MAX_PROBE_RETRIES {
        if outcome.result != ProbeResult::Unknown {
            break;
        }
        outcome = run_once(exec, job);
    }
    outcome
}

/// One attempt; a panicking handler (or exec implementation) is a probe
/// error rather than a lost worker.
fn run_once(exec: &dyn ContainerExec, job: &Job) -> Outcome {
    catch_unwind(AssertUnwindSafe(|| run_check(exec, job)))
        .unwrap_or_else(|_| Outcome::error("the probe handler panicked"))
}

fn run_check(exec: &dyn ContainerExec, job: &Job) -> Outcome {
    let timeout = job.timeout;
    match &job.check {
        Check::Exec(cmd) => handlers::run_exec(exec, &job.container_id, cmd, timeout).into(),
        Check::Http(target) => handlers::http_get(target, timeout),
        Check::Tcp { host, port } => handlers::run_tcp(host, *port, timeout).into(),
        Check::Grpc {
            host,
            port,
            service,
        } => handlers::run_grpc(host, *port, service.as_deref(), timeout).into(),
        Check::Invalid(msg) => Outcome::error(msg.clone()),
    }
}

/// Upstream's events: Unhealthy for a failure or an error, ProbeWarning
/// for a success with a warning.
pub(crate) fn record_event(recorder: &dyn EventRecorder, job: &Job, outcome: &Outcome) {
    let kind = job.key.kind;
    let output = truncate(outcome.output.clone(), MAX_EVENT_OUTPUT);
    let (reason, message) = match outcome.result {
        ProbeResult::Failure => (
            CONTAINER_UNHEALTHY,
            format!("{kind} probe failed: {output}"),
        ),
        ProbeResult::Unknown => (
            CONTAINER_UNHEALTHY,
            format!("{kind} probe errored and resulted in unknown state: {output}"),
        ),
        ProbeResult::Success if outcome.warning => (
            CONTAINER_PROBE_WARNING,
            format!("{kind} probe warning: {output}"),
        ),
        ProbeResult::Success => return,
    };
    log::debug!(
        "probe: {} {}/{}: {message}",
        job.key.pod_uid,
        job.key.container,
        kind
    );
    recorder.pod_container_event(
        &job.pod,
        &job.key.container,
        EventType::Warning,
        reason,
        &message,
    );
}
