//! Runs the lifecycle hooks that have no async CRI form (upstream
//! `handlerRunner` in `pkg/kubelet/lifecycle/handlers.go`) off the pod
//! workers. Exec hooks are async ExecSync calls completed on gRPC's
//! completion queue (see `kuberuntime::killer`, `post_start`); this runs the
//! other two actions:
//!
//! - `sleep` is a timer: one thread keeps every pending sleep in a heap and
//!   calls each back when it is due, so a thousand sleeping hooks cost no
//!   more threads than one.
//! - `httpGet` is a blocking request bounded by its timeout, made on a
//!   fixed pool of [`HTTP_WORKERS`] threads. Upstream runs each in its own
//!   goroutine; here a pod waits on another's hook only when more than
//!   [`HTTP_WORKERS`] httpGet hooks hang at once, and then at most for one
//!   hook's timeout.
//!
//! A hook's outcome goes to its caller's callback, on the runner's thread.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};

use crate::prober::handlers::{hook_get, HttpTarget};
use crate::util::worker::{self, ShutdownStage, Worker};

/// Threads making httpGet hook requests.
pub const HTTP_WORKERS: usize = 2;
/// How long the timer sleeps when no hook is pending (it wakes at once for
/// a new one; this only bounds the idle wait).
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// What a hook does, resolved against its container by the caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// One GET, bounded by the timeout; only a request that gets no
    /// response fails the hook (upstream: any status passes).
    HttpGet {
        target: HttpTarget,
        timeout: Duration,
    },
    /// Wait this long, then succeed.
    Sleep(Duration),
}

/// Told a hook's outcome: `Err` carries what to report.
pub type HookDone = Box<dyn FnOnce(Result<(), String>) + Send>;

struct HttpJob {
    target: HttpTarget,
    timeout: Duration,
    done: HookDone,
}

struct Timed {
    at: Instant,
    done: HookDone,
}

/// The runner's queues; [`HandlerRunner::start`] spawns the threads that
/// drain them.
pub struct HandlerRunner {
    http_tx: Sender<HttpJob>,
    http_rx: Receiver<HttpJob>,
    timer_tx: Sender<Timed>,
    timer_rx: Receiver<Timed>,
}

impl Default for HandlerRunner {
    fn default() -> Self {
        let (http_tx, http_rx) = unbounded();
        let (timer_tx, timer_rx) = unbounded();
        HandlerRunner {
            http_tx,
            http_rx,
            timer_tx,
            timer_rx,
        }
    }
}

impl HandlerRunner {
    /// Starts `action`; `done` is told its outcome. Never blocks.
    pub fn run(&self, action: Action, done: HookDone) {
        let sent = match action {
            Action::Sleep(d) => self
                .timer_tx
                .send(Timed {
                    at: Instant::now() + d,
                    done,
                })
                .map_err(|e| e.into_inner().done),
            Action::HttpGet { target, timeout } => self
                .http_tx
                .send(HttpJob {
                    target,
                    timeout,
                    done,
                })
                .map_err(|e| e.into_inner().done),
        };
        // The receivers live as long as the runner, so this cannot fail;
        // should it, the hook fails rather than hanging its pod.
        if let Err(done) = sent {
            done(Err("the hook runner is gone".into()));
        }
    }

    /// Spawns the timer and the httpGet workers; they end when `shutdown`
    /// closes, dropping hooks still pending.
    pub fn start(&self, shutdown: &Receiver<()>) -> std::io::Result<Vec<Worker>> {
        let mut threads = Vec::with_capacity(HTTP_WORKERS + 1);
        let rx = self.timer_rx.clone();
        threads.push(worker::spawn_supervised(
            "hook-timer",
            ShutdownStage::Workers,
            shutdown.clone(),
            move |stop| run_timer(&rx, stop),
        )?);
        for i in 0..HTTP_WORKERS {
            let rx = self.http_rx.clone();
            threads.push(worker::spawn_supervised(
                &format!("hook-http-{i}"),
                ShutdownStage::Workers,
                shutdown.clone(),
                move |stop| run_http(&rx, stop),
            )?);
        }
        Ok(threads)
    }
}

/// Calls each sleep back when it is due, earliest first.
fn run_timer(rx: &Receiver<Timed>, shutdown: &Receiver<()>) {
    let mut due: BinaryHeap<Reverse<(Instant, u64)>> = BinaryHeap::new();
    let mut pending: HashMap<u64, HookDone> = HashMap::new();
    let mut seq = 0u64;
    loop {
        let now = Instant::now();
        while let Some(Reverse((at, id))) = due.peek().copied() {
            if at > now {
                break;
            }
            due.pop();
            if let Some(done) = pending.remove(&id) {
                contained("hook-timer", || done(Ok(())));
            }
        }
        let wait = due.peek().map_or(IDLE_WAIT, |Reverse((at, _))| {
            at.saturating_duration_since(now)
        });
        select! {
            recv(rx) -> msg => match msg {
                Ok(t) => {
                    seq += 1;
                    due.push(Reverse((t.at, seq)));
                    pending.insert(seq, t.done);
                }
                Err(_) => return,
            },
            recv(shutdown) -> _ => return,
            default(wait) => {}
        }
    }
}

/// Makes httpGet hook requests one at a time, each bounded by its timeout.
fn run_http(rx: &Receiver<HttpJob>, shutdown: &Receiver<()>) {
    loop {
        select! {
            recv(rx) -> msg => match msg {
                Ok(job) => {
                    let outcome = hook_get(&job.target, job.timeout);
                    let done = job.done;
                    contained("hook-http", || done(outcome));
                }
                Err(_) => return,
            },
            recv(shutdown) -> _ => return,
        }
    }
}

