//! Creating, updating and removing cgroups (upstream
//! `cm/cgroup_manager_linux.go`, `cgroup_v1_manager_linux.go`,
//! `cgroup_v2_manager_linux.go`). The version (where the hierarchies are,
//! which files hold the limits) is kept apart from the driver (how a
//! [`CgroupName`] is spelled): both drivers write the same files, the
//! systemd driver at systemd's paths.

use std::io;
use std::path::{Path, PathBuf};

use super::cgroup_name::CgroupName;
use super::helpers::{cpu_shares_to_weight, ResourceConfig};
use super::systemd::{Systemd, SystemdError};
use super::{CgroupError, CmError, Driver};

/// The cgroup version of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    /// Unified (cgroup2 mounted at /sys/fs/cgroup).
    V2,
}

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// The v1 controllers a pod cgroup must exist in before its sandbox
/// starts (upstream's Exists checks these, where mounted).
const V1_REQUIRED: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "pids"];
/// The v2 controllers pods are limited with, enabled down the tree.
const V2_CONTROLLERS: &[&str] = &["cpu", "cpuset", "memory", "pids", "hugetlb", "io"];

/// One mounted hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub path: PathBuf,
    /// v1: the controllers it carries (`cpu`, `name=systemd`, ...); empty
    /// for a cgroup2 mount.
    pub controllers: Vec<String>,
}

/// Where the hierarchies are mounted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hierarchies {
    pub version: Version,
    /// v1: one entry per mounted hierarchy, plus (hybrid hosts) the
    /// cgroup2 mount, where runc also places containers. v2: the one
    /// unified mount.
    pub mounts: Vec<Mount>,
    /// A plain directory tree standing in for cgroupfs (unit tests): its
    /// control files are ordinary files that rmdir must remove first.
    pub fake: bool,
}

impl Hierarchies {
    /// The host's: v2 when /sys/fs/cgroup is cgroup2, else every cgroup
    /// and cgroup2 mount in /proc/self/mountinfo.
    pub fn detect() -> Result<Hierarchies, CmError> {
        let root = Path::new("/sys/fs/cgroup");
        let st = nix::sys::statfs::statfs(root).map_err(|error| CmError::Statfs {
            path: root.to_owned(),
            error,
        })?;
        if st.filesystem_type().0 as i64 == CGROUP2_SUPER_MAGIC {
            return Ok(Hierarchies::v2(root));
        }
        let mountinfo = Path::new("/proc/self/mountinfo");
        let info = std::fs::read_to_string(mountinfo).map_err(|error| CmError::Read {
            path: mountinfo.to_owned(),
            error,
        })?;
        let mounts = parse_mountinfo(&info);
        if !mounts.iter().any(|m| !m.controllers.is_empty()) {
            return Err(CmError::NoHierarchy);
        }
        Ok(Hierarchies {
            version: Version::V1,
            mounts,
            fake: false,
        })
    }

    pub fn v2(root: &Path) -> Hierarchies {
        Hierarchies {
            version: Version::V2,
            mounts: vec![Mount {
                path: root.to_path_buf(),
                controllers: Vec::new(),
            }],
            fake: false,
        }
    }

    /// The controllers pods are limited by that this host lacks: v1 ones
    /// not mounted, v2 ones the root does not offer (cgroup.controllers).
    pub fn missing_controllers(&self) -> Vec<&'static str> {
        match self.version {
            Version::V1 => V1_REQUIRED
                .iter()
                .copied()
                .filter(|c| self.controller(c).is_none())
                .collect(),
            Version::V2 => {
                let root = self
                    .mounts
                    .first()
                    .map(|m| m.path.join("cgroup.controllers"));
                let offered = root
                    .and_then(|p| std::fs::read_to_string(p).ok())
                    .unwrap_or_default();
                let offered: Vec<&str> = offered.split_whitespace().collect();
                ["cpu", "memory", "pids"]
                    .into_iter()
                    .filter(|c| !offered.contains(c))
                    .collect()
            }
        }
    }

    /// The mount carrying a v1 controller.
    fn controller(&self, name: &str) -> Option<&Path> {
        self.mounts
            .iter()
            .find(|m| m.controllers.iter().any(|c| c == name))
            .map(|m| m.path.as_path())
    }
}

