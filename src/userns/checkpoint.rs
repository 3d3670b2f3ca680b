//! A pod's mappings file, `<pods dir>/<uid>/userns` (upstream
//! userns_manager.go `writeMappingsToFile`/`readMappingsFromFile` over
//! pkg/kubelet/util/store `FileStore`, and the shape checks of
//! `parseUserNsFileAndRecord`). The JSON is Go's `json.Marshal` of
//! upstream's `userNamespace`, field for field:
//! `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[…]}`.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::UsernsError;

/// Upstream `mappingsFile`: the file's name in the pod directory.
pub const MAPPINGS_FILE: &str = "userns";

/// The temporary file a write goes through, hidden as FileStore's are
/// (upstream names it `.` plus random digits; a fixed name suffices under
/// the manager's lock).
const TMP_FILE: &str = ".userns.tmp";

/// One range of IDs: container IDs from `container_id` are host IDs from
/// `host_id` (upstream `idMapping`, and the CRI `IDMapping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IdMapping {
    #[serde(rename = "hostId", default)]
    pub host_id: u32,
    #[serde(rename = "containerId", default)]
    pub container_id: u32,
    #[serde(default)]
    pub length: u32,
}

/// A pod's user namespace: the CRI `UserNamespace{mode: POD}`'s `uids` and
/// `gids` (upstream `userNamespace`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Mappings {
    #[serde(rename = "uidMappings")]
    pub uids: Vec<IdMapping>,
    #[serde(rename = "gidMappings")]
    pub gids: Vec<IdMapping>,
}

impl Mappings {
    /// What upstream `createUserNs` writes: container ID 0 at `host_id`,
    /// `length` IDs, the same for UIDs and GIDs.
    pub fn single(host_id: u32, length: u32) -> Self {
        let m = IdMapping {
            host_id,
            container_id: 0,
            length,
        };
        Mappings {
            uids: vec![m],
            gids: vec![m],
        }
    }
}

/// The file as decoded: Go leaves a `null` or missing list empty, and a
/// `null` document a zero value, where serde would refuse them.
#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "uidMappings", default)]
    uids: Option<Vec<IdMapping>>,
    #[serde(rename = "gidMappings", default)]
    gids: Option<Vec<IdMapping>>,
}

/// The file's content checked as upstream `parseUserNsFileAndRecord` checks
/// it before recording: one mapping each, identical, with root mapped.
/// Returns the mappings and the single (host ID, length).
pub(super) fn parse(content: &[u8]) -> Result<(Mappings, IdMapping), UsernsError> {
    let wire: Option<Wire> =
        serde_json::from_slice(content).map_err(|e| UsernsError::InvalidFile(e.to_string()))?;
    let mappings = match wire {
        Some(w) => Mappings {
            uids: w.uids.unwrap_or_default(),
            gids: w.gids.unwrap_or_default(),
        },
        None => Mappings::default(),
    };
    let (uid, gid) = match (mappings.uids.as_slice(), mappings.gids.as_slice()) {
        ([uid], [gid]) => (*uid, *gid),
        ([_], _) => return Err(UsernsError::MappingCountsDiffer),
        _ => return Err(UsernsError::NotOneMapping),
    };
    if uid != gid {
        return Err(UsernsError::MappingsDiffer);
    }
    // Root must be mapped: some runtimes assume it, and rkubelet (as
    // upstream) never writes anything else.
    if uid.container_id != 0 {
        return Err(UsernsError::UidZeroNotMapped);
    }
    if gid.container_id != 0 {
        return Err(UsernsError::GidZeroNotMapped);
    }
    Ok((mappings, uid))
}

/// The file's bytes, empty when there is none (upstream's
/// `ErrKeyNotFound`). As `NewFileStore`, creates the pod directory first.
pub(super) fn read(pod_dir: &Path) -> Result<Vec<u8>, UsernsError> {
    ensure_dir(pod_dir)?;
    let path = pod_dir.join(MAPPINGS_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(UsernsError::io("open", &path, e)),
    }
}

/// Writes the file whole or not at all (FileStore's temp file, fsync and
/// rename), then fsyncs the pod directory so the rename is durable.
pub(super) fn write(pod_dir: &Path, mappings: &Mappings) -> Result<(), UsernsError> {
    let data = serde_json::to_vec(mappings).map_err(|e| UsernsError::Encode(e.to_string()))?;
    ensure_dir(pod_dir)?;
    let tmp = pod_dir.join(TMP_FILE);
    let path = pod_dir.join(MAPPINGS_FILE);
    if let Err(e) = write_tmp(&tmp, &data) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, &path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(UsernsError::Io {
            op: "rename",
            path: format!("{} {}", tmp.display(), path.display()),
            source: e,
        });
    }
    let dir = std::fs::File::open(pod_dir).map_err(|e| UsernsError::io("open", pod_dir, e))?;
    dir.sync_all()
        .map_err(|e| UsernsError::io("sync", pod_dir, e))
}

/// The temporary file, 0600 as Go's `os.CreateTemp` makes it, synced.
fn write_tmp(tmp: &Path, data: &[u8]) -> Result<(), UsernsError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .map_err(|e| UsernsError::io("open", tmp, e))?;
    f.write_all(data)
        .map_err(|e| UsernsError::io("write", tmp, e))?;
    f.sync_all().map_err(|e| UsernsError::io("sync", tmp, e))
}

/// FileStore's `ensureDirectory`: the directory (0755, with parents) unless
/// something already stands at the path.
fn ensure_dir(dir: &Path) -> Result<(), UsernsError> {
    if std::fs::metadata(dir).is_ok() {
        return Ok(());
    }
    DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| UsernsError::CreateStore(Box::new(UsernsError::io("mkdir", dir, e))))
}
