//! Static pods from staticPodPath (upstream pkg/kubelet/config/file.go and
//! file_linux.go): a directory of manifests or a single manifest file, re-read
//! every period and promptly on inotify events.
//!
//! Like upstream, every regular file in the directory whose name does not
//! start with '.' is read, whatever its extension: manifests without a
//! `.yaml` suffix keep working, and editors' swap files (`.x.swp`) and
//! hidden temporaries are skipped. Subdirectories are not recursed into.

use crate::podutil::PodExt;
use crate::util::worker::{self, ShutdownStage, Worker};
use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use k8s_openapi::api::core::v1::Pod;
use log::{debug, error, info, warn};
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent};

use super::common::{decode_single_pod, ManifestOrigin, MAX_CONFIG_LENGTH};
use super::send_update;
use super::ManifestError;
use crate::types::{PodUpdate, FILE_SOURCE};

/// How often the thread looks at inotify and the shutdown channel.
const TICK: Duration = Duration::from_millis(50);
/// Quiet time after the last inotify event before re-reading, so an editor's
/// write-rename-chmod burst yields one snapshot.
const DEBOUNCE: Duration = Duration::from_millis(100);
/// Upper bound on debouncing when events keep arriving.
const MAX_DEBOUNCE: Duration = Duration::from_millis(500);

/// Manifests that could not be used, each with a message naming the file.
pub type FileErrors = Vec<(PathBuf, String)>;

/// Starts the "file-source" thread. It sends a `PodOperation::Set` of all valid
/// pods under `path` after every read, and exits when `shutdown` receives a
/// message or all its senders are dropped.
pub fn start_file_source(
    path: impl Into<PathBuf>,
    node_name: &str,
    period: Duration,
    updates: Sender<PodUpdate>,
    shutdown: Receiver<()>,
) -> io::Result<Worker> {
    let source = FileSource::new(path.into(), node_name, updates);
    worker::spawn("file-source", ShutdownStage::Sources, move || {
        source.run(period, &shutdown)
    })
}

/// Why the wait between reads ended.
enum Wake {
    Period,
    Changed,
    Shutdown,
}

/// The directory being watched and, when staticPodPath is a file (or does not
/// exist yet), the one entry name in it that matters.
#[derive(Clone, PartialEq, Eq, Debug)]
struct WatchTarget {
    dir: PathBuf,
    entry: Option<OsString>,
}

struct Watch {
    target: WatchTarget,
    inotify: Inotify,
}

struct FileSource {
    path: PathBuf,
    node_name: String,
    updates: Sender<PodUpdate>,
    watch: Option<Watch>,
    missing_logged: bool,
    /// Whether a snapshot has been sent yet.
    sent_once: bool,
    /// Last error logged per manifest, so a broken file is logged at error
    /// level once per distinct failure rather than on every period.
    reported: HashMap<PathBuf, String>,
}

impl FileSource {
    fn new(path: PathBuf, node_name: &str, updates: Sender<PodUpdate>) -> Self {
        FileSource {
            path,
            node_name: node_name.to_string(),
            updates,
            watch: None,
            missing_logged: false,
            sent_once: false,
            reported: HashMap::new(),
        }
    }

    fn run(mut self, period: Duration, shutdown: &Receiver<()>) {
        info!("Watching static pod path {}", self.path.display());
        loop {
            self.ensure_watch();
            if let Some(pods) = self.read_pods() {
                let update = PodUpdate::set(FILE_SOURCE, pods);
                if !send_update(&self.updates, update, shutdown) {
                    break;
                }
                self.sent_once = true;
            }
            if let Wake::Shutdown = self.wait(period, shutdown) {
                break;
            }
        }
        debug!("file source for {} stopped", self.path.display());
    }

