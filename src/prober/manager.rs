//! The prober manager (upstream prober_manager.go): the kubelet's entry
//! points, the scheduler thread and the worker pool.

use crate::util::worker::{ShutdownStage, Worker};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, Receiver, Sender, TrySendError};
use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use super::core::{Core, Done, Job, Now};
use super::handlers::Outcome;
use super::spec::Check;
use super::{worker, ContainerExec, ContainerInfo, ResultUpdate};
use crate::events::EventRecorder;

/// How long the scheduler sleeps with nothing scheduled (it is woken for
/// any change anyway).
const IDLE_WAIT: Duration = Duration::from_secs(60);

pub struct ProberManager {
    core: Mutex<Core>,
    exec: Arc<dyn ContainerExec>,
    recorder: Arc<dyn EventRecorder>,
    updates: Sender<ResultUpdate>,
    workers: usize,
    /// Nudges the scheduler after a change (capacity 1: wake-ups coalesce).
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    /// Checks wait for a free worker: a finished check wakes the scheduler.
    backlog: AtomicBool,
    /// Start delays of checks (actual start − scheduled time), for tests.
    #[cfg(test)]
    pub(crate) lags: Arc<Mutex<Vec<Duration>>>,
}

impl ProberManager {
    /// `updates` receives every liveness, readiness and startup result
    /// change; `workers` is the pool size (at least 1).
    pub fn new(
        exec: Arc<dyn ContainerExec>,
        recorder: Arc<dyn EventRecorder>,
        updates: Sender<ResultUpdate>,
        workers: usize,
    ) -> Arc<Self> {
        let (wake_tx, wake_rx) = bounded(1);
        Arc::new(ProberManager {
            core: Mutex::new(Core::new(Instant::now())),
            exec,
            recorder,
            updates,
            workers: workers.max(1),
            wake_tx,
            wake_rx,
            backlog: AtomicBool::new(false),
            #[cfg(test)]
            lags: Arc::default(),
        })
    }

    /// Starts the "prober" scheduler and the "probe-worker-N" pool; all stop
    /// once `shutdown` fires (a worker first finishes its check).
    pub fn start(self: &Arc<Self>, shutdown: Receiver<()>) -> io::Result<Vec<Worker>> {
        let (job_tx, job_rx) = bounded::<Job>(self.workers);
        let mut handles = Vec::with_capacity(self.workers + 1);
        for i in 0..self.workers {
            let pool = Pool {
                manager: Arc::clone(self),
                jobs: job_rx.clone(),
            };
            handles.push(crate::util::worker::spawn(
                &format!("probe-worker-{i}"),
                ShutdownStage::Workers,
                move || pool.run(),
            )?);
        }
        let me = Arc::clone(self);
        handles.push(crate::util::worker::spawn(
            "prober",
            ShutdownStage::Workers,
            move || me.schedule_loop(job_tx, shutdown),
        )?);
        Ok(handles)
    }

    pub fn add_pod(&self, pod: &Arc<Pod>) {
        lock(&self.core).add_pod(pod, Now::real());
        self.wake();
    }

    /// See [`Core::refresh_pod`]; no probe changes, so no wake-up.
    pub fn refresh_pod(&self, pod: &Arc<Pod>) {
        lock(&self.core).refresh_pod(pod);
    }

    pub fn remove_pod(&self, uid: &str) {
        lock(&self.core).remove_pod(uid);
        self.wake();
    }

    /// The containers' current instances and the pod IP; a new container ID
    /// restarts that container's probes (counters, initial delay). The
    /// scheduler is woken only for a pod with probes: every sync of every
    /// pod comes here.
    pub fn update_pod_status(
        &self,
        pod_uid: &str,
        pod_ip: Option<&str>,
        containers: &[ContainerInfo],
    ) {
        let probed = lock(&self.core).update_pod_status(pod_uid, pod_ip, containers, Now::real());
        if probed {
            self.wake();
        }
    }

    pub fn is_ready(&self, pod_uid: &str, container_name: &str) -> bool {
        lock(&self.core).is_ready(pod_uid, container_name)
    }

