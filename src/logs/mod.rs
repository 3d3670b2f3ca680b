//! Container log management (upstream `pkg/kubelet/logs/container_log_manager.go`)
//! and the legacy `/var/log/containers` symlinks (upstream kuberuntime's
//! `legacyLogSymlink`, removed with the container and swept by the GC).
//!
//! The "log-manager" thread wakes every containerLogMonitorInterval and, for
//! each running container whose current log file has reached
//! containerLogMaxSize, rotates it the way upstream does:
//!   1. list the rotated siblings `<log>.*`; drop leftovers of a failed
//!      previous rotation (`*.tmp`, and uncompressed files whose `.gz` exists);
//!   2. delete the oldest so that at most containerLogMaxFiles-2 rotated files
//!      remain (the current log and the one rotated now make up the rest);
//!   3. gzip every remaining uncompressed rotated file (`<log>.<ts>.gz`), as
//!      upstream does; the file rotated in this round stays plain so the
//!      runtime (and log shippers) can finish writing/reading it;
//!   4. rename `<log>` -> `<log>.<YYYYMMDD-hhmmss>` and call CRI
//!      ReopenContainerLog; if that fails the rename is undone so the next
//!      round retries.
//!
//! A log file that has gone missing (a crash between rename and reopen) is
//! recovered by calling ReopenContainerLog, as upstream.

use crate::util::worker::Worker;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Receiver;
use rkubelet_util::lock;

use crate::cri::RemoteRuntime;

/// Upstream ContainerLogsDir: the legacy symlink directory.
pub const CONTAINER_LOGS_DIR: &str = "/var/log/containers";
const COMPRESS_SUFFIX: &str = ".gz";
const TMP_SUFFIX: &str = ".tmp";
const LEGACY_LOG_SUFFIX: &str = "log";
/// ext4's file-name limit; upstream truncates symlink names to it.
const EXT4_MAX_FILE_NAME_LEN: usize = 255;

/// Rotation policy (containerLogMaxSize / containerLogMaxFiles /
/// containerLogMonitorInterval).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Rotate once the current file reaches this many bytes.
    pub max_size: u64,
    /// Files kept per container, the current one included (>= 2).
    pub max_files: usize,
    pub monitor_interval: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            max_size: 10 * 1024 * 1024,
            max_files: 5,
            monitor_interval: Duration::from_secs(10),
        }
    }
}

/// A container log setting the manager cannot use.
#[derive(Debug, thiserror::Error)]
pub enum LogConfigError {
    #[error("containerLogMaxSize {0:?}: {1}")]
    SizeUnreadable(String, String),
    #[error("containerLogMaxSize {0:?} out of range")]
    SizeOutOfRange(String),
    #[error("containerLogMaxFiles {0} out of range")]
    FilesOutOfRange(i32),
}

impl LogConfig {
    /// From the kubelet configuration (already validated there).
    pub fn from_kubelet_config(
        c: &crate::kubeletconfig::KubeletConfiguration,
    ) -> Result<Self, LogConfigError> {
        let size =
            crate::util::quantity::parse_quantity(&c.container_log_max_size).map_err(|e| {
                LogConfigError::SizeUnreadable(c.container_log_max_size.clone(), format!("{e:?}"))
            })?;
        let max_size = u64::try_from(size)
            .map_err(|_| LogConfigError::SizeOutOfRange(c.container_log_max_size.clone()))?;
        let max_files = usize::try_from(c.container_log_max_files)
            .map_err(|_| LogConfigError::FilesOutOfRange(c.container_log_max_files))?;
        Ok(LogConfig {
            max_size,
            max_files,
            monitor_interval: c.container_log_monitor_interval.0,
        })
    }
}

/// The one runtime call rotation needs; a seam for tests.
pub trait LogRuntime: Send + Sync {
    fn reopen_log(&self, container_id: &str) -> Result<(), String>;
}

impl LogRuntime for RemoteRuntime {
    fn reopen_log(&self, container_id: &str) -> Result<(), String> {
        self.reopen_container_log(container_id)
            .map_err(|e| e.to_string())
    }
}

/// Lists (container ID, current log path) of every running container.
pub type ListRunning = Box<dyn Fn() -> Vec<(String, PathBuf)> + Send + Sync>;

