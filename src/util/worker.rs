//! Owned module threads (upstream `wait.Until(f, period, stopCh)` plus
//! Firecracker's joined handles): every thread is spawned here, named; a
//! module's thread has its panics contained and carries the
//! [`ShutdownStage`] it is joined in, within a deadline, so a stranger can
//! see every thread the kubelet owns and a thread that does not stop is
//! named in the log rather than forgotten.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, select, tick, Receiver};

use super::backoff::Exponential;

/// The back-off before a periodic function runs again after it panicked.
const PANIC_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const PANIC_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// When a module thread is joined at shutdown, in this order: the sources
/// stop feeding pods, then the workers drain, then status reaches the API,
/// then the servers go. Every thread has seen the closed shutdown channel
/// already; the stage only decides whose end is waited for first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownStage {
    /// Pod sources: files, URL, the API reflectors, the merger.
    Sources,
    /// What acts on pods and the node: PLEG, pod workers, volumes, probes,
    /// image pulls, hooks, GC, eviction, logs, OOM, node shutdown.
    Workers,
    /// What reports to the API: pod and node status, lease, certificates,
    /// events.
    Status,
    /// The servers: healthz and the kubelet API.
    Servers,
}

impl ShutdownStage {
    /// The stages in the order shutdown joins them.
    pub const ORDER: [ShutdownStage; 4] = [
        ShutdownStage::Sources,
        ShutdownStage::Workers,
        ShutdownStage::Status,
        ShutdownStage::Servers,
    ];

    /// The stage as the shutdown log names it.
    pub fn name(self) -> &'static str {
        match self {
            ShutdownStage::Sources => "sources",
            ShutdownStage::Workers => "workers",
            ShutdownStage::Status => "status",
            ShutdownStage::Servers => "servers",
        }
    }
}

/// A module thread, its name and its shutdown stage, to be joined at
/// shutdown.
#[derive(Debug)]
pub struct Worker {
    name: String,
    stage: ShutdownStage,
    handle: JoinHandle<()>,
}

impl Worker {
    pub fn stage(&self) -> ShutdownStage {
        self.stage
    }

    #[cfg(test)]
    pub fn thread(&self) -> &std::thread::Thread {
        self.handle.thread()
    }

    #[cfg(test)]
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the thread without a deadline (tests; shutdown uses
    /// [`join_all`]).
    #[cfg(test)]
    pub fn join(self) -> std::thread::Result<()> {
        self.handle.join()
    }

    /// Adopts a thread the API client or the healthz server spawned
    /// itself (their own crates start their threads).
    pub fn adopt(handle: JoinHandle<()>, stage: ShutdownStage) -> Worker {
        let name = handle.thread().name().unwrap_or("unnamed").to_string();
        Worker {
            name,
            stage,
            handle,
        }
    }
}

/// Spawns a named module thread; the OS refusing a thread is an error, not
/// a panic.
pub fn spawn<F>(name: &str, stage: ShutdownStage, f: F) -> std::io::Result<Worker>
where
    F: FnOnce() + Send + 'static,
{
    spawn_boxed(name, stage, Box::new(f))
}

/// The spawners' one body. Boxed, so std's thread start-up and the loops
/// below are compiled once, not once per module's closure (a few KB of the
/// static binary each, for some fifty threads).
fn spawn_boxed(
    name: &str,
    stage: ShutdownStage,
    f: Box<dyn FnOnce() + Send>,
) -> std::io::Result<Worker> {
    Ok(Worker {
        name: name.to_string(),
        stage,
        handle: spawn_helper(name, f)?,
    })
}

/// Spawns a named thread that is no module's and is not joined at
/// shutdown: one per served connection or stream (bounded by their
/// limits), the signal waiter, the pod config merger. Whoever needs its
/// result joins the handle.
pub fn spawn_helper<F, T>(name: &str, f: F) -> std::io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    std::thread::Builder::new().name(name.to_string()).spawn(f)
}

/// Runs `f` every `period`, the first time after `delay`, until `shutdown`
/// closes. A panic in `f` is logged and counted; `f` runs again after a
/// back-off (1 s doubling to 1 min), so one bad round never kills the
/// module (upstream's HandleCrash in wait.Until).
pub fn spawn_periodic<F>(
    name: &str,
    stage: ShutdownStage,
    period: Duration,
    delay: Duration,
    shutdown: Receiver<()>,
    f: F,
) -> std::io::Result<Worker>
where
    F: FnMut() + Send + 'static,
{
    periodic(name, stage, period, delay, shutdown, Box::new(f))
}

