//! What the plugin manager wants and what it has (upstream
//! pluginmanager/cache): the desired state is every plugin socket the
//! watcher sees, the actual state every plugin a handler has taken. Both
//! are owned by the plugin manager's one thread, so they carry no locks.
//! Lists, not hash maps: a node has a handful of plugins, and each map
//! type would be one more copy of the hash table's code in the binary.

use std::path::{Path, PathBuf};

/// A socket the watcher found, and when (as a generation, not a clock
/// reading: two updates in the same clock tick must still differ, or a
/// replaced socket would not be registered again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DesiredPlugin {
    pub socket_path: PathBuf,
    pub timestamp: u64,
}

/// Plugin sockets seen on disk, in the order first seen.
#[derive(Debug, Default)]
pub(crate) struct DesiredStateOfWorld {
    plugins: Vec<DesiredPlugin>,
    clock: u64,
}

impl DesiredStateOfWorld {
    /// Records a socket, new or replaced: either way it gets a new
    /// timestamp, which tells the reconciler to (re-)register it.
    pub fn add_or_update(&mut self, socket_path: &Path) {
        self.clock += 1;
        let timestamp = self.clock;
        match self
            .plugins
            .iter_mut()
            .find(|p| p.socket_path == socket_path)
        {
            Some(p) => p.timestamp = timestamp,
            None => self.plugins.push(DesiredPlugin {
                socket_path: socket_path.to_path_buf(),
                timestamp,
            }),
        }
    }

    pub fn remove(&mut self, socket_path: &Path) -> bool {
        let before = self.plugins.len();
        self.plugins.retain(|p| p.socket_path != socket_path);
        self.plugins.len() != before
    }

    /// Forgets every socket under `dir` (a directory removed or moved
    /// away takes its sockets with it without one event per socket).
    pub fn remove_under(&mut self, dir: &Path) -> usize {
        let before = self.plugins.len();
        self.plugins.retain(|p| !p.socket_path.starts_with(dir));
        before - self.plugins.len()
    }

    pub fn contains(&self, socket_path: &Path) -> bool {
        self.plugins.iter().any(|p| p.socket_path == socket_path)
    }

    /// Whether `socket_path` is still wanted as it was at `timestamp`.
    pub fn is_current(&self, socket_path: &Path, timestamp: u64) -> bool {
        self.plugins
            .iter()
            .any(|p| p.socket_path == socket_path && p.timestamp == timestamp)
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.plugins.iter().map(|p| p.socket_path.as_path())
    }

    /// Oldest change first.
    pub fn plugins(&self) -> Vec<DesiredPlugin> {
        let mut all = self.plugins.clone();
        all.sort_by_key(|p| p.timestamp);
        all
    }
}

/// A plugin handed to its handler: what deregistration needs later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RegisteredPlugin {
    pub socket_path: PathBuf,
    pub timestamp: u64,
    pub plugin_type: String,
    pub name: String,
    pub endpoint: String,
}

/// Plugins given to a handler, one per socket path.
#[derive(Debug, Default)]
pub(crate) struct ActualStateOfWorld {
    plugins: Vec<RegisteredPlugin>,
}

impl ActualStateOfWorld {
    pub fn add(&mut self, plugin: RegisteredPlugin) {
        self.remove(&plugin.socket_path);
        self.plugins.push(plugin);
    }

    pub fn remove(&mut self, socket_path: &Path) -> Option<RegisteredPlugin> {
        let at = self
            .plugins
            .iter()
            .position(|p| p.socket_path == socket_path)?;
        Some(self.plugins.swap_remove(at))
    }

    /// Whether the plugin at `socket_path` was registered from the socket
    /// seen at `timestamp` (not from one it has since replaced).
    pub fn is_current(&self, socket_path: &Path, timestamp: u64) -> bool {
        self.plugins
            .iter()
            .any(|p| p.socket_path == socket_path && p.timestamp == timestamp)
    }

    pub fn plugins(&self) -> Vec<RegisteredPlugin> {
        self.plugins.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_a_socket_changes_its_timestamp() {
        let mut dsw = DesiredStateOfWorld::default();
        let p = Path::new("/r/a.sock");
        dsw.add_or_update(p);
        let first = dsw.plugins()[0].timestamp;
        dsw.add_or_update(p);
        assert!(!dsw.is_current(p, first));
        assert_eq!(dsw.plugins().len(), 1);
    }

    #[test]
    fn removing_a_directory_forgets_its_sockets_only() {
        let mut dsw = DesiredStateOfWorld::default();
        dsw.add_or_update(Path::new("/r/d/a.sock"));
        dsw.add_or_update(Path::new("/r/d2.sock"));
        assert_eq!(dsw.remove_under(Path::new("/r/d")), 1);
        assert!(dsw.contains(Path::new("/r/d2.sock")));
    }
}
