//! The image manager (upstream `pkg/kubelet/images/image_manager.go`):
//! decides per imagePullPolicy whether a container's image must be pulled,
//! backs off failed pulls, and reports progress with upstream's events.
//!
//! Unlike upstream's EnsureImageExists, which blocks its pod's goroutine
//! until the pull ends, [`ImageManager::ensure_image_exists`] never waits on
//! a pull: it hands the pull to the [`Puller`]'s threads and answers
//! [`PullError::InProgress`] (the container waits as `ContainerCreating`),
//! freeing the pod worker. When the pull ends, the puller thread records
//! the result for each waiting container, posts `Pulled` or `Failed`, and
//! re-queues each waiting pod through the callback given to
//! [`ImageManager::new`]; the pod's next sync takes the result.
//! The pod's imagePullSecrets travel with the request, as upstream's
//! `PullImage` uses them: each matching credential in turn until one works.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Container, ImageVolumeSource, Pod, Secret};
use rkubelet_util::lock;

use super::puller::{
    FailureKind, ImageService, OnPulled, PullKey, PullRequest, PullResult, Puller, PullerConfig,
};
use crate::credentialprovider;
use crate::cri::api;
use crate::events::{self, EventRecorder, EventType};
use crate::kubeletconfig::format_go_duration;
use crate::podutil::PodExt;
use crate::util::backoff::Backoff;
use crate::util::worker::Worker;

const PULL_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// How soon a container waiting on a pull is looked at again if no
/// re-queue came (the re-queue after the pull is what normally wakes it).
pub const PULL_WAIT_RETRY: Duration = Duration::from_secs(10);
/// How soon to try again when the pull queue was full.
const QUEUE_FULL_RETRY: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// The policy the API server would default: Always for `:latest` or an
/// untagged image, IfNotPresent otherwise.
pub fn pull_policy(c: &Container) -> PullPolicy {
    policy_or_default(
        c.image_pull_policy.as_deref(),
        c.image.as_deref().unwrap_or(""),
    )
}

fn policy_or_default(policy: Option<&str>, image: &str) -> PullPolicy {
    match policy {
        Some("Always") => PullPolicy::Always,
        Some("Never") => PullPolicy::Never,
        Some("IfNotPresent") => PullPolicy::IfNotPresent,
        _ => match image_tag(image) {
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

/// Why a container's image is not (yet) there. `reason()` is upstream's
/// error name, which becomes the container's Waiting reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullError {
    /// The pull is queued or running on the puller: not a failure, the
    /// container waits as `ContainerCreating` (as upstream's while its
    /// EnsureImageExists blocks).
    InProgress {
        retry_after: Duration,
    },
    InvalidImageName(String),
    ImageInspect(String),
    NeverPull(String),
    BackOff {
        message: String,
        remaining: Duration,
    },
    Pull(String),
    RegistryUnavailable(String),
    SignatureValidationFailed(String),
}

impl PullError {
    /// The waiting reason while a pull runs (what upstream shows before
    /// its first pull ends).
    pub const IN_PROGRESS_REASON: &'static str = "ContainerCreating";

    pub fn reason(&self) -> &'static str {
        match self {
            PullError::InProgress { .. } => Self::IN_PROGRESS_REASON,
            PullError::InvalidImageName(_) => "InvalidImageName",
            PullError::ImageInspect(_) => "ImageInspectError",
            PullError::NeverPull(_) => "ErrImageNeverPull",
            PullError::BackOff { .. } => "ImagePullBackOff",
            PullError::Pull(_) => "ErrImagePull",
            PullError::RegistryUnavailable(_) => "RegistryUnavailable",
            PullError::SignatureValidationFailed(_) => "SignatureValidationFailed",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            PullError::InProgress { .. } => "",
            PullError::BackOff { message, .. } => message,
            PullError::InvalidImageName(m)
            | PullError::ImageInspect(m)
            | PullError::NeverPull(m)
            | PullError::Pull(m)
            | PullError::RegistryUnavailable(m)
            | PullError::SignatureValidationFailed(m) => m,
        }
    }

    /// When looking again is worthwhile (None: the worker's default).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PullError::InProgress { retry_after } => Some(*retry_after),
            PullError::BackOff { remaining, .. } => Some(*remaining),
            _ => None,
        }
    }
}

