//! Image volumes (upstream getImageVolumes and toKubeContainerImageVolumes,
//! KEP-4639). With the `ImageVolume` gate on, the image of each image
//! volume a container mounts is pulled as a container's image is, with the
//! pod's pull secrets and the volume's pull policy (events on the pod, not
//! the container), and the container's mount names the pulled image. A
//! runtime that cannot mount images (containerd before 2.1 knows no
//! `Mount.image` and sees an empty host path) refuses the container, so
//! the pod never runs without its volume.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Secret};

use super::container::ConfigError;
use super::start::StartTarget;
use super::{KubeRuntimeManager, SyncError};
use crate::cri::api;
use crate::volume::util::subpath::relative_sub_path;

impl KubeRuntimeManager {
    /// The image references of the image volumes `c` mounts, pulled now
    /// if needed; a pull under way or failed is the container's error, as
    /// upstream fails the container late with ErrImagePull or
    /// ImagePullBackOff. Empty while the gate is off.
    pub(super) fn image_volumes(
        &self,
        t: &StartTarget<'_>,
        c: &Container,
        pull_secrets: &[Secret],
    ) -> Result<HashMap<String, String>, SyncError> {
        let mut refs = HashMap::new();
        if !self.cfg.image_volumes {
            return Ok(refs);
        }
        let mounted: HashSet<&str> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.name.as_str())
            .collect();
        let volumes = t.pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
        for vol in volumes.into_iter().flatten() {
            let Some(source) = vol.image.as_ref() else {
                continue;
            };
            if !mounted.contains(vol.name.as_str()) {
                continue;
            }
            let image = self
                .images
                .ensure_volume_image(t.pod, &vol.name, source, t.sandbox_config, pull_secrets)
                .map_err(|e| self.image_error(t.pod, c, &e))?;
            refs.insert(vol.name.clone(), image);
        }
        Ok(refs)
    }
}

/// An image volume's mount (upstream makeMounts with ImageVolume on): no
/// host path, the pulled image and the subPath within it, read-only. The
/// subPath is checked as upstream checks any: relative, without `..`.
/// Without a pulled image (the gate off) it is upstream's refusal of the
/// stub plugin's empty path.
pub(super) fn image_mount(
    pulled: &HashMap<String, String>,
    volume: &str,
    sub_path: Option<&str>,
) -> Result<api::Mount, ConfigError> {
    let image = pulled.get(volume).ok_or(ConfigError::ImageVolumeDisabled)?;
    let sub = sub_path.unwrap_or("");
    relative_sub_path(sub).map_err(|error| ConfigError::SubPath {
        volume: volume.to_string(),
        error,
    })?;
    Ok(api::Mount {
        image: protobuf::MessageField::some(api::ImageSpec {
            image: image.clone(),
            ..Default::default()
        }),
        image_sub_path: sub.to_string(),
        readonly: true,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pulled() -> HashMap<String, String> {
        HashMap::from([("iv".to_string(), "sha256:abc".to_string())])
    }

    #[test]
    fn the_mount_names_the_pulled_image_read_only_with_no_host_path() {
        let m = image_mount(&pulled(), "iv", Some("bin")).expect("mount");
        assert_eq!(m.image.image, "sha256:abc");
        assert_eq!(m.image_sub_path, "bin");
        assert!(m.readonly);
        assert_eq!(m.host_path, "");
        let whole = image_mount(&pulled(), "iv", None).expect("mount");
        assert_eq!(whole.image_sub_path, "");
    }

    #[test]
    fn with_the_gate_off_the_container_is_refused_as_upstream_does() {
        let e = image_mount(&HashMap::new(), "iv", None).unwrap_err();
        assert_eq!(e.to_string(), "path is empty *image.imagePlugin");
    }

    #[test]
    fn a_sub_path_out_of_the_image_is_refused() {
        for sub in ["/etc", "a/../../etc", ".."] {
            let e = image_mount(&pulled(), "iv", Some(sub)).unwrap_err();
            assert!(matches!(e, ConfigError::SubPath { .. }), "{sub}: {e}");
        }
    }
}
