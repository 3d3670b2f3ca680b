//! Group OOM kill (upstream `singleProcessOOMKill`, v1.32+; the kernel's
//! `memory.oom.group`, set by upstream since v1.28): on cgroup v2 a
//! container over its memory limit is killed whole, not one process of it
//! left running without the others.

use std::path::Path;

/// The cgroup v2 file runc sets from CRI's `unified` map.
pub const MEMORY_OOM_GROUP: &str = "memory.oom.group";

/// Whether every container's cgroup gets `memory.oom.group = 1`: by
/// default on cgroup v2; never on v1, which has no such knob and where
/// asking for it (`singleProcessOOMKill: false`) is refused as upstream's
/// validation refuses it.
pub fn group_kill(single_process_oom_kill: Option<bool>, cgroup_v2: bool) -> Result<bool, String> {
    match (single_process_oom_kill, cgroup_v2) {
        (Some(false), false) => Err(
            "invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1"
                .to_string(),
        ),
        (Some(single), true) => Ok(!single),
        (None, v2) => Ok(v2),
        (Some(true), false) => Ok(false),
    }
}

/// Sets the knob in a container's or the sandbox's resources where group
/// kill is on.
pub fn apply(cfg: &super::RuntimeManagerConfig, r: &mut crate::cri::api::LinuxContainerResources) {
    if cfg.oom_group_kill {
        r.unified
            .insert(MEMORY_OOM_GROUP.to_string(), "1".to_string());
    }
}

/// The unified hierarchy is mounted at /sys/fs/cgroup.
pub fn cgroup_v2() -> bool {
    Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_kill_is_cgroup_v2_s_default_and_never_asked_of_v1() {
        assert_eq!(group_kill(None, true), Ok(true));
        assert_eq!(group_kill(Some(false), true), Ok(true));
        assert_eq!(group_kill(Some(true), true), Ok(false));
        assert_eq!(group_kill(None, false), Ok(false));
        assert_eq!(group_kill(Some(true), false), Ok(false));
        let e = group_kill(Some(false), false).unwrap_err();
        assert!(
            e.contains("singleProcessOOMKill must not be explicitly set to false"),
            "{e}"
        );
    }

    /// The container's resources carry the knob only when asked.
    #[test]
    fn containers_get_memory_oom_group_when_group_kill_is_on() {
        let pod = k8s_openapi::api::core::v1::Pod::default();
        let c = k8s_openapi::api::core::v1::Container::default();
        let mut cfg = super::super::RuntimeManagerConfig::for_tests();
        let r = super::super::container::linux_resources(&pod, &c, &cfg);
        assert_eq!(r.unified.get(MEMORY_OOM_GROUP), None);
        cfg.oom_group_kill = true;
        let r = super::super::container::linux_resources(&pod, &c, &cfg);
        assert_eq!(
            r.unified.get(MEMORY_OOM_GROUP).map(String::as_str),
            Some("1")
        );
    }
}