/// A caller's callback that panics is logged and counted; the runner
/// thread and the other hooks it holds live on.
fn contained(module: &str, f: impl FnOnce()) {
    let mut f = Some(f);
    let _ = worker::run_contained(module, &mut || {
        if let Some(f) = f.take() {
            f();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn started() -> (HandlerRunner, Sender<()>, Vec<Worker>) {
        let runner = HandlerRunner::default();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded(0);
        let threads = runner.start(&stop_rx).expect("spawn the runner");
        (runner, stop_tx, threads)
    }

    fn stop(stop_tx: Sender<()>, threads: Vec<Worker>) {
        drop(stop_tx);
        for t in threads {
            t.join().expect("runner thread ends");
        }
    }

    /// A finished hook: its label, outcome and when it finished.
    type Finished = (&'static str, Result<(), String>, Instant);

    fn recorder() -> (Sender<Finished>, Receiver<Finished>) {
        unbounded()
    }

    fn done_to(tx: &Sender<Finished>, label: &'static str) -> HookDone {
        let tx = tx.clone();
        Box::new(move |r| {
            let _ = tx.send((label, r, Instant::now()));
        })
    }

    #[test]
    fn sleeps_finish_when_due_in_deadline_order_on_one_thread() {
        let (runner, stop_tx, threads) = started();
        let (tx, rx) = recorder();
        let t0 = Instant::now();
        runner.run(
            Action::Sleep(Duration::from_millis(400)),
            done_to(&tx, "long"),
        );
        runner.run(
            Action::Sleep(Duration::from_millis(100)),
            done_to(&tx, "short"),
        );
        // Many sleeps pending at once cost no thread each.
        for _ in 0..200 {
            runner.run(Action::Sleep(Duration::from_secs(60)), Box::new(|_| {}));
        }
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("short ends");
        let second = rx.recv_timeout(Duration::from_secs(5)).expect("long ends");
        assert_eq!((first.0, second.0), ("short", "long"));
        assert!(first.1.is_ok() && second.1.is_ok());
        assert!(
            first.2 - t0 >= Duration::from_millis(100),
            "{:?}",
            first.2 - t0
        );
        assert!(
            second.2 - t0 >= Duration::from_millis(400),
            "{:?}",
            second.2 - t0
        );
        assert_eq!(threads.len(), HTTP_WORKERS + 1);
        stop(stop_tx, threads);
    }

    /// A listener that accepts and never answers.
    fn silent_server() -> (u16, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let h = std::thread::spawn(move || {
            let _held: Vec<_> = l.incoming().take(1).flatten().collect();
            std::thread::sleep(Duration::from_secs(3));
        });
        (port, h)
    }

    /// Answers one request with `status`.
    fn answering_server(status: u16) -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            if let Some(Ok(mut s)) = l.incoming().next() {
                let mut buf = [0u8; 2048];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
            }
        });
        port
    }

    fn get(port: u16, timeout: Duration) -> Action {
        Action::HttpGet {
            target: HttpTarget {
                scheme: "http".into(),
                host: "127.0.0.1".into(),
                port,
                path: "/hook".into(),
                headers: vec![],
            },
            timeout,
        }
    }

    #[test]
    fn a_hanging_http_hook_times_out_and_does_not_hold_another() {
        let (runner, stop_tx, threads) = started();
        let (tx, rx) = recorder();
        let (silent, _h) = silent_server();
        let t0 = Instant::now();
        runner.run(
            get(silent, Duration::from_millis(800)),
            done_to(&tx, "hang"),
        );
        runner.run(
            get(answering_server(200), Duration::from_secs(5)),
            done_to(&tx, "ok"),
        );
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("ok ends");
        assert_eq!(first.0, "ok");
        assert_eq!(first.1, Ok(()));
        assert!(
            first.2 - t0 < Duration::from_millis(800),
            "{:?}",
            first.2 - t0
        );
        let second = rx.recv_timeout(Duration::from_secs(5)).expect("hang ends");
        assert_eq!(second.0, "hang");
        assert!(second.1.is_err(), "a request that timed out passed");
        stop(stop_tx, threads);
    }

    /// Upstream: any answer passes, only no answer fails.
    #[test]
    fn any_status_passes_and_a_refused_connection_fails() {
        let (runner, stop_tx, threads) = started();
        let (tx, rx) = recorder();
        runner.run(
            get(answering_server(500), Duration::from_secs(5)),
            done_to(&tx, "500"),
        );
        let (_, outcome, _) = rx.recv_timeout(Duration::from_secs(5)).expect("ends");
        assert_eq!(outcome, Ok(()));
        let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = closed.local_addr().expect("addr").port();
        drop(closed);
        runner.run(get(port, Duration::from_secs(5)), done_to(&tx, "refused"));
        let (_, outcome, _) = rx.recv_timeout(Duration::from_secs(5)).expect("ends");
        assert!(outcome.is_err(), "a refused connection passed");
        stop(stop_tx, threads);
    }

    #[test]
    fn a_panicking_callback_leaves_the_runner_working() {
        let (runner, stop_tx, threads) = started();
        let (tx, rx) = recorder();
        runner.run(
            Action::Sleep(Duration::ZERO),
            Box::new(|_| panic!("callback panics")),
        );
        runner.run(
            Action::Sleep(Duration::from_millis(10)),
            done_to(&tx, "after"),
        );
        // The panic hook symbolizes a backtrace first (.ci/run sets
        // RUST_BACKTRACE), which took over 5 s while the VM suites ran.
        let (label, _, _) = rx.recv_timeout(Duration::from_secs(60)).expect("ends");
        assert_eq!(label, "after");
        stop(stop_tx, threads);
    }
}
