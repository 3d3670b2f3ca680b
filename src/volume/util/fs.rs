//! Removal that never crosses a mount (upstream's RemoveAllOneFilesystem,
//! used by cleanupOrphanedPodDirs): a secret's tmpfs still mounted under a
//! pod directory is left alone and reported, never emptied by accident.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Removes `path` and everything below it that lives on the same
/// filesystem. Fails with `ResourceBusy` when a mount point is found.
pub fn remove_all_one_filesystem(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    remove(path, &meta, meta.dev())
}

fn remove(path: &Path, meta: &std::fs::Metadata, dev: u64) -> io::Result<()> {
    if meta.dev() != dev {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "{} is on another filesystem (still mounted?)",
                path.display()
            ),
        ));
    }
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let child = entry.path();
        let child_meta = std::fs::symlink_metadata(&child)?;
        remove(&child, &child_meta, dev)?;
    }
    std::fs::remove_dir(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn removes_tree_without_following_links() {
        let base = std::env::temp_dir().join(format!("rkubelet-rm1fs-{}", std::process::id()));
        let outside = base.join("outside");
        let tree = base.join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        std::fs::write(tree.join("a/b/f"), "x").unwrap();
        symlink(&outside, tree.join("link")).unwrap();
        remove_all_one_filesystem(&tree).unwrap();
        assert!(!tree.exists());
        assert!(outside.join("keep").exists(), "a link's target is kept");
        remove_all_one_filesystem(&tree).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }
}
