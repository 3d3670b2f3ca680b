//! The pods' user namespace ID allocator (upstream
//! pkg/kubelet/userns/userns_manager.go, v1.34): every `hostUsers: false`
//! pod gets its own block of 65536 host IDs, cut from the kubelet's range
//! ([`IdRange`]) and kept in `<pods dir>/<uid>/userns` so that a restart
//! never hands one block to two pods.
//!
//! As upstream:
//! - A bitmap has a bit per block; a new pod takes the first free block
//!   after a random one (the registry allocator's random scan).
//! - The checkpoints of every pod directory are recorded when the manager
//!   is built. One that does not parse or does not fit the range fails the
//!   build (`record pod mappings for existing pod "<uid>": …`), which upstream
//!   turns into a kubelet that does not start.
//! - [`UsernsManager::get_or_create`] re-reads a pod's file on every call and
//!   writes one (temp file, fsync, rename, fsync of the directory) the first
//!   time.
//! - [`UsernsManager::clean_up_orphans`] frees pods on disk that are no
//!   longer known, and allocations whose directory is gone.
//!
//! Not here: the feature gate, the runtime handler's support check (with
//! its ``can't set `spec.hostUsers: false`, …`` messages) and the CRI
//! `UserNamespace` message, which are the caller's.
//!
//! One deviation: blocks whose IDs would reach 2^32-1 (the default range's
//! last block, 4294901760-4294967295) or pass 2^32 (a subuid range that runs
//! past the top) are never handed out. The kernel refuses such a mapping and
//! v1.34 would leave the pod failing `FailedCreatePodSandBox` forever
//! (kubernetes#139916), or wrap a past-the-top block round to low host IDs.
//! A file naming the top block (written by an upstream kubelet) is still
//! recorded, as upstream records it.

mod bitmap;
mod checkpoint;
mod error;
mod range;

#[cfg(test)]
mod range_tests;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rkubelet_util::lock;

use bitmap::Bitmap;
pub use checkpoint::{IdMapping, Mappings, MAPPINGS_FILE};
pub use error::UsernsError;
pub use range::IdRange;

/// IDs per pod: upstream `userNsUnitLength` and
/// `DefaultKubeletUserNamespacesIDsPerPod`. v1.34 ignores
/// `userNamespaces.idsPerPod` (honoured from v1.35, kubernetes#133373).
pub const USERNS_LENGTH: u32 = 65536;

/// The last block whose IDs all stay below 2^32-1 is block 65534.
const BLOCKS_BELOW_INVALID_ID: u32 = 65535;

/// Hands out and records pods' ID blocks. One lock guards the bitmap, the
/// owners and the files, as upstream's `lock` does.
pub struct UsernsManager {
    pods_dir: PathBuf,
    /// The range's first block (upstream `off`).
    off: u32,
    /// Blocks in the range (upstream `len`).
    blocks: u32,
    state: Mutex<State>,
}

struct State {
    /// A bit per block of the range, block 0 being `off`.
    used: Bitmap,
    /// Pod UID → the first host ID of its block (upstream `usedBy`).
    used_by: HashMap<String, u32>,
}

impl UsernsManager {
    /// [`UsernsManager::with_max_pods`] without the room-for-max-pods check.
    #[cfg(test)]
    pub fn new(pods_dir: PathBuf, range: IdRange) -> Result<Self, UsernsError> {
        Self::with_max_pods(pods_dir, range, 0)
    }

    /// Upstream `MakeUserNsManager`: checks `range` (whole blocks, not the
    /// host's block 0, at least `max_pods` blocks), then records every
    /// `<pods_dir>/*/userns`. A missing `pods_dir` has nothing to record.
    pub fn with_max_pods(
        pods_dir: PathBuf,
        range: IdRange,
        max_pods: u32,
    ) -> Result<Self, UsernsError> {
        range.validate(max_pods)?;
        let off = range.first / USERNS_LENGTH;
        let blocks = range.len / USERNS_LENGTH;
        log::debug!(
            "User namespace manager mapping: offset {off}, length {blocks}, idsPerPod {USERNS_LENGTH}"
        );
        let manager = UsernsManager {
            pods_dir,
            off,
            blocks,
            state: Mutex::new(State {
                used: Bitmap::new(blocks as usize),
                used_by: HashMap::new(),
            }),
        };
        manager.record_existing()?;
        Ok(manager)
    }