/// The IDs of the running containers.
pub type RunningIds = Box<dyn Fn() -> Vec<String> + Send + Sync>;

/// What upstream's rotateLogs lists: running containers and their log paths
/// (ListContainers + ContainerStatus). Ready-made `list_running` for
/// [`LogManager::new`].
///
/// The kubelet takes the running containers from the PLEG's last relist
/// (at most a relist period old), not from a ListContainers of its own
/// every round as upstream: the relist lists them every second anyway.
/// A container's log path is fixed when it is created, so ContainerStatus
/// is asked once per container, not on every round: with 30 containers
/// that is 180 fewer CRI calls a minute at the default 10 s interval.
pub struct RunningLogs {
    runtime: Arc<RemoteRuntime>,
    running: RunningIds,
    paths: LogPaths,
}

impl RunningLogs {
    pub fn new(runtime: Arc<RemoteRuntime>, running: RunningIds) -> Self {
        RunningLogs {
            runtime,
            running,
            paths: LogPaths::default(),
        }
    }

    pub fn list(&self) -> Vec<(String, PathBuf)> {
        self.paths.resolve((self.running)(), |id| {
            self.runtime
                .container_status(id)
                .map(|s| s.log_path)
                .map_err(|e| e.to_string())
        })
    }
}

/// The log path of each container seen running, by container ID (empty:
/// the runtime keeps no log); only the containers of the last listing are
/// kept.
#[derive(Default)]
pub(crate) struct LogPaths(Mutex<std::collections::HashMap<String, String>>);

impl LogPaths {
    /// The (ID, log path) of `running`, asking `log_path` only for IDs not
    /// seen before. A container without a log path is skipped; one whose
    /// status failed is asked again next time.
    pub(crate) fn resolve(
        &self,
        running: Vec<String>,
        log_path: impl Fn(&str) -> Result<String, String>,
    ) -> Vec<(String, PathBuf)> {
        let mut known = lock(&self.0);
        known.retain(|id, _| running.contains(id));
        for id in running {
            if known.contains_key(&id) {
                continue;
            }
            match log_path(&id) {
                Ok(p) => {
                    known.insert(id, p);
                }
                Err(e) => log::debug!("log rotation: status of {id}: {e}"),
            }
        }
        known
            .iter()
            .filter(|(_, p)| !p.is_empty())
            .map(|(id, p)| (id.clone(), PathBuf::from(p)))
            .collect()
    }
}

pub struct LogManager {
    runtime: Arc<dyn LogRuntime>,
    cfg: LogConfig,
    list_running: ListRunning,
    /// Rotation and clean() never run at once (upstream's mutex).
    lock: Mutex<()>,
}

impl LogManager {
    /// `runtime` is usually `Arc<RemoteRuntime>` (coerces).
    pub fn new(
        runtime: Arc<dyn LogRuntime>,
        cfg: LogConfig,
        list_running: ListRunning,
    ) -> Arc<Self> {
        let mut cfg = cfg;
        // Validation guarantees >= 2; keep the arithmetic below sane anyway.
        cfg.max_files = cfg.max_files.max(2);
        Arc::new(LogManager {
            runtime,
            cfg,
            list_running,
            lock: Mutex::new(()),
        })
    }

    /// Runs the "log-manager" thread until `shutdown` receives or closes.
    pub fn start(self: &Arc<Self>, shutdown: Receiver<()>) -> io::Result<Worker> {
        let this = Arc::clone(self);
        let period = this.cfg.monitor_interval;
        crate::util::worker::spawn_periodic(
            "log-manager",
            crate::util::worker::ShutdownStage::Workers,
            period,
            period,
            shutdown,
            move || this.rotate_once(),
        )
    }

    /// One monitoring pass over every running container.
    pub fn rotate_once(&self) {
        let running = (self.list_running)();
        let _guard = lock(&self.lock);
        for (id, path) in running {
            if let Err(e) = self.process_container(&id, &path) {
                log::warn!("rotating log of container {id} ({}): {e}", path.display());
            }
        }
    }

