//! projected volumes (upstream `pkg/volume/projected`): secrets,
//! configMaps, downward API and service-account tokens in one directory on
//! tmpfs. The default `kube-api-access-*` volume is one of these.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Volume, VolumeProjection};

use super::content::{write_volume, Medium};
use super::util::atomic_writer::{validate_path, FileProjection, Payload};
use super::util::payload::merge;
use super::{configmap, downwardapi, file_mode, secret, PluginKind, SetUpContext, VolumeError};

/// Upstream's default token lifetime for a projection without one.
const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<PathBuf, VolumeError> {
    let Some(src) = vol.projected.as_ref() else {
        return Err(VolumeError::Invalid(format!(
            "volume {:?}: no projected",
            vol.name
        )));
    };
    let mut files = Payload::new();
    for source in src.sources.iter().flatten() {
        merge(&mut files, source_payload(ctx, source, src.default_mode)?);
    }
    write_volume(ctx, PluginKind::Projected, &vol.name, Medium::Memory, files)
}

fn source_payload(
    ctx: &SetUpContext<'_>,
    source: &VolumeProjection,
    default_mode: Option<i32>,
) -> Result<Payload, VolumeError> {
    if let Some(s) = &source.secret {
        return secret::payload(
            ctx,
            &s.name,
            s.items.as_deref(),
            default_mode,
            s.optional.unwrap_or(false),
        );
    }
    if let Some(c) = &source.config_map {
        return configmap::payload(
            ctx,
            &c.name,
            c.items.as_deref(),
            default_mode,
            c.optional.unwrap_or(false),
        );
    }
    if let Some(d) = &source.downward_api {
        return downwardapi::payload(ctx, d.items.as_deref().unwrap_or_default(), default_mode);
    }
    if let Some(t) = &source.service_account_token {
        validate_path(&t.path).map_err(|e| VolumeError::Invalid(e.to_string()))?;
        let audience = t.audience.as_deref().unwrap_or_default();
        let expiration = t
            .expiration_seconds
            .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS);
        let token = ctx
            .host
            .service_account_token(ctx.pod, audience, expiration)
            .map_err(|e| VolumeError::Failed(e.to_string()))?;
        // Readable by the pod's one user only, where its containers all
        // run as one (upstream: 0600 owned by fsUser, or with fsGroup).
        let fs_user = fs_user(ctx.pod);
        let mode = if fs_user.is_some() || ctx.fs_group().is_some() {
            0o600
        } else {
            file_mode(None, default_mode)?
        };
        return Ok(Payload::from([(
            t.path.clone(),
            FileProjection {
                data: token.into_bytes(),
                mode,
                fs_user,
            },
        )]));
    }
    if source.cluster_trust_bundle.is_some() {
        return Err(VolumeError::Invalid(
            "projected source clusterTrustBundle is not supported by this kubelet".into(),
        ));
    }
    Err(VolumeError::Invalid(
        "projected volume has an empty or unsupported source".into(),
    ))
}

/// Upstream `FsUserFrom`: the user every container of the pod runs as,
/// when they all say the same one (their own runAsUser, else the pod's).
fn fs_user(pod: &k8s_openapi::api::core::v1::Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let users = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| crate::kuberuntime::security_context::effective(pod, c).run_as_user);
    let mut fs_user = None;
    for user in users {
        let user = user?;
        if fs_user.is_some_and(|u| u != user) {
            return None;
        }
        fs_user = Some(user);
    }
    fs_user.and_then(|u| u32::try_from(u).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn fs_user_is_the_one_user_every_container_runs_as() {
        let both = pod(json!({"spec": {"securityContext": {"runAsUser": 1000},
            "containers": [{"name": "a"}, {"name": "b"}]}}));
        assert_eq!(fs_user(&both), Some(1000));
        let own = pod(json!({"spec": {"containers": [
            {"name": "a", "securityContext": {"runAsUser": 7}},
            {"name": "b", "securityContext": {"runAsUser": 7}}]}}));
        assert_eq!(fs_user(&own), Some(7));
        let two = pod(json!({"spec": {"securityContext": {"runAsUser": 1000},
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 2}}]}}));
        assert_eq!(fs_user(&two), None);
        let unset = pod(json!({"spec": {"containers": [
            {"name": "a", "securityContext": {"runAsUser": 7}}, {"name": "b"}]}}));
        assert_eq!(fs_user(&unset), None);
    }
}
