//! Image pulls per imagePullPolicy, with back-off (upstream
//! `pkg/kubelet/images/image_manager.go`), using the pod's
//! imagePullSecrets as upstream's `PullImage` does: each matching
//! credential in turn until one works, anonymous only when none matches.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod, Secret};

use super::SyncError;
use crate::credentialprovider::{self, RegistryAuth};
use crate::cri::{api, CriError, RemoteRuntime};
use crate::events::{self, EventRecorder, EventType};
use crate::podutil::PodExt;
use crate::util::backoff::Backoff;

const PULL_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// The policy the API server would default: Always for `:latest` or an
/// untagged image, IfNotPresent otherwise.
pub fn pull_policy(c: &Container) -> PullPolicy {
    match c.image_pull_policy.as_deref() {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ => match image_tag(c.image.as_deref().unwrap_or("")) {
            ImageTag::Digest => PullPolicy::IfNotPresent,
            ImageTag::Tag(t) if t != "latest" => PullPolicy::IfNotPresent,
            _ => PullPolicy::Always,
        },
    }
}

enum ImageTag<'a> {
    None,
    Tag(&'a str),
    Digest,
}

fn image_tag(image: &str) -> ImageTag<'_> {
    if image.contains('@') {
        return ImageTag::Digest;
    }
    // A ':' after the last '/' is a tag; before it, a registry port.
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => ImageTag::Tag(tag),
        None => ImageTag::None,
    }
}

/// `busybox` -> `busybox:latest`, as upstream's applyDefaultImageTag.
pub fn with_default_tag(image: &str) -> String {
    match image_tag(image) {
        ImageTag::None => format!("{image}:latest"),
        _ => image.to_string(),
    }
}

pub struct ImageManager {
    runtime: Arc<RemoteRuntime>,
    recorder: Arc<dyn EventRecorder>,
    backoff: Backoff,
    /// serializeImagePulls: one pull at a time.
    pull_lock: Option<Mutex<()>>,
}

impl ImageManager {
    pub fn new(
        runtime: Arc<RemoteRuntime>,
        recorder: Arc<dyn EventRecorder>,
        serialize: bool,
    ) -> Self {
        ImageManager {
            runtime,
            recorder,
            backoff: Backoff::new(PULL_BACKOFF_INITIAL, PULL_BACKOFF_MAX, PULL_BACKOFF_MAX * 2),
            pull_lock: serialize.then(|| Mutex::new(())),
        }
    }

    /// Makes sure the container's image is present; returns its reference.
    /// `pull_secrets` are the pod's imagePullSecrets (those that exist);
    /// they are read only when a pull is needed.
    pub fn ensure_image_exists(
        &self,
        pod: &Pod,
        c: &Container,
        sandbox: &api::PodSandboxConfig,
        pull_secrets: &[Secret],
    ) -> Result<String, SyncError> {
        let name = Some(c.name.as_str());
        let spec_image = c.image.as_deref().unwrap_or("").trim();
        if spec_image.is_empty() {
            return Err(SyncError::new(
                name,
                "InvalidImageName",
                "container has no image",
            ));
        }
        let image = with_default_tag(spec_image);
        let present = self
            .runtime
            .image_status(&image)
            .map_err(|e| SyncError::runtime(name, "ErrImageInspect", &e))?
            .map(|i| i.id);
        let policy = pull_policy(c);
        match (policy, &present) {
            (PullPolicy::IfNotPresent, Some(id)) | (PullPolicy::Never, Some(id)) => {
                self.recorder.pod_container_event(
                    pod,
                    &c.name,
                    EventType::Normal,
                    events::PULLED_IMAGE,
                    &format!("Container image {spec_image:?} already present on machine"),
                );
                return Ok(id.clone());
            }
            (PullPolicy::Never, None) => {
                let msg = format!(
                    "Container image {spec_image:?} is not present with pull policy of Never"
                );
                self.recorder.pod_container_event(
                    pod,
                    &c.name,
                    EventType::Warning,
                    events::ERR_IMAGE_NEVER_PULL,
                    &msg,
                );
                return Err(SyncError::new(name, "ErrImageNeverPull", msg));
            }
            _ => {}
        }
        self.pull(pod, c, &image, spec_image, sandbox, pull_secrets)
    }