    /// Records the block of every pod directory's mappings file (the
    /// constructor's scan; running it again changes nothing). A directory
    /// without the file, or with an empty one, has no user namespace.
    pub fn record_existing(&self) -> Result<(), UsernsError> {
        let found = match self.list_pods_from_disk() {
            Ok(found) => found,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(UsernsError::ReadPodsDir(Box::new(UsernsError::io(
                    "open",
                    &self.pods_dir,
                    e,
                ))))
            }
        };
        let mut state = lock(&self.state);
        for pod in found {
            log::debug!("reading pod from disk for user namespace: pod {pod}");
            let dir = self.pod_dir(&pod);
            let recorded = checkpoint::read(&dir).and_then(|content| {
                if content.is_empty() {
                    return Ok(());
                }
                self.parse_and_record(&mut state, &pod, &content)
                    .map(|_| ())
            });
            if let Err(e) = recorded {
                return Err(UsernsError::RecordExisting {
                    path: dir.join(MAPPINGS_FILE),
                    pod,
                    source: Box::new(e),
                });
            }
        }
        Ok(())
    }

    /// Upstream `GetOrCreateUserNamespaceMappings` once the pod has
    /// `hostUsers: false` and its runtime handler supports user namespaces:
    /// the pod's recorded block, or a new one written to its file. `None`
    /// when `host_users_false` is false (hostUsers true or unset: the
    /// caller sends `{mode: NODE}`).
    pub fn get_or_create(
        &self,
        pod_uid: &str,
        host_users_false: bool,
    ) -> Result<Option<Mappings>, UsernsError> {
        if !host_users_false {
            return Ok(None);
        }
        let mut state = lock(&self.state);
        let dir = self.pod_dir(pod_uid);
        let content = checkpoint::read(&dir)?;
        let mappings = if content.is_empty() {
            self.create(&mut state, pod_uid, &dir)
                .map_err(|e| UsernsError::CreateUserNamespace(Box::new(e)))?
        } else {
            self.parse_and_record(&mut state, pod_uid, &content)
                .map_err(|e| UsernsError::UserNamespace(Box::new(e)))?
        };
        Ok(Some(mappings))
    }

    /// Upstream `Release`: frees the pod's block and removes its file;
    /// nothing for a pod without a block.
    #[cfg(test)]
    pub fn release(&self, pod_uid: &str) {
        let mut state = lock(&self.state);
        self.release_locked(&mut state, pod_uid);
    }

    /// Upstream `CleanupOrphanedPodUsernsAllocations`, `active` being the
    /// UIDs of the pods the kubelet knows and of those the runtime still
    /// runs: releases the block of every pod not in `active`, and of every
    /// pod whose directory is gone. Upstream lists the pods directory;
    /// every file there was recorded at start or when written, so walking
    /// the recorded blocks finds the same pods without a directory read per
    /// housekeeping (and costs nothing while no pod has a block).
    pub fn clean_up_orphans(&self, active: &HashSet<String>) {
        let mut state = lock(&self.state);
        let orphans: Vec<String> = state
            .used_by
            .keys()
            .filter(|pod| !active.contains(*pod) || self.pod_dir_gone(pod))
            .cloned()
            .collect();
        for pod in orphans {
            log::debug!("Clean up orphaned pod user namespace possible allocation: pod {pod}");
            self.release_locked(&mut state, &pod);
        }
    }

    /// Only a directory known to be gone: a stat that fails otherwise
    /// never frees a running pod's block.
    fn pod_dir_gone(&self, pod_uid: &str) -> bool {
        matches!(std::fs::metadata(self.pod_dir(pod_uid)), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    }

    fn pod_dir(&self, pod_uid: &str) -> PathBuf {
        self.pods_dir.join(pod_uid)
    }

    /// Upstream `ListPodsFromDisk`: the directories in the pods directory,
    /// sorted by name as Go's `os.ReadDir` returns them. Names that are not
    /// UTF-8 cannot be pod UIDs and are skipped.
    fn list_pods_from_disk(&self) -> std::io::Result<Vec<String>> {
        let mut pods = Vec::new();
        for entry in std::fs::read_dir(&self.pods_dir)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            if let Ok(name) = entry.file_name().into_string() {
                pods.push(name);
            }
        }
        pods.sort();
        Ok(pods)
    }

    /// Upstream `parseUserNsFileAndRecord`.
    fn parse_and_record(
        &self,
        state: &mut State,
        pod: &str,
        content: &[u8],
    ) -> Result<Mappings, UsernsError> {
        let (mappings, mapping) = checkpoint::parse(content)?;
        self.record(state, pod, mapping.host_id, mapping.length)?;
        Ok(mappings)
    }

    /// Upstream `record`: marks the block starting at `from` as the pod's.
    fn record(
        &self,
        state: &mut State,
        pod: &str,
        from: u32,
        length: u32,
    ) -> Result<(), UsernsError> {
        if length != USERNS_LENGTH {
            return Err(UsernsError::WrongLength(length));
        }
        if !from.is_multiple_of(USERNS_LENGTH) {
            return Err(UsernsError::WrongOffset(from));
        }
        let previous = state.used_by.get(pod).copied();
        if previous.is_some_and(|p| p != from) {
            return Err(UsernsError::DifferentRange {
                pod: pod.to_string(),
            });
        }
        let block = from / USERNS_LENGTH;
        if block < self.off || block - self.off >= self.blocks {
            return Err(UsernsError::OutOfRange(from));
        }
        let index = (block - self.off) as usize;
        if previous.is_none() && state.used.has(index) {
            return Err(UsernsError::RangeTaken {
                pod: pod.to_string(),
            });
        }
        if previous == Some(from) {
            return Ok(());
        }
        log::debug!("new pod user namespace allocation: pod {pod}");
        state.used.allocate(index);
        state.used_by.insert(pod.to_string(), from);
        Ok(())
    }

    /// Upstream `createUserNs`: a new block, written to the pod's file; the
    /// block is released again when the write fails.
    fn create(&self, state: &mut State, pod: &str, dir: &Path) -> Result<Mappings, UsernsError> {
        let host_id = self.allocate_one(state, pod)?;
        let mappings = Mappings::single(host_id, USERNS_LENGTH);
        if let Err(e) = checkpoint::write(dir, &mappings) {
            self.release_locked(state, pod);
            return Err(e);
        }
        Ok(mappings)
    }

    /// Upstream `allocateOne`: the first host ID of a free block. As
    /// upstream, a pod that already had a block keeps that one taken (it
    /// may still be in use) and gets the new one.
    fn allocate_one(&self, state: &mut State, pod: &str) -> Result<u32, UsernsError> {
        let limit = self.allocatable_blocks();
        let start = (rkubelet_util::random_unit() * f64::from(limit)) as usize;
        let index = state
            .used
            .allocate_next(limit as usize, start)
            .ok_or(UsernsError::NoFreeSlot)?;
        // index < limit <= 65535 - off, so the product stays below 2^32.
        let host_id = (index as u32 + self.off) * USERNS_LENGTH;
        log::debug!("new pod user namespace allocation: pod {pod}");
        state.used_by.insert(pod.to_string(), host_id);
        Ok(host_id)
    }

    /// The blocks a new pod may get: the range's, less any whose IDs would
    /// reach 2^32-1 (see the module's deviation).
    fn allocatable_blocks(&self) -> u32 {
        self.blocks
            .min(BLOCKS_BELOW_INVALID_ID.saturating_sub(self.off))
    }

    /// Upstream `releaseWithLock`.
    fn release_locked(&self, state: &mut State, pod: &str) {
        let Some(from) = state.used_by.remove(pod) else {
            log::debug!("pod user namespace allocation not present: pod {pod}");
            return;
        };
        log::debug!("releasing pod user namespace allocation: pod {pod}");
        let _ = std::fs::remove_file(self.pod_dir(pod).join(MAPPINGS_FILE));
        let block = from / USERNS_LENGTH;
        if block >= self.off {
            state.used.release((block - self.off) as usize);
        }
    }

    /// Upstream `podAllocated`.
    #[cfg(test)]
    fn pod_allocated(&self, pod_uid: &str) -> Option<u32> {
        lock(&self.state).used_by.get(pod_uid).copied()
    }
}
