//! The security admit handlers (upstream `lifecycle/handlers.go`'s
//! AppArmor handler, and `pkg/kubelet/sysctl`'s allowlist, which upstream
//! registers as an admit handler too): a pod asking for what this node
//! cannot enforce is rejected before any of its containers exists, rather
//! than run with less confinement than it asked for.

use k8s_openapi::api::core::v1::Pod;

use super::admission::Rejection;
use crate::apparmor;
use crate::sysctl;

/// Upstream `AppArmorNotAdmittedReason`.
pub const APPARMOR_NOT_ADMITTED_REASON: &str = "AppArmor";

#[derive(Debug, Clone)]
pub struct SecurityAdmitHandlers {
    pub sysctls: sysctl::Allowlist,
    pub apparmor: apparmor::Validator,
}

/// An `allowedUnsafeSysctls` entry the node cannot allow.
#[derive(Debug, thiserror::Error)]
#[error("allowedUnsafeSysctls: {0}")]
pub struct UnsafeSysctlsError(pub sysctl::AllowlistError);

impl SecurityAdmitHandlers {
    /// The node's handlers: its sysctl allowlist (safe set plus
    /// `allowedUnsafeSysctls`) and the host's AppArmor support.
    pub fn for_node(allowed_unsafe_sysctls: &[String]) -> Result<Self, UnsafeSysctlsError> {
        Ok(SecurityAdmitHandlers {
            sysctls: sysctl::Allowlist::for_node(allowed_unsafe_sysctls)
                .map_err(UnsafeSysctlsError)?,
            apparmor: apparmor::Validator::new(),
        })
    }
}

/// Upstream `appArmorAdmitHandler`: a pod already running or finished is
/// not checked again. A static pod has no phase yet and is checked.
pub fn admit_apparmor(v: &apparmor::Validator, pod: &Pod) -> Result<(), Rejection> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| !p.is_empty() && p != "Pending") {
        return Ok(());
    }
    v.validate(pod).map_err(|e| Rejection {
        reason: APPARMOR_NOT_ADMITTED_REASON.to_string(),
        message: format!("Cannot enforce AppArmor: {e}"),
    })
}
