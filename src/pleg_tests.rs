//! PLEG relists against the in-memory fake runtime: the events each
//! container change produces, what the status cache holds afterwards, and
//! what a failing runtime does to both.

use super::*;
use crate::container::PodStatus;
use crate::kuberuntime::fake_runtime::{cri_error, FakeContainer, FakeRuntime, FakeSandbox};
use crate::util::testing::eventually;
use EventType::*;

struct Setup {
    rt: Arc<FakeRuntime>,
    cache: Arc<Cache>,
    pleg: Arc<GenericPleg>,
    rx: Receiver<PodLifecycleEvent>,
    relist_soon: RelistSoon,
}

fn setup() -> Setup {
    let rt = Arc::new(FakeRuntime::new());
    let cache = Arc::new(Cache::new());
    let (relist_soon, asks) = RelistSoon::channel();
    let (pleg, rx) = GenericPleg::new(
        Arc::clone(&rt) as Arc<dyn PodSource>,
        Arc::clone(&cache),
        asks,
    );
    Setup {
        rt,
        cache,
        pleg,
        rx,
        relist_soon,
    }
}

impl Setup {
    /// Relists once; returns the events sent, sorted for comparison.
    fn relist(&self) -> Vec<(String, EventType, String)> {
        self.pleg.relist();
        let mut v: Vec<_> = self
            .rx
            .try_iter()
            .map(|e| (e.pod_uid, e.kind, e.container_id))
            .collect();
        v.sort_by(|a, b| (&a.0, &a.2).cmp(&(&b.0, &b.2)));
        v
    }

    fn set_state(&self, id: &str, state: ContainerState) {
        let mut st = self.rt.state();
        if let Some(c) = st.containers.iter_mut().find(|c| c.id == id) {
            c.state = state;
        }
    }

    /// Container `id` exited by SIGKILL at `at`, containerd saying `Error`.
    fn sigkill_exit(&self, id: &str, at: SystemTime) {
        let mut st = self.rt.state();
        if let Some(c) = st.containers.iter_mut().find(|c| c.id == id) {
            c.state = ContainerState::Exited;
            c.exit_code = 137;
            c.reason = "Error".into();
            c.finished_at = Some(at);
        }
    }

    fn cached(&self, uid: &str) -> (PodStatus, Option<String>) {
        self.cache.get(uid)
    }

    fn inspected(&self) -> Vec<String> {
        let calls = self.rt.calls_to("GetPodStatus");
        calls.into_iter().map(|args| args[0].clone()).collect()
    }
}

fn ev(uid: &str, kind: EventType, id: &str) -> (String, EventType, String) {
    (uid.into(), kind, id.into())
}

/// Pod "a": a ready sandbox "s1" and a running container "c1".
fn with_running_pod() -> Setup {
    let s = setup();
    s.rt.state().sandboxes.push(FakeSandbox::ready("s1", "a"));
    let c = FakeContainer::running("c1", "a", "app", "sha256:app");
    s.rt.state().containers.push(c);
    s
}

#[test]
fn a_new_pod_starts_its_sandbox_and_containers_and_is_cached() {
    let s = with_running_pod();
    assert_eq!(
        s.relist(),
        [
            ev("a", ContainerStarted, "c1"),
            ev("a", ContainerStarted, "s1")
        ]
    );
    assert_eq!(s.inspected(), ["a"]);
    let (status, err) = s.cached("a");
    assert_eq!(err, None);
    assert_eq!(
        (status.name.as_str(), status.namespace.as_str()),
        ("a", "default")
    );
    assert_eq!(status.containers[0].state, ContainerState::Running);
    assert_eq!(s.pleg.running_pods().len(), 1);
}

#[test]
fn an_unchanged_pod_emits_nothing_and_is_not_inspected_again() {
    let s = with_running_pod();
    s.relist();
    let first = s.pleg.running_pods();
    s.rt.clear_calls();
    let before = Instant::now();
    assert!(s.relist().is_empty());
    assert!(s.inspected().is_empty());
    assert!(
        Arc::ptr_eq(&first, &s.pleg.running_pods()),
        "the runtime gave back its snapshot: nothing was diffed"
    );
    // The relist still stamps the cache, so waiting workers see it fresh.
    assert!(s.cache.get_if_newer("a", Some(before)).is_some());
}