    pub fn is_started(&self, pod_uid: &str, container_name: &str) -> bool {
        lock(&self.core).is_started(pod_uid, container_name)
    }

    #[cfg(test)]
    pub fn liveness_failed(&self, container_id: &str) -> bool {
        lock(&self.core).liveness_failed(container_id)
    }

    fn wake(&self) {
        let _ = self.wake_tx.try_send(());
    }

    /// The scheduler: dispatch due checks, send updates, sleep until the
    /// next deadline or a change.
    fn schedule_loop(&self, jobs: Sender<Job>, shutdown: Receiver<()>) {
        let mut pending = VecDeque::new();
        loop {
            let (next, updates) = {
                let mut core = lock(&self.core);
                pending.extend(core.take_due(Now::real()));
                (core.next_deadline(), std::mem::take(&mut core.outbox))
            };
            // Set before the dispatch, so a check that ends meanwhile wakes us.
            self.backlog.store(!pending.is_empty(), Ordering::SeqCst);
            dispatch(&jobs, &mut pending);
            self.backlog.store(!pending.is_empty(), Ordering::SeqCst);
            if !self.publish(updates, &shutdown) {
                return;
            }
            let wait = next.map_or(IDLE_WAIT, |d| d.saturating_duration_since(Instant::now()));
            select! {
                recv(shutdown) -> _ => return,
                recv(self.wake_rx) -> _ => {}
                default(wait) => {}
            }
        }
    }

    /// A finished check, applied by its worker under the state lock. The
    /// next check of the probe was scheduled when this one was handed out,
    /// so the scheduler is woken only with work for it: a result change to
    /// send, or checks waiting for a worker. At steady state a check costs
    /// it one wake-up, not two.
    fn finish(&self, done: Done) {
        let changed = {
            let mut core = lock(&self.core);
            core.on_result(done, Now::real());
            !core.outbox.is_empty()
        };
        if changed || self.backlog.load(Ordering::SeqCst) {
            self.wake();
        }
    }

    /// Sends the updates; false when shutdown fired while the kubelet was
    /// not taking them.
    fn publish(&self, updates: Vec<ResultUpdate>, shutdown: &Receiver<()>) -> bool {
        for u in updates {
            select! {
                send(self.updates, u) -> res => {
                    if res.is_err() {
                        return true; // nobody listens; nothing to deliver
                    }
                }
                recv(shutdown) -> _ => return false,
            }
        }
        true
    }
}

/// Hands pending checks to the pool while it has room; the rest wait for
/// a worker to finish (its result wakes the scheduler).
fn dispatch(jobs: &Sender<Job>, pending: &mut VecDeque<Job>) {
    while let Some(job) = pending.pop_front() {
        match jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                pending.push_front(job);
                return;
            }
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
}

/// One pool worker's share of the manager.
struct Pool {
    manager: Arc<ProberManager>,
    jobs: Receiver<Job>,
}

impl Pool {
    /// Runs checks until the scheduler goes away.
    fn run(self) {
        for job in self.jobs.iter() {
            #[cfg(test)]
            lock(&self.manager.lags).push(Instant::now().saturating_duration_since(job.due));
            // Exec checks go async: a command that runs to its timeout
            // costs its own probe, not a pool worker.
            let m = &self.manager;
            if let Check::Exec(cmd) = &job.check {
                let cmd = cmd.clone();
                let manager = Arc::clone(m);
                let finish = Box::new(move |job: Job, outcome: Outcome| {
                    worker::record_event(&*manager.recorder, &job, &outcome);
                    manager.finish(Done {
                        key: job.key,
                        generation: job.generation,
                        outcome,
                    });
                });
                worker::execute_exec_async(Arc::clone(&m.exec), job, cmd, 0, finish);
                continue;
            }
            let outcome = worker::execute(&*m.exec, &job);
            worker::record_event(&*m.recorder, &job, &outcome);
            m.finish(Done {
                key: job.key,
                generation: job.generation,
                outcome,
            });
        }
    }
}