/// cgroup and cgroup2 mounts: mount point (field 5) and, after the `-`
/// that ends the optional fields, fstype and super options.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype)) = (fields.get(4), fields.get(dash + 1)) else {
            continue;
        };
        let controllers = match *fstype {
            "cgroup2" => Vec::new(),
            "cgroup" => fields
                .get(dash + 3)
                .map(|o| {
                    o.split(',')
                        .filter(|x| !matches!(*x, "rw" | "ro") && !x.contains("xattr"))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            _ => continue,
        };
        out.push(Mount {
            path: PathBuf::from(point.replace("\\040", " ")),
            controllers,
        });
    }
    out
}

/// A cgroup and what to set on it (upstream CgroupConfig).
#[derive(Clone, Debug)]
pub struct CgroupConfig {
    pub name: CgroupName,
    pub resources: ResourceConfig,
}

/// The files to write for `rc` on v1, as (controller, file, value), in
/// the order they must be written.
pub fn v1_files(rc: &ResourceConfig) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    if let Some(s) = rc.cpu_shares {
        out.push(("cpu", "cpu.shares", s.to_string()));
    }
    if let Some(p) = rc.cpu_period {
        out.push(("cpu", "cpu.cfs_period_us", p.to_string()));
    }
    if let Some(q) = rc.cpu_quota {
        out.push(("cpu", "cpu.cfs_quota_us", q.to_string()));
    }
    // 0 means "not set", as libcontainer reads it.
    if let Some(m) = rc.memory.filter(|m| *m != 0) {
        out.push(("memory", "memory.limit_in_bytes", m.to_string()));
    }
    if let Some(p) = rc.pids_limit.filter(|p| *p != 0) {
        out.push(("pids", "pids.max", limit_or_max(p)));
    }
    out
}

/// The files to write for `rc` on v2, as (file, value).
pub fn v2_files(rc: &ResourceConfig) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(s) = rc.cpu_shares {
        out.push(("cpu.weight", cpu_shares_to_weight(s).to_string()));
    }
    let (quota, period) = (rc.cpu_quota.unwrap_or(0), rc.cpu_period.unwrap_or(0));
    if quota != 0 || period != 0 {
        let mut v = if quota > 0 {
            quota.to_string()
        } else {
            "max".to_string()
        };
        if period != 0 {
            v.push_str(&format!(" {period}"));
        }
        out.push(("cpu.max", v));
    }
    if let Some(m) = rc.memory.filter(|m| *m != 0) {
        out.push(("memory.max", limit_or_max(m)));
    }
    if let Some(p) = rc.pids_limit.filter(|p| *p != 0) {
        out.push(("pids.max", limit_or_max(p)));
    }
    out
}

fn limit_or_max(v: i64) -> String {
    if v < 0 {
        "max".to_string()
    } else {
        v.to_string()
    }
}

/// Creates, updates and removes cgroups by name, in the driver's syntax
/// and the version's files. Under the systemd driver on a real host,
/// systemd's units carry the same limits (see [`super::systemd`]).
#[derive(Clone, Debug)]
pub struct CgroupManager {
    pub driver: Driver,
    pub hierarchies: Hierarchies,
    /// The systemd driver's unit manager; None for cgroupfs, and for a
    /// fake tree, which no systemd manages.
    systemd: Option<Systemd>,
}

impl CgroupManager {
    pub fn new(driver: Driver, hierarchies: Hierarchies) -> Self {
        let systemd = (driver == Driver::Systemd && !hierarchies.fake).then_some(Systemd {
            version: hierarchies.version,
        });
        CgroupManager {
            driver,
            hierarchies,
            systemd,
        }
    }

    /// The name in the driver's syntax: what the runtime is handed as a
    /// cgroup parent (upstream Name).
    pub fn name(&self, name: &CgroupName) -> String {
        match self.driver {
            Driver::Cgroupfs => name.to_cgroupfs(),
            Driver::Systemd => name.to_systemd(),
        }
    }

