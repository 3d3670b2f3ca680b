//! The image manager and its puller against a fake image service.

use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::credentialprovider::RegistryAuth;
use crate::cri::CriError;

/// Images present, pulls counted, each pull slow and maybe failing.
#[derive(Default)]
struct FakeImages {
    present: Mutex<HashSet<String>>,
    pulls: Mutex<Vec<String>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
    delay: Duration,
    fail: Option<String>,
}

impl ImageService for FakeImages {
    fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        Ok(self
            .present
            .lock()
            .unwrap()
            .contains(image)
            .then(|| api::Image {
                id: format!("sha256:{image}"),
                size: 1234,
                ..Default::default()
            }))
    }

    fn pull_image(
        &self,
        image: &str,
        _auth: Option<api::AuthConfig>,
        _sandbox: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        self.pulls.lock().unwrap().push(image.to_string());
        let n = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(n, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.running.fetch_sub(1, Ordering::SeqCst);
        if let Some(m) = &self.fail {
            return Err(CriError {
                method: "PullImage",
                code: None,
                message: m.clone(),
            });
        }
        self.present.lock().unwrap().insert(image.to_string());
        Ok(format!("sha256:{image}"))
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<(String, String, String)>>);

impl EventRecorder for Events {
    fn pod_event(&self, pod: &Pod, _kind: EventType, reason: &str, message: &str) {
        self.0
            .lock()
            .unwrap()
            .push((pod.uid().to_string(), reason.into(), message.into()));
    }
}

impl Events {
    fn reasons(&self, uid: &str) -> Vec<String> {
        let ev = self.0.lock().unwrap();
        ev.iter()
            .filter(|(u, _, _)| u == uid)
            .map(|(_, r, _)| r.clone())
            .collect()
    }
}

struct Setup {
    images: Arc<FakeImages>,
    events: Arc<Events>,
    mgr: Arc<ImageManager>,
    requeued: Arc<Mutex<Vec<String>>>,
    _stop: crossbeam_channel::Sender<()>,
}

fn setup(images: FakeImages, cfg: PullerConfig) -> Setup {
    let images = Arc::new(images);
    let events = Arc::new(Events::default());
    let mgr = ImageManager::new(
        Arc::clone(&images) as Arc<dyn ImageService>,
        Arc::clone(&events) as Arc<dyn EventRecorder>,
        cfg,
    );
    let requeued = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&requeued);
    mgr.set_on_pulled(Box::new(move |uid| r.lock().unwrap().push(uid.to_string())));
    let (stop, rx) = crossbeam_channel::bounded::<()>(0);
    mgr.start(&rx).unwrap();
    Setup {
        images,
        events,
        mgr,
        requeued,
        _stop: stop,
    }
}

fn no_qps() -> PullerConfig {
    PullerConfig {
        qps: 0,
        ..PullerConfig::default()
    }
}

