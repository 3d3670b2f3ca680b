//! Pod sysctls (upstream `pkg/kubelet/sysctl`): the safe set every pod may
//! use, the node's `allowedUnsafeSysctls` (names, or prefixes ending in
//! `*`), and the admission rule rejecting a pod that sets anything else with
//! reason `SysctlForbidden`. Names are normalised to the dotted form first
//! (`net/ipv4/ip_forward` is `net.ipv4.ip_forward`), as upstream.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::lifecycle::admission::Rejection;
use crate::podutil::PodExt;

pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// Upstream validation's limit on a sysctl name.
const SYSCTL_MAX_LENGTH: usize = 253;

/// Upstream `safeSysctls`: namespaced and isolated, with the kernel that
/// first namespaced it where that is recent.
const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", None),
    ("net.ipv4.tcp_wmem", None),
];

/// The kernel namespace a sysctl lives in (upstream `Namespace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn as_str(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// Upstream `NamespacedBy`: None when the sysctl is not known to be
/// namespaced (and so may never be set per pod).
pub fn namespaced_by(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    const PREFIXES: &[(&str, Namespace)] = &[
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|&(_, ns)| ns)
}

/// Upstream `NormalizeName`: a name whose first separator is `/` uses `/`
/// between parts and `.` inside them; swap the two.
pub fn normalize_name(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// Upstream `IsValidSysctlPattern`: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
/// joined by `.` or `/`, optionally ending in `*` (which may follow a
/// separator: `net.core.*`).
fn is_valid_pattern(p: &str) -> bool {
    if p.is_empty() || p.len() > SYSCTL_MAX_LENGTH {
        return false;
    }
    let (body, star) = match p.strip_suffix('*') {
        Some(b) => (b.strip_suffix(['.', '/']).unwrap_or(b), true),
        None => (p, false),
    };
    if body.is_empty() {
        return star;
    }
    body.split(['.', '/']).all(is_segment)
}

fn is_segment(s: &str) -> bool {
    let b = s.as_bytes();
    let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            edge(first) && edge(last) && b.iter().all(|c| edge(c) || *c == b'-' || *c == b'_')
        }
        _ => false,
    }
}

/// The safe sysctls this kernel namespaces (upstream `SafeSysctlAllowlist`).
pub fn safe_sysctl_allowlist(kernel: Option<(u32, u32)>) -> Vec<String> {
    SAFE_SYSCTLS
        .iter()
        .filter(|(name, min)| match (min, kernel) {
            (None, _) => true,
            (Some(min), Some(k)) => k >= *min,
            (Some(_), None) => {
                log::info!("kernel version unknown: dropping {name} from the safe sysctls");
                false
            }
        })
        .map(|(n, _)| n.to_string())
        .collect()
}

/// This kernel's (major, minor), from uname(2).
pub fn kernel_version() -> Option<(u32, u32)> {
    let uts = nix::sys::utsname::uname().ok()?;
    let release = uts.release().to_string_lossy().into_owned();
    let mut parts = release.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// An `allowedUnsafeSysctls` pattern the node refuses at start.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error(
        "sysctl {0:?} must have at most {SYSCTL_MAX_LENGTH} characters and match regex \
         ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\\*)?$"
    )]
    InvalidPattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    PrefixNotNamespaced(String),
    #[error("the sysctl {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// Upstream `patternAllowlist`: exact names and `*` prefixes, each with
/// the namespace it lives in.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    sysctls: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Allowlist {
    /// The node's allowlist: the safe set plus `allowedUnsafeSysctls`
    /// (upstream concatenates the two). An invalid or un-namespaced
    /// pattern is an error naming it.
    pub fn for_node(allowed_unsafe: &[String]) -> Result<Allowlist, AllowlistError> {
        let mut all = safe_sysctl_allowlist(kernel_version());
        all.extend(allowed_unsafe.iter().cloned());
        Allowlist::new(&all)
    }

    /// Upstream `NewAllowlist`.
    pub fn new(patterns: &[String]) -> Result<Allowlist, AllowlistError> {
        let mut w = Allowlist::default();
        for s in patterns {
            if !is_valid_pattern(s) {
                return Err(AllowlistError::InvalidPattern(s.clone()));
            }
            let s = normalize_name(s);
            if let Some(prefix) = s.strip_suffix('*') {
                let ns = namespaced_by(prefix)
                    .ok_or_else(|| AllowlistError::PrefixNotNamespaced(s.clone()))?;
                w.prefixes.insert(prefix.to_string(), ns);
            } else {
                let ns =
                    namespaced_by(&s).ok_or_else(|| AllowlistError::NotNamespaced(s.clone()))?;
                w.sysctls.insert(s, ns);
            }
        }
        Ok(w)
    }

    /// Upstream `validateSysctl`: allowlisted, and not in a namespace the
    /// pod shares with the host.
    fn validate(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let sysctl = normalize_name(sysctl);
        let ns = self.sysctls.get(&sysctl).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| sysctl.starts_with(p.as_str()))
                .map(|(_, &ns)| ns)
        });
        match ns {
            None => Err(format!("{sysctl:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(format!(
                "{sysctl:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(ns @ Namespace::Net) if host_net => Err(format!(
                "{sysctl:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Upstream `Admit`: every sysctl of the pod's security context must
    /// pass, else the pod is rejected with `SysctlForbidden`.
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let spec = pod.spec_or_default();
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_deref())
            .unwrap_or(&[]);
        let host_net = spec.host_network.unwrap_or(false);
        let host_ipc = spec.host_ipc.unwrap_or(false);
        for s in sysctls {
            if let Err(e) = self.validate(&s.name, host_net, host_ipc) {
                return Err(Rejection {
                    reason: FORBIDDEN_REASON.to_string(),
                    message: format!("forbidden sysctl: {e}"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
