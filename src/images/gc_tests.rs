//! Image GC rounds against the in-memory fake runtime, with the image
//! filesystem's size fixed by the test: which images go, in which order,
//! and what is reported when not enough can go.

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use super::*;
use crate::kuberuntime::fake_runtime::{cri_error, not_found, FakeContainer, FakeRuntime};

const GB: u64 = 1_000_000_000;
const PAUSE: &str = "registry.k8s.io/pause:3.9";

/// Node events, as (reason, message).
#[derive(Default)]
struct NodeEvents(Mutex<Vec<(String, String)>>);

impl EventRecorder for NodeEvents {
    fn pod_event(&self, _: &Pod, _: EventType, _: &str, _: &str) {}

    fn node_event(&self, _: EventType, reason: &str, message: &str) {
        let mut ev = lock(&self.0);
        ev.push((reason.into(), message.into()));
    }
}

impl NodeEvents {
    fn reasons(&self) -> Vec<String> {
        let ev = lock(&self.0);
        ev.iter().map(|(r, _)| r.clone()).collect()
    }
}

struct Setup {
    rt: Arc<FakeRuntime>,
    events: Arc<NodeEvents>,
    /// (capacity, available) the image filesystem reports.
    disk: Arc<Mutex<(u64, u64)>>,
    gc: ImageGcManager,
    t0: Instant,
}

/// Thresholds 85/80 %, minimum age 2 minutes, no maximum age; a 100 GB
/// image filesystem with 50 GB free.
fn policy() -> ImageGcPolicy {
    ImageGcPolicy {
        high_threshold_percent: 85,
        low_threshold_percent: 80,
        min_age: Duration::from_secs(120),
        max_age: Duration::ZERO,
    }
}

fn setup(policy: ImageGcPolicy) -> Setup {
    let rt = Arc::new(FakeRuntime::new());
    rt.state().image_fs_mount = "/fake/images".into();
    let events = Arc::new(NodeEvents::default());
    let disk = Arc::new(Mutex::new((100 * GB, 50 * GB)));
    let mut gc = ImageGcManager::new(
        Arc::clone(&rt) as Arc<dyn ImageService>,
        Arc::clone(&rt) as Arc<dyn RuntimeService>,
        policy,
        PAUSE.into(),
        Arc::clone(&events) as Arc<dyn EventRecorder>,
    );
    let d = Arc::clone(&disk);
    gc.statfs = Box::new(move |path| {
        assert_eq!(path, Path::new("/fake/images"), "stats the reported mount");
        let (capacity, available) = *lock(&d);
        Ok(FsInfo {
            capacity,
            available,
            ..Default::default()
        })
    });
    Setup {
        rt,
        events,
        disk,
        gc,
        t0: Instant::now(),
    }
}

impl Setup {
    fn add_image(&self, id: &str, size: u64) {
        self.rt.state().add_image(id, &format!("{id}:tag"), size);
    }

    fn use_image(&self, container: &str, id: &str) {
        let c = FakeContainer::running(container, "pod", container, id);
        self.rt.state().containers.push(c);
    }

    fn set_disk(&self, capacity: u64, available: u64) {
        *self.disk.lock().unwrap() = (capacity, available);
    }

    /// Runs a round `secs` after t0.
    fn round(&self, secs: u64) -> Result<(), ImageGcError> {
        self.gc.garbage_collect(self.t0 + Duration::from_secs(secs))
    }

    fn removed(&self) -> Vec<String> {
        let calls = self.rt.calls_to("RemoveImage");
        calls.into_iter().map(|args| args[0].clone()).collect()
    }

    fn present(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .rt
            .state()
            .images
            .iter()
            .map(|i| i.id.clone())
            .collect();
        v.sort();
        v
    }
}

#[test]
fn below_the_high_threshold_nothing_is_removed() {
    let s = setup(policy());
    s.add_image("a", 10 * GB);
    s.set_disk(100 * GB, 16 * GB); // 84 % used
    assert!(s.round(0).is_ok());
    assert!(s.removed().is_empty());
    assert!(s.events.reasons().is_empty());
}

#[test]
fn above_it_least_recently_used_go_first_down_to_the_low_threshold() {
    let s = setup(policy());
    for id in ["a", "b", "never"] {
        s.add_image(id, 6 * GB);
    }
    s.use_image("ca", "a");
    s.use_image("cb", "b");
    s.round(0).unwrap();
    // a stops being used before b does.
    s.rt.state().containers.retain(|c| c.id != "ca");
    s.round(60).unwrap();
    s.rt.state().containers.clear();
    s.round(120).unwrap();
    assert!(s.removed().is_empty(), "below the threshold so far");

    // 90 % used: 10 GB must go to get back to 80 %.
    s.set_disk(100 * GB, 10 * GB);
    assert!(s.round(180).is_ok());
    assert_eq!(s.removed(), ["never", "a"], "never used, then oldest use");
    assert_eq!(s.present(), ["b"]);
}