    fn process_container(&self, id: &str, path: &Path) -> Result<(), String> {
        let size = match fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Lost between rename and reopen: ask the runtime to recreate it.
                self.runtime
                    .reopen_log(id)
                    .map_err(|e| format!("reopening missing log: {e}"))?;
                fs::metadata(path)
                    .map_err(|e| format!("log still missing after reopen: {e}"))?
                    .len()
            }
            Err(e) => return Err(format!("stat: {e}")),
        };
        if size < self.cfg.max_size {
            return Ok(());
        }
        self.rotate_log(id, path)
    }

    fn rotate_log(&self, id: &str, path: &Path) -> Result<(), String> {
        let logs = rotated_logs(path).map_err(|e| format!("listing rotated logs: {e}"))?;
        let logs = cleanup_unused_logs(logs)?;
        let logs = remove_excess_logs(logs, self.cfg.max_files)?;
        for l in &logs {
            if !l.to_string_lossy().ends_with(COMPRESS_SUFFIX) {
                compress_log(l).map_err(|e| format!("compressing {}: {e}", l.display()))?;
            }
        }
        self.rotate_latest_log(id, path)
    }

    fn rotate_latest_log(&self, id: &str, path: &Path) -> Result<(), String> {
        let rotated = PathBuf::from(format!("{}.{}", path.display(), timestamp_now()));
        if rotated.exists() {
            // Rotated twice within a second: wait for the next round rather
            // than overwrite the earlier file.
            return Ok(());
        }
        fs::rename(path, &rotated)
            .map_err(|e| format!("renaming to {}: {e}", rotated.display()))?;
        if let Err(e) = self.runtime.reopen_log(id) {
            // Put it back so the next round retries.
            if let Err(re) = fs::rename(&rotated, path) {
                log::error!(
                    "renaming rotated log {} back to {}: {re}",
                    rotated.display(),
                    path.display()
                );
            }
            return Err(format!("reopening container log: {e}"));
        }
        Ok(())
    }
}

/// Removes `log_path` and all of its rotated files (`log_path*`): upstream
/// Clean, for when the container is removed. Rotation only touches running
/// containers, so this needs no lock against it.
pub fn clean_logs(log_path: &Path) {
    let mut paths = rotated_logs(log_path).unwrap_or_default();
    paths.push(log_path.to_path_buf());
    for p in paths {
        if let Err(e) = fs::remove_file(&p) {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("removing log {}: {e}", p.display());
            }
        }
    }
}

