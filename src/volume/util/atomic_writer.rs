//! Upstream `pkg/volume/util/atomic_writer.go`: writes a volume's files so
//! that readers see either the old set or the new one, never a mix.
//!
//! Layout inside the volume directory (what applications and sidecars such
//! as config reloaders already expect):
//!
//! ```text
//! ..2026_11_23_20_57_01.123456789/   the files of one version
//! ..data -> ..2026_11_23_20_57_01.123456789
//! key    -> ..data/key               one link per top-level path
//! ```
//!
//! A new version is written to a fresh timestamped directory, then `..data`
//! is swapped by renaming a temporary link over it (atomic), then the
//! user-visible links are added or removed and the old version deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

const DATA_DIR: &str = "..data";
const DATA_DIR_TMP: &str = "..data_tmp";

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    /// The file's owner where it is not root (a projected token, upstream
    /// `FsUser`).
    pub fs_user: Option<u32>,
}

/// Relative path → file. Paths are validated by [`validate_path`].
pub type Payload = BTreeMap<String, FileProjection>;

#[derive(Debug)]
pub enum WriteError {
    /// A payload path is absolute, has `..` or is otherwise unusable.
    InvalidPath {
        path: String,
        why: &'static str,
    },
    Io {
        what: String,
        source: io::Error,
    },
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::InvalidPath { path, why } => write!(f, "invalid path {path:?}: {why}"),
            WriteError::Io { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for WriteError {}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> WriteError {
    let what = what.into();
    move |source| WriteError::Io { what, source }
}

/// Upstream validatePath: relative, no `..` element, not starting with
/// `..`, at most 4096 bytes, no element longer than 255 bytes.
pub fn validate_path(path: &str) -> Result<(), WriteError> {
    let bad = |why| {
        Err(WriteError::InvalidPath {
            path: path.to_string(),
            why,
        })
    };
    if path.is_empty() {
        return bad("must not be empty");
    }
    if path.len() > 4096 {
        return bad("must be less than or equal to 4096 characters");
    }
    if Path::new(path).is_absolute() {
        return bad("must be relative");
    }
    if path.starts_with("..") {
        return bad("must not start with '..'");
    }
    for part in path.split('/') {
        if part == ".." {
            return bad("must not contain '..'");
        }
        if part.len() > 255 {
            return bad("each element must be at most 255 characters");
        }
    }
    Ok(())
}

/// Writes `payload` into `dir`; returns whether anything changed.
/// `set_perms` runs over the new version before it becomes visible
/// (fsGroup ownership).
pub fn write(
    dir: &Path,
    payload: &Payload,
    set_perms: &dyn Fn(&Path) -> io::Result<()>,
) -> Result<bool, WriteError> {
    for path in payload.keys() {
        validate_path(path)?;
    }
    let data_link = dir.join(DATA_DIR);
    let old_version = fs::read_link(&data_link).ok();
    if let Some(old) = &old_version {
        if matches_payload(&dir.join(old), payload) {
            return Ok(false);
        }
    }
    let version = new_version_dir(dir)?;
    let written = write_payload(&version, payload).and_then(|()| {
        set_perms(&version).map_err(io_err(format!("set permissions of {}", version.display())))
    });
    if let Err(e) = written {
        let _ = fs::remove_dir_all(&version);
        return Err(e);
    }
    let name = version
        .file_name()
        .map(PathBuf::from)
        .ok_or_else(|| io_err("version directory")(io::ErrorKind::InvalidInput.into()))?;
    // Swap ..data atomically: a temporary link renamed over the old one.
    let tmp = dir.join(DATA_DIR_TMP);
    let _ = fs::remove_file(&tmp);
    symlink(&name, &tmp).map_err(io_err(format!("symlink {}", tmp.display())))?;
    fs::rename(&tmp, &data_link).map_err(io_err(format!("rename to {}", data_link.display())))?;
    update_user_links(dir, payload)?;
    if let Some(old) = old_version.filter(|o| *o != name) {
        let _ = fs::remove_dir_all(dir.join(old));
    }
    Ok(true)
}

/// Whether the current version holds exactly this payload (content and
/// mode), so an unchanged object costs no write.
fn matches_payload(version: &Path, payload: &Payload) -> bool {
    let mut present = BTreeSet::new();
    if collect_files(version, version, &mut present).is_err() {
        return false;
    }
    if present.len() != payload.len() {
        return false;
    }
    payload.iter().all(|(path, file)| {
        let p = version.join(path);
        let meta_ok = fs::metadata(&p).is_ok_and(|m| {
            m.permissions().mode() & 0o7777 == file.mode
                && file.fs_user.is_none_or(|uid| m.uid() == uid)
        });
        meta_ok && fs::read(&p).is_ok_and(|d| d == file.data)
    })
}

fn collect_files(root: &Path, dir: &Path, out: &mut BTreeSet<String>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect_files(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.insert(rel.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

fn new_version_dir(dir: &Path) -> Result<PathBuf, WriteError> {
    let now = chrono_like_timestamp();
    for n in 0..100u32 {
        let candidate = dir.join(if n == 0 {
            format!("..{now}")
        } else {
            format!("..{now}.{n}")
        });
        match fs::create_dir(&candidate) {
            Ok(()) => {
                fs::set_permissions(&candidate, fs::Permissions::from_mode(0o755))
                    .map_err(io_err(format!("chmod {}", candidate.display())))?;
                return Ok(candidate);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(format!("create {}", candidate.display()))(e)),
        }
    }
    Err(io_err(format!(
        "create a version directory in {}",
        dir.display()
    ))(io::ErrorKind::AlreadyExists.into()))
}

/// `2006_01_02_15_04_05.<nanos>` in UTC, upstream's version directory name.
fn chrono_like_timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}_{mo:02}_{d:02}_{:02}_{:02}_{:02}.{:09}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_nanos()
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (H. Hinnant's civil_from_days).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn write_payload(version: &Path, payload: &Payload) -> Result<(), WriteError> {
    for (path, file) in payload {
        let target = version.join(path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(io_err(format!("create {}", parent.display())))?;
        }
        fs::write(&target, &file.data).map_err(io_err(format!("write {}", target.display())))?;
        fs::set_permissions(&target, fs::Permissions::from_mode(file.mode))
            .map_err(io_err(format!("chmod {}", target.display())))?;
        if let Some(uid) = file.fs_user {
            std::os::unix::fs::lchown(&target, Some(uid), None)
                .map_err(io_err(format!("chown {}", target.display())))?;
        }
    }
    Ok(())
}

/// The first element of each payload path gets a link into `..data`; links
/// of paths no longer in the payload are removed.
fn update_user_links(dir: &Path, payload: &Payload) -> Result<(), WriteError> {
    let wanted: BTreeSet<&str> = payload.keys().filter_map(|p| first_element(p)).collect();
    for name in &wanted {
        let link = dir.join(name);
        let target = Path::new(DATA_DIR).join(name);
        if fs::read_link(&link).is_ok_and(|t| t == target) {
            continue;
        }
        let _ = fs::remove_file(&link);
        symlink(&target, &link).map_err(io_err(format!("symlink {}", link.display())))?;
    }
    let entries = fs::read_dir(dir).map_err(io_err(format!("read {}", dir.display())))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || wanted.contains(name.as_str()) {
            continue;
        }
        // Only our own links: a user-visible name is always a symlink.
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            let _ = fs::remove_file(entry.path());
        }
    }
    Ok(())
}

fn first_element(path: &str) -> Option<&str> {
    match Path::new(path).components().next()? {
        Component::Normal(s) => s.to_str(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection {
                        data: d.as_bytes().to_vec(),
                        mode: *m,
                        fs_user: None,
                    },
                )
            })
            .collect()
    }

