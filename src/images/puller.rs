//! The image puller (upstream `pkg/kubelet/images/puller.go`, with its
//! serialized and parallel pullers and `throttledImageService`): pulls run
//! on the puller's own threads, never on a pod worker.
//!
//! Upstream's serialized puller is one goroutine reading a queue of 10;
//! its parallel puller starts a goroutine per pull, limited by
//! `maxParallelImagePulls` (nil: unlimited). Here both are a fixed pool of
//! threads reading one bounded queue: one thread with
//! `serializeImagePulls: true`, else `maxParallelImagePulls` threads
//! (unset: [`UNLIMITED_PULLS_CAP`], so the thread count stays fixed).
//! Requests are keyed by image and credentials, so the owner
//! ([`super::image_manager::ImageManager`]) queues one pull for any number of
//! pods asking for the same image with the same credentials.
//! `registryPullQPS`/`registryBurst` gate each PullImage as upstream's
//! throttled service does: over the limit the pull fails with "pull QPS
//! exceeded" (and the pod backs off); 0 QPS means no limit.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender};

use crate::client::flowcontrol::TokenBucket;
use crate::credentialprovider::RegistryAuth;
use crate::cri::{api, CriError};
use crate::util::worker::{self, ShutdownStage::Workers, Worker};

/// Pulls waiting for a puller thread (upstream's serialized puller: 10).
/// Distinct images only: pods asking the same image share an entry.
pub const MAX_QUEUED_PULLS: usize = 64;
/// Puller threads when `serializeImagePulls: false` and
/// `maxParallelImagePulls` is unset (upstream: unlimited goroutines).
pub const UNLIMITED_PULLS_CAP: usize = 5;
/// The most puller threads an explicit `maxParallelImagePulls` gets.
pub const MAX_PULL_THREADS: usize = 32;

/// The puller's image calls go through the shared CRI seam; re-exported so
/// the image manager and its tests keep naming it from here.
pub use crate::cri::ImageService;

/// The KubeletConfiguration fields the puller follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullerConfig {
    pub serialize: bool,
    pub max_parallel: Option<i32>,
    pub qps: i32,
    pub burst: i32,
}

impl Default for PullerConfig {
    fn default() -> Self {
        PullerConfig {
            serialize: true,
            max_parallel: None,
            qps: 5,
            burst: 10,
        }
    }
}

impl PullerConfig {
    pub fn from_kubelet_config(c: &crate::kubeletconfig::KubeletConfiguration) -> Self {
        PullerConfig {
            serialize: c.serialize_image_pulls,
            max_parallel: c.max_parallel_image_pulls,
            qps: c.registry_pull_qps,
            burst: c.registry_burst,
        }
    }

    /// How many puller threads run.
    pub fn threads(&self) -> usize {
        if self.serialize {
            return 1;
        }
        match self.max_parallel {
            Some(n) => usize::try_from(n).unwrap_or(1).clamp(1, MAX_PULL_THREADS),
            None => UNLIMITED_PULLS_CAP,
        }
    }
}

/// What makes two pulls the same: the image and the credentials (hashed;
/// neither the credentials nor their hash are ever logged).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PullKey {
    pub image: String,
    creds: u64,
}

impl PullKey {
    pub fn new(image: &str, creds: &[RegistryAuth]) -> Self {
        let mut h = DefaultHasher::new();
        for c in creds {
            (&c.username, &c.password, &c.email).hash(&mut h);
        }
        PullKey {
            image: image.to_string(),
            creds: if creds.is_empty() { 0 } else { h.finish() | 1 },
        }
    }
}

impl std::fmt::Debug for PullKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = if self.creds == 0 {
            "anonymous"
        } else {
            "with credentials"
        };
        write!(f, "{:?} ({auth})", self.image)
    }
}

/// One pull to run.
pub struct PullRequest {
    pub key: PullKey,
    pub creds: Vec<RegistryAuth>,
    pub sandbox: api::PodSandboxConfig,
}

/// How a pull went (upstream pullResult).
#[derive(Debug, Clone)]
pub struct PullResult {
    pub image_ref: Result<String, PullFailure>,
    /// Best effort, from ImageStatus after the pull; 0 when unknown.
    pub size: u64,
    /// The PullImage calls alone (with the image size look-up).
    pub pull_duration: Duration,
}

/// A failed pull: the message, and upstream's classification of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullFailure {
    pub message: String,
    pub kind: FailureKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// ErrImagePull
    Pull,
    /// The runtime said "RegistryUnavailable: ..."
    RegistryUnavailable,
    /// The runtime said "SignatureValidationFailed: ..."
    SignatureValidationFailed,
}

/// Called on the puller thread when a pull finishes.
pub type OnPulled = Arc<dyn Fn(&PullKey, PullResult) + Send + Sync>;

pub struct Puller {
    service: Arc<dyn ImageService>,
    tx: Sender<PullRequest>,
    rx: Receiver<PullRequest>,
    limiter: Option<TokenBucket>,
    threads: usize,
}

impl Puller {
    pub fn new(service: Arc<dyn ImageService>, cfg: PullerConfig) -> Self {
        let asked = cfg.max_parallel.and_then(|n| usize::try_from(n).ok());
        if !cfg.serialize && asked.is_some_and(|n| n > MAX_PULL_THREADS) {
            log::warn!(
                "maxParallelImagePulls {}: only {MAX_PULL_THREADS} puller threads are started \
                 (a fixed thread budget)",
                cfg.max_parallel.unwrap_or_default()
            );
        }
        let (tx, rx) = bounded(MAX_QUEUED_PULLS);
        let limiter = (cfg.qps > 0)
            .then(|| TokenBucket::new(cfg.qps as f32, u32::try_from(cfg.burst).unwrap_or(1)));
        Puller {
            service,
            tx,
            rx,
            limiter,
            threads: cfg.threads(),
        }
    }

