//! Why a pod's sync step failed. Upstream's SyncPod and friends return
//! plain errors; here the cause is a type, so the pod workers can tell a
//! pod that waits on something outside it (its volumes' objects) from one
//! whose step failed, and each cause carries its own retry delay.

use std::fmt;
use std::time::Duration;

use super::{VOLUME_RETRY, WORKER_BACKOFF};
use crate::cm::CgroupError;
use crate::cri::CriError;
use crate::kuberuntime::SyncError;
use crate::podworkers::SyncFailure;
use crate::volumemanager::MountWaitError;

#[derive(Debug)]
pub enum PodSyncError {
    /// Creating the pod's directories under the root dir.
    PodDirs(std::io::Error),
    /// Its volumes are not set up yet (upstream WaitForAttachAndMount).
    Volumes(MountWaitError),
    /// The pod cgroup could not be made (upstream EnsureExists).
    PodCgroup(CgroupError),
    /// Container or sandbox actions failed, each with its reason.
    Containers(Vec<SyncError>),
    /// Stopping the pod's containers or sandboxes failed.
    Kill(SyncError),
    /// Removing the pod's containers and sandboxes failed.
    Remove(CriError),
}

impl fmt::Display for PodSyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PodSyncError::PodDirs(e) => write!(f, "create pod directories: {e}"),
            PodSyncError::Volumes(e) => write!(f, "Unable to attach or mount volumes: {e}"),
            PodSyncError::PodCgroup(e) => write!(f, "unable to ensure pod container exists: {e}"),
            PodSyncError::Containers(errors) => {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                f.write_str(&all.join("; "))
            }
            PodSyncError::Kill(e) => write!(f, "{e}"),
            PodSyncError::Remove(e) => write!(f, "remove the pod's containers: {e}"),
        }
    }
}

impl std::error::Error for PodSyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PodSyncError::PodDirs(e) => Some(e),
            PodSyncError::PodCgroup(e) => Some(e),
            PodSyncError::Remove(e) => Some(e),
            PodSyncError::Volumes(_) | PodSyncError::Containers(_) | PodSyncError::Kill(_) => None,
        }
    }
}

impl PodSyncError {
    /// How soon a retry can help: volumes are re-checked sooner than the
    /// worker back-off; a container in crash back-off no sooner than it ends.
    pub fn retry_after(&self) -> Duration {
        let of = |e: &SyncError| e.retry_after.unwrap_or(WORKER_BACKOFF);
        match self {
            PodSyncError::Volumes(_) => VOLUME_RETRY,
            PodSyncError::Containers(errors) => {
                errors.iter().map(of).min().unwrap_or(WORKER_BACKOFF)
            }
            PodSyncError::Kill(e) => of(e),
            PodSyncError::PodDirs(_) | PodSyncError::PodCgroup(_) | PodSyncError::Remove(_) => {
                WORKER_BACKOFF
            }
        }
    }
}

impl From<PodSyncError> for SyncFailure {
    fn from(e: PodSyncError) -> SyncFailure {
        let retry_after = e.retry_after();
        if matches!(e, PodSyncError::Volumes(_)) {
            SyncFailure::waiting(e, retry_after)
        } else {
            SyncFailure::failed(e, retry_after)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podworkers::FailureKind;

    fn container_error(retry_after: Option<Duration>) -> SyncError {
        SyncError {
            container: Some("c".into()),
            reason: "CrashLoopBackOff",
            message: "back-off restarting failed container".into(),
            retry_after,
        }
    }

    /// Volumes not ready yet is a wait, retried sooner than a failure;
    /// failed containers retry when the earliest back-off ends.
    #[test]
    fn the_cause_picks_the_kind_and_the_retry() {
        let waiting: SyncFailure = PodSyncError::Volumes(MountWaitError {
            unmounted: vec!["cfg".into()],
            errors: vec![],
            report: false,
        })
        .into();
        assert_eq!(waiting.kind, FailureKind::Waiting);
        assert_eq!(waiting.retry_after, VOLUME_RETRY);
        assert!(waiting
            .error
            .to_string()
            .starts_with("Unable to attach or mount volumes"));

        let soon = Duration::from_secs(3);
        let failed: SyncFailure =
            PodSyncError::Containers(vec![container_error(None), container_error(Some(soon))])
                .into();
        assert_eq!(failed.kind, FailureKind::Failed);
        assert_eq!(failed.retry_after, soon);

        let dirs: SyncFailure =
            PodSyncError::PodDirs(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
                .into();
        assert_eq!(
            (dirs.kind, dirs.retry_after),
            (FailureKind::Failed, WORKER_BACKOFF)
        );
        assert!(
            std::error::Error::source(&*dirs.error).is_some(),
            "the io error is kept"
        );
    }
}
