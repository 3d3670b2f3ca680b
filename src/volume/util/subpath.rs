//! Safe subPath (upstream `pkg/volume/util/subpath`): a subPath must stay
//! inside its volume. Each element is resolved in turn and a symlink whose
//! target leaves the volume is refused, never followed out, so a container
//! cannot aim a subPath at the host through a link it planted. Links that
//! stay inside the volume (a configMap's `key -> ..data/key`) resolve, and
//! the resolved path is what gets bind-mounted, as upstream does.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Resolves `sub` below `volume`, creating missing directories (as upstream
/// does for a subPath that does not exist yet).
pub fn safe_sub_path(volume: &Path, sub: &str) -> Result<PathBuf, String> {
    let rel = Path::new(sub);
    if rel.is_absolute() {
        return Err(format!("subPath {sub:?} must be a relative path"));
    }
    let base = volume
        .canonicalize()
        .map_err(|e| format!("volume {}: {e}", volume.display()))?;
    let mut path = base.clone();
    for part in rel.components() {
        match part {
            Component::Normal(p) => path.push(p),
            Component::CurDir => continue,
            _ => return Err(format!("subPath {sub:?} must not contain '..'")),
        }
        match std::fs::symlink_metadata(&path) {
            Ok(_) => {
                let resolved = path
                    .canonicalize()
                    .map_err(|e| format!("subPath {}: {e}", path.display()))?;
                if !resolved.starts_with(&base) {
                    return Err(format!(
                        "subPath {sub:?}: {} resolves to {}, outside the volume; \
                         symlinks out of a volume are not followed",
                        path.display(),
                        resolved.display()
                    ));
                }
                path = resolved;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::create_dir(&path)
                    .map_err(|e| format!("create subPath {}: {e}", path.display()))?;
                std::fs::set_permissions(
                    &path,
                    std::os::unix::fs::PermissionsExt::from_mode(0o750),
                )
                .map_err(|e| format!("chmod subPath {}: {e}", path.display()))?;
            }
            Err(e) => return Err(format!("subPath {}: {e}", path.display())),
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
