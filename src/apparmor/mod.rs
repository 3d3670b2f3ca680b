//! AppArmor (upstream `pkg/security/apparmor`): which profile a container
//! asks for (the `appArmorProfile` fields, and the deprecated
//! `container.apparmor.security.beta.kubernetes.io/<name>` annotations), and
//! whether this host can enforce it. The admission rule built on it is in
//! [`crate::lifecycle::handlers`].

use std::path::Path;

use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

use crate::podutil::PodExt;

/// The deprecated per-container annotation, suffixed by the container name.
pub const BETA_CONTAINER_ANNOTATION_PREFIX: &str =
    "container.apparmor.security.beta.kubernetes.io/";
/// Annotation values of the deprecated form.
pub const BETA_PROFILE_RUNTIME_DEFAULT: &str = "runtime/default";
pub const BETA_PROFILE_UNCONFINED: &str = "unconfined";
pub const BETA_PROFILE_LOCALHOST_PREFIX: &str = "localhost/";

pub const TYPE_RUNTIME_DEFAULT: &str = "RuntimeDefault";
pub const TYPE_UNCONFINED: &str = "Unconfined";
pub const TYPE_LOCALHOST: &str = "Localhost";

/// Checks pods against what the host can enforce (upstream `validator`).
/// The host is probed once, at start: enabling AppArmor needs a restart,
/// as upstream.
#[derive(Debug, Clone)]
pub struct Validator {
    host_error: Option<String>,
}

impl Validator {
    /// Probes this host (`/sys/kernel/security/apparmor` and the module's
    /// `enabled` parameter, as runc's `apparmor.IsEnabled`).
    pub fn new() -> Validator {
        Validator::with_host(validate_host(Path::new("/sys")))
    }

    /// A validator for a host whose probe gave `host_error` (tests).
    pub fn with_host(host_error: Option<String>) -> Validator {
        if let Some(e) = &host_error {
            log::info!(
                "AppArmor: {e}; pods that ask for a profile other than Unconfined will be rejected"
            );
        }
        Validator { host_error }
    }

    /// Upstream `Validate`: Ok when the pod asks for no confinement, or the
    /// host can enforce what it asks and every Localhost profile is named.
    pub fn validate(&self, pod: &Pod) -> Result<(), String> {
        if !is_required(pod) {
            return Ok(());
        }
        if let Some(e) = &self.host_error {
            return Err(e.clone());
        }
        for c in all_containers(pod) {
            let Some(p) = get_profile(pod, &c) else {
                continue;
            };
            let empty = p
                .localhost_profile
                .as_deref()
                .is_none_or(|n| n.trim().is_empty());
            if p.type_ == TYPE_LOCALHOST && empty {
                return Err(format!(
                    "invalid empty AppArmor profile name: {}",
                    describe(&p)
                ));
            }
        }
        Ok(())
    }
}

/// Why this host cannot enforce AppArmor, or None when it can.
fn validate_host(sys: &Path) -> Option<String> {
    let fs_present = sys.join("kernel/security/apparmor").exists();
    let enabled = std::fs::read(sys.join("module/apparmor/parameters/enabled"))
        .map(|b| b.len() > 1 && b[0] == b'Y')
        .unwrap_or(false);
    if fs_present && enabled {
        None
    } else {
        Some("AppArmor is not enabled on the host".to_string())
    }
}

/// Init, regular and ephemeral containers (upstream VisitContainers with
/// AllContainers).
fn all_containers(pod: &Pod) -> Vec<Container> {
    pod.init_containers()
        .iter()
        .chain(pod.containers())
        .cloned()
        .chain(
            pod.ephemeral_containers()
                .iter()
                .map(crate::podutil::ephemeral_as_container),
        )
        .collect()
}

/// Upstream `isRequired`: any profile other than Unconfined, in the pod's
/// or a container's field or in a deprecated annotation.
pub fn is_required(pod: &Pod) -> bool {
    let confined = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != TYPE_UNCONFINED);
    let spec = pod.spec_or_default();
    if confined(
        spec.security_context
            .as_ref()
            .and_then(|s| s.app_armor_profile.as_ref()),
    ) {
        return true;
    }
    if all_containers(pod).iter().any(|c| {
        confined(
            c.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref()),
        )
    }) {
        return true;
    }
    pod.metadata.annotations.iter().flatten().any(|(k, v)| {
        k.starts_with(BETA_CONTAINER_ANNOTATION_PREFIX) && v != BETA_PROFILE_UNCONFINED
    })
}

/// Upstream `GetProfile`: the container's field, else its deprecated
/// annotation (static pods keep annotations unsynced to fields), else the
/// pod's field.
pub fn get_profile(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = c
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.as_ref())
    {
        return Some(p.clone());
    }
    let annotation = pod.annotation(&format!("{BETA_CONTAINER_ANNOTATION_PREFIX}{}", c.name));
    if let Some(p) = annotation.and_then(profile_from_annotation) {
        return Some(p);
    }
    pod.spec_or_default()
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
}

/// The deprecated annotation's value as a profile; None when invalid.
fn profile_from_annotation(value: &str) -> Option<AppArmorProfile> {
    let of = |t: &str, name: Option<&str>| AppArmorProfile {
        type_: t.to_string(),
        localhost_profile: name.map(str::to_string),
    };
    match value {
        BETA_PROFILE_RUNTIME_DEFAULT => Some(of(TYPE_RUNTIME_DEFAULT, None)),
        BETA_PROFILE_UNCONFINED => Some(of(TYPE_UNCONFINED, None)),
        v => v
            .strip_prefix(BETA_PROFILE_LOCALHOST_PREFIX)
            .map(|name| of(TYPE_LOCALHOST, Some(name))),
    }
}

/// Go's `%q` of the profile struct is not worth copying; this names the
/// same two fields.
fn describe(p: &AppArmorProfile) -> String {
    format!(
        "{{type: {:?}, localhostProfile: {:?}}}",
        p.type_,
        p.localhost_profile.as_deref().unwrap_or("")
    )
}

#[cfg(test)]
mod tests;