    /// Waits for the period to pass, a debounced change, or shutdown.
    fn wait(&mut self, period: Duration, shutdown: &Receiver<()>) -> Wake {
        let deadline = Instant::now() + period;
        let mut burst: Option<(Instant, Instant)> = None; // (first, last) event
        loop {
            let now = Instant::now();
            if let Some((first, last)) = burst {
                if now >= last + DEBOUNCE || now >= first + MAX_DEBOUNCE {
                    return Wake::Changed;
                }
            }
            if now >= deadline {
                return Wake::Period;
            }
            let timeout = TICK.min(deadline - now);
            match shutdown.recv_timeout(timeout) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return Wake::Shutdown,
                Err(RecvTimeoutError::Timeout) => {}
            }
            if self.drain_events() {
                let at = Instant::now();
                burst = Some(burst.map_or((at, at), |(first, _)| (first, at)));
            }
        }
    }

    /// Where inotify should look: the directory itself, or the parent of a
    /// manifest file or of a path that does not exist yet (to see it appear).
    fn desired_target(&self) -> Option<WatchTarget> {
        if self.path.is_dir() {
            return Some(WatchTarget {
                dir: self.path.clone(),
                entry: None,
            });
        }
        let entry = self.path.file_name()?.to_os_string();
        let parent = match self.path.parent() {
            Some(p) if p.as_os_str().is_empty() => Path::new("."),
            Some(p) => p,
            None => return None,
        };
        parent.is_dir().then(|| WatchTarget {
            dir: parent.to_path_buf(),
            entry: Some(entry),
        })
    }

    /// (Re)creates the inotify watch when what should be watched changed.
    /// Failing to watch is not fatal: the periodic re-read still works.
    fn ensure_watch(&mut self) {
        let desired = self.desired_target();
        if self.watch.as_ref().map(|w| &w.target) == desired.as_ref() {
            return;
        }
        self.watch = None;
        let Some(target) = desired else {
            return;
        };
        match new_watch(&target.dir) {
            Ok(inotify) => self.watch = Some(Watch { target, inotify }),
            Err(e) => warn!(
                "Unable to watch {} with inotify, relying on periodic reads: {e}",
                target.dir.display()
            ),
        }
    }

    /// Reads all pending inotify events; true if any of them matters.
    fn drain_events(&mut self) -> bool {
        let Some(watch) = &self.watch else {
            return false;
        };
        let mut relevant = false;
        let mut drop_watch = false;
        loop {
            match watch.inotify.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => {
                    for event in &events {
                        let (matters, lost) = classify(event, &watch.target);
                        relevant |= matters;
                        drop_watch |= lost;
                    }
                }
                Err(Errno::EAGAIN) => break,
                Err(e) => {
                    warn!("Reading inotify events for {}: {e}", self.path.display());
                    relevant = true;
                    drop_watch = true;
                    break;
                }
            }
        }
        if drop_watch {
            // The watched directory went away; ensure_watch sets up a new one.
            self.watch = None;
        }
        relevant
    }

    /// One full read of the path. None means nothing could be read at all, and
    /// the last snapshot stands; a missing path is an empty snapshot, as upstream.
    fn read_pods(&mut self) -> Option<Vec<Pod>> {
        let meta = match fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !self.missing_logged {
                    warn!(
                        "Static pod path {} does not exist; will keep checking",
                        self.path.display()
                    );
                    self.missing_logged = true;
                }
                return Some(Vec::new());
            }
            Err(e) => {
                error!("Unable to read config path {}: {e}", self.path.display());
                return None;
            }
        };
        if self.missing_logged {
            info!("Static pod path {} now exists", self.path.display());
            self.missing_logged = false;
        }
        let (pods, errors) = if meta.is_dir() {
            match extract_from_dir(&self.path, &self.node_name) {
                Ok(read) => read,
                Err(e) => {
                    error!("Unable to read config path {}: {e:#}", self.path.display());
                    return None;
                }
            }
        } else if meta.is_file() {
            let (pods, errors) = extract_files(std::slice::from_ref(&self.path), &self.node_name);
            // As upstream, a broken single manifest keeps the last state, but
            // the first read still sends a snapshot so the source gets ready.
            if !errors.is_empty() && self.sent_once {
                self.report(errors);
                return None;
            }
            (pods, errors)
        } else {
            error!(
                "Config path {} is not a directory or file",
                self.path.display()
            );
            return None;
        };
        self.report(errors);
        Some(pods)
    }

    fn report(&mut self, errors: FileErrors) {
        let mut now = HashMap::with_capacity(errors.len());
        for (path, message) in errors {
            if self.reported.get(&path) == Some(&message) {
                debug!("Could not process manifest file (unchanged): {message}");
            } else {
                error!("Could not process manifest file: {message}");
            }
            now.insert(path, message);
        }
        self.reported = now;
    }
}