    /// The driver's on-disk directory name back to a name (upstream
    /// CgroupName).
    pub fn parse(&self, path: &str) -> CgroupName {
        match self.driver {
            Driver::Cgroupfs => CgroupName::parse_cgroupfs(path),
            Driver::Systemd => CgroupName::parse_systemd(path),
        }
    }

    /// The directory of `name` below each mount that holds it.
    pub fn paths(&self, name: &CgroupName) -> Vec<PathBuf> {
        let rel = self.name(name);
        let rel = rel.trim_start_matches('/');
        self.hierarchies
            .mounts
            .iter()
            .map(|m| m.path.join(rel))
            .collect()
    }

    /// Whether the cgroup exists where limits are set: in every required
    /// v1 controller that is mounted, or in the v2 tree.
    pub fn exists(&self, name: &CgroupName) -> bool {
        let rel = self.name(name);
        let rel = rel.trim_start_matches('/');
        match self.hierarchies.version {
            Version::V2 => self.hierarchies.mounts[0].path.join(rel).is_dir(),
            Version::V1 => V1_REQUIRED
                .iter()
                .filter_map(|c| self.hierarchies.controller(c))
                .all(|m| m.join(rel).is_dir()),
        }
    }

    /// Creates the cgroup in every hierarchy (parents too, as mkdir -p),
    /// then sets its resources. Already existing is fine. Under systemd
    /// the slice is started first, with its limits as unit properties.
    pub fn create(&self, cfg: &CgroupConfig) -> Result<(), CgroupError> {
        if let Some(systemd) = &self.systemd {
            systemd
                .start_slice(&cfg.name, &cfg.resources)
                .map_err(|e| self.systemd_error(&cfg.name, e))?;
        }
        match self.hierarchies.version {
            Version::V1 => {
                for m in &self.hierarchies.mounts {
                    let cpuset = m.controllers.iter().any(|c| c == "cpuset");
                    create_dirs(&m.path, &self.name(&cfg.name), cpuset, false)?;
                }
            }
            Version::V2 => {
                let root = &self.hierarchies.mounts[0].path;
                create_dirs(root, &self.name(&cfg.name), false, true)?;
            }
        }
        self.write_files(cfg)
    }

    /// Sets the cgroup's resources: on its unit's properties under
    /// systemd, then in its files (as runc's Set does both).
    pub fn update(&self, cfg: &CgroupConfig) -> Result<(), CgroupError> {
        if let Some(systemd) = &self.systemd {
            systemd
                .set_properties(&cfg.name, &cfg.resources)
                .map_err(|e| self.systemd_error(&cfg.name, e))?;
        }
        self.write_files(cfg)
    }

    fn systemd_error(&self, name: &CgroupName, e: SystemdError) -> CgroupError {
        let path = self.paths(name).into_iter().next().unwrap_or_default();
        CgroupError::new("systemd unit of", &path, io::Error::other(e))
    }

    /// Writes the cgroup's resources to its files.
    fn write_files(&self, cfg: &CgroupConfig) -> Result<(), CgroupError> {
        let rel = self.name(&cfg.name);
        let rel = rel.trim_start_matches('/');
        match self.hierarchies.version {
            Version::V2 => {
                let dir = self.hierarchies.mounts[0].path.join(rel);
                for (file, value) in v2_files(&cfg.resources) {
                    write(&dir.join(file), &value)?;
                }
                Ok(())
            }
            Version::V1 => self.update_v1(rel, &cfg.resources),
        }
    }

    fn update_v1(&self, rel: &str, rc: &ResourceConfig) -> Result<(), CgroupError> {
        let files = v1_files(rc);
        let mut period_rejected = None;
        for (controller, file, value) in &files {
            let mount = self.hierarchies.controller(controller).ok_or_else(|| {
                CgroupError::new(
                    "find controller",
                    Path::new(controller),
                    io::Error::from(io::ErrorKind::NotFound),
                )
            })?;
            let path = mount.join(rel).join(file);
            match write(&path, value) {
                // A shorter period can be refused while the old quota
                // stands (the ratio would exceed the parent's); it is
                // retried once the quota is written, as libcontainer does.
                Err(e) if *file == "cpu.cfs_period_us" && e.errno() == Some(libc::EINVAL) => {
                    period_rejected = Some((path, value.clone()));
                }
                other => other?,
            }
        }
        if let Some((path, value)) = period_rejected {
            write(&path, &value)?;
        }
        Ok(())
    }

