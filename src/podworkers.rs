//! Pod workers (upstream `pkg/kubelet/pod_workers.go`): every pod moves
//! through syncing -> terminating -> terminated, one step at a time.
//!
//! Upstream runs a goroutine per pod; here a fixed pool of threads takes
//! pods that have work, so the thread count does not grow with pods. A pod
//! is worked on by at most one thread at a time, and only once the status
//! cache holds a runtime status newer than the *end* of its previous sync
//! (upstream's lastSyncTime), so no sync acts on a view older than its own
//! last action. Follow-up termination steps are exempt (`needs_fresh_cache`):
//! they act on stops the killer remembers, not on the cached view.
//! A free worker takes a pod that has run a step before ahead of one still
//! to be created, then the one waiting longest (`next_job`).
//!
//! Lock order: the workers' `states` lock is taken first and the status
//! cache's lock inside it (`next_job` asks the cache while choosing a pod).
//! The cache calls back into the workers only after a relist and outside
//! its own lock ([`PodWorkers::cache_listener`]), so the nesting cannot
//! deadlock; that callback wakes workers waiting for a fresher cache, which
//! otherwise look again after [`IDLE_WAIT`] at most.
//!
//! The pool is made before what it runs: the cache and the syncer are given
//! to [`PodWorkers::start`], so the runtime manager under the syncer can be
//! built with the pool's wake-up (a container stop finishing) without a
//! cycle of owners.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use crate::container::cache::Cache;
use crate::container::{PodStatus, RuntimePod};
use crate::pleg::RelistSoon;
use crate::podutil::PodExt;
use crate::util::worker::{self, ShutdownStage, Worker};
use crate::util::workqueue::WorkQueue;

/// Upstream's workerBackOffPeriod: retry delay after a failed sync.
pub const WORKER_BACKOFF: Duration = Duration::from_secs(10);
/// The longest a failed sync waits: upstream's worker back-off with its
/// full jitter (10 s stretched by half), what a crash back-off asks.
pub const WORKER_BACKOFF_MAX: Duration = Duration::from_secs(15);
/// How long an idle worker sleeps before looking again (bounded waits).
/// Work, a relist a pod waits for and shutdown ([`PodWorkers::wake_all`])
/// wake it at once; this only bounds a wait nothing ended. At one second
/// the four idle workers woke 240 times a minute for nothing.
const IDLE_WAIT: Duration = Duration::from_secs(5);
/// A terminating pod whose stops are under way is looked at again after
/// this even if no completion wakes it.
pub const STOP_RECHECK: Duration = Duration::from_secs(5);
/// How long the time a pod was forgotten is kept: far longer than a relist
/// takes, so housekeeping can tell a listing from before it.
const FORGOTTEN_KEPT: Duration = Duration::from_secs(60);

/// What a finished step asks for next.
enum Next {
    /// Stay in the phase; resync after the resync interval.
    Resync,
    /// As `Resync`, after a sync that made a sandbox or started a
    /// container: PLEG is asked to relist now, so the pod's next sync (its
    /// Running and Ready status) need not wait for the relist period.
    Started,
    /// Move on to this phase.
    Phase(Phase),
    /// Stops are under way: wait for a wake-up (or the recheck).
    WaitForStops,
}

/// What a sync of a pod that should run found or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    /// The pod runs on; `started` when the sync made a sandbox or started
    /// a container.
    Running { started: bool },
    /// The pod reached a terminal phase and is to be terminated.
    Terminal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateType {
    Create,
    Update,
    Sync,
    Kill,
}

/// Where a pod is in its life, as upstream's podSyncStatus tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Syncing,
    Terminating,
    Terminated,
}

/// How far a terminating step got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// Everything is stopped: the pod moves on to terminated.
    Done,
    /// Container stops are under way off the worker; the pod is woken
    /// (`wake_pod`) when one finishes, and looked at again after
    /// [`STOP_RECHECK`] in any case.
    Stopping,
}

/// A failed step: what kind of failure, why, and retry no sooner than
/// `retry_after`.
#[derive(Debug)]
pub struct SyncFailure {
    pub kind: FailureKind,
    pub error: Box<dyn std::error::Error + Send + Sync>,
    pub retry_after: Duration,
}

/// How the workers treat a failed step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The pod waits on something outside it (its volumes' objects): an
    /// expected state, retried quietly.
    Waiting,
    /// The step failed: logged as a warning and retried.
    Failed,
    /// The step panicked: already logged and counted where it was caught.
    Panicked,
}