fn pod(uid: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            name: Some(uid.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn container(image: &str, policy: &str) -> Container {
    Container {
        name: "c".into(),
        image: Some(image.into()),
        image_pull_policy: Some(policy.into()),
        ..Default::default()
    }
}

fn ensure(s: &Setup, uid: &str, c: &Container) -> Result<String, PullError> {
    s.mgr
        .ensure_image_exists(&pod(uid), c, &api::PodSandboxConfig::default(), &[])
}

fn wait_requeued(s: &Setup, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.requeued.lock().unwrap().len() < n {
        assert!(Instant::now() < deadline, "{n} pods re-queued");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_present_image_never_reaches_the_puller() {
    let images = FakeImages::default();
    images.present.lock().unwrap().insert("busybox:1.36".into());
    let s = setup(images, no_qps());
    let c = container("busybox:1.36", "IfNotPresent");
    assert_eq!(ensure(&s, "a", &c), Ok("sha256:busybox:1.36".into()));
    assert!(s.images.pulls.lock().unwrap().is_empty());
    assert_eq!(s.events.reasons("a"), ["Pulled"]);
    let never = container("absent:1", "Never");
    assert_eq!(
        ensure(&s, "a", &never).unwrap_err().reason(),
        "ErrImageNeverPull"
    );
}

#[test]
fn pulls_do_not_block_and_same_image_pulls_are_deduplicated() {
    let s = setup(
        FakeImages {
            delay: Duration::from_millis(200),
            ..Default::default()
        },
        no_qps(),
    );
    let c = container("reg/x:1", "Always");
    let started = Instant::now();
    for uid in ["a", "b", "c"] {
        let e = ensure(&s, uid, &c).unwrap_err();
        assert_eq!(e.reason(), "ContainerCreating");
        assert_eq!(e.retry_after(), Some(PULL_WAIT_RETRY));
    }
    // Asking again while it pulls neither waits nor pulls again.
    assert_eq!(
        ensure(&s, "a", &c).unwrap_err().reason(),
        "ContainerCreating"
    );
    assert!(started.elapsed() < Duration::from_millis(150), "no waiting");
    wait_requeued(&s, 3);
    assert_eq!(*s.images.pulls.lock().unwrap(), ["reg/x:1"]);
    let mut requeued = s.requeued.lock().unwrap().clone();
    requeued.sort();
    assert_eq!(requeued, ["a", "b", "c"]);
    for uid in ["a", "b", "c"] {
        assert_eq!(ensure(&s, uid, &c), Ok("sha256:reg/x:1".into()));
        assert_eq!(s.events.reasons(uid), ["Pulling", "Pulled"]);
    }
    let ev = s.events.0.lock().unwrap();
    let pulled = &ev.iter().find(|(_, r, _)| r == "Pulled").unwrap().2;
    assert!(
        pulled.starts_with("Successfully pulled image \"reg/x:1\" in ")
            && pulled.contains("s including waiting). Image size: 1234 bytes."),
        "{pulled}"
    );
}

#[test]
fn a_failed_pull_is_err_image_pull_then_back_off() {
    let s = setup(
        FakeImages {
            fail: Some("connection refused".into()),
            ..Default::default()
        },
        no_qps(),
    );
    let c = container("reg/y:1", "IfNotPresent");
    assert_eq!(
        ensure(&s, "a", &c).unwrap_err().reason(),
        "ContainerCreating"
    );
    wait_requeued(&s, 1);
    let e = ensure(&s, "a", &c).unwrap_err();
    assert_eq!(e.reason(), "ErrImagePull");
    assert!(e.message().contains("connection refused"), "{e}");
    let e = ensure(&s, "a", &c).unwrap_err();
    assert_eq!(e.reason(), "ImagePullBackOff");
    assert_eq!(e.message(), "Back-off pulling image \"reg/y:1\"");
    assert!(e.retry_after().is_some_and(|d| d > Duration::ZERO));
    assert_eq!(s.events.reasons("a"), ["Pulling", "Failed", "BackOff"]);
}

fn max_parallel(cfg: PullerConfig) -> usize {
    let s = setup(
        FakeImages {
            delay: Duration::from_millis(150),
            ..Default::default()
        },
        cfg,
    );
    for i in 0..4 {
        let c = container(&format!("reg/img{i}:1"), "Always");
        assert_eq!(
            ensure(&s, &format!("p{i}"), &c).unwrap_err().reason(),
            "ContainerCreating"
        );
    }
    wait_requeued(&s, 4);
    assert_eq!(s.images.pulls.lock().unwrap().len(), 4);
    s.images.max_running.load(Ordering::SeqCst)
}

#[test]
fn serialized_pulls_run_one_at_a_time_parallel_ones_on_a_fixed_pool() {
    assert_eq!(max_parallel(no_qps()), 1);
    let pool = PullerConfig {
        serialize: false,
        max_parallel: Some(3),
        ..no_qps()
    };
    assert_eq!(pool.threads(), 3);
    assert_eq!(max_parallel(pool), 3);
    let unset = PullerConfig {
        serialize: false,
        max_parallel: None,
        ..no_qps()
    };
    assert_eq!(unset.threads(), super::super::puller::UNLIMITED_PULLS_CAP);
}

#[test]
fn registry_qps_limits_pulls_as_upstream() {
    let s = setup(
        FakeImages::default(),
        PullerConfig {
            qps: 1,
            burst: 1,
            ..PullerConfig::default()
        },
    );
    let (a, b) = (
        container("reg/a:1", "Always"),
        container("reg/b:1", "Always"),
    );
    assert!(ensure(&s, "a", &a).is_err());
    assert!(ensure(&s, "b", &b).is_err());
    wait_requeued(&s, 2);
    assert_eq!(ensure(&s, "a", &a), Ok("sha256:reg/a:1".into()));
    let e = ensure(&s, "b", &b).unwrap_err();
    assert_eq!(
        (e.reason(), e.message()),
        ("ErrImagePull", "pull QPS exceeded")
    );
    assert_eq!(*s.images.pulls.lock().unwrap(), ["reg/a:1"]);
}

#[test]
fn pull_keys_include_credentials_without_showing_them() {
    let auth = |u: &str| RegistryAuth {
        username: u.into(),
        password: "s3cret".into(),
        email: String::new(),
    };
    let anon = PullKey::new("reg/x:1", &[]);
    assert_eq!(anon, PullKey::new("reg/x:1", &[]));
    assert_ne!(anon, PullKey::new("reg/x:1", &[auth("u")]));
    assert_eq!(
        PullKey::new("reg/x:1", &[auth("u")]),
        PullKey::new("reg/x:1", &[auth("u")])
    );
    assert_ne!(
        PullKey::new("reg/x:1", &[auth("u")]),
        PullKey::new("reg/x:1", &[auth("v")])
    );
    let shown = format!("{:?}", PullKey::new("reg/x:1", &[auth("u")]));
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn forgotten_pods_are_not_requeued() {
    let s = setup(
        FakeImages {
            delay: Duration::from_millis(100),
            ..Default::default()
        },
        no_qps(),
    );
    let c = container("reg/z:1", "Always");
    assert!(ensure(&s, "gone", &c).is_err());
    assert!(ensure(&s, "kept", &c).is_err());
    s.mgr.forget_pod("gone");
    wait_requeued(&s, 1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(*s.requeued.lock().unwrap(), ["kept"]);
    assert!(s.mgr.lock().done.keys().all(|(u, _)| u != "gone"));
}

#[test]
fn go_durations() {
    assert_eq!(go_millis(Duration::from_micros(1_234_567)), "1.234s");
    assert_eq!(go_millis(Duration::from_millis(512)), "512ms");
    assert_eq!(go_millis(Duration::from_millis(61_500)), "1m1.5s");
    assert_eq!(go_millis(Duration::ZERO), "0s");
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
