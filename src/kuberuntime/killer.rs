//! Container stops that never hold a pod worker.
//!
//! Upstream stops each container in its own goroutine
//! (`killContainersWithSyncResult`) and the pod's goroutine waits for them.
//! Here a stop (preStop exec hook, then StopContainer with the grace
//! period) is an async CRI call that completes on gRPC's completion-queue
//! thread; the pod worker that asked is free at once. So 30 pods with a
//! 30 s grace stop in one grace period on a fixed thread count, not
//! ⌈30/4⌉ of them.
//!
//! The killer remembers each container's stop by container ID (an ID is
//! one instance, never reused): in flight, stopped, or failed. A worker
//! asking again while a stop is in flight gets `InFlight` and moves on; the
//! completion wakes the pod (and PLEG reports the death), and the next sync
//! finds the container `Stopped`. A shorter grace asked during a stop (a
//! forced delete) issues a second, shorter stop, as upstream's pod workers
//! restart termination with the smaller grace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use crate::cri::{AsyncStop, CriError, RemoteRuntime};

/// A newer request must end the stop at least this much sooner to issue a
/// second StopContainer; grace is counted in whole seconds.
const SHORTEN_SLACK: Duration = Duration::from_secs(1);
/// How long a finished stop is remembered when its pod is not forgotten
/// first (status may lag a completion by a relist or two).
const STOPPED_TTL: Duration = Duration::from_secs(600);

/// Where stops are sent: the CRI client, or a fake in tests.
pub trait StopContainer: Send + Sync {
    fn stop_async(
        &self,
        id: &str,
        pre_stop: Option<Vec<String>>,
        grace: Duration,
        min_grace: Duration,
        done: Box<dyn FnOnce(AsyncStop) + Send>,
    );
    /// StopPodSandbox (network teardown included), async like the stops.
    fn stop_sandbox_async(&self, id: &str, done: SandboxDone);
}

/// Told a sandbox stop's result, on the completion thread.
pub type SandboxDone = Box<dyn FnOnce(Result<(), CriError>) + Send>;

impl StopContainer for RemoteRuntime {
    fn stop_sandbox_async(&self, id: &str, done: SandboxDone) {
        self.stop_pod_sandbox_async(id, done);
    }

    fn stop_async(
        &self,
        id: &str,
        pre_stop: Option<Vec<String>>,
        grace: Duration,
        min_grace: Duration,
        done: Box<dyn FnOnce(AsyncStop) + Send>,
    ) {
        self.stop_container_async(id, pre_stop, grace, min_grace, done);
    }
}

/// Where one container's stop stands after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// This request started the stop: record the Killing event.
    Issued,
    /// A stop is already under way.
    InFlight,
    /// The container is stopped.
    Stopped,
}

/// What a stop's requester wants done with its outcome.
pub type OnDone = Box<dyn FnOnce(&AsyncStop) + Send>;

/// Called when a deferred preStop hook is done, to issue the stop.
pub type ThenStop = Box<dyn FnOnce() + Send>;

/// A preStop hook to run before StopContainer, within the grace period.
pub enum PreStop {
    /// An exec hook's command: an async ExecSync chained before the stop.
    Exec(Vec<String>),
    /// An httpGet or sleep hook: starts it on the handler runner and calls
    /// back when it is done; the stop follows with the grace left.
    Deferred(Box<dyn FnOnce(ThenStop) + Send>),
}

/// One container to stop.
pub struct StopRequest {
    pub pod_uid: String,
    pub id: String,
    pub grace: Duration,
    /// The least grace left after the preStop hook (upstream's 2 s).
    pub min_grace: Duration,
    /// A preStop hook, run first within the grace period.
    pub pre_stop: Option<PreStop>,
    /// Runs with the outcome on the completion thread (hook events).
    pub on_done: Option<OnDone>,
}

enum State {
    InFlight { ends: Instant, outstanding: u32 },
    Stopped { at: Instant },
    Failed(CriError),
}

struct Entry {
    pod_uid: String,
    /// When the first stop of this container was issued.
    issued: Instant,
    state: State,
}