    /// Queues a pull without waiting; false when the queue is full.
    pub fn submit(&self, req: PullRequest) -> bool {
        self.tx.try_send(req).is_ok()
    }

    /// Starts the puller threads (`image-puller-N`); each runs until
    /// `shutdown` closes, calling `on_pulled` after every pull.
    pub fn start(
        self: &Arc<Self>,
        on_pulled: OnPulled,
        shutdown: &Receiver<()>,
    ) -> std::io::Result<Vec<Worker>> {
        (0..self.threads)
            .map(|i| {
                let p = Arc::clone(self);
                let done = Arc::clone(&on_pulled);
                worker::spawn_supervised(&format!("image-puller-{i}"), Workers, shutdown.clone(), {
                    move |stop| p.run(stop, &done)
                })
            })
            .collect()
    }

    fn run(&self, shutdown: &Receiver<()>, on_pulled: &OnPulled) {
        loop {
            select! {
                recv(self.rx) -> req => match req {
                    Ok(req) => {
                        let result = self.pull(&req);
                        on_pulled(&req.key, result);
                    }
                    Err(_) => return,
                },
                recv(shutdown) -> _ => return,
            }
        }
    }

    /// Runs one request: the QPS gate, PullImage with each credential in
    /// turn, then the image size. A panic becomes a failed pull, so the
    /// pods waiting on it are never left waiting forever.
    pub fn pull(&self, req: &PullRequest) -> PullResult {
        let started = Instant::now();
        let attempt =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.pull_unguarded(req)));
        let (image_ref, size) = attempt.unwrap_or_else(|_| {
            crate::metrics::module_panicked("image-puller");
            log::error!("image puller: pull of {:?} panicked", req.key);
            let message = "image pull panicked".to_string();
            (
                Err(PullFailure {
                    message,
                    kind: FailureKind::Pull,
                }),
                0,
            )
        });
        PullResult {
            image_ref,
            size,
            pull_duration: started.elapsed(),
        }
    }

    fn pull_unguarded(&self, req: &PullRequest) -> (Result<String, PullFailure>, u64) {
        if let Some(l) = &self.limiter {
            if l.wait(Duration::ZERO).is_err() {
                let failure = PullFailure {
                    message: "pull QPS exceeded".into(),
                    kind: FailureKind::Pull,
                };
                return (Err(failure), 0);
            }
        }
        let image = req.key.image.as_str();
        log::info!("image puller: pulling {:?}", req.key);
        let result = pull_with_credentials(&req.creds, |auth| {
            self.service
                .pull_image(image, auth, Some(req.sandbox.clone()))
        });
        let size = match &result {
            Ok(r) if !r.is_empty() => self
                .service
                .image_status(image)
                .ok()
                .flatten()
                .map_or(0, |i| i.size),
            _ => 0,
        };
        (result, size)
    }
}

/// Upstream `PullImage`: without credentials one anonymous pull; with
/// them, each in order until one succeeds (no anonymous attempt after),
/// the errors aggregated as `utilerrors.NewAggregate` prints them.
pub fn pull_with_credentials(
    creds: &[RegistryAuth],
    mut pull: impl FnMut(Option<api::AuthConfig>) -> Result<String, CriError>,
) -> Result<String, PullFailure> {
    let mut errors: Vec<CriError> = Vec::new();
    if creds.is_empty() {
        match pull(None) {
            Ok(r) => return Ok(r),
            Err(e) => errors.push(e),
        }
    }
    for auth in creds {
        match pull(Some(auth.to_cri())) {
            Ok(image_ref) => return Ok(image_ref),
            Err(e) => {
                if !errors.iter().any(|x| x.to_string() == e.to_string()) {
                    errors.push(e);
                }
            }
        }
    }
    Err(match errors.as_slice() {
        [one] => PullFailure {
            message: one.status_text(),
            kind: classify(&one.message),
        },
        many => PullFailure {
            message: format!(
                "[{}]",
                many.iter()
                    .map(CriError::status_text)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            kind: FailureKind::Pull,
        },
    })
}

/// Upstream evalCRIPullErr: the runtime's well-known error names.
fn classify(message: &str) -> FailureKind {
    if message.starts_with("RegistryUnavailable") {
        FailureKind::RegistryUnavailable
    } else if message.starts_with("SignatureValidationFailed") {
        FailureKind::SignatureValidationFailed
    } else {
        FailureKind::Pull
    }
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
        assert_eq!(r.as_deref(), Ok("ref"));
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
        assert_eq!(r.as_deref(), Ok("ref"));
        assert_eq!(seen, ["a", "b"]);
    }

    #[test]
    fn all_failing_aggregates_errors() {
        let r = pull_with_credentials(&[cred("a"), cred("b")], |a| {
            Err(denied(&a.unwrap().username))
        });
        let e = r.unwrap_err().message;
        assert!(
            e.starts_with('[') && e.contains("401 for a") && e.contains("401 for b"),
            "{e}"
        );
        assert!(!e.contains("-pw"), "{e}");
        let one = pull_with_credentials(&[cred("a")], |_| Err(denied("a")))
            .unwrap_err()
            .message;
        assert!(!one.starts_with('['), "{one}");
    }

    #[test]
    fn well_known_runtime_errors_are_classified() {
        let f = pull_with_credentials(&[], |_| {
            Err(CriError {
                method: "PullImage",
                code: None,
                message: "RegistryUnavailable: no route".into(),
            })
        })
        .unwrap_err();
        assert_eq!(f.kind, FailureKind::RegistryUnavailable);
    }
}