impl std::fmt::Display for PullError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason(), self.message())
    }
}

/// Called with a pod's UID when a pull it waited for has finished.
pub type OnPodPulled = Box<dyn Fn(&str) + Send + Sync>;

/// Whom an image is pulled for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Requester {
    /// A container, named in its events' field path.
    Container(String),
    /// An image volume (upstream getImageVolumes): pulled for the pod,
    /// whose events name no container.
    Volume(String),
}

/// One image to make present, and why.
struct Wanted<'a> {
    requester: Requester,
    spec_image: &'a str,
    policy: PullPolicy,
}

/// A container or image volume waiting on a pull.
struct Waiter {
    uid: String,
    pod: Pod,
    requester: Requester,
    spec_image: String,
    since: Instant,
}

#[derive(Default)]
struct State {
    /// Pulls queued or running, with the containers waiting on each.
    inflight: HashMap<PullKey, Vec<Waiter>>,
    /// Results of finished pulls, by pod UID and requester, taken by the
    /// requester's next sync.
    done: HashMap<(String, Requester), Result<String, PullError>>,
}

pub struct ImageManager {
    service: Arc<dyn ImageService>,
    recorder: Arc<dyn EventRecorder>,
    backoff: Backoff,
    puller: Arc<Puller>,
    state: Mutex<State>,
    on_pulled: OnPodPulled,
}

impl ImageManager {
    pub fn new(
        service: Arc<dyn ImageService>,
        recorder: Arc<dyn EventRecorder>,
        cfg: PullerConfig,
        on_pulled: OnPodPulled,
    ) -> Arc<Self> {
        let puller = Arc::new(Puller::new(Arc::clone(&service), cfg));
        Arc::new(ImageManager {
            service,
            recorder,
            backoff: Backoff::new(PULL_BACKOFF_INITIAL, PULL_BACKOFF_MAX, PULL_BACKOFF_MAX * 2),
            puller,
            state: Mutex::new(State::default()),
            on_pulled,
        })
    }

    /// Starts the puller threads.
    pub fn start(
        self: &Arc<Self>,
        shutdown: &crossbeam_channel::Receiver<()>,
    ) -> std::io::Result<Vec<Worker>> {
        let weak = Arc::downgrade(self);
        let done: OnPulled = Arc::new(move |key: &PullKey, result: PullResult| {
            if let Some(m) = weak.upgrade() {
                m.complete(key, result);
            }
        });
        self.puller.start(done, shutdown)
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
    ) -> Result<String, PullError> {
        let spec_image = c.image.as_deref().unwrap_or("").trim();
        if spec_image.is_empty() {
            return Err(PullError::InvalidImageName(
                "container has no image".to_string(),
            ));
        }
        let wanted = Wanted {
            requester: Requester::Container(c.name.clone()),
            spec_image,
            policy: pull_policy(c),
        };
        self.ensure(pod, &wanted, sandbox, pull_secrets)
    }

    /// Makes sure an image volume's image is present, with the pod's
    /// pull secrets and the volume's pull policy; returns its reference.
    pub fn ensure_volume_image(
        &self,
        pod: &Pod,
        volume: &str,
        source: &ImageVolumeSource,
        sandbox: &api::PodSandboxConfig,
        pull_secrets: &[Secret],
    ) -> Result<String, PullError> {
        let spec_image = source.reference.as_deref().unwrap_or("").trim();
        if spec_image.is_empty() {
            return Err(PullError::InvalidImageName(format!(
                "image volume {volume:?} has no reference"
            )));
        }
        let wanted = Wanted {
            requester: Requester::Volume(volume.to_string()),
            spec_image,
            policy: policy_or_default(source.pull_policy.as_deref(), spec_image),
        };
        self.ensure(pod, &wanted, sandbox, pull_secrets)
    }

