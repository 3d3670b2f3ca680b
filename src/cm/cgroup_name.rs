//! Driver-neutral cgroup names and their cgroupfs and systemd forms
//! (upstream `cm/cgroup_manager_linux.go` CgroupName, ToCgroupfs,
//! ToSystemd, ParseCgroupfsToCgroupName, ParseSystemdToCgroupName, and
//! runc's `systemd.ExpandSlice`).

use std::fmt;

const SYSTEMD_SUFFIX: &str = ".slice";

/// A cgroup as a list of components, `["kubepods", "burstable", "pod<uid>"]`;
/// empty is the root. The driver decides how it is spelled on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CgroupName(pub Vec<String>);

impl CgroupName {
    pub fn root() -> Self {
        CgroupName(Vec::new())
    }

    /// This name with one more component (upstream NewCgroupName).
    pub fn child(&self, component: &str) -> Self {
        let mut parts = self.0.clone();
        parts.push(component.to_string());
        CgroupName(parts)
    }

    /// The last component; empty for the root.
    pub fn base(&self) -> &str {
        self.0.last().map_or("", String::as_str)
    }

    /// `/kubepods/burstable/pod<uid>`; `/` for the root.
    pub fn to_cgroupfs(&self) -> String {
        format!("/{}", self.0.join("/"))
    }

    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`:
    /// each component has its dashes escaped to underscores, since systemd
    /// uses the dash as the slice separator.
    pub fn to_systemd(&self) -> String {
        if self.0.is_empty() || (self.0.len() == 1 && self.0[0].is_empty()) {
            return "/".to_string();
        }
        let escaped: Vec<String> = self.0.iter().map(|p| p.replace('-', "_")).collect();
        let slice = format!("{}{SYSTEMD_SUFFIX}", escaped.join("-"));
        // Components never hold a '/' (names come from our own config
        // and pod UIDs), so the expansion cannot fail on valid input;
        // fall back to the unexpanded slice rather than panic.
        expand_slice(&slice).unwrap_or(slice)
    }

    /// `/a/b` → `["a", "b"]`; `/` → root.
    pub fn parse_cgroupfs(name: &str) -> Self {
        let trimmed = name.trim_start_matches('/');
        if trimmed.is_empty() {
            return CgroupName::root();
        }
        CgroupName(trimmed.split('/').map(str::to_string).collect())
    }

    /// `/a.slice/a-b_c.slice` → `["a", "b-c"]`: only the last segment
    /// counts, since a systemd slice name carries its whole path.
    pub fn parse_systemd(name: &str) -> Self {
        let base = name.rsplit('/').next().unwrap_or("");
        let base = base.strip_suffix(SYSTEMD_SUFFIX).unwrap_or(base);
        if base.is_empty() {
            return CgroupName::root();
        }
        CgroupName(base.split('-').map(|p| p.replace('_', "-")).collect())
    }
}

impl fmt::Display for CgroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_cgroupfs())
    }
}

/// `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice` (runc's ExpandSlice).
pub fn expand_slice(slice: &str) -> Result<String, String> {
    let invalid = || format!("invalid slice name: {slice}");
    let name = slice.strip_suffix(SYSTEMD_SUFFIX).ok_or_else(invalid)?;
    if slice.contains('/') {
        return Err(invalid());
    }
    if name == "-" {
        return Ok("/".to_string());
    }
    let (mut path, mut prefix) = (String::new(), String::new());
    for component in name.split('-') {
        // `a--b.slice` and `-a.slice` are not slices.
        if component.is_empty() {
            return Err(invalid());
        }
        path.push_str(&format!("/{prefix}{component}{SYSTEMD_SUFFIX}"));
        prefix.push_str(&format!("{component}-"));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> CgroupName {
        CgroupName(parts.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn cgroupfs_names() {
        assert_eq!(CgroupName::root().to_cgroupfs(), "/");
        assert_eq!(name(&["kubepods"]).to_cgroupfs(), "/kubepods");
        assert_eq!(
            name(&["kubepods", "burstable", "pod1234-abcd"]).to_cgroupfs(),
            "/kubepods/burstable/pod1234-abcd"
        );
        assert_eq!(
            CgroupName::parse_cgroupfs("/kubepods/burstable"),
            name(&["kubepods", "burstable"])
        );
        assert_eq!(CgroupName::parse_cgroupfs("/"), CgroupName::root());
        assert_eq!(CgroupName::parse_cgroupfs(""), CgroupName::root());
        assert_eq!(
            CgroupName::parse_cgroupfs("/rk-test-80"),
            name(&["rk-test-80"])
        );
    }

    #[test]
    fn systemd_names() {
        assert_eq!(CgroupName::root().to_systemd(), "/");
        assert_eq!(name(&["kubepods"]).to_systemd(), "/kubepods.slice");
        assert_eq!(
            name(&["kubepods", "burstable"]).to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice"
        );
        let pod = name(&["kubepods", "burstable", "pod6f1e-22ab-4c"]);
        assert_eq!(
            pod.to_systemd(),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1e_22ab_4c.slice"
        );
        // Guaranteed pods sit right under kubepods.
        assert_eq!(
            name(&["kubepods", "pod1-2"]).to_systemd(),
            "/kubepods.slice/kubepods-pod1_2.slice"
        );
        // A cgroupRoot with dashes is escaped like any component.
        assert_eq!(
            name(&["rk-test-80", "kubepods"]).to_systemd(),
            "/rk_test_80.slice/rk_test_80-kubepods.slice"
        );
    }

    #[test]
    fn systemd_round_trip() {
        let pod = name(&["kubepods", "besteffort", "pod6f1e-22ab"]);
        assert_eq!(CgroupName::parse_systemd(&pod.to_systemd()), pod);
        assert_eq!(
            CgroupName::parse_systemd("kubepods-besteffort-pod6f1e_22ab.slice"),
            pod
        );
        assert_eq!(CgroupName::parse_systemd("/"), CgroupName::root());
    }

    #[test]
    fn expand_slice_rules() {
        assert_eq!(expand_slice("-.slice").unwrap(), "/");
        assert_eq!(expand_slice("a.slice").unwrap(), "/a.slice");
        assert_eq!(
            expand_slice("a-b-c.slice").unwrap(),
            "/a.slice/a-b.slice/a-b-c.slice"
        );
        for bad in ["a", "a--b.slice", "-a.slice", "a/b.slice", ".slic"] {
            assert!(expand_slice(bad).is_err(), "{bad}");
        }
    }
}
