//! The plugin watcher (upstream pluginmanager/pluginwatcher): inotify on
//! the registry directory and every subdirectory in it, turning unix
//! sockets that appear and go into the desired state of world.
//!
//! As upstream, names starting with '.' and anything that is not a socket
//! are ignored; subdirectories are followed. Entries are looked at without
//! following symlinks, so a link cannot make the walk loop.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use super::cache::DesiredStateOfWorld;
use super::PluginManagerError;

/// The registry directory's mode when it has to be created: plugins are
/// root's, and others have no business listing their sockets.
const DIR_MODE: u32 = 0o750;

/// Watches one registry directory tree.
pub(crate) struct Watcher {
    root: PathBuf,
    inotify: Option<Inotify>,
    /// The directory each watch descriptor stands for (a short list: one
    /// entry per directory in the registry).
    dirs: Vec<(WatchDescriptor, PathBuf)>,
    /// Set when events were lost (queue overflow): the tree is walked again.
    rewalk: bool,
    /// How deep below the root directories are followed.
    max_depth: usize,
    /// A directory right under the root that is never walked.
    skip: Option<&'static str>,
    /// A watcher that failed to start tries again from then on.
    retry_at: Option<Instant>,
}

/// How long a watcher that could not start waits before trying again.
const RESTART_DELAY: Duration = Duration::from_secs(10);