type Entries = Arc<Mutex<HashMap<String, Entry>>>;
/// Told the pod UID when one of its stops finishes.
pub type OnStopped = Arc<dyn Fn(&str) + Send + Sync>;

pub struct Killer {
    stopper: Arc<dyn StopContainer>,
    entries: Entries,
    on_stopped: OnStopped,
}

impl Killer {
    /// `on_stopped` is told when a pod's stop finishes (the pod workers).
    pub fn new(stopper: Arc<dyn StopContainer>, on_stopped: OnStopped) -> Self {
        Killer {
            stopper,
            entries: Arc::new(Mutex::new(HashMap::new())),
            on_stopped,
        }
    }

    /// The completion callback, for other async work that wakes pods the
    /// same way (postStart hooks).
    pub fn wake_handle(&self) -> OnStopped {
        Arc::clone(&self.on_stopped)
    }

    /// Whether a stop of this container is remembered (in flight, done or
    /// failed): a caller then neither records Killing nor runs hooks again.
    pub fn knows(&self, id: &str) -> bool {
        lock(&self.entries).contains_key(id)
    }

    /// Stops a container, or reports the stop already under way. A failed
    /// stop is reported once and forgotten, so the next request retries.
    pub fn stop(&self, req: StopRequest) -> Result<Progress, CriError> {
        let ends = Instant::now() + req.grace;
        let mut pre_stop = req.pre_stop;
        let progress = {
            let mut entries = lock(&self.entries);
            if let Some(done) = finished(&mut entries, &req.id) {
                return done;
            }
            match entries.get_mut(&req.id).map(|e| &mut e.state) {
                Some(State::InFlight {
                    ends: current,
                    outstanding,
                }) => {
                    if ends + SHORTEN_SLACK > *current {
                        return Ok(Progress::InFlight);
                    }
                    // A shorter grace: stop again; the hook already ran.
                    *current = ends;
                    *outstanding += 1;
                    pre_stop = None;
                    Progress::InFlight
                }
                _ => {
                    insert_in_flight(&mut entries, &req.id, &req.pod_uid, ends);
                    Progress::Issued
                }
            }
        };
        let complete = self.completion(&req.id, &req.pod_uid);
        let on_done = req.on_done;
        let stopper = Arc::clone(&self.stopper);
        let (id, min_grace) = (req.id, req.min_grace);
        let issue = move |exec_hook: Option<Vec<String>>, grace: Duration| {
            stopper.stop_async(
                &id,
                exec_hook,
                grace,
                min_grace,
                Box::new(move |outcome| {
                    if let Some(f) = on_done {
                        f(&outcome);
                    }
                    complete(outcome.stopped);
                }),
            );
        };
        match pre_stop {
            None => issue(None, req.grace),
            Some(PreStop::Exec(cmd)) => issue(Some(cmd), req.grace),
            Some(PreStop::Deferred(run)) => {
                let (started, grace) = (Instant::now(), req.grace);
                run(Box::new(move || {
                    issue(None, grace.saturating_sub(started.elapsed()).max(min_grace));
                }));
            }
        }
        Ok(progress)
    }

    /// Stops a sandbox once its containers are stopped, or reports the
    /// stop under way, the same way as containers (sandbox and container
    /// IDs never collide).
    pub fn stop_sandbox(&self, pod_uid: &str, id: &str) -> Result<Progress, CriError> {
        {
            let mut entries = lock(&self.entries);
            if let Some(done) = finished(&mut entries, id) {
                return done;
            }
            if entries.contains_key(id) {
                return Ok(Progress::InFlight);
            }
            insert_in_flight(&mut entries, id, pod_uid, Instant::now());
        }
        self.stopper
            .stop_sandbox_async(id, Box::new(self.completion(id, pod_uid)));
        Ok(Progress::Issued)
    }

    /// What runs when a stop of `id` finishes, on the completion thread:
    /// record the result, then wake the pod.
    fn completion(&self, id: &str, pod_uid: &str) -> impl FnOnce(Result<(), CriError>) + Send {
        let entries = Arc::clone(&self.entries);
        let on_stopped = Arc::clone(&self.on_stopped);
        let (id, uid) = (id.to_string(), pod_uid.to_string());
        move |result| {
            complete(&entries, &id, result);
            on_stopped(&uid);
        }
    }

