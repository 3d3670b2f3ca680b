//! The image manager and its puller against a fake image service.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_util::lock;

use super::*;
use crate::credentialprovider::RegistryAuth;
use crate::kuberuntime::fake_runtime::{cri_error, FakeRuntime};
use crate::util::testing::eventually;

/// The shared fake runtime, with pulled images of 1234 bytes.
fn images() -> FakeRuntime {
    let f = FakeRuntime::new();
    f.state().pulled_image_size = 1234;
    f
}

/// The images pulled so far, in order.
fn pulls(f: &FakeRuntime) -> Vec<String> {
    f.calls_to("PullImage")
        .into_iter()
        .map(|args| args[0].clone())
        .collect()
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

    /// Marks the reason with the container its field path names.
    fn pod_container_event(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        self.pod_event(pod, kind, &format!("{reason}@{container}"), message);
    }
}

impl Events {
    fn reasons(&self, uid: &str) -> Vec<String> {
        let ev = self.0.lock().unwrap();
        ev.iter()
            .filter(|(u, _, _)| u == uid)
            .map(|(_, r, _)| r.split('@').next().unwrap_or_default().to_string())
            .collect()
    }
}

struct Setup {
    images: Arc<FakeRuntime>,
    events: Arc<Events>,
    mgr: Arc<ImageManager>,
    requeued: Arc<Mutex<Vec<String>>>,
    _stop: crossbeam_channel::Sender<()>,
}

fn setup(images: FakeRuntime, cfg: PullerConfig) -> Setup {
    let images = Arc::new(images);
    let events = Arc::new(Events::default());
    let requeued = Arc::new(Mutex::new(Vec::new()));
    let r = Arc::clone(&requeued);
    let mgr = ImageManager::new(
        Arc::clone(&images) as Arc<dyn ImageService>,
        Arc::clone(&events) as Arc<dyn EventRecorder>,
        cfg,
        Box::new(move |uid| r.lock().unwrap().push(uid.to_string())),
    );
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
    eventually(&format!("{n} pods re-queued"), || {
        s.requeued.lock().unwrap().len() >= n
    });
}

#[test]
fn a_present_image_never_reaches_the_puller() {
    let images = images();
    images
        .state()
        .add_image("sha256:busybox:1.36", "busybox:1.36", 1234);
    let s = setup(images, no_qps());
    let c = container("busybox:1.36", "IfNotPresent");
    assert_eq!(ensure(&s, "a", &c), Ok("sha256:busybox:1.36".into()));
    assert!(pulls(&s.images).is_empty());
    assert_eq!(s.events.reasons("a"), ["Pulled"]);
    let never = container("absent:1", "Never");
    assert_eq!(
        ensure(&s, "a", &never).unwrap_err().reason(),
        "ErrImageNeverPull"
    );
}

#[test]
fn pulls_do_not_block_and_same_image_pulls_are_deduplicated() {
    let images = images();
    images.set_delay("PullImage", Duration::from_millis(200));
    let s = setup(images, no_qps());
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
    assert_eq!(pulls(&s.images), ["reg/x:1"]);
    let mut requeued = s.requeued.lock().unwrap().clone();
    requeued.sort();
    assert_eq!(requeued, ["a", "b", "c"]);
    for uid in ["a", "b", "c"] {
        assert_eq!(ensure(&s, uid, &c), Ok("sha256:reg/x:1".into()));
        assert_eq!(s.events.reasons(uid), ["Pulling", "Pulled"]);
    }
    let ev = s.events.0.lock().unwrap();
    let pulled = &ev.iter().find(|(_, r, _)| r == "Pulled@c").unwrap().2;
    assert!(
        pulled.starts_with("Successfully pulled image \"reg/x:1\" in ")
            && pulled.contains("s including waiting). Image size: 1234 bytes."),
        "{pulled}"
    );
}

