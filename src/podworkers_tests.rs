//! Pod workers against a fake syncer and a fake PLEG that keeps the cache
//! fresh: one sync per pod at a time, and a panicking sync contained.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rkubelet_util::lock;

use super::*;

#[derive(Default)]
struct FakeSyncer {
    /// Syncs running now, by pod UID.
    running: Mutex<HashMap<String, usize>>,
    /// The most syncs of one pod seen at once, and of all pods.
    max_per_pod: AtomicUsize,
    max_total: AtomicUsize,
    /// Pods whose first sync panics.
    panic_once: Mutex<HashSet<String>>,
    /// Pods whose container stops are still under way.
    stopping: Mutex<HashSet<String>>,
    /// Terminating and terminated steps begun, by pod UID.
    terminating: Mutex<HashMap<String, usize>>,
    terminated: Mutex<HashMap<String, usize>>,
    delay: Duration,
    /// Pods whose syncs report a container started.
    starts: Mutex<HashSet<String>>,
    /// Syncs of pods that should run, in the order they began.
    order: Mutex<Vec<String>>,
    /// Pods whose syncs take this long instead of `delay`.
    slow: Mutex<HashMap<String, Duration>>,
    /// The FailedSync messages reported, by pod UID.
    failed: Mutex<Vec<(String, String)>>,
}

impl FakeSyncer {
    /// Syncs begun of the pod.
    fn calls(&self, uid: &str) -> usize {
        self.order
            .lock()
            .unwrap()
            .iter()
            .filter(|u| *u == uid)
            .count()
    }
    fn count(map: &Mutex<HashMap<String, usize>>, uid: &str) -> usize {
        *map.lock().unwrap().get(uid).unwrap_or(&0)
    }
}

impl PodSyncer for FakeSyncer {
    fn sync_pod(
        &self,
        _update: UpdateType,
        pod: &Arc<Pod>,
        _status: &PodStatus,
    ) -> Result<Synced, SyncFailure> {
        let uid = pod.uid().to_string();
        self.order.lock().unwrap().push(uid.clone());
        if self.panic_once.lock().unwrap().remove(&uid) {
            panic!("injected panic in the sync of {uid}");
        }
        {
            let mut r = self.running.lock().unwrap();
            let n = r.entry(uid.clone()).or_default();
            *n += 1;
            self.max_per_pod.fetch_max(*n, Ordering::SeqCst);
            let total = r.values().sum();
            self.max_total.fetch_max(total, Ordering::SeqCst);
        }
        let delay = self.slow.lock().unwrap().get(&uid).copied();
        std::thread::sleep(delay.unwrap_or(self.delay));
        *self.running.lock().unwrap().get_mut(&uid).unwrap() -= 1;
        let started = self.starts.lock().unwrap().contains(&uid);
        Ok(Synced::Running { started })
    }

    fn sync_terminating_pod(
        &self,
        pod: Option<&Pod>,
        _running: Option<&RuntimePod>,
        _status: &PodStatus,
        _grace: Option<i64>,
    ) -> Result<Termination, SyncFailure> {
        let uid = pod.map(|p| p.uid().to_string()).unwrap_or_default();
        *self
            .terminating
            .lock()
            .unwrap()
            .entry(uid.clone())
            .or_default() += 1;
        if self.stopping.lock().unwrap().contains(&uid) {
            return Ok(Termination::Stopping);
        }
        Ok(Termination::Done)
    }

    fn sync_terminated_pod(
        &self,
        pod: Option<&Pod>,
        _status: &PodStatus,
        _removed: bool,
    ) -> Result<(), SyncFailure> {
        let uid = pod.map(|p| p.uid().to_string()).unwrap_or_default();
        *self.terminated.lock().unwrap().entry(uid).or_default() += 1;
        Ok(())
    }

    fn sync_failed(&self, pod: &Pod, message: &str) {
        let uid = pod.uid().to_string();
        self.failed.lock().unwrap().push((uid, message.to_string()));
    }
}

fn pod(uid: &str) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            uid: Some(uid.into()),
            name: Some(uid.into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    })
}