    /// Whether any stop of the pod is still under way.
    pub fn stopping(&self, pod_uid: &str) -> bool {
        lock(&self.entries)
            .values()
            .any(|e| e.pod_uid == pod_uid && matches!(e.state, State::InFlight { .. }))
    }

    /// When the pod's first remembered stop was issued: later waves of a
    /// termination (sidecars) count their grace from it.
    pub fn stopping_since(&self, pod_uid: &str) -> Option<Instant> {
        lock(&self.entries)
            .values()
            .filter(|e| e.pod_uid == pod_uid)
            .map(|e| e.issued)
            .min()
    }

    /// Forgets a pod's finished stops (the pod is gone).
    pub fn forget_pod(&self, pod_uid: &str) {
        lock(&self.entries)
            .retain(|_, e| e.pod_uid != pod_uid || matches!(e.state, State::InFlight { .. }));
    }

    /// Drops stops finished long ago (pods never forgotten explicitly).
    pub fn gc(&self, now: Instant) {
        lock(&self.entries).retain(|_, e| match e.state {
            State::Stopped { at } => now.saturating_duration_since(at) < STOPPED_TTL,
            _ => true,
        });
    }
}

/// A stop of `id` that already finished: stopped, or its failure, which
/// is handed out once so that the next request retries.
fn finished(entries: &mut HashMap<String, Entry>, id: &str) -> Option<Result<Progress, CriError>> {
    match entries.get(id).map(|e| &e.state) {
        Some(State::Stopped { .. }) => Some(Ok(Progress::Stopped)),
        Some(State::Failed(_)) => match entries.remove(id).map(|e| e.state) {
            Some(State::Failed(err)) => Some(Err(err)),
            _ => Some(Ok(Progress::Stopped)),
        },
        _ => None,
    }
}

/// Remembers a stop of `id` as issued now, ending at `ends`.
fn insert_in_flight(entries: &mut HashMap<String, Entry>, id: &str, pod_uid: &str, ends: Instant) {
    entries.insert(
        id.to_string(),
        Entry {
            pod_uid: pod_uid.to_string(),
            issued: Instant::now(),
            state: State::InFlight {
                ends,
                outstanding: 1,
            },
        },
    );
}