    fn noop(_: &Path) -> io::Result<()> {
        Ok(())
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_780), (2026, 11, 23));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn layout_matches_upstream() {
        let tmp = tempfile::TempDir::with_prefix("rkubelet-aw-layout-").unwrap();
        let d = tmp.path();
        let p = payload(&[("a", "1", 0o644), ("sub/b", "2", 0o400)]);
        assert!(write(d, &p, &noop).unwrap());
        let data = fs::read_link(d.join("..data")).unwrap();
        assert!(data.to_string_lossy().starts_with(".."));
        assert_eq!(fs::read_link(d.join("a")).unwrap(), Path::new("..data/a"));
        assert_eq!(
            fs::read_link(d.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(fs::read_to_string(d.join("sub/b")).unwrap(), "2");
        let mode = fs::metadata(d.join("sub/b")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o400);
    }

    #[test]
    fn unchanged_payload_is_not_rewritten_and_updates_swap_versions() {
        let tmp = tempfile::TempDir::with_prefix("rkubelet-aw-update-").unwrap();
        let d = tmp.path();
        let p1 = payload(&[("a", "1", 0o644), ("gone", "x", 0o644)]);
        assert!(write(d, &p1, &noop).unwrap());
        let v1 = fs::read_link(d.join("..data")).unwrap();
        assert!(!write(d, &p1, &noop).unwrap());
        assert_eq!(fs::read_link(d.join("..data")).unwrap(), v1);
        // A mode change alone is a change.
        let p2 = payload(&[("a", "1", 0o600)]);
        assert!(write(d, &p2, &noop).unwrap());
        let v2 = fs::read_link(d.join("..data")).unwrap();
        assert_ne!(v1, v2);
        assert!(!d.join(&v1).exists(), "old version removed");
        assert!(
            fs::symlink_metadata(d.join("gone")).is_err(),
            "stale link removed"
        );
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "1");
    }

    #[test]
    fn bad_paths_are_rejected_before_anything_is_written() {
        let tmp = tempfile::TempDir::with_prefix("rkubelet-aw-bad-").unwrap();
        let d = tmp.path();
        for bad in ["/etc/passwd", "../x", "a/../../x", "..hidden", ""] {
            let p = payload(&[("ok", "1", 0o644), (bad, "x", 0o644)]);
            let err = write(d, &p, &noop).unwrap_err();
            assert!(
                matches!(err, WriteError::InvalidPath { .. }),
                "{bad}: {err}"
            );
        }
        assert!(fs::read_dir(d).unwrap().next().is_none());
    }

    #[test]
    fn failed_permissions_leave_the_old_version_visible() {
        let tmp = tempfile::TempDir::with_prefix("rkubelet-aw-perms-").unwrap();
        let d = tmp.path();
        let p1 = payload(&[("a", "1", 0o644)]);
        write(d, &p1, &noop).unwrap();
        let fail = |_: &Path| Err(io::Error::from(io::ErrorKind::PermissionDenied));
        let p2 = payload(&[("a", "2", 0o644)]);
        assert!(write(d, &p2, &fail).is_err());
        assert_eq!(fs::read_to_string(d.join("a")).unwrap(), "1");
        let versions = fs::read_dir(d)
            .unwrap()
            .filter(|e| {
                let n = e.as_ref().unwrap().file_name();
                let n = n.to_string_lossy();
                n.starts_with("..") && n != "..data"
            })
            .count();
        assert_eq!(versions, 1, "the failed version is removed");
    }
}