impl Watcher {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Watcher {
            root: root.into(),
            inotify: None,
            dirs: Vec::new(),
            rewalk: false,
            max_depth: usize::MAX,
            skip: None,
            retry_at: None,
        }
    }

    /// Follows directories down to `max_depth` below the root only, and
    /// never the one named `skip` right under it (the old `plugins`
    /// directory also holds drivers' files and mounted volumes).
    pub fn limited(mut self, max_depth: usize, skip: &'static str) -> Self {
        self.max_depth = max_depth;
        self.skip = Some(skip);
        self
    }

    /// Whether the walk stays out of `dir`.
    fn out_of_bounds(&self, dir: &Path) -> bool {
        let Ok(rel) = dir.strip_prefix(&self.root) else {
            return true;
        };
        let depth = rel.components().count();
        depth > self.max_depth || (depth == 1 && self.skip.is_some_and(|s| rel == Path::new(s)))
    }

    /// Creates the directory if missing, watches it and records the
    /// sockets already in it (upstream's Start and traversePluginDir).
    pub fn start(&mut self, dsw: &mut DesiredStateOfWorld) -> Result<(), PluginManagerError> {
        self.inotify = None;
        self.dirs.clear();
        create_dir(&self.root)?;
        let flags = InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC;
        let inotify = Inotify::init(flags).map_err(|source| PluginManagerError::Watch {
            path: self.root.clone(),
            source,
        })?;
        let root_wd = inotify
            .add_watch(&self.root, watch_mask())
            .map_err(|source| PluginManagerError::Watch {
                path: self.root.clone(),
                source,
            })?;
        self.dirs.push((root_wd, self.root.clone()));
        self.inotify = Some(inotify);
        info!("Watching plugin registry {}", self.root.display());
        self.resync(dsw);
        Ok(())
    }

    /// The inotify descriptor to poll, once started.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(|i| i.as_fd())
    }

    /// When [`Watcher::take_events`] should next run to start the
    /// watcher: None while it runs, now when it lost its directory.
    pub fn restart_at(&self) -> Option<Instant> {
        match &self.inotify {
            Some(_) => None,
            None => Some(self.retry_at.unwrap_or_else(Instant::now)),
        }
    }

    /// Applies the inotify events pending now (the manager polls [`fd`]
    /// for them); true if the desired state may have changed. A watcher
    /// that could not start (or lost its directory) tries again here once
    /// [`restart_at`] has come.
    ///
    /// [`fd`]: Watcher::fd
    /// [`restart_at`]: Watcher::restart_at
    pub fn take_events(&mut self, dsw: &mut DesiredStateOfWorld) -> bool {
        if self.inotify.is_none() {
            if self.retry_at.is_some_and(|at| Instant::now() < at) {
                return false;
            }
            if let Err(e) = self.start(dsw) {
                warn!("Plugin watcher: {e}; trying again in {RESTART_DELAY:?}");
                self.retry_at = Some(Instant::now() + RESTART_DELAY);
                return false;
            }
            self.retry_at = None;
            return true;
        }
        let events = self.read();
        let mut changed = false;
        for event in &events {
            changed |= self.apply(event, dsw);
        }
        if self.rewalk {
            self.rewalk = false;
            info!(
                "Plugin watcher: events were lost; walking {} again",
                self.root.display()
            );
            changed |= self.resync(dsw);
        }
        changed
    }

    /// Reads everything pending; the descriptor is non-blocking, so none
    /// pending is EAGAIN at once.
    fn read(&mut self) -> Vec<InotifyEvent> {
        let Some(inotify) = &self.inotify else {
            return Vec::new();
        };
        let mut all = Vec::new();
        loop {
            match inotify.read_events() {
                Ok(events) if events.is_empty() => break,
                Ok(events) => all.extend(events),
                Err(Errno::EAGAIN) | Err(Errno::EINTR) => break,
                Err(e) => {
                    warn!("Plugin watcher: reading events: {e}; walking again");
                    self.rewalk = true;
                    break;
                }
            }
        }
        all
    }

    /// One event; true if the desired state changed.
    fn apply(&mut self, event: &InotifyEvent, dsw: &mut DesiredStateOfWorld) -> bool {
        if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            self.rewalk = true;
            return false;
        }
        let Some(dir) = self.dir_of(event.wd) else {
            return false;
        };
        let self_gone =
            AddWatchFlags::IN_IGNORED | AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF;
        if event.mask.intersects(self_gone) {
            return self.lost_dir(event.wd, &dir, dsw);
        }
        let Some(name) = &event.name else {
            return false;
        };
        let path = dir.join(name);
        if event
            .mask
            .intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM)
        {
            return self.removed(&path, dsw);
        }
        if event
            .mask
            .intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
        {
            return self.created(&path, dsw);
        }
        false
    }

    /// A watched directory went away. Losing the root means starting over
    /// (the directory is made again at the next wait).
    fn lost_dir(&mut self, wd: WatchDescriptor, dir: &Path, dsw: &mut DesiredStateOfWorld) -> bool {
        self.dirs.retain(|(w, _)| *w != wd);
        if dir != self.root {
            return dsw.remove_under(dir) > 0;
        }
        warn!(
            "Plugin registry {} went away; making it again",
            self.root.display()
        );
        self.inotify = None;
        self.dirs.clear();
        dsw.remove_under(&self.root) > 0
    }

    /// A name appeared (created or moved in): a socket is a plugin, a
    /// directory is watched and walked.
    fn created(&mut self, path: &Path, dsw: &mut DesiredStateOfWorld) -> bool {
        if is_hidden(path) {
            debug!("Plugin watcher: ignoring hidden {}", path.display());
            return false;
        }
        let meta = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            // Gone again before we looked: its removal event follows.
            Err(_) => return false,
        };
        if meta.is_dir() {
            let mut found = Vec::new();
            self.walk(path, &mut found);
            for socket in &found {
                dsw.add_or_update(socket);
            }
            return !found.is_empty();
        }
        if !meta.file_type().is_socket() {
            debug!("Plugin watcher: ignoring non-socket {}", path.display());
            return false;
        }
        info!("Plugin socket {} appeared", path.display());
        dsw.add_or_update(path);
        true
    }

    /// A name went (deleted or moved away): the socket, or every socket
    /// under a directory, leaves the desired state. A moved directory
    /// keeps its watches, which would now see a tree elsewhere.
    fn removed(&mut self, path: &Path, dsw: &mut DesiredStateOfWorld) -> bool {
        let moved: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, d)| d.starts_with(path))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in moved {
            self.dirs.retain(|(w, _)| *w != wd);
            if let Some(inotify) = &self.inotify {
                // Already gone with a deleted directory: nothing to undo.
                let _ = inotify.rm_watch(wd);
            }
        }
        if dsw.remove(path) {
            info!("Plugin socket {} went away", path.display());
            return true;
        }
        dsw.remove_under(path) > 0
    }

    /// Walks the whole tree again: sockets missing from the desired state
    /// are added, those no longer on disk removed. Used at start and after
    /// lost events; a socket replaced while events were lost keeps its
    /// old timestamp.
    fn resync(&mut self, dsw: &mut DesiredStateOfWorld) -> bool {
        let mut found = Vec::new();
        let root = self.root.clone();
        self.walk(&root, &mut found);
        found.sort();
        found.dedup();
        let gone: Vec<PathBuf> = dsw
            .paths()
            .filter(|p| {
                p.starts_with(&self.root) && found.binary_search_by(|f| f.as_path().cmp(p)).is_err()
            })
            .map(Path::to_path_buf)
            .collect();
        let mut changed = !gone.is_empty();
        for path in gone {
            dsw.remove(&path);
        }
        for path in found {
            if !dsw.contains(&path) {
                dsw.add_or_update(&path);
                changed = true;
            }
        }
        changed
    }

    /// Watches `dir` and collects the sockets under it, following
    /// subdirectories. A directory that cannot be read or watched is
    /// logged and skipped; the rest of the tree still counts.
    fn dir_of(&self, wd: WatchDescriptor) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find(|(w, _)| *w == wd)
            .map(|(_, d)| d.clone())
    }

    fn walk(&mut self, dir: &Path, found: &mut Vec<PathBuf>) {
        if self.out_of_bounds(dir) {
            debug!("Plugin watcher: not following {}", dir.display());
            return;
        }
        self.add_watch(dir);
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                warn!("Plugin watcher: reading {}: {e}", dir.display());
                return;
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if is_hidden(&path) {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => self.walk(&path, found),
                Ok(t) if t.is_socket() => found.push(path),
                _ => debug!("Plugin watcher: ignoring {}", path.display()),
            }
        }
    }

    fn add_watch(&mut self, dir: &Path) {
        let Some(inotify) = &self.inotify else {
            return;
        };
        match inotify.add_watch(dir, watch_mask()) {
            Ok(wd) => {
                self.dirs.retain(|(w, _)| *w != wd);
                self.dirs.push((wd, dir.to_path_buf()));
            }
            Err(e) => warn!("Plugin watcher: watching {}: {e}", dir.display()),
        }
    }
}