/// Records a finished StopContainer. Success (or the container already
/// gone) means stopped; a failure counts only when no other stop of the
/// container is still out.
fn complete(entries: &Entries, id: &str, result: Result<(), CriError>) {
    let mut entries = lock(entries);
    let Some(entry) = entries.get_mut(id) else {
        return;
    };
    let State::InFlight { outstanding, .. } = &mut entry.state else {
        return; // an earlier completion already settled it
    };
    *outstanding = outstanding.saturating_sub(1);
    match result {
        Ok(()) => {
            entry.state = State::Stopped { at: Instant::now() };
        }
        Err(e) if e.is_not_found() => {
            entry.state = State::Stopped { at: Instant::now() };
        }
        Err(e) => {
            if *outstanding == 0 {
                log::warn!("stop container {id}: {e}");
                entry.state = State::Failed(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Done = Box<dyn FnOnce(AsyncStop) + Send>;
    /// A recorded stop: container, hook command, grace, completion.
    type Call = (String, Option<Vec<String>>, Duration, Done);

    /// Records stops; the test completes them.
    #[derive(Default)]
    struct FakeStopper {
        calls: Mutex<Vec<Call>>,
    }

    impl StopContainer for FakeStopper {
        fn stop_async(
            &self,
            id: &str,
            pre_stop: Option<Vec<String>>,
            grace: Duration,
            _min: Duration,
            done: Done,
        ) {
            self.calls
                .lock()
                .unwrap()
                .push((id.to_string(), pre_stop, grace, done));
        }
        fn stop_sandbox_async(&self, id: &str, done: SandboxDone) {
            let done: Done = Box::new(move |o: AsyncStop| done(o.stopped));
            self.calls
                .lock()
                .unwrap()
                .push((id.to_string(), None, Duration::ZERO, done));
        }
    }

    impl FakeStopper {
        fn finish(&self, i: usize, result: Result<(), CriError>) {
            let (_, _, _, done) = self.calls.lock().unwrap().remove(i);
            done(AsyncStop {
                hook: None,
                hook_took: Duration::ZERO,
                stopped: result,
            });
        }
        fn count(&self) -> usize {
            self.calls.lock().unwrap().len()
        }
    }

    fn req(id: &str, grace: u64) -> StopRequest {
        StopRequest {
            pod_uid: "uid-1".into(),
            id: id.into(),
            grace: Duration::from_secs(grace),
            min_grace: Duration::from_secs(2),
            pre_stop: Some(PreStop::Exec(vec!["sh".into()])),
            on_done: None,
        }
    }

    fn killer() -> (Arc<FakeStopper>, Killer, Arc<Mutex<Vec<String>>>) {
        let fake = Arc::new(FakeStopper::default());
        let woken = Arc::new(Mutex::new(vec![]));
        let w = Arc::clone(&woken);
        let k = Killer::new(
            Arc::clone(&fake) as Arc<dyn StopContainer>,
            Arc::new(move |uid| w.lock().unwrap().push(uid.into())),
        );
        (fake, k, woken)
    }

    fn grpc_err(code: grpcio::RpcStatusCode) -> CriError {
        CriError {
            method: "StopContainer",
            code: Some(code),
            message: "boom".into(),
        }
    }

    #[test]
    fn a_stop_is_issued_once_and_never_waited_for() {
        let (fake, k, woken) = killer();
        assert_eq!(k.stop(req("c1", 30)).unwrap(), Progress::Issued);
        assert_eq!(k.stop(req("c1", 30)).unwrap(), Progress::InFlight);
        assert_eq!(fake.count(), 1, "a second request does not stop again");
        assert!(k.stopping("uid-1") && k.knows("c1"));
        fake.finish(0, Ok(()));
        assert_eq!(*woken.lock().unwrap(), ["uid-1"]);
        assert!(!k.stopping("uid-1"));
        assert_eq!(k.stop(req("c1", 30)).unwrap(), Progress::Stopped);
        assert_eq!(fake.count(), 0);
    }

    #[test]
    fn many_containers_stop_concurrently() {
        let (fake, k, _) = killer();
        for i in 0..30 {
            assert_eq!(k.stop(req(&format!("c{i}"), 10)).unwrap(), Progress::Issued);
        }
        assert_eq!(fake.count(), 30, "all 30 stops are out at once");
    }

    #[test]
    fn a_failed_stop_is_reported_once_then_retried() {
        let (fake, k, woken) = killer();
        k.stop(req("c1", 5)).unwrap();
        fake.finish(0, Err(grpc_err(grpcio::RpcStatusCode::UNAVAILABLE)));
        assert_eq!(woken.lock().unwrap().len(), 1, "the pod is woken to retry");
        let err = k.stop(req("c1", 5)).unwrap_err();
        assert_eq!(err.code, Some(grpcio::RpcStatusCode::UNAVAILABLE));
        assert_eq!(k.stop(req("c1", 5)).unwrap(), Progress::Issued);
        assert_eq!(fake.count(), 1);
    }

    #[test]
    fn not_found_counts_as_stopped() {
        let (fake, k, _) = killer();
        k.stop(req("c1", 5)).unwrap();
        fake.finish(0, Err(grpc_err(grpcio::RpcStatusCode::NOT_FOUND)));
        assert_eq!(k.stop(req("c1", 5)).unwrap(), Progress::Stopped);
    }

    #[test]
    fn a_shorter_grace_stops_again_without_the_hook() {
        let (fake, k, _) = killer();
        k.stop(req("c1", 30)).unwrap();
        // Same or nearly the same end: nothing new.
        assert_eq!(k.stop(req("c1", 29)).unwrap(), Progress::InFlight);
        assert_eq!(fake.count(), 1);
        // A forced delete: grace 0.
        assert_eq!(k.stop(req("c1", 0)).unwrap(), Progress::InFlight);
        let calls = fake.calls.lock().unwrap();
        assert_eq!(calls.len(), 2);
        assert!(
            calls[0].1.is_some() && calls[1].1.is_none(),
            "hook runs once"
        );
        assert_eq!(calls[1].2, Duration::ZERO);
        drop(calls);
        // The short stop succeeds; the long one's late failure changes nothing.
        fake.finish(1, Ok(()));
        fake.finish(0, Err(grpc_err(grpcio::RpcStatusCode::DEADLINE_EXCEEDED)));
        assert_eq!(k.stop(req("c1", 30)).unwrap(), Progress::Stopped);
    }

    #[test]
    fn a_failure_with_another_stop_out_waits_for_that_one() {
        let (fake, k, _) = killer();
        k.stop(req("c1", 30)).unwrap();
        k.stop(req("c1", 0)).unwrap();
        fake.finish(0, Err(grpc_err(grpcio::RpcStatusCode::DEADLINE_EXCEEDED)));
        assert_eq!(k.stop(req("c1", 0)).unwrap(), Progress::InFlight);
        fake.finish(0, Ok(()));
        assert_eq!(k.stop(req("c1", 0)).unwrap(), Progress::Stopped);
    }

    #[test]
    fn forgetting_a_pod_keeps_its_stops_in_flight() {
        let (fake, k, _) = killer();
        k.stop(req("c1", 5)).unwrap();
        k.stop(req("c2", 5)).unwrap();
        fake.finish(0, Ok(()));
        k.forget_pod("uid-1");
        assert!(!k.knows("c1"), "finished stop forgotten");
        assert!(k.knows("c2"), "in-flight stop kept");
        k.gc(Instant::now() + STOPPED_TTL * 2);
        assert!(k.knows("c2"));
    }

    /// An httpGet or sleep preStop holds the stop back until it is done,
    /// then the stop gets the rest of the grace period, at least the
    /// minimum; the container counts as stopping all along.
    #[test]
    fn a_deferred_hook_runs_before_the_stop_with_the_grace_left() {
        let (fake, k, _) = killer();
        let pending: Arc<Mutex<Option<ThenStop>>> = Arc::default();
        let slot = Arc::clone(&pending);
        let mut r = req("c1", 3);
        r.pre_stop = Some(PreStop::Deferred(Box::new(move |then| {
            *slot.lock().unwrap() = Some(then);
        })));
        assert_eq!(k.stop(r).unwrap(), Progress::Issued);
        assert_eq!(fake.count(), 0, "no StopContainer while the hook runs");
        assert!(k.stopping("uid-1"));
        assert_eq!(k.stop(req("c1", 3)).unwrap(), Progress::InFlight);
        std::thread::sleep(Duration::from_millis(1100));
        let then = pending
            .lock()
            .unwrap()
            .take()
            .expect("the hook was started");
        then();
        let calls = fake.calls.lock().unwrap();
        assert_eq!(calls.len(), 1);
        assert!(calls[0].1.is_none(), "no exec hook is chained");
        assert_eq!(
            calls[0].2,
            Duration::from_secs(2),
            "min grace after a 1.1 s hook of 3 s"
        );
        drop(calls);
        fake.finish(0, Ok(()));
        assert_eq!(k.stop(req("c1", 3)).unwrap(), Progress::Stopped);
    }

    #[test]
    fn sandboxes_stop_async_and_are_remembered() {
        let (fake, k, woken) = killer();
        assert_eq!(k.stop_sandbox("uid-1", "sb1").unwrap(), Progress::Issued);
        assert_eq!(k.stop_sandbox("uid-1", "sb1").unwrap(), Progress::InFlight);
        assert_eq!(fake.count(), 1);
        assert!(k.stopping("uid-1"));
        fake.finish(0, Ok(()));
        assert_eq!(*woken.lock().unwrap(), ["uid-1"]);
        assert_eq!(k.stop_sandbox("uid-1", "sb1").unwrap(), Progress::Stopped);
        k.stop_sandbox("uid-1", "sb2").unwrap();
        fake.finish(0, Err(grpc_err(grpcio::RpcStatusCode::INTERNAL)));
        assert!(k.stop_sandbox("uid-1", "sb2").is_err(), "reported once");
        assert_eq!(k.stop_sandbox("uid-1", "sb2").unwrap(), Progress::Issued);
    }
}
