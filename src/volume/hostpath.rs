//! hostPath (upstream `pkg/volume/hostpath`): the host path itself, after
//! the `type` check.

use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Volume;

use super::{io_failed, VolumeError};

pub fn set_up(vol: &Volume) -> Result<PathBuf, VolumeError> {
    let Some(hp) = vol.host_path.as_ref() else {
        return Err(VolumeError::Invalid(format!(
            "volume {:?}: no hostPath",
            vol.name
        )));
    };
    let path = PathBuf::from(&hp.path);
    check_type(&path, hp.type_.as_deref().unwrap_or(""))?;
    Ok(path)
}

/// Upstream checkType: the `*OrCreate` types create what is missing, the
/// others only check (following symlinks, as os.Stat does).
pub fn check_type(path: &std::path::Path, ty: &str) -> Result<(), VolumeError> {
    let meta = std::fs::metadata(path);
    let must = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(VolumeError::NotFound(format!(
                "hostPath type check failed: {} is not a {what}",
                path.display()
            )))
        }
    };
    let ft = meta.as_ref().ok().map(|m| m.file_type());
    match ty {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if ft.is_none() {
                std::fs::create_dir_all(path).map_err(|e| io_failed(path.display(), e))?;
                set_mode(path, 0o755)?;
                return Ok(());
            }
            must(ft.is_some_and(|t| t.is_dir()), "directory")
        }
        "FileOrCreate" => {
            if ft.is_none() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io_failed(parent.display(), e))?;
                }
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|e| io_failed(path.display(), e))?;
                set_mode(path, 0o644)?;
                return Ok(());
            }
            must(ft.is_some_and(|t| t.is_file()), "file")
        }
        "Directory" => must(ft.is_some_and(|t| t.is_dir()), "directory"),
        "File" => must(ft.is_some_and(|t| t.is_file()), "file"),
        "Socket" => must(ft.is_some_and(|t| t.is_socket()), "socket"),
        "CharDevice" => must(ft.is_some_and(|t| t.is_char_device()), "character device"),
        "BlockDevice" => must(ft.is_some_and(|t| t.is_block_device()), "block device"),
        other => Err(VolumeError::Invalid(format!(
            "hostPath {}: unknown type {other:?}",
            path.display()
        ))),
    }
}

fn set_mode(path: &std::path::Path, mode: u32) -> Result<(), VolumeError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io_failed(path.display(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type() {
        let base = std::env::temp_dir().join(format!("rkubelet-hostpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("made/dir");
        check_type(&dir, "DirectoryOrCreate").unwrap();
        assert!(dir.is_dir());
        let file = base.join("made/file");
        check_type(&file, "FileOrCreate").unwrap();
        assert!(file.is_file());
        check_type(&file, "FileOrCreate").unwrap();
        check_type(&dir, "Directory").unwrap();
        assert!(check_type(&dir, "File").is_err());
        assert!(check_type(&file, "Directory").is_err());
        assert!(check_type(&file, "DirectoryOrCreate").is_err());
        assert!(check_type(&base.join("none"), "Directory").is_err());
        assert!(check_type(&file, "Socket").is_err());
        let sock = base.join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        check_type(&sock, "Socket").unwrap();
        check_type(Path::new("/dev/null"), "CharDevice").unwrap();
        assert!(check_type(Path::new("/dev/null"), "BlockDevice").is_err());
        assert!(check_type(&file, "Bogus").is_err());
        check_type(&base.join("anything"), "").unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }

    use std::path::Path;
}