/// What a watched directory reports: names coming and going, and its own
/// end. IN_ONLYDIR and IN_DONT_FOLLOW keep a watch from landing on
/// whatever replaced the directory, or on a link's target.
fn watch_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."))
}

/// Creates the registry directory (and its parents) if missing; something
/// else at that path is an error.
fn create_dir(dir: &Path) -> Result<(), PluginManagerError> {
    let err = |source: io::Error| PluginManagerError::CreateDir {
        path: dir.to_path_buf(),
        source,
    };
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(err)?;
    if fs::metadata(dir).map_err(err)?.is_dir() {
        Ok(())
    } else {
        Err(PluginManagerError::NotADirectory(dir.to_path_buf()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// What a queue overflow triggers: the walk finds what the lost events
    /// would have said.
    #[test]
    fn a_rewalk_catches_up_with_lost_events() {
        let dir = tempfile::TempDir::with_prefix("rkubelet-watcher-").unwrap();
        let root = dir.path().join("registry");
        let mut dsw = DesiredStateOfWorld::default();
        let mut w = Watcher::new(&root);
        w.start(&mut dsw).unwrap();
        UnixListener::bind(root.join("old.sock")).unwrap();
        // The kernel queues the event before bind returns.
        assert!(w.take_events(&mut dsw));
        fs::remove_file(root.join("old.sock")).unwrap();
        UnixListener::bind(root.join("new.sock")).unwrap();
        // Drop the pending events, as an overflow would.
        w.start(&mut DesiredStateOfWorld::default()).unwrap();
        w.rewalk = true;
        assert!(w.take_events(&mut dsw));
        let paths: Vec<_> = dsw.paths().collect();
        assert_eq!(paths, [root.join("new.sock")]);
    }
}