fn new_watch(dir: &Path) -> nix::Result<Inotify> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    let mask = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF;
    inotify.add_watch(dir, mask)?;
    Ok(inotify)
}

/// Returns (event matters, watch is gone).
fn classify(event: &InotifyEvent, target: &WatchTarget) -> (bool, bool) {
    let gone =
        AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF;
    if event.mask.intersects(gone) {
        return (true, true);
    }
    if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
        return (true, false);
    }
    let Some(name) = event.name.as_deref() else {
        return (false, false);
    };
    let matters = match &target.entry {
        Some(entry) => name == entry.as_os_str(),
        None => !is_hidden(name),
    };
    (matters, false)
}

fn is_hidden(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
}

/// Reads every non-hidden regular file of `dir`, in name order. Errors for
/// single files are returned beside the pods; only an unreadable directory
/// is an error.
pub fn extract_from_dir(
    dir: &Path,
    node_name: &str,
) -> Result<(Vec<Pod>, FileErrors), ManifestError> {
    let mut paths = Vec::new();
    let listing = |error| ManifestError::Listing {
        dir: dir.display().to_string(),
        error,
    };
    for entry in fs::read_dir(dir).map_err(listing)? {
        let entry = entry.map_err(listing)?;
        if !is_hidden(&entry.file_name()) {
            paths.push(entry.path());
        }
    }
    paths.sort();
    let files: Vec<PathBuf> = paths.into_iter().filter(|p| is_manifest_file(p)).collect();
    Ok(extract_files(&files, node_name))
}

/// Follows symlinks, as upstream's os.Stat does; directories are not recursed.
fn is_manifest_file(path: &Path) -> bool {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => true,
        Ok(meta) if meta.is_dir() => {
            debug!("Not recursing into manifest path {}", path.display());
            false
        }
        Ok(_) => {
            debug!("Manifest path {} is not a regular file", path.display());
            false
        }
        // Removed between listing and stat: nothing to report.
        Err(_) => false,
    }
}

/// Decodes each file; a pod whose name+namespace was already taken by an
/// earlier file is rejected, as upstream's filterInvalidPods does.
fn extract_files(files: &[PathBuf], node_name: &str) -> (Vec<Pod>, FileErrors) {
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    let mut owners: HashMap<String, &Path> = HashMap::new();
    let mut seen = HashSet::new();
    for path in files {
        match extract_from_file(path, node_name) {
            Ok(pod) => {
                let full_name = pod.full_name();
                if seen.insert(full_name.clone()) {
                    owners.insert(full_name, path);
                    pods.push(pod);
                } else {
                    let first = owners.get(&full_name).map_or(Path::new("?"), |p| *p);
                    let message = format!(
                        "{}: duplicate pod name {full_name:?}, already defined by {}",
                        path.display(),
                        first.display()
                    );
                    errors.push((path.clone(), message));
                }
            }
            // A file deleted mid-read is not an error worth reporting.
            Err(e) if e.is_not_found() => {}
            Err(e) => errors.push((path.clone(), e.to_string())),
        }
    }
    (pods, errors)
}

/// Reads one manifest. Errors start with the file's path.
pub fn extract_from_file(path: &Path, node_name: &str) -> Result<Pod, ManifestError> {
    let data = read_limited(path)?;
    let origin = path.to_string_lossy();
    decode_single_pod(&data, ManifestOrigin::File(&origin), node_name)
        .map_err(|e| e.at(path.display().to_string()))
}

fn read_limited(path: &Path) -> Result<Vec<u8>, ManifestError> {
    let file = fs::File::open(path).map_err(ManifestError::Read)?;
    let mut data = Vec::new();
    file.take(MAX_CONFIG_LENGTH as u64 + 1)
        .read_to_end(&mut data)
        .map_err(ManifestError::Read)?;
    if data.len() > MAX_CONFIG_LENGTH {
        return Err(ManifestError::TooLarge);
    }
    Ok(data)
}
