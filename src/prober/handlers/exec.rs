//! Exec probes (upstream `pkg/probe/exec`): run a command in the container
//! through CRI ExecSync; exit code 0 is success.

use std::time::{Duration, Instant};

use super::{truncate, MAX_PROBE_OUTPUT};
use crate::cri::CriError;
use crate::prober::{ContainerExec, ExecReply, ProbeResult};

/// Runs `cmd` in the container, bounded by `timeout`. A command that times
/// out fails (upstream with the ExecProbeTimeout feature on); any other
/// runtime error is a probe error (`Unknown`).
pub fn run_exec(
    exec: &dyn ContainerExec,
    container_id: &str,
    cmd: &[String],
    timeout: Duration,
) -> (ProbeResult, String) {
    let start = Instant::now();
    let reply = exec.exec_sync(container_id, cmd, timeout);
    exec_verdict(reply, cmd, start.elapsed(), timeout)
}

/// What an ExecSync reply means for a probe or hook that ran `cmd` for
/// `took`: exit 0 passes, a time-out fails, any other error is unknown.
pub fn exec_verdict(
    reply: Result<ExecReply, CriError>,
    cmd: &[String],
    took: Duration,
    timeout: Duration,
) -> (ProbeResult, String) {
    match reply {
        Ok((code, stdout, stderr)) => {
            let result = if code == 0 {
                ProbeResult::Success
            } else {
                ProbeResult::Failure
            };
            (result, combined_output(stdout, stderr))
        }
        Err(e) if is_timeout(&e, took, timeout) => (
            ProbeResult::Failure,
            format!("command {:?} timed out", cmd.join(" ")),
        ),
        Err(e) => (ProbeResult::Unknown, e.to_string()),
    }
}

/// stdout then stderr, as upstream RunInContainer combines them, capped.
fn combined_output(mut stdout: Vec<u8>, stderr: Vec<u8>) -> String {
    stdout.extend_from_slice(&stderr);
    stdout.truncate(MAX_PROBE_OUTPUT);
    truncate(
        String::from_utf8_lossy(&stdout).into_owned(),
        MAX_PROBE_OUTPUT,
    )
}

/// The runtime's or our own deadline passed (containerd answers an exec
/// time-out with DeadlineExceeded, as does the gRPC client's deadline).
fn is_timeout(err: &CriError, elapsed: Duration, timeout: Duration) -> bool {
    elapsed >= timeout || err.code == Some(grpcio::RpcStatusCode::DEADLINE_EXCEEDED)
}