#[test]
fn running_to_exited_is_container_died_and_refreshes_the_cache() {
    let s = with_running_pod();
    s.relist();
    s.set_state("c1", ContainerState::Exited);
    assert_eq!(s.relist(), [ev("a", ContainerDied, "c1")]);
    assert_eq!(s.cached("a").0.containers[0].state, ContainerState::Exited);
}

/// containerd answers `Error` when a container's exit is handled before
/// its OOM event; the pod is inspected again while that can change, and a
/// changed answer syncs the pod.
#[test]
fn a_sigkill_exit_is_inspected_again_until_its_oom_reason_settles() {
    let s = with_running_pod();
    s.relist();
    s.sigkill_exit("c1", SystemTime::now());
    assert_eq!(s.relist(), [ev("a", ContainerDied, "c1")]);
    assert_eq!(s.cached("a").0.containers[0].reason, "Error");
    s.rt.state().containers[0].reason = "OOMKilled".into();
    assert_eq!(s.relist(), [ev("a", PodSync, "")]);
    assert_eq!(s.cached("a").0.containers[0].reason, "OOMKilled");
    let before = s.inspected().len();
    s.relist();
    assert_eq!(s.inspected().len(), before, "OOMKilled is final");
}

#[test]
fn a_sigkill_exit_long_ago_is_not_inspected_again() {
    let s = with_running_pod();
    s.relist();
    s.sigkill_exit("c1", SystemTime::now() - OOM_SETTLE);
    s.relist();
    let before = s.inspected().len();
    assert_eq!(s.relist(), []);
    assert_eq!(s.inspected().len(), before);
}

#[test]
fn removal_is_container_removed_after_died_or_both_at_once() {
    let s = with_running_pod();
    let c2 = FakeContainer::running("c2", "a", "side", "sha256:side");
    s.rt.state().containers.push(c2);
    s.relist();
    s.set_state("c1", ContainerState::Exited);
    s.relist();
    // c1 was seen exited: only its removal is new. c2 vanished running:
    // it died and was removed within one period (upstream generateEvents).
    s.rt.state().containers.clear();
    assert_eq!(
        s.relist(),
        [
            ev("a", ContainerRemoved, "c1"),
            ev("a", ContainerDied, "c2"),
            ev("a", ContainerRemoved, "c2"),
        ]
    );
    assert!(s.cached("a").0.containers.is_empty());
}

#[test]
fn a_sandbox_going_not_ready_is_died_too() {
    let s = with_running_pod();
    s.relist();
    s.rt.state().sandboxes[0].ready = false;
    assert_eq!(s.relist(), [ev("a", ContainerDied, "s1")]);
}

#[test]
fn changed_events_are_not_sent_but_the_pod_is_inspected() {
    let s = with_running_pod();
    s.relist();
    s.rt.clear_calls();
    s.set_state("c1", ContainerState::Unknown);
    assert!(s.relist().is_empty(), "ContainerChanged stays inside PLEG");
    assert_eq!(s.inspected(), ["a"]);
    assert_eq!(s.cached("a").0.containers[0].state, ContainerState::Unknown);
}

#[test]
fn a_failed_relist_keeps_the_old_state_and_emits_nothing() {
    let s = with_running_pod();
    s.relist();
    s.rt.fail_next("GetPods", cri_error("ListPodSandbox", "runtime down"));
    s.set_state("c1", ContainerState::Exited);
    s.rt.clear_calls();
    assert!(s.relist().is_empty());
    assert!(s.inspected().is_empty());
    assert_eq!(s.cached("a").0.containers[0].state, ContainerState::Running);
    assert_eq!(s.pleg.running_pods().len(), 1, "last good relist kept");
    // The next good relist diffs against the last good one.
    assert_eq!(s.relist(), [ev("a", ContainerDied, "c1")]);
}

#[test]
fn failing_relists_do_not_refresh_health() {
    let s = with_running_pod();
    assert!(s.pleg.healthy().is_ok(), "healthy before the first relist");
    s.relist();
    let stale = Instant::now().checked_sub(RELIST_THRESHOLD + Duration::from_secs(1));
    s.pleg.state().last_relist = stale;
    s.rt.fail_next("GetPods", cri_error("ListPodSandbox", "runtime down"));
    s.relist();
    assert!(s.pleg.healthy().is_err());
    s.relist();
    assert!(s.pleg.healthy().is_ok());
}