    fn ensure(
        &self,
        pod: &Pod,
        w: &Wanted<'_>,
        sandbox: &api::PodSandboxConfig,
        pull_secrets: &[Secret],
    ) -> Result<String, PullError> {
        let spec_image = w.spec_image;
        // A pull this requester waited for has ended: its result first.
        let waiter_key = (pod.uid().to_string(), w.requester.clone());
        if let Some(done) = lock(&self.state).done.remove(&waiter_key) {
            return done;
        }
        let image = with_default_tag(spec_image);
        let present = self
            .service
            .image_status(&image)
            .map_err(|e| {
                let msg = format!("Failed to inspect image {spec_image:?}: {e}");
                self.event(
                    pod,
                    &w.requester,
                    EventType::Warning,
                    events::FAILED_TO_INSPECT_IMAGE,
                    &msg,
                );
                PullError::ImageInspect(msg)
            })?
            .map(|i| i.id);
        match (w.policy, present) {
            (PullPolicy::IfNotPresent | PullPolicy::Never, Some(id)) => {
                let msg = format!("Container image {spec_image:?} already present on machine");
                self.event(
                    pod,
                    &w.requester,
                    EventType::Normal,
                    events::PULLED_IMAGE,
                    &msg,
                );
                return Ok(id);
            }
            (PullPolicy::Never, None) => {
                let msg = format!(
                    "Container image {spec_image:?} is not present with pull policy of Never"
                );
                self.event(
                    pod,
                    &w.requester,
                    EventType::Warning,
                    events::ERR_IMAGE_NEVER_PULL,
                    &msg,
                );
                return Err(PullError::NeverPull(msg));
            }
            _ => {}
        }
        self.request_pull(pod, w, &image, sandbox, pull_secrets)
    }

    fn request_pull(
        &self,
        pod: &Pod,
        w: &Wanted<'_>,
        image: &str,
        sandbox: &api::PodSandboxConfig,
        pull_secrets: &[Secret],
    ) -> Result<String, PullError> {
        let (spec_image, requester) = (w.spec_image, &w.requester);
        let in_progress = PullError::InProgress {
            retry_after: PULL_WAIT_RETRY,
        };
        if self.is_waiting(pod.uid(), requester) {
            return Err(in_progress);
        }
        let backoff_key = backoff_key(pod.uid(), spec_image);
        if let Some(remaining) = self
            .backoff
            .remaining_since_update(&backoff_key, SystemTime::now())
        {
            let message = format!("Back-off pulling image {spec_image:?}");
            self.event(
                pod,
                requester,
                EventType::Normal,
                events::BACK_OFF_PULL_IMAGE,
                &message,
            );
            return Err(PullError::BackOff { message, remaining });
        }
        let creds = match credentialprovider::lookup(pull_secrets, image) {
            Ok(creds) => creds,
            Err(e) => {
                self.backoff.next(&backoff_key, SystemTime::now());
                let msg = format!("Failed to pull image {spec_image:?}: {e}");
                self.event(
                    pod,
                    requester,
                    EventType::Warning,
                    events::FAILED_TO_PULL_IMAGE,
                    &msg,
                );
                return Err(PullError::Pull(e.to_string()));
            }
        };
        let key = PullKey::new(image, &creds);
        let waiter = Waiter {
            uid: pod.uid().to_string(),
            pod: pod.clone(),
            requester: requester.clone(),
            spec_image: spec_image.to_string(),
            since: Instant::now(),
        };
        {
            let mut st = lock(&self.state);
            if let Some(waiters) = st.inflight.get_mut(&key) {
                waiters.push(waiter);
            } else {
                let req = PullRequest {
                    key: key.clone(),
                    creds,
                    sandbox: sandbox.clone(),
                };
                if !self.puller.submit(req) {
                    log::warn!(
                        "pod {}: image pull queue is full; {spec_image:?} is requested again later",
                        pod.full_name()
                    );
                    return Err(PullError::InProgress {
                        retry_after: QUEUE_FULL_RETRY,
                    });
                }
                st.inflight.insert(key, vec![waiter]);
            }
            // Under the lock: the puller takes it before it reports the
            // pull's end, so a pull that fails at once cannot post Failed
            // before this Pulling (recording never blocks).
            let msg = format!("Pulling image {spec_image:?}");
            self.event(
                pod,
                requester,
                EventType::Normal,
                events::PULLING_IMAGE,
                &msg,
            );
        }
        Err(in_progress)
    }