fn periodic(
    name: &str,
    stage: ShutdownStage,
    period: Duration,
    delay: Duration,
    shutdown: Receiver<()>,
    mut f: Box<dyn FnMut() + Send>,
) -> std::io::Result<Worker> {
    let thread_name = name.to_string();
    spawn_boxed(
        name,
        stage,
        Box::new(move || {
            select! {
                recv(after(delay)) -> _ => {}
                recv(shutdown) -> _ => return,
            }
            let ticker = tick(period);
            let mut backoff = Exponential::new(PANIC_BACKOFF_INITIAL, PANIC_BACKOFF_MAX);
            loop {
                let wait = match run_contained(&thread_name, &mut f) {
                    Ok(()) => {
                        backoff.reset();
                        None
                    }
                    Err(()) => Some(backoff.next_delay()),
                };
                match wait {
                    None => select! {
                        recv(ticker) -> _ => {}
                        recv(shutdown) -> _ => return,
                    },
                    Some(w) => select! {
                        recv(after(w)) -> _ => {}
                        recv(shutdown) -> _ => return,
                    },
                }
            }
        }),
    )
}

/// Runs `run` (a module's whole loop, which returns when `shutdown`
/// closes) on a named thread under a supervisor: a panic is logged and
/// counted, and the loop is started again after a back-off (1 s doubling
/// to 1 min), unless shutdown came meanwhile.
pub fn spawn_supervised<F>(
    name: &str,
    stage: ShutdownStage,
    shutdown: Receiver<()>,
    run: F,
) -> std::io::Result<Worker>
where
    F: FnMut(&Receiver<()>) + Send + 'static,
{
    supervised(name, stage, shutdown, Box::new(run))
}

/// A module's whole loop, given the shutdown channel.
type ModuleLoop = Box<dyn FnMut(&Receiver<()>) + Send>;

fn supervised(
    name: &str,
    stage: ShutdownStage,
    shutdown: Receiver<()>,
    mut run: ModuleLoop,
) -> std::io::Result<Worker> {
    let module = name.to_string();
    spawn_boxed(
        name,
        stage,
        Box::new(move || {
            let mut backoff = Exponential::new(PANIC_BACKOFF_INITIAL, PANIC_BACKOFF_MAX);
            loop {
                if run_contained(&module, &mut || run(&shutdown)).is_ok() {
                    return;
                }
                select! {
                    recv(after(backoff.next_delay())) -> _ => {}
                    recv(shutdown) -> _ => return,
                }
            }
        }),
    )
}

/// Runs one round of a module's work, catching a panic.
pub fn run_contained(module: &str, f: &mut dyn FnMut()) -> Result<(), ()> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        log::error!("module {module} panicked: {what}; it runs again after a back-off");
        crate::metrics::module_panicked(module);
    })
}

/// Joins `workers` in order, each within what is left of `deadline`.
/// Returns the names of those that did not stop in time (left running;
/// the process is about to exit).
pub fn join_all(stage: ShutdownStage, workers: Vec<Worker>, deadline: Instant) -> Vec<String> {
    let stage = stage.name();
    let mut late = Vec::new();
    for w in workers {
        while !w.handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if w.handle.is_finished() {
            if w.handle.join().is_err() {
                log::warn!("shutdown ({stage}): {} had panicked", w.name);
            } else {
                log::info!("shutdown ({stage}): {} stopped", w.name);
            }
        } else {
            log::warn!("shutdown ({stage}): {} did not stop in time", w.name);
            late.push(w.name);
        }
    }
    late
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn periodic_survives_panics_and_stops_on_shutdown() {
        let (stop, rx) = crossbeam_channel::bounded::<()>(0);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let w = spawn_periodic(
            "test-periodic",
            ShutdownStage::Workers,
            Duration::from_millis(5),
            Duration::ZERO,
            rx,
            move || {
                if r.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("first round fails");
                }
            },
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while runs.load(Ordering::SeqCst) < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            runs.load(Ordering::SeqCst) >= 3,
            "it ran again after the panic"
        );
        drop(stop);
        let late = join_all(
            ShutdownStage::Workers,
            vec![w],
            Instant::now() + Duration::from_secs(2),
        );
        assert!(late.is_empty());
    }

    #[test]
    fn supervised_loop_is_restarted_after_a_panic() {
        let (stop, rx) = crossbeam_channel::bounded::<()>(0);
        let starts = Arc::new(AtomicUsize::new(0));
        let s = starts.clone();
        let w = spawn_supervised(
            "test-supervised",
            ShutdownStage::Workers,
            rx,
            move |shutdown| {
                if s.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("the loop dies once");
                }
                let _ = shutdown.recv();
            },
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while starts.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(starts.load(Ordering::SeqCst), 2, "restarted once");
        drop(stop);
        let deadline = Instant::now() + Duration::from_secs(2);
        assert!(join_all(ShutdownStage::Workers, vec![w], deadline).is_empty());
    }

    #[test]
    fn a_thread_that_does_not_stop_is_named() {
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let w = spawn("test-stuck", ShutdownStage::Servers, move || {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_millis(50);
        let late = join_all(ShutdownStage::Servers, vec![w], deadline);
        assert_eq!(late, ["test-stuck"]);
        drop(tx);
    }
}
