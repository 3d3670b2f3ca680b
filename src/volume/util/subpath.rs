//! Safe subPath (upstream `pkg/volume/util/subpath`): a subPath must stay
//! inside its volume. Each element is resolved in turn and a symlink whose
//! target leaves the volume is refused, never followed out, so a container
//! cannot aim a subPath at the host through a link it planted. Links that
//! stay inside the volume (a configMap's `key -> ..data/key`) resolve, and
//! the resolved path is what gets bind-mounted, as upstream does.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a subPath cannot be mounted.
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("subPath {0:?} must be a relative path")]
    Absolute(String),
    #[error("subPath {0:?} must not contain '..'")]
    ParentRef(String),
    /// A symlink on the way leads out of the volume.
    #[error(
        "subPath {sub:?}: {} resolves to {}, outside the volume; \
         symlinks out of a volume are not followed",
        .path.display(),
        .resolved.display()
    )]
    Escapes {
        sub: String,
        path: PathBuf,
        resolved: PathBuf,
    },
    /// Resolving or creating a path failed (`what` names the step).
    #[error("{what} {}: {error}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        error: io::Error,
    },
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SubPathError {
    let path = path.to_path_buf();
    move |error| SubPathError::Io { what, path, error }
}

/// `sub` as a path that stays below whatever it is joined to: relative,
/// with no `..` (upstream's IsAbs and ValidatePathNoBacksteps checks).
pub fn relative_sub_path(sub: &str) -> Result<&Path, SubPathError> {
    let rel = Path::new(sub);
    if rel.is_absolute() {
        return Err(SubPathError::Absolute(sub.to_string()));
    }
    if rel.components().any(|c| c == Component::ParentDir) {
        return Err(SubPathError::ParentRef(sub.to_string()));
    }
    Ok(rel)
}

/// Resolves `sub` below `volume`, creating missing directories (as upstream
/// does for a subPath that does not exist yet).
pub fn safe_sub_path(volume: &Path, sub: &str) -> Result<PathBuf, SubPathError> {
    let rel = relative_sub_path(sub)?;
    let base = volume.canonicalize().map_err(io_error("volume", volume))?;
    let mut path = base.clone();
    for part in rel.components() {
        match part {
            Component::Normal(p) => path.push(p),
            Component::CurDir => continue,
            _ => return Err(SubPathError::ParentRef(sub.to_string())),
        }
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {
                let resolved = path.canonicalize().map_err(io_error("subPath", &path))?;
                if !resolved.starts_with(&base) {
                    return Err(SubPathError::Escapes {
                        sub: sub.to_string(),
                        path,
                        resolved,
                    });
                }
                path = resolved;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&path).map_err(io_error("create subPath", &path))?;
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o750),
                )
                .map_err(io_error("chmod subPath", &path))?;
            }
            Err(e) => return Err(io_error("subPath", &path)(e)),
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_out_of_the_volume_are_refused() {
        let base = std::env::temp_dir().join(format!("rkubelet-subpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let vol = base.join("vol");
        std::fs::create_dir_all(vol.join("real")).unwrap();
        std::fs::create_dir_all(vol.join("..data")).unwrap();
        std::fs::write(vol.join("..data/key"), "v").unwrap();
        std::os::unix::fs::symlink("..data/key", vol.join("key")).unwrap();
        std::os::unix::fs::symlink("/etc", vol.join("escape")).unwrap();
        std::os::unix::fs::symlink("../..", vol.join("real/up")).unwrap();
        let canon = vol.canonicalize().unwrap();
        assert_eq!(safe_sub_path(&vol, "real").unwrap(), canon.join("real"));
        assert_eq!(
            safe_sub_path(&vol, "new/dir").unwrap(),
            canon.join("new/dir")
        );
        assert!(vol.join("new/dir").is_dir());
        assert_eq!(
            safe_sub_path(&vol, "key").unwrap(),
            canon.join("..data/key")
        );
        assert!(safe_sub_path(&vol, "escape").is_err());
        assert!(safe_sub_path(&vol, "escape/passwd").is_err());
        assert!(safe_sub_path(&vol, "real/up").is_err());
        assert!(safe_sub_path(&vol, "../x").is_err());
        assert!(safe_sub_path(&vol, "/etc").is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