struct Harness {
    workers: Arc<PodWorkers>,
    /// What the workers asked PLEG for (`RelistSoon`).
    relist_asks: crossbeam_channel::Receiver<()>,
    stop: Option<crossbeam_channel::Sender<()>>,
    fresh: Arc<AtomicBool>,
    cache: Arc<Cache>,
    threads: Vec<crate::util::worker::Worker>,
    relists: Option<std::thread::JoinHandle<()>>,
}

impl Harness {
    fn new(syncer: Arc<FakeSyncer>, n: usize) -> Self {
        let (relist_soon, relist_asks) = RelistSoon::channel();
        let workers = PodWorkers::new(
            Arc::new(WorkQueue::new()),
            Duration::from_secs(60),
            relist_soon,
        );
        let cache = Arc::new(Cache::with_on_update(workers.cache_listener()));
        let (stop, rx) = crossbeam_channel::bounded::<()>(0);
        let syncer = syncer as Arc<dyn PodSyncer>;
        let threads = workers.start(n, &cache, &syncer, rx).unwrap();
        // A fake PLEG: a relist every 5 ms keeps the cache fresh.
        let fresh = Arc::new(AtomicBool::new(true));
        let f = Arc::clone(&fresh);
        let pleg_cache = Arc::clone(&cache);
        let relists = std::thread::spawn(move || {
            let cache = pleg_cache;
            while f.load(Ordering::SeqCst) {
                cache.update_time(Instant::now());
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Harness {
            workers,
            relist_asks,
            stop: Some(stop),
            fresh,
            cache,
            threads,
            relists: Some(relists),
        }
    }

    fn update(&self, p: &Arc<Pod>, t: UpdateType) {
        self.workers.update_pod(UpdatePodOptions {
            update_type: t,
            pod: Some(Arc::clone(p)),
            running_pod: None,
            grace_override: None,
            removed: false,
        });
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.fresh.store(false, Ordering::SeqCst);
        drop(self.stop.take());
        self.workers.wake_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(t) = self.relists.take() {
            let _ = t.join();
        }
    }
}

use crate::util::testing::eventually;

#[test]
fn one_sync_per_pod_at_a_time_but_pods_in_parallel() {
    let syncer = Arc::new(FakeSyncer {
        delay: Duration::from_millis(30),
        ..Default::default()
    });
    let h = Harness::new(Arc::clone(&syncer), 4);
    let pods: Vec<_> = (0..4).map(|i| pod(&format!("p{i}"))).collect();
    for round in 0..10 {
        for p in &pods {
            let t = if round == 0 {
                UpdateType::Create
            } else {
                UpdateType::Sync
            };
            h.update(p, t);
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    eventually("every pod synced twice", || {
        pods.iter().all(|p| syncer.calls(p.uid()) >= 2)
    });
    assert_eq!(syncer.max_per_pod.load(Ordering::SeqCst), 1);
    assert!(
        syncer.max_total.load(Ordering::SeqCst) > 1,
        "different pods sync concurrently"
    );
}

#[test]
fn idle_workers_stop_when_woken_at_shutdown_not_at_their_next_look() {
    let syncer = Arc::new(FakeSyncer::default());
    let mut h = Harness::new(Arc::clone(&syncer), 4);
    let p = pod("p");
    h.update(&p, UpdateType::Create);
    eventually("the pod synced", || syncer.calls("p") == 1);
    // Every worker is now idle, waiting up to IDLE_WAIT.
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    drop(h.stop.take());
    h.workers.wake_all();
    eventually("every worker stopped", || {
        h.threads.iter().all(|t| t.is_finished())
    });
    assert!(
        started.elapsed() < IDLE_WAIT / 2,
        "stopped in {:?}",
        started.elapsed()
    );
}

#[test]
fn a_pod_no_source_wants_is_terminated_at_once_then_forgotten() {
    let syncer = Arc::new(FakeSyncer::default());
    let h = Harness::new(Arc::clone(&syncer), 2);
    let p = pod("p");
    h.update(&p, UpdateType::Create);
    eventually("the pod synced", || syncer.calls("p") == 1);
    // Both workers are now idle, waiting up to IDLE_WAIT.
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let none = HashSet::new();
    assert!(h.workers.sync_known_pods(&none).is_empty(), "still running");
    eventually("the pod terminated", || {
        FakeSyncer::count(&syncer.terminated, "p") == 1
    });
    // (woken by the next relist the termination waits for, not at the
    // workers' next idle look)
    assert!(
        started.elapsed() < IDLE_WAIT / 2,
        "terminated after {:?}",
        started.elapsed()
    );
    let before = Instant::now();
    eventually("the pod forgotten", || {
        h.workers.sync_known_pods(&none) == ["p"]
    });
    assert!(!h.workers.is_known("p"));
    // A runtime listing begun before it was forgotten may still show it;
    // one begun after cannot.
    assert!(h.workers.forgotten_since("p", before));
    assert!(!h.workers.forgotten_since("p", Instant::now()));
    assert!(!h.workers.forgotten_since("other", before));
}

#[test]
fn a_panicking_sync_does_not_kill_the_worker_and_is_retried() {
    let syncer = Arc::new(FakeSyncer::default());
    syncer.panic_once.lock().unwrap().insert("boom".into());
    // One worker: if the panic killed it, nothing else would ever sync.
    let h = Harness::new(Arc::clone(&syncer), 1);
    let boom = pod("boom");
    h.update(&boom, UpdateType::Create);
    eventually("the panicking sync ran", || syncer.calls("boom") == 1);
    let other = pod("other");
    h.update(&other, UpdateType::Create);
    eventually("the same worker syncs another pod", || {
        syncer.calls("other") == 1
    });
    // The panicked pod backs off (WORKER_BACKOFF); a resync request, as
    // the work queue sends, runs it again at once.
    assert_eq!(syncer.calls("boom"), 1, "backing off");
    h.update(&boom, UpdateType::Sync);
    eventually("the panicked pod is retried", || syncer.calls("boom") == 2);
    assert!(h.workers.is_known("boom"));
}

#[test]
fn stopping_pods_do_not_hold_the_worker_and_finish_when_woken() {
    let syncer = Arc::new(FakeSyncer::default());
    let pods: Vec<_> = (0..10).map(|i| pod(&format!("s{i}"))).collect();
    syncer
        .stopping
        .lock()
        .unwrap()
        .extend(pods.iter().map(|p| p.uid().to_string()));
    // One worker: a held worker would serialise the ten grace periods.
    let h = Harness::new(Arc::clone(&syncer), 1);
    for p in &pods {
        h.update(p, UpdateType::Kill);
    }
    eventually("every pod started stopping", || {
        pods.iter()
            .all(|p| FakeSyncer::count(&syncer.terminating, p.uid()) >= 1)
    });
    assert!(pods
        .iter()
        .all(|p| FakeSyncer::count(&syncer.terminated, p.uid()) == 0));
    // Not re-run in a loop while waiting: the next look is a wake-up or
    // the recheck, seconds away.
    std::thread::sleep(Duration::from_millis(100));
    assert!(pods
        .iter()
        .all(|p| FakeSyncer::count(&syncer.terminating, p.uid()) == 1));
    // The stops finish: each completion wakes its pod, which terminates.
    for p in &pods {
        syncer.stopping.lock().unwrap().remove(p.uid());
        h.workers.wake_pod(p.uid());
    }
    eventually("every pod terminated", || {
        pods.iter()
            .all(|p| FakeSyncer::count(&syncer.terminated, p.uid()) == 1)
    });
}

#[test]
fn a_shorter_grace_while_terminating_is_taken() {
    let syncer = Arc::new(FakeSyncer::default());
    let p = pod("g");
    syncer.stopping.lock().unwrap().insert("g".into());
    let h = Harness::new(Arc::clone(&syncer), 1);
    let kill = |grace| {
        h.workers.update_pod(UpdatePodOptions {
            update_type: UpdateType::Kill,
            pod: Some(Arc::clone(&p)),
            running_pod: None,
            grace_override: grace,
            removed: false,
        })
    };
    kill(Some(30));
    eventually("terminating", || {
        FakeSyncer::count(&syncer.terminating, "g") == 1
    });
    // The same grace again changes nothing: the pod waits for its stops.
    kill(Some(30));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(FakeSyncer::count(&syncer.terminating, "g"), 1);
    assert_eq!(lock(&h.workers.states)["g"].grace_override, Some(30));
    // A forced delete is looked at at once, with the shorter grace.
    kill(Some(0));
    eventually("the forced delete is looked at", || {
        FakeSyncer::count(&syncer.terminating, "g") == 2
    });
    assert_eq!(lock(&h.workers.states)["g"].grace_override, Some(0));
}

#[test]
fn a_sync_that_started_something_asks_for_a_relist_after_it_ends() {
    let syncer = Arc::new(FakeSyncer::default());
    let h = Harness::new(Arc::clone(&syncer), 2);
    let quiet = pod("quiet");
    h.update(&quiet, UpdateType::Create);
    eventually("the quiet pod synced", || syncer.calls("quiet") >= 1);
    // A sync that started nothing (every resync of a steady pod) asks
    // nothing: an idle node relists on the period alone.
    std::thread::sleep(Duration::from_millis(50));
    assert!(h.relist_asks.try_recv().is_err());

    let starting = pod("starting");
    syncer.starts.lock().unwrap().insert("starting".into());
    h.update(&starting, UpdateType::Create);
    let asked = h.relist_asks.recv_timeout(Duration::from_secs(5));
    assert!(asked.is_ok(), "no relist asked for after a start");
    // Asked once the step had ended: a relist that begins now is fresh
    // enough for the pod's next sync.
    let states = lock(&h.workers.states);
    let st = states.get("starting").expect("known pod");
    assert!(st.last_sync_end.is_some() && !st.working);
}

#[test]
fn a_started_pod_syncs_before_a_creation_that_asked_first() {
    let syncer = Arc::new(FakeSyncer::default());
    let h = Harness::new(Arc::clone(&syncer), 1);
    let started = pod("started");
    h.update(&started, UpdateType::Create);
    eventually("the pod was created", || syncer.calls("started") == 1);
    // Its one worker busy with another pod's long creation, a new pod asks
    // to be created and then the started pod to sync (its Running status).
    syncer
        .slow
        .lock()
        .unwrap()
        .insert("busy".into(), Duration::from_millis(100));
    h.update(&pod("busy"), UpdateType::Create);
    eventually("the long creation began", || syncer.calls("busy") == 1);
    h.update(&pod("new"), UpdateType::Create);
    std::thread::sleep(Duration::from_millis(5));
    h.update(&started, UpdateType::Sync);
    eventually("both synced", || {
        syncer.calls("new") == 1 && syncer.calls("started") == 2
    });
    let order = syncer.order.lock().unwrap().clone();
    assert_eq!(order, ["started", "busy", "started", "new"]);
}

/// A kubelet that just started and could not inspect a pod (the runtime
/// restarting) must not sync it with no status: it would create a second
/// sandbox. The step reports FailedSync and waits; other pods go on.
#[test]
fn a_pod_whose_inspection_failed_is_not_synced() {
    let syncer = Arc::new(FakeSyncer::default());
    let h = Harness::new(Arc::clone(&syncer), 2);
    let status = |uid: &str| PodStatus {
        uid: uid.into(),
        ..Default::default()
    };
    h.cache.set(
        "unknown",
        status("unknown"),
        Some("ContainerStatus: deadline exceeded".into()),
        Instant::now(),
    );
    h.update(&pod("unknown"), UpdateType::Create);
    h.update(&pod("known"), UpdateType::Create);
    eventually("the known pod synced", || syncer.calls("known") == 1);
    eventually("a FailedSync", || !syncer.failed.lock().unwrap().is_empty());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(syncer.calls("unknown"), 0, "synced with an unknown status");
    let failed = syncer.failed.lock().unwrap().clone();
    assert_eq!(
        failed,
        vec![(
            "unknown".to_string(),
            "error determining status: ContainerStatus: deadline exceeded".to_string()
        )],
        "one FailedSync, then a back-off"
    );
}
