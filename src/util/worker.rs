//! Owned module threads (upstream `wait.Until(f, period, stopCh)` plus
//! Firecracker's joined handles): every long-lived thread is spawned here,
//! named, with its panics contained, and joined at shutdown within a
//! deadline, so a stranger can see every thread the kubelet owns and a
//! thread that does not stop is named in the log rather than forgotten.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, select, tick, Receiver};

/// The back-off before a periodic function runs again after it panicked.
const PANIC_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const PANIC_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// A module thread and its name, to be joined at shutdown.
#[derive(Debug)]
pub struct Worker {
    name: String,
    handle: JoinHandle<()>,
}

impl Worker {
    pub fn name(&self) -> &str {
        &self.name
    }

    #[cfg(test)]
    pub fn thread(&self) -> &std::thread::Thread {
        self.handle.thread()
    }

    /// Waits for the thread without a deadline (tests; shutdown uses
    /// [`join_all`]).
    #[cfg(test)]
    pub fn join(self) -> std::thread::Result<()> {
        self.handle.join()
    }

    /// Adopts a thread spawned elsewhere (a module's own `start`).
    pub fn adopt(handle: JoinHandle<()>) -> Worker {
        let name = handle.thread().name().unwrap_or("unnamed").to_string();
        Worker { name, handle }
    }
}

/// Spawns a named thread; the OS refusing a thread is an error, not a panic.
pub fn spawn<F>(name: &str, f: F) -> std::io::Result<Worker>
where
    F: FnOnce() + Send + 'static,
{
    let handle = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)?;
    Ok(Worker {
        name: name.to_string(),
        handle,
    })
}

/// Runs `f` every `period`, the first time after `delay`, until `shutdown`
/// closes. A panic in `f` is logged and counted; `f` runs again after a
/// back-off (1 s doubling to 1 min), so one bad round never kills the
/// module (upstream's HandleCrash in wait.Until).
pub fn spawn_periodic<F>(
    name: &str,
    period: Duration,
    delay: Duration,
    shutdown: Receiver<()>,
    mut f: F,
) -> std::io::Result<Worker>
where
    F: FnMut() + Send + 'static,
{
    let thread_name = name.to_string();
    spawn(name, move || {
        select! {
            recv(after(delay)) -> _ => {}
            recv(shutdown) -> _ => return,
        }
        let ticker = tick(period);
        let mut backoff = PANIC_BACKOFF_INITIAL;
        loop {
            let wait = match run_contained(&thread_name, &mut f) {
                Ok(()) => {
                    backoff = PANIC_BACKOFF_INITIAL;
                    None
                }
                Err(()) => {
                    let w = backoff;
                    backoff = (backoff * 2).min(PANIC_BACKOFF_MAX);
                    Some(w)
                }
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
    })
}

/// Runs `run` (a module's whole loop, which returns when `shutdown`
/// closes) on a named thread under a supervisor: a panic is logged and
/// counted, and the loop is started again after a back-off (1 s doubling
/// to 1 min), unless shutdown came meanwhile.
pub fn spawn_supervised<F>(
    name: &str,
    shutdown: Receiver<()>,
    mut run: F,
) -> std::io::Result<Worker>
where
    F: FnMut(&Receiver<()>) + Send + 'static,
{
    let module = name.to_string();
    spawn(name, move || {
        let mut backoff = PANIC_BACKOFF_INITIAL;
        loop {
            let mut round = || run(&shutdown);
            if run_contained(&module, &mut round).is_ok() {
                return;
            }
            select! {
                recv(after(backoff)) -> _ => {}
                recv(shutdown) -> _ => return,
            }
            backoff = (backoff * 2).min(PANIC_BACKOFF_MAX);
        }
    })
}

/// Runs one round of a module's work, catching a panic.
pub fn run_contained<F: FnMut()>(module: &str, f: &mut F) -> Result<(), ()> {
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
pub fn join_all(stage: &str, workers: Vec<Worker>, deadline: Instant) -> Vec<String> {
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
        let late = join_all("test", vec![w], Instant::now() + Duration::from_secs(2));
        assert!(late.is_empty());
    }

    #[test]
    fn supervised_loop_is_restarted_after_a_panic() {
        let (stop, rx) = crossbeam_channel::bounded::<()>(0);
        let starts = Arc::new(AtomicUsize::new(0));
        let s = starts.clone();
        let w = spawn_supervised("test-supervised", rx, move |shutdown| {
            if s.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("the loop dies once");
            }
            let _ = shutdown.recv();
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while starts.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(starts.load(Ordering::SeqCst), 2, "restarted once");
        drop(stop);
        assert!(join_all("test", vec![w], Instant::now() + Duration::from_secs(2)).is_empty());
    }

    #[test]
    fn a_thread_that_does_not_stop_is_named() {
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let w = spawn("test-stuck", move || {
            let _ = rx.recv_timeout(Duration::from_secs(5));
        })
        .unwrap();
        let late = join_all("test", vec![w], Instant::now() + Duration::from_millis(50));
        assert_eq!(late, ["test-stuck"]);
        drop(tx);
    }
}