impl SyncFailure {
    pub fn waiting(
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
        retry_after: Duration,
    ) -> Self {
        SyncFailure {
            kind: FailureKind::Waiting,
            error: error.into(),
            retry_after,
        }
    }

    pub fn failed(
        error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
        retry_after: Duration,
    ) -> Self {
        SyncFailure {
            kind: FailureKind::Failed,
            error: error.into(),
            retry_after,
        }
    }
}

/// What the workers call; the kubelet implements it.
pub trait PodSyncer: Send + Sync {
    /// Syncs a pod that should run.
    fn sync_pod(
        &self,
        update: UpdateType,
        pod: &Arc<Pod>,
        status: &PodStatus,
    ) -> Result<Synced, SyncFailure>;
    /// Stops everything of the pod, without waiting for grace periods.
    /// `pod` is `None` for orphans found only in the runtime.
    fn sync_terminating_pod(
        &self,
        pod: Option<&Pod>,
        running: Option<&RuntimePod>,
        status: &PodStatus,
        grace: Option<i64>,
    ) -> Result<Termination, SyncFailure>;
    /// Cleans up after a stopped pod; `removed` when no source wants it.
    fn sync_terminated_pod(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        removed: bool,
    ) -> Result<(), SyncFailure>;
    /// Reports a step that could not run (upstream's FailedSync event).
    fn sync_failed(&self, _pod: &Pod, _message: &str) {}
}

/// An update for one pod.
pub struct UpdatePodOptions {
    pub update_type: UpdateType,
    pub pod: Option<Arc<Pod>>,
    /// For killing pods the kubelet has no spec for.
    pub running_pod: Option<RuntimePod>,
    pub grace_override: Option<i64>,
    /// The pod is gone from every source (not merely finished).
    pub removed: bool,
}

struct PodState {
    pod: Option<Arc<Pod>>,
    running_pod: Option<RuntimePod>,
    phase: Phase,
    update_type: UpdateType,
    grace_override: Option<i64>,
    removed: bool,
    /// Work is requested.
    dirty: bool,
    /// When work was first requested, for fairness.
    dirty_since: Instant,
    working: bool,
    /// When the last step finished: the next one needs a cache entry newer
    /// than that, so it sees everything the last step did (upstream sets
    /// lastSyncTime after the sync returns; a relist that began during a
    /// sync may have listed before the sync's containers existed).
    last_sync_end: Option<Instant>,
    not_before: Option<Instant>,
    /// The phase of the last step that finished.
    last_step: Option<Phase>,
    /// Terminated and cleaned up.
    finished: bool,
}

impl PodState {
    /// Whether the next step must see a cache newer than the last step's
    /// end. A sync must (it may have just started containers the cache
    /// does not show yet), and so must the first terminating step, which
    /// picks what to stop. Later terminating steps only follow up stops the
    /// killer remembers, and the terminated step lists the runtime itself,
    /// so they run as soon as a stop finishes rather than a relist later.
    fn needs_fresh_cache(&self) -> bool {
        match self.phase {
            Phase::Syncing => true,
            Phase::Terminating => self.last_step != Some(Phase::Terminating),
            Phase::Terminated => false,
        }
    }
}

impl PodState {
    fn new(now: Instant) -> Self {
        PodState {
            pod: None,
            running_pod: None,
            phase: Phase::Syncing,
            update_type: UpdateType::Create,
            grace_override: None,
            removed: false,
            dirty: false,
            dirty_since: now,
            working: false,
            last_sync_end: None,
            not_before: None,
            last_step: None,
            finished: false,
        }
    }

    fn mark_dirty(&mut self, now: Instant) {
        if !self.dirty {
            self.dirty = true;
            self.dirty_since = now;
        }
    }
}

/// One unit of work handed to a worker thread.
struct Job {
    uid: String,
    phase: Phase,
    update_type: UpdateType,
    pod: Option<Arc<Pod>>,
    running_pod: Option<RuntimePod>,
    grace: Option<i64>,
    removed: bool,
    status: PodStatus,
    /// PLEG could not inspect the pod: its status is not known.
    status_error: Option<String>,
}

pub struct PodWorkers {
    states: Mutex<HashMap<String, PodState>>,
    /// When each pod was last forgotten, for FORGOTTEN_KEPT.
    forgotten_at: Mutex<HashMap<String, Instant>>,
    wake: Condvar,
    /// The kubelet's resync queue: successful syncs come back after
    /// `resync_interval`, failed ones after their back-off.
    work_queue: Arc<WorkQueue>,
    resync_interval: Duration,
    /// Told after a sync that started something (`Next::Started`).
    relist_soon: RelistSoon,
}

