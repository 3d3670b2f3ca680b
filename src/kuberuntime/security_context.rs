//! Security contexts for the CRI (upstream `kuberuntime/security_context.go`,
//! `security_context_others.go`, the seccomp and AppArmor parts of
//! `helpers.go`, and `pkg/securitycontext`): the effective settings of a
//! container (its own, else the pod's), seccomp and AppArmor profiles,
//! SELinux options, `procMount`, and the `runAsNonRoot` check against the
//! image's user.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    Container, Pod, PodSecurityContext, SELinuxOptions, SeccompProfile, SecurityContext,
};
use protobuf::EnumOrUnknown;

use crate::apparmor;
use crate::cri::api;
use crate::podutil::PodExt;

// Upstream's defaults for what an unprivileged container may not see or
// change.
use crate::cri::defaults::{
    MASKED_PATHS as DEFAULT_MASKED_PATHS, READONLY_PATHS as DEFAULT_READONLY_PATHS,
};
const PROC_MOUNT_UNMASKED: &str = "Unmasked";

/// What the security context depends on besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct SecurityOptions<'a> {
    /// `<root-dir>/seccomp`, where Localhost profiles live.
    pub seccomp_root: &'a Path,
    /// `seccompDefault`: RuntimeDefault unless the pod says otherwise.
    pub seccomp_default: bool,
}

/// The settings of a container after the pod's have filled its gaps
/// (upstream `DetermineEffectiveSecurityContext`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Effective {
    pub run_as_user: Option<i64>,
    pub run_as_group: Option<i64>,
    pub run_as_non_root: Option<bool>,
    pub se_linux_options: Option<SELinuxOptions>,
    pub privileged: bool,
    pub proc_mount: Option<String>,
}

pub fn effective(pod: &Pod, c: &Container) -> Effective {
    let sc = c.security_context.as_ref();
    let pod_sc = pod.spec_or_default().security_context.as_ref();
    Effective {
        run_as_user: sc
            .and_then(|s| s.run_as_user)
            .or(pod_sc.and_then(|s| s.run_as_user)),
        run_as_group: sc
            .and_then(|s| s.run_as_group)
            .or(pod_sc.and_then(|s| s.run_as_group)),
        run_as_non_root: sc
            .and_then(|s| s.run_as_non_root)
            .or(pod_sc.and_then(|s| s.run_as_non_root)),
        se_linux_options: sc
            .and_then(|s| s.se_linux_options.clone())
            .or_else(|| pod_sc.and_then(|s| s.se_linux_options.clone())),
        privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
        proc_mount: sc.and_then(|s| s.proc_mount.clone()),
    }
}

/// Whether the image's user must be known to start `c` (runAsNonRoot with
/// no runAsUser to vouch for it).
pub fn needs_image_user(pod: &Pod, c: &Container) -> bool {
    let e = effective(pod, c);
    e.run_as_non_root == Some(true) && e.run_as_user.is_none()
}

/// The image's default user as CRI ImageStatus gives it (upstream
/// getImageUser): a uid, else a user name, else root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    pub fn from_image(image: Option<&api::Image>) -> ImageUser {
        let root = ImageUser {
            uid: Some(0),
            username: String::new(),
        };
        let Some(i) = image else { return root };
        if let Some(uid) = i.uid.as_ref() {
            return ImageUser {
                uid: Some(uid.value),
                username: String::new(),
            };
        }
        if !i.username.is_empty() {
            return ImageUser {
                uid: None,
                username: i.username.clone(),
            };
        }
        root
    }
}

/// Why a container's security context cannot be made, or does not hold:
/// its CreateContainerConfigError message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityContextError {
    /// runAsNonRoot is broken or cannot be verified (upstream
    /// verifyRunAsNonRoot's messages, which name the pod and container).
    #[error("{0}")]
    NonRoot(String),
    #[error("localhostProfile must be set if seccompProfile type is Localhost.")]
    MissingLocalhostSeccomp,
    /// A Localhost seccomp profile that cannot be loaded.
    #[error("cannot load seccomp profile {path:?}: {reason}")]
    SeccompFile { path: String, reason: String },
    #[error("missing localhost apparmor profile name")]
    MissingLocalhostAppArmor,
    #[error("unknown apparmor profile type: {0:?}")]
    UnknownAppArmorType(String),
}

/// Upstream `verifyRunAsNonRoot`, with its messages.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    user: &ImageUser,
) -> Result<(), SecurityContextError> {
    let e = effective(pod, c);
    if e.run_as_non_root != Some(true) {
        return Ok(());
    }
    let who = format!(
        "(pod: \"{}({})\", container: {})",
        pod.full_name(),
        pod.uid(),
        c.name
    );
    if let Some(uid) = e.run_as_user {
        if uid == 0 {
            return Err(SecurityContextError::NonRoot(format!(
                "container's runAsUser breaks non-root policy {who}"
            )));
        }
        return Ok(());
    }
    let non_root = |msg: String| Err(SecurityContextError::NonRoot(msg));
    match user.uid {
        None if !user.username.is_empty() => non_root(format!(
            "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root {who}",
            user.username
        )),
        Some(0) => non_root(format!(
            "container has runAsNonRoot and image will run as root {who}"
        )),
        Some(uid) if !(1..=i64::from(i32::MAX)).contains(&uid) => non_root(format!(
            "container has runAsNonRoot and image has an invalid user id ({uid}). (Must be 1-({})): \
             must be between 0 and 2147483647, inclusive {who}",
            i32::MAX
        )),
        _ => Ok(()),
    }
}

