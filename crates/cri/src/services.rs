//! Narrow views of the CRI services (upstream cri-api's `ImageManagerService`
//! and `RuntimeService`): what the kubelet's modules call, so that each can
//! be unit tested against the in-memory fake (rkubelet's
//! `kuberuntime::fake_runtime`) instead of a live
//! runtime. Each trait holds only the calls some caller makes; a method is
//! added when a caller moves onto the seam, not before.

use crate::{api, CriError, RemoteRuntime};

/// The image calls of the puller and image garbage collection.
pub trait ImageService: Send + Sync {
    /// The image if the runtime holds it; `None` when it does not.
    fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError>;
    /// Pulls `image`; returns the image reference the runtime resolved.
    fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError>;
    fn list_images(&self) -> Result<Vec<api::Image>, CriError>;
    fn remove_image(&self, image: &str) -> Result<(), CriError>;
    fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError>;
}

/// The mount point of the runtime's (first) image filesystem, as
/// ImageFsInfo reports it; `None` when it names none.
pub fn image_fs_mountpoint(info: &api::ImageFsInfoResponse) -> Option<&str> {
    info.image_filesystems
        .first()
        .and_then(|f| f.fs_id.as_ref())
        .map(|id| id.mountpoint.as_str())
        .filter(|m| !m.is_empty())
}

/// The runtime (container and sandbox) calls of modules on the seam.
pub trait RuntimeService: Send + Sync {
    fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError>;
}

impl ImageService for RemoteRuntime {
    fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        RemoteRuntime::image_status(self, image)
    }

    fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        RemoteRuntime::pull_image(self, image, auth, sandbox)
    }

    fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        RemoteRuntime::list_images(self)
    }

    fn remove_image(&self, image: &str) -> Result<(), CriError> {
        RemoteRuntime::remove_image(self, image)
    }

    fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        RemoteRuntime::image_fs_info(self)
    }
}

impl RuntimeService for RemoteRuntime {
    fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        RemoteRuntime::list_containers(self, filter)
    }
}