    /// Removes the cgroup and anything below it from every hierarchy,
    /// deepest first. Gone already is fine; a cgroup with processes in it
    /// fails with EBUSY and is retried by the caller. Under systemd its
    /// unit is stopped first (which removes the directories systemd
    /// manages), unless no directory is left.
    pub fn destroy(&self, name: &CgroupName) -> Result<(), CgroupError> {
        let paths = self.paths(name);
        if let Some(systemd) = &self.systemd {
            if paths.iter().any(|p| p.is_dir()) {
                systemd
                    .stop(name)
                    .map_err(|e| self.systemd_error(name, e))?;
            }
        }
        let mut first_err = None;
        for dir in paths {
            if let Err(e) = remove_tree(&dir, self.hierarchies.fake) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The names of the child cgroups of `name`, over every hierarchy.
    pub fn children(&self, name: &CgroupName) -> Vec<CgroupName> {
        let mut out: Vec<CgroupName> = Vec::new();
        let parent = self.name(name);
        for dir in self.paths(name) {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let child = format!(
                    "{}/{}",
                    parent.trim_end_matches('/'),
                    e.file_name().to_string_lossy()
                );
                let n = self.parse(&child);
                if !out.contains(&n) {
                    out.push(n);
                }
            }
        }
        out
    }
}

/// `mkdir -p` of `rel` below `mount`. A new cpuset cgroup starts with no
/// cpus or mems (no task could join it), so each level copies its
/// parent's, as libcontainer does. On v2 every level's parent delegates
/// the controllers pods are limited with.
fn create_dirs(mount: &Path, rel: &str, cpuset: bool, v2: bool) -> Result<(), CgroupError> {
    let mut dir = mount.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        let parent = dir.clone();
        dir.push(part);
        if dir.is_dir() {
            continue;
        }
        if v2 {
            enable_controllers(&parent)?;
        }
        match std::fs::create_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(CgroupError::new("mkdir", &dir, e));
            }
            _ => {}
        }
        if cpuset {
            for file in ["cpuset.cpus", "cpuset.mems"] {
                // An empty parent (a cgroupRoot made with plain mkdir) has
                // nothing to give; runc fills the chain from the nearest
                // set ancestor when it places a container.
                let value = match std::fs::read_to_string(parent.join(file)) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
                    other => other.map_err(|e| CgroupError::new("read", &parent.join(file), e))?,
                };
                if !value.trim().is_empty() {
                    write(&dir.join(file), value.trim())?;
                }
            }
        }
    }
    Ok(())
}

/// Writes `+cpu +memory ...` (those the parent has) to its
/// cgroup.subtree_control.
fn enable_controllers(parent: &Path) -> Result<(), CgroupError> {
    let available = read(&parent.join("cgroup.controllers"))?;
    let wanted: Vec<String> = available
        .split_whitespace()
        .filter(|c| V2_CONTROLLERS.contains(c))
        .map(|c| format!("+{c}"))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    write(&parent.join("cgroup.subtree_control"), &wanted.join(" "))
}

/// rmdir of `dir` and its sub-cgroups, children first.
fn remove_tree(dir: &Path, fake: bool) -> Result<(), CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CgroupError::new("read", dir, e)),
    };
    for e in entries.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path(), fake)?;
        } else if fake {
            let _ = std::fs::remove_file(e.path());
        }
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(CgroupError::new("rmdir", dir, e)),
        _ => Ok(()),
    }
}

fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|e| CgroupError::new("read", path, e))
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    std::fs::write(path, value)
        .map_err(|e| CgroupError::new(&format!("write {value:?} to"), path, e))
}