fn profile(t: api::security_profile::ProfileType, localhost_ref: &str) -> api::SecurityProfile {
    api::SecurityProfile {
        profile_type: EnumOrUnknown::new(t),
        localhost_ref: localhost_ref.to_string(),
        ..Default::default()
    }
}

/// Upstream `fieldSeccompProfile`: Localhost profiles are files below the
/// seccomp root; an unknown type is Unconfined.
fn field_seccomp_profile(
    p: &SeccompProfile,
    root: &Path,
) -> Result<api::SecurityProfile, SecurityContextError> {
    use api::security_profile::ProfileType;
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(profile(ProfileType::RuntimeDefault, "")),
        "Localhost" => match p.localhost_profile.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => Ok(profile(
                ProfileType::Localhost,
                &root.join(name).to_string_lossy(),
            )),
            None => Err(SecurityContextError::MissingLocalhostSeccomp),
        },
        _ => Ok(profile(ProfileType::Unconfined, "")),
    }
}

/// Upstream `getSeccompProfile`: the container's field, else the pod's,
/// else RuntimeDefault with `seccompDefault` and Unconfined without.
pub fn seccomp_profile(
    pod_sc: Option<&PodSecurityContext>,
    sc: Option<&SecurityContext>,
    opts: SecurityOptions<'_>,
) -> Result<api::SecurityProfile, SecurityContextError> {
    use api::security_profile::ProfileType;
    let field = sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .or_else(|| pod_sc.and_then(|s| s.seccomp_profile.as_ref()));
    match field {
        Some(p) => field_seccomp_profile(p, opts.seccomp_root),
        None if opts.seccomp_default => Ok(profile(ProfileType::RuntimeDefault, "")),
        None => Ok(profile(ProfileType::Unconfined, "")),
    }
}

/// A Localhost profile must exist before the container is created: the
/// error names the file, where the runtime would fail CreateContainer
/// with its own wording.
fn check_localhost_file(p: &api::SecurityProfile) -> Result<(), SecurityContextError> {
    if p.profile_type.enum_value() != Ok(api::security_profile::ProfileType::Localhost) {
        return Ok(());
    }
    let path = PathBuf::from(&p.localhost_ref);
    let unloadable = |reason: String| SecurityContextError::SeccompFile {
        path: path.display().to_string(),
        reason,
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(unloadable("not a regular file".into())),
        Err(e) => Err(unloadable(e.to_string())),
    }
}

/// Upstream `getAppArmorProfile`: the profile for the CRI, and the
/// deprecated string form older runtimes read. None: nothing asked.
pub fn apparmor_profile(
    pod: &Pod,
    c: &Container,
) -> Result<Option<(api::SecurityProfile, String)>, SecurityContextError> {
    use api::security_profile::ProfileType;
    let Some(p) = apparmor::get_profile(pod, c) else {
        return Ok(None);
    };
    Ok(Some(match p.type_.as_str() {
        apparmor::TYPE_RUNTIME_DEFAULT => (
            profile(ProfileType::RuntimeDefault, ""),
            apparmor::BETA_PROFILE_RUNTIME_DEFAULT.to_string(),
        ),
        apparmor::TYPE_UNCONFINED => (
            profile(ProfileType::Unconfined, ""),
            apparmor::BETA_PROFILE_UNCONFINED.to_string(),
        ),
        apparmor::TYPE_LOCALHOST => {
            let name = p
                .localhost_profile
                .as_deref()
                .ok_or(SecurityContextError::MissingLocalhostAppArmor)?;
            (
                profile(ProfileType::Localhost, name),
                format!("{}{name}", apparmor::BETA_PROFILE_LOCALHOST_PREFIX),
            )
        }
        other => return Err(SecurityContextError::UnknownAppArmorType(other.into())),
    }))
}

pub fn selinux_option(o: &SELinuxOptions) -> api::SELinuxOption {
    api::SELinuxOption {
        user: o.user.clone().unwrap_or_default(),
        role: o.role.clone().unwrap_or_default(),
        type_: o.type_.clone().unwrap_or_default(),
        level: o.level.clone().unwrap_or_default(),
        ..Default::default()
    }
}

/// Upstream `ConvertToRuntimeMaskedPaths`/`ReadonlyPaths`: the defaults,
/// none for `procMount: Unmasked`; a privileged container gets none (the
/// runtime would drop them anyway).
fn proc_paths(e: &Effective, defaults: &[&str]) -> Vec<String> {
    if e.privileged || e.proc_mount.as_deref() == Some(PROC_MOUNT_UNMASKED) {
        return Vec::new();
    }
    defaults.iter().map(|s| s.to_string()).collect()
}