impl PodWorkers {
    pub fn new(
        work_queue: Arc<WorkQueue>,
        resync_interval: Duration,
        relist_soon: RelistSoon,
    ) -> Arc<Self> {
        Arc::new(PodWorkers {
            states: Mutex::new(HashMap::new()),
            forgotten_at: Mutex::new(HashMap::new()),
            wake: Condvar::new(),
            work_queue,
            relist_soon,
            resync_interval,
        })
    }

    /// What the status cache calls after each relist (`Cache::with_on_update`).
    pub fn cache_listener(self: &Arc<Self>) -> crate::container::cache::OnUpdate {
        let workers = Arc::clone(self);
        Box::new(move || workers.cache_updated())
    }

    /// A relist completed: workers waiting for a fresher cache look again.
    /// Taking the states lock first means a worker between its check and
    /// its wait cannot miss this. With no pod waiting for one (a steady
    /// node), the relist wakes nobody.
    fn cache_updated(&self) {
        let states = lock(&self.states);
        let waiting = states
            .values()
            .filter(|st| st.dirty && !st.working && st.needs_fresh_cache())
            .count();
        drop(states);
        // One worker per waiting pod: the rest would wake for nothing.
        for _ in 0..waiting {
            self.wake.notify_one();
        }
    }

    /// Starts `n` worker threads that sync pods with `syncer`, reading
    /// `cache` (which must tell [`cache_listener`](Self::cache_listener)),
    /// until `shutdown` fires.
    pub fn start(
        self: &Arc<Self>,
        n: usize,
        cache: &Arc<Cache>,
        syncer: &Arc<dyn PodSyncer>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<Vec<Worker>> {
        (0..n)
            .map(|i| {
                let w = Arc::clone(self);
                let (cache, syncer) = (Arc::clone(cache), Arc::clone(syncer));
                let stop = shutdown.clone();
                worker::spawn(
                    &format!("pod-worker-{i}"),
                    ShutdownStage::Workers,
                    move || w.run(&cache, &*syncer, &stop),
                )
            })
            .collect()
    }

    /// Records an update and wakes a worker (upstream UpdatePod).
    /// A status-only change of a known pod (mostly our own status PATCH
    /// coming back): keep the newest copy without asking for work, so the
    /// older one is freed now rather than at the pod's next sync. The spec
    /// is the same (PodConfig said Reconcile).
    pub fn refresh_pod(&self, pod: &Arc<Pod>) {
        if let Some(st) = lock(&self.states).get_mut(pod.uid()) {
            if st.pod.is_some() {
                st.pod = Some(Arc::clone(pod));
            }
        }
    }

    pub fn update_pod(&self, opts: UpdatePodOptions) {
        let uid = match (&opts.pod, &opts.running_pod) {
            (Some(p), _) => p.uid().to_string(),
            (None, Some(r)) => r.uid.clone(),
            (None, None) => return,
        };
        let now = Instant::now();
        let mut states = lock(&self.states);
        let st = states.entry(uid).or_insert_with(|| PodState::new(now));
        if let Some(p) = opts.pod {
            st.pod = Some(p);
        }
        if opts.running_pod.is_some() {
            st.running_pod = opts.running_pod;
        }
        if opts.removed {
            st.removed = true;
        }
        let kill = opts.update_type == UpdateType::Kill
            || st.pod.as_ref().is_none_or(|p| p.is_being_deleted());
        if kill && st.phase == Phase::Syncing {
            st.phase = Phase::Terminating;
            st.grace_override = opts.grace_override;
            st.not_before = None;
        } else if kill && st.phase == Phase::Terminating {
            // A shorter grace (a forced delete) takes effect at once, as
            // upstream restarts termination with it.
            if let Some(g) = opts
                .grace_override
                .filter(|g| st.grace_override.is_none_or(|cur| g < &cur))
            {
                st.grace_override = Some(g);
                st.not_before = None;
            }
        }
        if st.phase == Phase::Syncing {
            st.update_type = opts.update_type;
            // A resync request (the work queue, PLEG, probes) is work to
            // do now: the back-off of a failed step only delays the
            // worker's own retry, as upstream keeps back-off in the work
            // queue alone. This is how a pod whose image pull or volumes
            // just became ready is synced at once.
            if opts.update_type == UpdateType::Sync {
                st.not_before = None;
            }
        }
        if st.phase == Phase::Terminated && st.finished {
            // A terminated pod does not run again under the same UID; only
            // its removal still has work to do.
            if !st.removed {
                return;
            }
            st.finished = false;
        }
        st.mark_dirty(now);
        drop(states);
        self.wake.notify_one();
    }

    /// Terminates workers of pods no longer desired and forgets the finished
    /// ones (upstream SyncKnownPods). Returns the UIDs forgotten.
    pub fn sync_known_pods(&self, desired: &HashSet<String>) -> Vec<String> {
        let now = Instant::now();
        let mut forgotten = Vec::new();
        let mut newly_removed = false;
        let mut states = lock(&self.states);
        for (uid, st) in states.iter_mut() {
            if desired.contains(uid) {
                continue;
            }
            if !st.removed {
                newly_removed = true;
                st.removed = true;
                if st.phase == Phase::Syncing {
                    st.phase = Phase::Terminating;
                }
                st.finished = false;
                st.not_before = None;
                st.mark_dirty(now);
            }
        }
        states.retain(|uid, st| {
            let gone = st.finished && st.removed && !st.working && !desired.contains(uid);
            if gone {
                forgotten.push(uid.clone());
            }
            !gone
        });
        drop(states);
        // Only a pod marked for termination here is new work; every 2 s
        // otherwise this woke each idle worker for nothing.
        if newly_removed {
            self.wake.notify_all();
        }
        let mut at = lock(&self.forgotten_at);
        at.retain(|_, t| now.duration_since(*t) < FORGOTTEN_KEPT);
        at.extend(forgotten.iter().map(|uid| (uid.clone(), now)));
        forgotten
    }

    /// Whether the pod was forgotten at or after `t`. Its containers and
    /// sandboxes were removed before that, so a runtime listing that began
    /// before `t` may still show them.
    pub fn forgotten_since(&self, uid: &str, t: Instant) -> bool {
        lock(&self.forgotten_at).get(uid).is_some_and(|f| *f >= t)
    }

    /// Shutdown has closed the workers' channel: the idle ones stop now,
    /// not at the end of their wait. Taking the states lock first means a
    /// worker between its shutdown check and its wait cannot miss this.
    pub fn wake_all(&self) {
        drop(lock(&self.states));
        self.wake.notify_all();
    }

    /// Work for a pod now, e.g. when one of its container stops finished.
    /// Unknown or finished pods are left alone.
    pub fn wake_pod(&self, uid: &str) {
        let mut states = lock(&self.states);
        let Some(st) = states.get_mut(uid).filter(|st| !st.finished) else {
            return;
        };
        st.not_before = None;
        st.mark_dirty(Instant::now());
        drop(states);
        self.wake.notify_one();
    }

    /// Whether the workers know the pod (running, stopping or stopped).
    pub fn is_known(&self, uid: &str) -> bool {
        lock(&self.states).contains_key(uid)
    }

    /// Whether the pod's containers have all been stopped by its worker
    /// (it reached the terminated phase), or the workers do not know it.
    pub fn is_terminated(&self, uid: &str) -> bool {
        lock(&self.states)
            .get(uid)
            .is_none_or(|st| st.phase == Phase::Terminated)
    }

    /// Every pod a worker still tracks (syncing, terminating or terminated).
    pub fn known_uids(&self) -> Vec<String> {
        lock(&self.states).keys().cloned().collect()
    }

    fn run(&self, cache: &Cache, syncer: &dyn PodSyncer, shutdown: &Receiver<()>) {
        loop {
            // Shutdown is signalled by closing the channel.
            if let Err(crossbeam_channel::TryRecvError::Disconnected) = shutdown.try_recv() {
                return;
            }
            match self.next_job(cache, shutdown) {
                Some(job) => self.work(syncer, job),
                None => continue,
            }
        }
    }

    /// Waits (bounded) for a pod that has work, is not being worked on, is
    /// past its back-off and has a fresh enough cache entry.
    fn next_job(&self, cache: &Cache, shutdown: &Receiver<()>) -> Option<Job> {
        let mut states = lock(&self.states);
        let now = Instant::now();
        let mut soonest: Option<Instant> = None;
        // A pod that has run a step before goes first, then the one that
        // asked longest ago. A pod's first step is its creation, the
        // costly one; a started pod's next sync only reports its Running
        // and Ready status, and waiting behind a burst of creations it
        // was seconds late (upstream's goroutine per pod never waits).
        // No creation waits for ever: a started pod's next sync needs a
        // relist newer than its last step, and its termination has a few
        // steps only.
        let mut pick: Option<(String, (bool, Instant))> = None;
        for (uid, st) in states.iter() {
            if !st.dirty || st.working {
                continue;
            }
            if let Some(nb) = st.not_before.filter(|nb| *nb > now) {
                soonest = Some(soonest.map_or(nb, |s| s.min(nb)));
                continue;
            }
            if st.needs_fresh_cache() && cache.get_if_newer(uid, st.last_sync_end).is_none() {
                continue;
            }
            if st.phase == Phase::Syncing && static_pod_must_wait(&states, uid, st) {
                continue;
            }
            let rank = (st.last_step.is_none(), st.dirty_since);
            if pick.as_ref().is_none_or(|(_, best)| rank < *best) {
                pick = Some((uid.clone(), rank));
            }
        }
        let Some((uid, _)) = pick else {
            // Looked at under the lock that `wake_all` takes before it
            // wakes anyone, so a shutdown is never slept through.
            if let Err(crossbeam_channel::TryRecvError::Disconnected) = shutdown.try_recv() {
                return None;
            }
            // A pod waiting for a fresher cache is woken by the next
            // relist (`cache_updated`), well inside IDLE_WAIT.
            let mut wait = IDLE_WAIT;
            if let Some(s) = soonest {
                wait = wait.min(s.saturating_duration_since(now));
            }
            let _unused = self
                .wake
                .wait_timeout(states, wait.max(Duration::from_millis(1)))
                .unwrap_or_else(|e| e.into_inner());
            return None;
        };
        let st = states.get_mut(&uid)?;
        let (status, status_error) = if st.needs_fresh_cache() {
            cache.get_if_newer(&uid, st.last_sync_end)?
        } else {
            cache.get(&uid)
        };
        st.dirty = false;
        st.working = true;
        Some(Job {
            uid,
            phase: st.phase,
            update_type: st.update_type,
            pod: st.pod.clone(),
            running_pod: st.running_pod.clone(),
            grace: st.grace_override,
            removed: st.removed,
            status,
            status_error,
        })
    }

    fn work(&self, syncer: &dyn PodSyncer, job: Job) {
        let started = Instant::now();
        let op = match (job.phase, job.update_type) {
            (Phase::Syncing, UpdateType::Create) => "create",
            (Phase::Syncing, UpdateType::Update) => "update",
            (Phase::Syncing, _) => "sync",
            (Phase::Terminating, _) => "terminating",
            (Phase::Terminated, _) => "terminated",
        };
        // A panic in one pod's sync is contained here: logged with the
        // pod, counted, retried after a back-off; the worker lives on.
        let result =
            catch_unwind(AssertUnwindSafe(|| run_step(syncer, &job))).unwrap_or_else(|payload| {
                let what = panic_message(payload.as_ref());
                let pod = job
                    .pod
                    .as_ref()
                    .map_or_else(|| job.uid.clone(), |p| p.full_name());
                log::error!("pod {pod} ({}): {op} step panicked: {what}", job.uid);
                crate::metrics::module_panicked("pod-worker");
                Err(SyncFailure {
                    kind: FailureKind::Panicked,
                    error: format!("sync panicked: {what}").into(),
                    retry_after: WORKER_BACKOFF,
                })
            });
        crate::metrics::pod_worker(op, started.elapsed());
        self.complete(&job, result);
    }

    fn complete(&self, job: &Job, result: Result<Next, SyncFailure>) {
        let started = matches!(result, Ok(Next::Started));
        let now = Instant::now();
        let mut states = lock(&self.states);
        let Some(st) = states.get_mut(&job.uid) else {
            return;
        };
        st.working = false;
        st.last_sync_end = Some(now);
        st.last_step = Some(job.phase);
        match result {
            Ok(next) => {
                st.not_before = None;
                match next {
                    // Moving on: the next phase runs as soon as possible,
                    // unless an update already moved the pod further.
                    Next::Phase(p) if phase_rank(p) > phase_rank(st.phase) => {
                        st.phase = p;
                        st.mark_dirty(now);
                    }
                    Next::Phase(_) => st.mark_dirty(now),
                    // A wake-up (or an update) may already have asked for
                    // more; otherwise look again later regardless.
                    Next::WaitForStops => {
                        if !st.dirty {
                            st.not_before = Some(now + STOP_RECHECK);
                            st.mark_dirty(now);
                        }
                    }
                    Next::Resync if job.phase == Phase::Terminated => {
                        // Removed while cleaning up a merely finished pod:
                        // clean up again, this time removing everything.
                        if st.removed && !job.removed {
                            st.mark_dirty(now);
                        } else {
                            st.finished = true;
                        }
                    }
                    Next::Resync | Next::Started => {
                        self.work_queue.enqueue(&job.uid, self.resync_interval);
                    }
                }
            }
            Err(f) => {
                match f.kind {
                    FailureKind::Waiting => {
                        log::info!("pod {}: {:?} step waits: {}", job.uid, job.phase, f.error)
                    }
                    FailureKind::Failed => {
                        log::warn!("pod {}: {:?} step failed: {}", job.uid, job.phase, f.error)
                    }
                    FailureKind::Panicked => {}
                }
                let delay = f
                    .retry_after
                    .min(WORKER_BACKOFF_MAX)
                    .max(Duration::from_millis(100));
                st.not_before = Some(now + delay);
                st.mark_dirty(now);
            }
        }
        // This worker looks for work again at once. Another is woken only
        // when there is more than it can take: a pod made dirty while every
        // worker was busy found none waiting.
        let more = states.values().filter(|st| st.dirty && !st.working).count() > 1;
        drop(states);
        if more {
            self.wake.notify_one();
        }
        // After `last_sync_end` is set: the relist asked for begins after
        // it, so it is fresh enough for the pod's next sync.
        if started {
            self.relist_soon.ask();
        }
    }
}

fn run_step(syncer: &dyn PodSyncer, job: &Job) -> Result<Next, SyncFailure> {
    #[cfg(feature = "fault-injection")]
    if job.phase == Phase::Syncing {
        crate::util::fault::panic_sync_if_asked(job.pod.as_deref());
    }
    if let Some(error) = status_unknown(syncer, job) {
        return Err(error);
    }
    match job.phase {
        Phase::Syncing => match &job.pod {
            Some(pod) => syncer
                .sync_pod(job.update_type, pod, &job.status)
                .map(|synced| match synced {
                    Synced::Terminal => Next::Phase(Phase::Terminating),
                    Synced::Running { started: true } => Next::Started,
                    Synced::Running { started: false } => Next::Resync,
                }),
            None => Ok(Next::Phase(Phase::Terminating)),
        },
        Phase::Terminating => syncer
            .sync_terminating_pod(
                job.pod.as_deref(),
                job.running_pod.as_ref(),
                &job.status,
                job.grace,
            )
            .map(|t| match t {
                Termination::Done => Next::Phase(Phase::Terminated),
                Termination::Stopping => Next::WaitForStops,
            }),
        Phase::Terminated => syncer
            .sync_terminated_pod(job.pod.as_deref(), &job.status, job.removed)
            .map(|()| Next::Resync),
    }
}

/// A step never acts on a status PLEG failed to read: a kubelet that just
/// started would see no sandbox and create a second one (upstream's
/// podWorkerLoop returns "error determining status" and retries). A pod
/// killed from the runtime's listing needs no status, as upstream.
fn status_unknown(syncer: &dyn PodSyncer, job: &Job) -> Option<SyncFailure> {
    let error = job.status_error.as_deref()?;
    if job.running_pod.is_some() {
        return None;
    }
    let message = format!("error determining status: {error}");
    if let Some(pod) = &job.pod {
        syncer.sync_failed(pod, &message);
    }
    Some(SyncFailure::failed(message, WORKER_BACKOFF))
}

/// A static pod does not start while an older pod of the same full name is
/// still running or stopping: a manifest edit replaces the pod, and the two
/// would otherwise fight over host ports and names (upstream
/// allowStaticPodStart).
fn static_pod_must_wait(states: &HashMap<String, PodState>, uid: &str, st: &PodState) -> bool {
    let Some(pod) = st.pod.as_ref().filter(|p| crate::types::is_static_pod(p)) else {
        return false;
    };
    if st.last_sync_end.is_some() {
        return false; // already started
    }
    let name = pod.full_name();
    states.iter().any(|(other_uid, other)| {
        other_uid != uid
            && other.phase != Phase::Terminated
            && other.pod.as_ref().is_some_and(|p| p.full_name() == name)
    })
}

fn phase_rank(p: Phase) -> u8 {
    match p {
        Phase::Syncing => 0,
        Phase::Terminating => 1,
        Phase::Terminated => 2,
    }
}

/// What a caught panic said.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
#[path = "podworkers_tests.rs"]
mod tests;