#[test]
fn a_failed_pull_is_err_image_pull_then_back_off() {
    let images = images();
    images.fail_next("PullImage", cri_error("PullImage", "connection refused"));
    let s = setup(images, no_qps());
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
    let images = images();
    images.set_delay("PullImage", Duration::from_millis(150));
    let s = setup(images, cfg);
    for i in 0..4 {
        let c = container(&format!("reg/img{i}:1"), "Always");
        assert_eq!(
            ensure(&s, &format!("p{i}"), &c).unwrap_err().reason(),
            "ContainerCreating"
        );
    }
    wait_requeued(&s, 4);
    assert_eq!(pulls(&s.images).len(), 4);
    s.images.max_concurrent("PullImage")
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
        images(),
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
    assert_eq!(pulls(&s.images), ["reg/a:1"]);
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
    let images = images();
    images.set_delay("PullImage", Duration::from_millis(100));
    let s = setup(images, no_qps());
    let c = container("reg/z:1", "Always");
    assert!(ensure(&s, "gone", &c).is_err());
    assert!(ensure(&s, "kept", &c).is_err());
    s.mgr.forget_pod("gone");
    wait_requeued(&s, 1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(*s.requeued.lock().unwrap(), ["kept"]);
    assert!(lock(&s.mgr.state).done.keys().all(|(u, _)| u != "gone"));
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

/// An image volume's image (upstream getImageVolumes): the pod's pull
/// secrets and the volume's policy; the events are the pod's, naming no
/// container; its result waits for the volume, not for a container.
#[test]
fn an_image_volume_is_pulled_with_the_pods_secrets_and_its_events_are_the_pods() {
    let s = setup(images(), no_qps());
    let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "u:p");
    let secret = Secret {
        type_: Some("kubernetes.io/dockerconfigjson".into()),
        data: Some(std::collections::BTreeMap::from([(
            ".dockerconfigjson".to_string(),
            k8s_openapi::ByteString(
                format!("{{\"auths\": {{\"reg.example\": {{\"auth\": \"{auth}\"}}}}}}")
                    .into_bytes(),
            ),
        )])),
        ..Default::default()
    };
    let source = ImageVolumeSource {
        reference: Some("reg.example/data:v1".into()),
        pull_policy: None,
    };
    let sandbox = api::PodSandboxConfig::default();
    let ensure_volume = || {
        s.mgr.ensure_volume_image(
            &pod("v"),
            "iv",
            &source,
            &sandbox,
            std::slice::from_ref(&secret),
        )
    };
    assert!(matches!(ensure_volume(), Err(PullError::InProgress { .. })));
    wait_requeued(&s, 1);
    assert_eq!(
        s.images.calls_to("PullImage"),
        [["reg.example/data:v1", "auth"]]
    );
    // A container of the pod does not take the volume's result.
    let c = container("reg.example/data:v1", "IfNotPresent");
    assert_eq!(ensure(&s, "v", &c), Ok("sha256:reg.example/data:v1".into()));
    assert_eq!(ensure_volume(), Ok("sha256:reg.example/data:v1".into()));
    let events = s.events.0.lock().unwrap().clone();
    let volume_events: Vec<&str> = events.iter().take(2).map(|(_, r, _)| r.as_str()).collect();
    assert_eq!(volume_events, ["Pulling", "Pulled"], "{events:?}");
    assert!(events[2].1.ends_with("@c"), "{events:?}");
    // The tag decides the default policy, as for containers: `latest` pulls.
    let latest = ImageVolumeSource {
        reference: Some("reg.example/data".into()),
        pull_policy: None,
    };
    let again = s
        .mgr
        .ensure_volume_image(&pod("w"), "iv", &latest, &sandbox, &[]);
    assert!(
        matches!(again, Err(PullError::InProgress { .. })),
        "{again:?}"
    );
    let empty = ImageVolumeSource::default();
    let refused = s
        .mgr
        .ensure_volume_image(&pod("w"), "iv", &empty, &sandbox, &[]);
    assert!(
        matches!(refused, Err(PullError::InvalidImageName(_))),
        "{refused:?}"
    );
}