#[test]
fn a_failed_inspection_is_cached_and_retried_on_the_next_relist() {
    let s = with_running_pod();
    s.rt.fail_next("GetPodStatus", cri_error("ContainerStatus", "timeout"));
    // The events go out even so: the worker will see the error.
    assert_eq!(s.relist().len(), 2);
    let (_, err) = s.cached("a");
    assert!(err.is_some_and(|e| e.contains("timeout")));
    s.rt.clear_calls();
    let listed = s.pleg.running_pods();
    assert!(s.relist().is_empty());
    assert!(
        Arc::ptr_eq(&listed, &s.pleg.running_pods()),
        "nothing changed"
    );
    assert_eq!(s.inspected(), ["a"], "re-inspected without a new event");
    let (status, err) = s.cached("a");
    assert_eq!((status.containers.len(), err), (1, None));
}

/// After the runtime was unreachable, every pod is inspected again even
/// when its listing looks unchanged: a status read while the runtime went
/// down may be wrong.
#[test]
fn a_failed_relist_makes_the_next_one_inspect_every_pod() {
    let s = with_running_pod();
    s.relist();
    s.rt.clear_calls();
    s.rt.fail_next("GetPods", cri_error("ListPodSandbox", "runtime down"));
    s.relist();
    assert!(s.inspected().is_empty());
    assert!(s.relist().is_empty(), "nothing changed state");
    assert_eq!(s.inspected(), ["a"]);
    s.rt.clear_calls();
    s.relist();
    assert!(s.inspected().is_empty(), "only once after the failure");
}

#[test]
fn a_vanished_pod_is_not_inspected_and_reads_empty() {
    let s = with_running_pod();
    s.relist();
    let before = Instant::now();
    s.rt.state().sandboxes.clear();
    s.rt.state().containers.clear();
    s.rt.clear_calls();
    assert_eq!(
        s.relist(),
        [
            ev("a", ContainerDied, "c1"),
            ev("a", ContainerRemoved, "c1"),
            ev("a", ContainerDied, "s1"),
            ev("a", ContainerRemoved, "s1"),
        ]
    );
    // Nothing of it is left in the listing: no runtime call to learn that.
    assert!(s.inspected().is_empty());
    let (status, _) = s.cached("a");
    assert!(status.containers.is_empty() && status.sandboxes.is_empty());
    // A worker waiting for a status newer than its last sync gets it.
    let (status, _) = s.cache.get_if_newer("a", Some(before)).expect("newer");
    assert!(status.containers.is_empty() && status.sandboxes.is_empty());
    assert!(s.pleg.running_pods().is_empty());
}

#[test]
fn the_running_containers_of_the_last_relist_are_listed_for_log_rotation() {
    let s = with_running_pod();
    let done = FakeContainer::running("c2", "a", "done", "sha256:done");
    s.rt.state().containers.push(done);
    s.set_state("c2", ContainerState::Exited);
    assert!(
        s.pleg.running_container_ids().is_empty(),
        "before any relist"
    );
    s.relist();
    assert_eq!(s.pleg.running_container_ids(), ["c1"]);
}

/// The relists the PLEG thread has made so far.
fn relists(rt: &FakeRuntime) -> usize {
    rt.calls_to("GetPods").len()
}

#[test]
fn an_ask_relists_before_the_period_and_asks_coalesce() {
    let s = setup();
    let (stop, shutdown) = crossbeam_channel::bounded::<()>(0);
    let thread = s.pleg.start(shutdown).expect("start PLEG");
    eventually("the first relist", || relists(&s.rt) >= 1);
    // Asked: the next relist comes after RELIST_SOON_MIN_GAP, not RELIST_PERIOD.
    let asked = Instant::now();
    s.relist_soon.ask();
    eventually("the asked relist", || relists(&s.rt) >= 2);
    assert!(
        asked.elapsed() < RELIST_PERIOD / 2,
        "asked relist took {:?}",
        asked.elapsed()
    );
    // A storm of asks for 300 ms: at most one relist per gap, plus the
    // period's tick and the one pending ask.
    let before = relists(&s.rt);
    let storm = Instant::now();
    while storm.elapsed() < Duration::from_millis(300) {
        s.relist_soon.ask();
        std::thread::sleep(Duration::from_millis(1));
    }
    let during = relists(&s.rt) - before;
    assert!(during <= 5, "{during} relists in 300 ms of asks");
    drop(stop);
    thread.join().expect("PLEG thread");
}
