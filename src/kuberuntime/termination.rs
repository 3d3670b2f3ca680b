//! Termination messages of exited containers (upstream
//! `kuberuntime_container.go`: `convertToKubeContainerStatus`,
//! `getTerminationMessage`, `readLastStringFromContainerLogs`; the limits
//! are `kubecontainer.MaxContainerTerminationMessage*`).
//!
//! The message file is the host file mounted at the container's
//! `terminationMessagePath`, found through the CRI status's mounts. With
//! `FallbackToLogsOnError`, a failed container that left it empty gets the
//! tail of its log instead. An exited instance never changes, so each is
//! read once and cached by container ID until it leaves the runtime.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rkubelet_util::lock;

use super::labels;
use crate::cri::api;
use crate::server::kubelet::crilog::{copy_logs, FollowControl, FollowTiming, LogOptions, Streams};

/// Bytes read from the end of the message file.
pub const MAX_TERMINATION_MESSAGE_LENGTH: u64 = 1024 * 4;
/// Bytes kept from the end of the log fallback.
pub const MAX_TERMINATION_MESSAGE_LOG_LENGTH: usize = 1024 * 2;
/// Lines read from the end of the log for the fallback.
pub const MAX_TERMINATION_MESSAGE_LOG_LINES: u64 = 80;

const FALLBACK_TO_LOGS_ON_ERROR: &str = "FallbackToLogsOnError";

/// The `message` of an exited container's status: the runtime's own
/// message, then ": " and the termination message when both are non-empty.
pub fn exited_container_message(status: &api::ContainerStatus) -> String {
    let policy = status
        .annotations
        .get(labels::TERMINATION_MESSAGE_POLICY_ANNOTATION)
        .map(String::as_str);
    // A container that could not even start has no logs to fall back to.
    let fallback = policy == Some(FALLBACK_TO_LOGS_ON_ERROR)
        && status.exit_code != 0
        && status.reason != "ContainerCannotRun";
    let path = status
        .annotations
        .get(labels::TERMINATION_MESSAGE_PATH_ANNOTATION)
        .map_or("", String::as_str);
    let (mut message, check_logs) = termination_message(&status.mounts, path, fallback);
    if check_logs {
        message = last_string_from_logs(Path::new(&status.log_path));
    }
    let mut out = status.message.clone();
    if !message.is_empty() {
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&message);
    }
    out
}

/// Upstream `getTerminationMessage`: the message file's last 4 KiB, and
/// whether to read the logs instead.
fn termination_message(mounts: &[api::Mount], path: &str, fallback: bool) -> (String, bool) {
    if path.is_empty() {
        return (String::new(), fallback);
    }
    let Some(mount) = mounts.iter().find(|m| m.container_path == path) else {
        return (String::new(), fallback);
    };
    match read_at_most(Path::new(&mount.host_path), MAX_TERMINATION_MESSAGE_LENGTH) {
        Ok(data) => {
            let empty = data.is_empty();
            (
                String::from_utf8_lossy(&data).into_owned(),
                fallback && empty,
            )
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => (String::new(), fallback),
        Err(e) => (
            format!("Error on reading termination log {}: {e}", mount.host_path),
            false,
        ),
    }
}

/// Upstream `tail.ReadAtMost`: at most `max` bytes from the end of the file.
fn read_at_most(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    let size = f.metadata()?.len();
    f.seek(SeekFrom::Start(size - size.min(max)))?;
    let mut data = Vec::new();
    f.take(max).read_to_end(&mut data)?;
    Ok(data)
}

/// Never follows: the container has exited.
struct Done;

impl FollowControl for Done {
    fn cancelled(&self) -> bool {
        true
    }
    fn running(&mut self) -> bool {
        false
    }
}

/// Upstream `readLastStringFromContainerLogs`: the last 80 lines of the
/// CRI log, both streams, without timestamps, of which the last 2 KiB.
fn last_string_from_logs(path: &Path) -> String {
    let opts = LogOptions {
        follow: false,
        timestamps: false,
        tail_lines: Some(MAX_TERMINATION_MESSAGE_LOG_LINES),
        limit_bytes: None,
        since_nanos: None,
        streams: Streams::All,
    };
    let timing = FollowTiming {
        poll: Duration::ZERO,
        idle_timeout: Duration::ZERO,
    };
    let mut out = Vec::new();
    if let Err(e) = copy_logs(path, &opts, &mut out, &mut Done, &timing) {
        return format!("Error on reading termination message from logs: {e}");
    }
    let start = out.len().saturating_sub(MAX_TERMINATION_MESSAGE_LOG_LENGTH);
    String::from_utf8_lossy(&out[start..]).into_owned()
}

/// Messages of exited instances: pod UID -> container ID -> message.
#[derive(Default)]
pub struct TerminationMessages {
    pods: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl TerminationMessages {
    /// The message of an exited container of pod `uid`, read on first use.
    pub fn message(&self, uid: &str, status: &api::ContainerStatus) -> String {
        if let Some(m) = lock(&self.pods)
            .get(uid)
            .and_then(|p| p.get(&status.id))
            .cloned()
        {
            return m;
        }
        // Read outside the lock: other pods' status need not wait on files.
        let message = exited_container_message(status);
        lock(&self.pods)
            .entry(uid.to_string())
            .or_default()
            .insert(status.id.clone(), message.clone());
        message
    }

    /// Drops the entries of pod `uid` whose containers are gone.
    pub fn retain(&self, uid: &str, present: &HashSet<&str>) {
        let mut pods = lock(&self.pods);
        if let Some(p) = pods.get_mut(uid) {
            p.retain(|id, _| present.contains(id.as_str()));
            if p.is_empty() {
                pods.remove(uid);
            }
        }
    }

    pub fn forget_pod(&self, uid: &str) {
        lock(&self.pods).remove(uid);
    }

    #[cfg(test)]
    pub fn cached(&self) -> usize {
        lock(&self.pods).values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
#[path = "termination_tests.rs"]
mod tests;
