//! The plugin manager (upstream pkg/kubelet/pluginmanager): one thread
//! that watches `<root-dir>/plugins_registry` for plugin sockets and
//! hands each plugin to the handler of its type (CSI drivers, device
//! plugins), taking it back when its socket goes.

mod cache;
mod watcher;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PluginManagerError {
    #[error("creating plugin directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("plugin directory {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("watching {path} with inotify: {source}")]
    Watch {
        path: PathBuf,
        source: nix::errno::Errno,
    },
}