/// fsGroup, then supplementalGroups, as upstream appends them.
fn supplemental_groups(pod_sc: Option<&PodSecurityContext>) -> Vec<i64> {
    let Some(s) = pod_sc else { return Vec::new() };
    s.fs_group
        .into_iter()
        .chain(s.supplemental_groups.iter().flatten().copied())
        .collect()
}

/// The CRI policy: Strict reaches the runtime only where admission found
/// the node able to honour it; Merge (the default) otherwise.
fn supplemental_groups_policy(
    pod_sc: Option<&PodSecurityContext>,
) -> protobuf::EnumOrUnknown<api::SupplementalGroupsPolicy> {
    let strict = pod_sc.and_then(|s| s.supplemental_groups_policy.as_deref()) == Some("Strict");
    protobuf::EnumOrUnknown::new(if strict {
        api::SupplementalGroupsPolicy::Strict
    } else {
        api::SupplementalGroupsPolicy::Merge
    })
}

fn int64(v: Option<i64>) -> protobuf::MessageField<api::Int64Value> {
    v.map(|value| api::Int64Value {
        value,
        ..Default::default()
    })
    .into()
}

/// The container's CRI security context (upstream
/// `determineEffectiveSecurityContext`), less the namespace options the
/// caller adds.
pub fn container_security_context(
    pod: &Pod,
    c: &Container,
    opts: SecurityOptions<'_>,
) -> Result<api::LinuxContainerSecurityContext, SecurityContextError> {
    let sc = c.security_context.as_ref();
    let pod_sc = pod.spec_or_default().security_context.as_ref();
    let e = effective(pod, c);
    let seccomp = seccomp_profile(pod_sc, sc, opts)?;
    check_localhost_file(&seccomp)?;
    let (apparmor, apparmor_profile) = match apparmor_profile(pod, c)? {
        Some((p, legacy)) => (Some(p), legacy),
        None => (None, String::new()),
    };
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    Ok(api::LinuxContainerSecurityContext {
        privileged: e.privileged,
        run_as_user: int64(e.run_as_user),
        run_as_group: int64(e.run_as_group),
        readonly_rootfs: sc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
        no_new_privs: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
        capabilities: caps
            .map(|c| api::Capability {
                add_capabilities: c.add.clone().unwrap_or_default(),
                drop_capabilities: c.drop.clone().unwrap_or_default(),
                ..Default::default()
            })
            .into(),
        supplemental_groups: supplemental_groups(pod_sc),
        supplemental_groups_policy: supplemental_groups_policy(pod_sc),
        selinux_options: e.se_linux_options.as_ref().map(selinux_option).into(),
        masked_paths: proc_paths(&e, DEFAULT_MASKED_PATHS),
        readonly_paths: proc_paths(&e, DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp).into(),
        apparmor: apparmor.into(),
        apparmor_profile,
        ..Default::default()
    })
}

/// The sandbox's CRI security context (upstream
/// `generatePodSandboxLinuxConfig`), less the namespace options. Its
/// seccomp profile is always RuntimeDefault, as upstream forces it
/// (kubernetes#84623), so a strict pod-level profile never breaks the
/// pause container.
pub fn sandbox_security_context(pod: &Pod) -> api::LinuxSandboxSecurityContext {
    let pod_sc = pod.spec_or_default().security_context.as_ref();
    let privileged = pod
        .containers()
        .iter()
        .chain(pod.init_containers())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    api::LinuxSandboxSecurityContext {
        privileged,
        run_as_user: int64(pod_sc.and_then(|s| s.run_as_user)),
        run_as_group: int64(pod_sc.and_then(|s| s.run_as_group)),
        supplemental_groups: supplemental_groups(pod_sc),
        supplemental_groups_policy: supplemental_groups_policy(pod_sc),
        selinux_options: pod_sc
            .and_then(|s| s.se_linux_options.as_ref())
            .map(selinux_option)
            .into(),
        seccomp: Some(profile(
            api::security_profile::ProfileType::RuntimeDefault,
            "",
        ))
        .into(),
        ..Default::default()
    }
}

/// Fields of the pod this kubelet cannot honour: a warning names each
/// (logged once per pod by the caller).
pub fn unsupported_fields(pod: &Pod) -> Vec<&'static str> {
    let mut out = Vec::new();
    let spec = pod.spec_or_default();
    let pod_sc = spec.security_context.as_ref();
    if pod_sc.and_then(|s| s.windows_options.as_ref()).is_some() {
        out.push("spec.securityContext.windowsOptions");
    }
    if pod_sc
        .and_then(|s| s.se_linux_change_policy.as_ref())
        .is_some()
    {
        out.push("spec.securityContext.seLinuxChangePolicy");
    }
    out
}

#[cfg(test)]
#[path = "security_context_tests.rs"]
mod tests;