/// `<log>.*` in the log's directory, sorted (oldest first: the timestamp
/// format sorts chronologically).
fn rotated_logs(log: &Path) -> io::Result<Vec<PathBuf>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let n = entry.file_name();
        let n = n.to_string_lossy();
        if n.starts_with(&prefix) && n.len() > prefix.len() {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

fn is_in_use(l: &str, logs: &[String]) -> bool {
    if l.ends_with(TMP_SUFFIX) {
        return false;
    }
    if l.ends_with(COMPRESS_SUFFIX) {
        return true;
    }
    let compressed = format!("{l}{COMPRESS_SUFFIX}");
    !logs.contains(&compressed)
}

fn cleanup_unused_logs(logs: Vec<PathBuf>) -> Result<Vec<PathBuf>, String> {
    let names: Vec<String> = logs
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let mut inuse = Vec::new();
    for (p, n) in logs.into_iter().zip(&names) {
        if is_in_use(n, &names) {
            inuse.push(p);
        } else {
            remove_if_exists(&p).map_err(|e| format!("removing unused log {n}: {e}"))?;
        }
    }
    Ok(inuse)
}

fn remove_excess_logs(mut logs: Vec<PathBuf>, max_files: usize) -> Result<Vec<PathBuf>, String> {
    logs.sort();
    let keep = max_files.saturating_sub(2);
    let excess = logs.len().saturating_sub(keep);
    for l in &logs[..excess] {
        remove_if_exists(l).map_err(|e| format!("removing old log {}: {e}", l.display()))?;
    }
    Ok(logs.split_off(excess))
}

fn remove_if_exists(p: &Path) -> io::Result<()> {
    match fs::remove_file(p) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// `<log>` -> `<log>.gz` via `<log>.tmp`, then removes `<log>`.
fn compress_log(log: &Path) -> io::Result<()> {
    let tmp = PathBuf::from(format!("{}{TMP_SUFFIX}", log.display()));
    let result = (|| {
        let mut src = fs::File::open(log)?;
        let dst = fs::File::create(&tmp)?;
        let mut gz = flate2::write::GzEncoder::new(dst, flate2::Compression::default());
        io::copy(&mut src, &mut gz)?;
        gz.finish()?.flush()?;
        fs::rename(&tmp, format!("{}{COMPRESS_SUFFIX}", log.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    fs::remove_file(log)
}

/// Now in local time as Go's "20060102-150405" (upstream uses clock.Now()).
// libc marks time_t deprecated on musl (its width changes with musl 1.2);
// localtime_r takes the platform's own time_t either way.
#[allow(deprecated)]
fn timestamp_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format_timestamp(now as libc::time_t)
}

#[allow(deprecated)]
fn format_timestamp(t: libc::time_t) -> String {
    // SAFETY: localtime_r only writes the tm we own.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return format!("{t}");
    }
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

// ---------------------------------------------------------------------------
// /var/log/containers symlinks
// ---------------------------------------------------------------------------

/// `<dir>/<pod>_<namespace>_<container>-<containerID>.log`, truncated to
/// ext4's 255-byte name limit as upstream. `container_id` may carry a
/// `runtime://` prefix, which is dropped.
pub fn symlink_path(
    dir: &Path,
    pod_name: &str,
    pod_namespace: &str,
    container_name: &str,
    container_id: &str,
) -> PathBuf {
    let id = container_id
        .split_once("://")
        .map(|(_, id)| id)
        .unwrap_or(container_id);
    let suffix = format!(".{LEGACY_LOG_SUFFIX}");
    let mut name = format!("{pod_name}_{pod_namespace}_{container_name}-{id}");
    let max = EXT4_MAX_FILE_NAME_LEN - suffix.len();
    if name.len() > max {
        let mut cut = max;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    dir.join(name + &suffix)
}

/// Creates the symlink to the container's log file when a container starts.
/// Skipped (Ok(None)) when `target` does not exist, as upstream does (it would
/// only dangle). An existing link of the same name is replaced.
pub fn create_symlink(
    dir: &Path,
    pod_name: &str,
    pod_namespace: &str,
    container_name: &str,
    container_id: &str,
    target: &Path,
) -> io::Result<Option<PathBuf>> {
    if let Err(e) = fs::metadata(target) {
        if e.kind() == io::ErrorKind::NotFound {
            return Ok(None);
        }
    }
    fs::create_dir_all(dir)?;
    let link = symlink_path(dir, pod_name, pod_namespace, container_name, container_id);
    match std::os::unix::fs::symlink(target, &link) {
        Ok(()) => Ok(Some(link)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(&link)?;
            std::os::unix::fs::symlink(target, &link)?;
            Ok(Some(link))
        }
        Err(e) => Err(e),
    }
}

/// Removes the symlink when the container is removed (missing is fine).
pub fn remove_symlink(
    dir: &Path,
    pod_name: &str,
    pod_namespace: &str,
    container_name: &str,
    container_id: &str,
) -> io::Result<()> {
    remove_if_exists(&symlink_path(
        dir,
        pod_name,
        pod_namespace,
        container_name,
        container_id,
    ))
}

/// The container ID in a symlink name (upstream getContainerIDFromLegacyLogSymlink).
pub fn container_id_from_symlink(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let last = name.rsplit('-').next()?;
    let id = last.strip_suffix(&format!(".{LEGACY_LOG_SUFFIX}"))?;
    (id.len() >= 6).then(|| id.to_string())
}

/// The GC's sweep (upstream container_gc): removes `*.log` symlinks in `dir`
/// whose target is gone, except those of containers `is_running` says are
/// still running (their log may be mid-rotation). Returns how many it removed.
pub fn cleanup_dangling_symlinks(dir: &Path, is_running: &dyn Fn(&str) -> bool) -> usize {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("listing {}: {e}", dir.display());
            }
            return 0;
        }
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if !path.file_name().is_some_and(|n| {
            n.to_string_lossy()
                .ends_with(&format!(".{LEGACY_LOG_SUFFIX}"))
        }) {
            continue;
        }
        // metadata follows the link: NotFound means it dangles.
        match fs::metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            _ => continue,
        }
        if let Some(id) = container_id_from_symlink(&path) {
            if is_running(&id) {
                continue;
            }
        }
        match fs::remove_file(&path) {
            Ok(()) => removed += 1,
            Err(e) => log::warn!("removing dangling log symlink {}: {e}", path.display()),
        }
    }
    removed
}

#[cfg(test)]
mod tests;