#[test]
fn images_of_containers_are_never_removed_even_exited_ones() {
    let s = setup(policy());
    s.add_image("running", GB);
    s.add_image("exited", GB);
    s.add_image("free", GB);
    s.use_image("c1", "running");
    s.use_image("c2", "exited");
    s.rt.state().containers[1].state = crate::container::ContainerState::Exited;
    s.set_disk(100 * GB, 10 * GB);
    s.gc.maybe_garbage_collect();
    assert_eq!(s.removed(), ["free"]);
    // Not enough could go: reported as upstream's FreeDiskSpaceFailed.
    assert_eq!(s.events.reasons(), [events::FREE_DISK_SPACE_FAILED]);
    let err = s.round(1).unwrap_err();
    assert!(
        matches!(err, ImageGcError::Insufficient { freed: 0, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("only found 0 bytes eligible"),
        "{err}"
    );
}

#[test]
fn the_sandbox_image_and_pinned_images_are_never_removed() {
    let s = setup(policy());
    s.rt.state().add_image("sha256:pause", PAUSE, GB);
    s.add_image("pinned", GB);
    s.rt.state().images[1].pinned = true;
    s.set_disk(100 * GB, 10 * GB);
    assert!(s.round(0).is_err());
    assert!(s.removed().is_empty());
    assert_eq!(s.rt.calls_to("ImageStatus"), [vec![PAUSE.to_string()]]);
}

#[test]
fn images_younger_than_the_minimum_age_wait() {
    let s = setup(policy());
    s.add_image("old", 20 * GB);
    s.round(0).unwrap();
    s.add_image("new", 20 * GB);
    s.round(10).unwrap();
    s.set_disk(100 * GB, 10 * GB);
    // "old" was there at the first round: old enough at once.
    s.round(20).unwrap();
    assert_eq!(s.removed(), ["old"]);
    // "new" was first seen at 10 s; with 2 minutes' minimum age it may go
    // from 130 s on.
    s.rt.clear_calls();
    assert!(s.round(129).is_err());
    assert!(s.removed().is_empty());
    s.round(130).unwrap();
    assert_eq!(s.removed(), ["new"]);
}

#[test]
fn a_failed_removal_is_skipped_and_the_rest_continue() {
    let s = setup(policy());
    for id in ["x", "y", "z"] {
        s.add_image(id, 6 * GB);
    }
    s.round(0).unwrap();
    s.rt.fail_next("RemoveImage", cri_error("RemoveImage", "in use"));
    s.set_disk(100 * GB, 10 * GB);
    // x failed and freed nothing; y and z free 12 GB of the 10 needed.
    assert!(s.round(1).is_ok());
    assert_eq!(s.removed(), ["x", "y", "z"]);
    assert_eq!(s.present(), ["x"]);
    assert!(s.events.reasons().is_empty(), "enough was freed");
}

#[test]
fn an_image_already_gone_frees_nothing() {
    let s = setup(policy());
    s.add_image("gone", 20 * GB);
    s.round(0).unwrap();
    s.rt.fail_next("RemoveImage", not_found("RemoveImage"));
    s.set_disk(100 * GB, 10 * GB);
    let err = s.round(1).unwrap_err();
    assert!(
        matches!(err, ImageGcError::Insufficient { freed: 0, .. }),
        "0 of 10 GB freed: {err:?}"
    );
}

#[test]
fn the_maximum_age_removes_idle_images_whatever_the_disk() {
    let s = setup(ImageGcPolicy {
        high_threshold_percent: 100, // the disk-usage part off
        max_age: Duration::from_secs(600),
        ..policy()
    });
    s.add_image("idle", GB);
    s.add_image("used", GB);
    s.use_image("c", "used");
    s.round(0).unwrap();
    s.round(600).unwrap();
    assert!(s.removed().is_empty(), "idle for exactly the maximum age");
    s.round(601).unwrap();
    assert_eq!(s.removed(), ["idle"]);
    assert!(s.rt.calls_to("ImageFsInfo").is_empty(), "no disk look-up");
}

#[test]
fn a_zero_capacity_filesystem_is_reported() {
    let s = setup(policy());
    s.set_disk(0, 0);
    s.gc.maybe_garbage_collect();
    assert_eq!(s.events.reasons(), [events::INVALID_DISK_CAPACITY]);
    assert!(matches!(s.round(1), Err(ImageGcError::InvalidCapacity)));
}

#[test]
fn a_failing_runtime_fails_the_round_and_posts_image_gc_failed() {
    let s = setup(policy());
    s.add_image("a", GB);
    s.set_disk(100 * GB, 10 * GB);
    s.rt.fail_next("ListImages", cri_error("ListImages", "unavailable"));
    s.gc.maybe_garbage_collect();
    assert!(s.removed().is_empty());
    assert_eq!(s.events.reasons(), [events::IMAGE_GC_FAILED]);
    // The failed round still counts: the next waits a full period.
    s.gc.maybe_garbage_collect();
    assert_eq!(s.rt.calls_to("ListImages").len(), 1);
}