    fn pull(
        &self,
        pod: &Pod,
        c: &Container,
        image: &str,
        spec_image: &str,
        sandbox: &api::PodSandboxConfig,
        pull_secrets: &[Secret],
    ) -> Result<String, SyncError> {
        let name = Some(c.name.as_str());
        let key = format!("{}_{}", pod.uid(), spec_image);
        let now = SystemTime::now();
        if let Some(remaining) = self.backoff.remaining_since_update(&key, now) {
            let msg = format!("Back-off pulling image {spec_image:?}");
            self.recorder.pod_container_event(
                pod,
                &c.name,
                EventType::Normal,
                events::BACK_OFF_PULL_IMAGE,
                &msg,
            );
            let mut err = SyncError::new(name, "ImagePullBackOff", msg);
            err.retry_after = Some(remaining);
            return Err(err);
        }
        self.recorder.pod_container_event(
            pod,
            &c.name,
            EventType::Normal,
            events::PULLING_IMAGE,
            &format!("Pulling image {spec_image:?}"),
        );
        let started = std::time::Instant::now();
        let result = match credentialprovider::lookup(pull_secrets, image) {
            Ok(creds) => {
                let _serial = self
                    .pull_lock
                    .as_ref()
                    .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
                pull_with_credentials(&creds, |auth| {
                    self.runtime.pull_image(image, auth, Some(sandbox.clone()))
                })
            }
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(image_ref) => {
                self.backoff.reset(&key);
                self.recorder.pod_container_event(
                    pod,
                    &c.name,
                    EventType::Normal,
                    events::PULLED_IMAGE,
                    &format!(
                        "Successfully pulled image {spec_image:?} in {:.3}s",
                        started.elapsed().as_secs_f64()
                    ),
                );
                Ok(image_ref)
            }
            Err(e) => {
                self.backoff.next(&key, SystemTime::now());
                let msg = format!("Failed to pull image {spec_image:?}: {e}");
                self.recorder.pod_container_event(
                    pod,
                    &c.name,
                    EventType::Warning,
                    events::FAILED_TO_PULL_IMAGE,
                    &msg,
                );
                Err(SyncError::new(name, "ErrImagePull", msg))
            }
        }
    }

    pub fn gc_backoffs(&self, now: SystemTime) {
        self.backoff.gc(now);
    }
}

/// Upstream `PullImage`: without credentials one anonymous pull; with
/// them, each in order until one succeeds (no anonymous attempt after),
/// the errors aggregated as `utilerrors.NewAggregate` prints them.
fn pull_with_credentials(
    creds: &[RegistryAuth],
    mut pull: impl FnMut(Option<api::AuthConfig>) -> Result<String, CriError>,
) -> Result<String, String> {
    if creds.is_empty() {
        return pull(None).map_err(|e| e.to_string());
    }
    let mut errors: Vec<String> = Vec::new();
    for auth in creds {
        match pull(Some(auth.to_cri())) {
            Ok(image_ref) => return Ok(image_ref),
            Err(e) => {
                let msg = e.to_string();
                if !errors.contains(&msg) {
                    errors.push(msg);
                }
            }
        }
    }
    Err(match errors.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(user: &str) -> RegistryAuth {
        RegistryAuth {
            username: user.into(),
            password: format!("{user}-pw"),
            email: String::new(),
        }
    }

    fn denied(user: &str) -> CriError {
        CriError {
            method: "PullImage",
            code: None,
            message: format!("401 for {user}"),
        }
    }

    #[test]
    fn anonymous_without_credentials() {
        let mut seen = Vec::new();
        let r = pull_with_credentials(&[], |a| {
            seen.push(a.is_some());
            Ok("ref".into())
        });
        assert_eq!(r, Ok("ref".into()));
        assert_eq!(seen, [false]);
    }

    #[test]
    fn credentials_in_order_until_one_works() {
        let mut seen = Vec::new();
        let r = pull_with_credentials(&[cred("a"), cred("b"), cred("c")], |a| {
            let a = a.expect("never anonymous when credentials match");
            seen.push(a.username.clone());
            assert_eq!(a.password, format!("{}-pw", a.username));
            if a.username == "b" {
                Ok("ref".into())
            } else {
                Err(denied(&a.username))
            }
        });
        assert_eq!(r, Ok("ref".into()));
        assert_eq!(seen, ["a", "b"]);
    }

    #[test]
    fn all_failing_aggregates_errors() {
        let r = pull_with_credentials(&[cred("a"), cred("b")], |a| {
            Err(denied(&a.unwrap().username))
        });
        let e = r.unwrap_err();
        assert!(
            e.starts_with('[') && e.contains("401 for a") && e.contains("401 for b"),
            "{e}"
        );
        assert!(!e.contains("-pw"), "{e}");
        let one = pull_with_credentials(&[cred("a")], |_| Err(denied("a"))).unwrap_err();
        assert!(!one.starts_with('['), "{one}");
    }

    fn c(image: &str, policy: Option<&str>) -> Container {
        Container {
            name: "a".into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn default_policies() {
        assert_eq!(pull_policy(&c("busybox", None)), PullPolicy::Always);
        assert_eq!(pull_policy(&c("busybox:latest", None)), PullPolicy::Always);
        assert_eq!(
            pull_policy(&c("busybox:1.36", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(pull_policy(&c("host:5000/img", None)), PullPolicy::Always);
        assert_eq!(
            pull_policy(&c("host:5000/img:v1", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            pull_policy(&c("img@sha256:abcd", None)),
            PullPolicy::IfNotPresent
        );
        assert_eq!(pull_policy(&c("busybox", Some("Never"))), PullPolicy::Never);
    }

    #[test]
    fn default_tag() {
        assert_eq!(with_default_tag("busybox"), "busybox:latest");
        assert_eq!(with_default_tag("host:5000/img"), "host:5000/img:latest");
        assert_eq!(with_default_tag("busybox:1.36"), "busybox:1.36");
        assert_eq!(with_default_tag("img@sha256:ab"), "img@sha256:ab");
    }
}