    fn is_waiting(&self, uid: &str, requester: &Requester) -> bool {
        lock(&self.state)
            .inflight
            .values()
            .flatten()
            .any(|w| w.uid == uid && w.requester == *requester)
    }

    /// On a puller thread: a pull ended. Every container that waited on it
    /// gets the result, its event, and its pod re-queued.
    fn complete(&self, key: &PullKey, result: PullResult) {
        let waiters = {
            let mut st = lock(&self.state);
            let waiters = st.inflight.remove(key).unwrap_or_default();
            for w in &waiters {
                let outcome = match &result.image_ref {
                    Ok(r) => Ok(r.clone()),
                    Err(f) => Err(to_pull_error(&w.spec_image, f)),
                };
                st.done
                    .insert((w.uid.clone(), w.requester.clone()), outcome);
            }
            waiters
        };
        let now = SystemTime::now();
        let mut backed_off = HashSet::new();
        for w in &waiters {
            let bkey = backoff_key(&w.uid, &w.spec_image);
            match &result.image_ref {
                Ok(_) => {
                    self.backoff.reset(&bkey);
                    let msg = format!(
                        "Successfully pulled image {:?} in {} ({} including waiting). Image size: {} bytes.",
                        w.spec_image,
                        go_millis(result.pull_duration),
                        go_millis(w.since.elapsed()),
                        result.size
                    );
                    self.event(
                        &w.pod,
                        &w.requester,
                        EventType::Normal,
                        events::PULLED_IMAGE,
                        &msg,
                    );
                }
                Err(f) => {
                    if backed_off.insert(bkey.clone()) {
                        self.backoff.next(&bkey, now);
                    }
                    let msg = format!("Failed to pull image {:?}: {}", w.spec_image, f.message);
                    self.event(
                        &w.pod,
                        &w.requester,
                        EventType::Warning,
                        events::FAILED_TO_PULL_IMAGE,
                        &msg,
                    );
                }
            }
        }
        let uids: HashSet<&str> = waiters.iter().map(|w| w.uid.as_str()).collect();
        for uid in uids {
            (self.on_pulled)(uid);
        }
    }

    /// Forgets a pod's pull results and stops waiting for its pulls (a pull
    /// already running still finishes; nobody is told).
    pub fn forget_pod(&self, uid: &str) {
        let mut st = lock(&self.state);
        st.done.retain(|(u, _), _| u != uid);
        for waiters in st.inflight.values_mut() {
            waiters.retain(|w| w.uid != uid);
        }
    }

    pub fn gc_backoffs(&self, now: SystemTime) {
        self.backoff.gc(now);
    }

    fn event(&self, pod: &Pod, who: &Requester, kind: EventType, reason: &str, msg: &str) {
        match who {
            Requester::Container(c) => self.recorder.pod_container_event(pod, c, kind, reason, msg),
            Requester::Volume(_) => self.recorder.pod_event(pod, kind, reason, msg),
        }
    }
}

fn backoff_key(uid: &str, spec_image: &str) -> String {
    format!("{uid}_{spec_image}")
}

/// Upstream evalCRIPullErr: well-known runtime errors get their own reason.
fn to_pull_error(spec_image: &str, f: &super::puller::PullFailure) -> PullError {
    let rest = |name: &str| {
        let m = f.message.as_str();
        let at = m.find(name).map_or(m.len(), |i| i + name.len());
        m[at..].to_string()
    };
    match f.kind {
        FailureKind::Pull => PullError::Pull(f.message.clone()),
        FailureKind::RegistryUnavailable => PullError::RegistryUnavailable(format!(
            "image pull failed for {spec_image} because the registry is unavailable{}",
            rest("RegistryUnavailable")
        )),
        FailureKind::SignatureValidationFailed => PullError::SignatureValidationFailed(format!(
            "image pull failed for {spec_image} because the signature validation failed{}",
            rest("SignatureValidationFailed")
        )),
    }
}

/// A duration as Go prints one truncated to milliseconds ("1.234s", "512ms").
fn go_millis(d: Duration) -> String {
    format_go_duration(d.as_millis() * 1_000_000)
}

#[cfg(test)]
#[path = "image_manager_tests.rs"]
mod tests;
