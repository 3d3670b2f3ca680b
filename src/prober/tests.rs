//! Scheduling (driven through [`Core`] with synthetic time) and the
//! threaded manager (fake exec, real time).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{bounded, unbounded, Receiver};
use k8s_openapi::api::core::v1::{Container, ExecAction, Pod, PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use rkubelet_util::lock;

use super::core::{Core, Done, Job, Now};
use super::handlers::Outcome;
use super::*;
use crate::events::{EventRecorder, EventType};

const SEC: Duration = Duration::from_secs(1);

fn probe(period: i32, delay: i32, failure: i32, success: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["check".into()]),
        }),
        period_seconds: Some(period),
        initial_delay_seconds: Some(delay),
        failure_threshold: Some(failure),
        success_threshold: Some(success),
        timeout_seconds: Some(1),
        ..Default::default()
    }
}

fn container(
    name: &str,
    live: Option<Probe>,
    ready: Option<Probe>,
    start: Option<Probe>,
) -> Container {
    Container {
        name: name.into(),
        liveness_probe: live,
        readiness_probe: ready,
        startup_probe: start,
        ..Default::default()
    }
}

fn pod(uid: &str, containers: Vec<Container>) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers,
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn running(name: &str, id: &str, started: SystemTime) -> ContainerInfo {
    ContainerInfo {
        name: name.into(),
        id: id.into(),
        running: true,
        started_at: Some(started),
    }
}

/// A core whose jitter window is long over.
fn core(now: Now) -> Core {
    Core::new(now.mono - Duration::from_secs(3600))
}

fn finish(core: &mut Core, job: &Job, result: ProbeResult, now: Now) {
    let done = Done {
        key: job.key.clone(),
        generation: job.generation,
        outcome: Outcome::new(result, String::new()),
    };
    core.on_result(done, now);
}

/// Runs every due probe with `result`; returns the jobs run.
fn run_due(core: &mut Core, now: Now, result: ProbeResult) -> Vec<Job> {
    let jobs = core.take_due(now);
    for job in &jobs {
        finish(core, job, result, now);
    }
    jobs
}

fn updates(core: &mut Core, kind: ProbeKind) -> Vec<ProbeResult> {
    std::mem::take(&mut core.outbox)
        .into_iter()
        .filter(|u| u.kind == kind)
        .map(|u| u.result)
        .collect()
}

#[test]
fn initial_delay_then_period() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", Some(probe(10, 5, 3, 1)), None, None)],
        ),
        t0,
    );
    c.update_pod_status("p", Some("10.0.0.1"), &[running("a", "c1", t0.wall)], t0);
    assert!(c.take_due(t0).is_empty());
    assert_eq!(c.next_deadline(), Some(t0.mono + 5 * SEC));
    assert!(c.take_due(t0.plus(4 * SEC)).is_empty());
    let jobs = run_due(&mut c, t0.plus(5 * SEC), ProbeResult::Success);
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].due, t0.mono + 5 * SEC);
    assert_eq!(c.next_deadline(), Some(t0.mono + 15 * SEC));
    assert!(c.take_due(t0.plus(14 * SEC)).is_empty());
    assert_eq!(
        run_due(&mut c, t0.plus(15 * SEC), ProbeResult::Success).len(),
        1
    );
}

#[test]
fn due_probes_come_out_in_deadline_order() {
    let t0 = Now::real();
    let mut c = core(t0);
    for (uid, delay) in [("p3", 3), ("p1", 1), ("p2", 2)] {
        c.add_pod(
            &pod(
                uid,
                vec![container("a", Some(probe(10, delay, 3, 1)), None, None)],
            ),
            t0,
        );
        c.update_pod_status(uid, None, &[running("a", uid, t0.wall)], t0);
    }
    let jobs = c.take_due(t0.plus(3 * SEC));
    let order: Vec<&str> = jobs.iter().map(|j| j.key.pod_uid.as_str()).collect();
    assert_eq!(order, ["p1", "p2", "p3"]);
}

#[test]
fn liveness_fails_after_threshold_then_holds_until_new_container() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", Some(probe(1, 0, 3, 1)), None, None)],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    assert_eq!(updates(&mut c, ProbeKind::Liveness), [ProbeResult::Success]);
    for i in 0..2 {
        assert_eq!(
            run_due(&mut c, t0.plus(i * SEC), ProbeResult::Failure).len(),
            1
        );
    }
    assert!(updates(&mut c, ProbeKind::Liveness).is_empty());
    assert!(!c.liveness_failed("c1"));
    run_due(&mut c, t0.plus(2 * SEC), ProbeResult::Failure);
    assert_eq!(updates(&mut c, ProbeKind::Liveness), [ProbeResult::Failure]);
    assert!(c.liveness_failed("c1"));
    // On hold: ticks keep coming but run nothing.
    assert!(c.take_due(t0.plus(5 * SEC)).is_empty());

    // The restarted container is probed afresh.
    let t1 = t0.plus(6 * SEC);
    c.update_pod_status("p", None, &[running("a", "c2", t1.wall)], t1);
    assert!(!c.liveness_failed("c2"));
    assert!(
        !c.liveness_failed("c1"),
        "the old container's result is dropped"
    );
    assert_eq!(run_due(&mut c, t1, ProbeResult::Failure).len(), 1);
    assert!(!c.liveness_failed("c2"), "counters were reset");
}

#[test]
fn readiness_needs_success_threshold_and_failure_threshold() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", None, Some(probe(1, 0, 2, 2)), None)],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    assert!(!c.is_ready("p", "a"));
    run_due(&mut c, t0, ProbeResult::Success);
    assert!(!c.is_ready("p", "a"));
    run_due(&mut c, t0.plus(SEC), ProbeResult::Success);
    assert!(c.is_ready("p", "a"));
    run_due(&mut c, t0.plus(2 * SEC), ProbeResult::Failure);
    assert!(c.is_ready("p", "a"));
    run_due(&mut c, t0.plus(3 * SEC), ProbeResult::Failure);
    assert!(!c.is_ready("p", "a"));
    assert_eq!(
        updates(&mut c, ProbeKind::Readiness),
        [
            ProbeResult::Failure,
            ProbeResult::Success,
            ProbeResult::Failure
        ]
    );
}

#[test]
fn startup_gates_liveness_and_readiness() {
    let t0 = Now::real();
    let mut c = core(t0);
    let p = probe(1, 0, 3, 1);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", Some(p.clone()), Some(p.clone()), Some(p))],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    assert!(!c.is_started("p", "a"));
    let jobs = c.take_due(t0);
    let kinds: Vec<ProbeKind> = jobs.iter().map(|j| j.key.kind).collect();
    assert_eq!(kinds, [ProbeKind::Startup]);
    finish(&mut c, &jobs[0], ProbeResult::Success, t0);
    assert!(c.is_started("p", "a"));
    assert!(!c.is_ready("p", "a"));
    // Startup success triggers the others at once; startup stops.
    let mut kinds: Vec<ProbeKind> = run_due(&mut c, t0, ProbeResult::Success)
        .iter()
        .map(|j| j.key.kind)
        .collect();
    kinds.sort();
    assert_eq!(kinds, [ProbeKind::Liveness, ProbeKind::Readiness]);
    assert!(c.is_ready("p", "a"));
    let later: Vec<ProbeKind> = c
        .take_due(t0.plus(SEC))
        .iter()
        .map(|j| j.key.kind)
        .collect();
    assert!(!later.contains(&ProbeKind::Startup));
}

#[test]
fn startup_failure_is_final_for_the_container() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", None, None, Some(probe(1, 0, 1, 1)))],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    run_due(&mut c, t0, ProbeResult::Failure);
    assert_eq!(
        updates(&mut c, ProbeKind::Startup),
        [ProbeResult::Unknown, ProbeResult::Failure]
    );
    assert!(c.take_due(t0.plus(3 * SEC)).is_empty());
}

#[test]
fn new_container_resets_counters_drops_stale_results_and_restarts_delay() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", Some(probe(1, 5, 2, 1)), None, None)],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    let t5 = t0.plus(5 * SEC);
    run_due(&mut c, t5, ProbeResult::Failure); // one failure counted
    let stale = c.take_due(t5.plus(SEC));
    assert_eq!(stale.len(), 1);
    // A new container while a check of the old one is in flight.
    let t7 = t0.plus(7 * SEC);
    c.update_pod_status("p", None, &[running("a", "c2", t7.wall)], t7);
    finish(&mut c, &stale[0], ProbeResult::Failure, t7);
    assert!(!c.liveness_failed("c2"), "a stale result does not count");
    assert!(
        c.take_due(t0.plus(11 * SEC)).is_empty(),
        "initial delay from the new start"
    );
    run_due(&mut c, t0.plus(12 * SEC), ProbeResult::Failure);
    assert!(!c.liveness_failed("c2"), "one failure of two");
    run_due(&mut c, t0.plus(13 * SEC), ProbeResult::Failure);
    assert!(c.liveness_failed("c2"));
}

#[test]
fn a_tick_with_the_check_in_flight_is_skipped() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", Some(probe(1, 0, 3, 1)), None, None)],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    let jobs = c.take_due(t0);
    assert_eq!(jobs.len(), 1);
    assert!(c.take_due(t0.plus(SEC)).is_empty());
    assert!(c.take_due(t0.plus(2 * SEC)).is_empty());
    finish(&mut c, &jobs[0], ProbeResult::Success, t0.plus(2 * SEC));
    assert_eq!(c.take_due(t0.plus(3 * SEC)).len(), 1);
}

#[test]
fn stopped_container_is_not_probed_and_not_ready() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(
        &pod(
            "p",
            vec![container("a", None, Some(probe(1, 0, 3, 1)), None)],
        ),
        t0,
    );
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    run_due(&mut c, t0, ProbeResult::Success);
    assert!(c.is_ready("p", "a"));
    let mut stopped = running("a", "c1", t0.wall);
    stopped.running = false;
    c.update_pod_status("p", None, &[stopped], t0.plus(SEC));
    assert!(!c.is_ready("p", "a"));
    assert!(c.take_due(t0.plus(2 * SEC)).is_empty());
}

#[test]
fn containers_without_probes_are_ready_and_started_when_running() {
    let t0 = Now::real();
    let mut c = core(t0);
    c.add_pod(&pod("p", vec![container("a", None, None, None)]), t0);
    assert!(!c.is_ready("p", "a"), "no status yet");
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    assert!(c.is_ready("p", "a") && c.is_started("p", "a"));
}

#[test]
fn deleting_pod_quiets_liveness() {
    let t0 = Now::real();
    let mut c = core(t0);
    let mut p = pod(
        "p",
        vec![container("a", Some(probe(1, 0, 1, 1)), None, None)],
    );
    c.add_pod(&p, t0);
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    Arc::make_mut(&mut p).metadata.deletion_timestamp = Some(Time(Default::default()));
    c.add_pod(&p, t0);
    assert!(c.take_due(t0).is_empty());
    assert!(!c.liveness_failed("c1"));
}

#[test]
fn a_refreshed_pod_replaces_the_kept_one() {
    let t0 = Now::real();
    let mut c = core(t0);
    let probed = pod(
        "p",
        vec![container("a", Some(probe(1, 0, 1, 1)), None, None)],
    );
    c.add_pod(&probed, t0);
    c.update_pod_status("p", None, &[running("a", "c1", t0.wall)], t0);
    // The kubelet's Update of the same pod, now being deleted: the probes
    // see it, and the older object is no longer held.
    let mut newer = (*probed).clone();
    newer.metadata.deletion_timestamp = Some(Time(Default::default()));
    let newer = Arc::new(newer);
    c.refresh_pod(&newer);
    assert_eq!(Arc::strong_count(&probed), 1);
    assert_eq!(Arc::strong_count(&newer), 2);
    assert!(c.take_due(t0).is_empty());
    assert!(!c.liveness_failed("c1"));

    // A pod without probes is not kept at all, nor after a refresh.
    let plain = pod("q", vec![container("a", None, None, None)]);
    c.add_pod(&plain, t0);
    c.refresh_pod(&plain);
    assert_eq!(Arc::strong_count(&plain), 1);
}

#[test]
fn remove_pod_leaves_nothing_scheduled() {
    let t0 = Now::real();
    let mut c = core(t0);
    let p = probe(1, 0, 3, 1);
    for uid in ["p1", "p2"] {
        let ctr = container("a", Some(p.clone()), Some(p.clone()), Some(p.clone()));
        c.add_pod(&pod(uid, vec![ctr]), t0);
        c.update_pod_status(uid, None, &[running("a", uid, t0.wall)], t0);
    }
    let in_flight = c.take_due(t0);
    assert_eq!(in_flight.len(), 2);
    c.remove_pod("p1");
    assert_eq!(c.scheduled(), 3);
    c.remove_pod("p2");
    assert_eq!(
        (c.scheduled(), c.probe_count(), c.result_count()),
        (0, 0, 0)
    );
    assert_eq!(c.next_deadline(), None);
    c.outbox.clear();
    for job in &in_flight {
        finish(&mut c, job, ProbeResult::Failure, t0); // late results are dropped
    }
    assert!(c.outbox.is_empty() && c.take_due(t0.plus(10 * SEC)).is_empty());
}

#[test]
fn young_manager_spreads_first_runs_over_a_period() {
    let t0 = Now::real();
    let mut c = Core::new(t0.mono);
    for i in 0..20 {
        let uid = format!("p{i}");
        c.add_pod(
            &pod(
                &uid,
                vec![container("a", Some(probe(10, 0, 3, 1)), None, None)],
            ),
            t0,
        );
        c.update_pod_status(&uid, None, &[running("a", &uid, t0.wall)], t0);
    }
    let first = c.take_due(t0).len();
    assert!(first < 5, "{first} of 20 ran at once");
    assert_eq!(c.take_due(t0.plus(10 * SEC)).len(), 20 - first);
}

// ---- the threaded manager ----

/// Serialises the tests that start a manager, so thread counts are theirs.
static MANAGER_TESTS: Mutex<()> = Mutex::new(());

/// Exec: "hang-*" containers time out after the timeout, "bad-*" exit 1,
/// others succeed at once.
fn deadline_exceeded() -> CriError {
    CriError {
        method: "ExecSync",
        code: Some(grpcio::RpcStatusCode::DEADLINE_EXCEEDED),
        message: "Deadline Exceeded".into(),
    }
}

#[derive(Default)]
struct FakeExec {
    calls: AtomicUsize,
}

impl ContainerExec for FakeExec {
    fn exec_sync(&self, id: &str, _: &[String], timeout: Duration) -> Result<ExecReply, CriError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if id.starts_with("hang") {
            thread::sleep(timeout);
            return Err(deadline_exceeded());
        }
        let code = i32::from(id.starts_with("bad"));
        Ok((code, b"boom".to_vec(), vec![]))
    }

    /// "async-hang-*" containers time out on another thread, as the CRI
    /// client's completion queue would; the rest reply here.
    fn exec_async(&self, id: &str, cmd: &[String], timeout: Duration, done: ExecDone) {
        if !id.starts_with("async-hang") {
            return done(self.exec_sync(id, cmd, timeout));
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        thread::spawn(move || {
            thread::sleep(timeout);
            done(Err(deadline_exceeded()));
        });
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<(String, String, String)>>);

impl EventRecorder for Events {
    fn pod_event(&self, _: &Pod, _: EventType, reason: &str, message: &str) {
        self.pod_container_event(&Pod::default(), "", EventType::Warning, reason, message);
    }

    fn pod_container_event(&self, _: &Pod, c: &str, _: EventType, reason: &str, message: &str) {
        let mut ev = lock(&self.0);
        ev.push((c.to_string(), reason.to_string(), message.to_string()));
    }
}

struct Running {
    manager: Arc<ProberManager>,
    exec: Arc<FakeExec>,
    events: Arc<Events>,
    updates: Receiver<ResultUpdate>,
    stop: Option<crossbeam_channel::Sender<()>>,
    handles: Vec<crate::util::worker::Worker>,
}

impl Running {
    fn start(workers: usize) -> Self {
        let exec = Arc::new(FakeExec::default());
        let events = Arc::new(Events::default());
        let (tx, updates) = unbounded();
        let manager = ProberManager::new(exec.clone(), events.clone(), tx, workers);
        let (stop, shutdown) = bounded(1);
        let handles = manager.start(shutdown).expect("start");
        Running {
            manager,
            exec,
            events,
            updates,
            stop: Some(stop),
            handles,
        }
    }

    fn add(&self, uid: &str, ctr: Container, id: &str) {
        let name = ctr.name.clone();
        self.manager.add_pod(&pod(uid, vec![ctr]));
        let info = running(&name, id, SystemTime::now());
        self.manager
            .update_pod_status(uid, Some("10.0.0.1"), &[info]);
    }

    fn stop(mut self) {
        drop(self.stop.take());
        for h in self.handles.drain(..) {
            h.join().expect("join");
        }
    }
}

fn probe_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "prober" || name.starts_with("probe-worker-"))
        .count()
}

fn process_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

#[test]
fn manager_reports_liveness_failure_with_event() {
    let _serial = lock(&MANAGER_TESTS);
    let r = Running::start(2);
    r.add(
        "p",
        container("app", Some(probe(1, 0, 1, 1)), None, None),
        "bad-1",
    );
    let deadline = Instant::now() + 5 * SEC;
    let failed = loop {
        match r.updates.recv_deadline(deadline) {
            Ok(u) if u.kind == ProbeKind::Liveness && u.result == ProbeResult::Failure => break u,
            Ok(_) => continue,
            Err(e) => panic!("no liveness failure: {e}"),
        }
    };
    assert_eq!(
        (failed.pod_uid.as_str(), failed.container_id.as_str()),
        ("p", "bad-1")
    );
    assert_eq!(failed.container_name, "app");
    assert!(r.manager.liveness_failed("bad-1"));
    let events = lock(&r.events.0).clone();
    assert!(events.contains(&(
        "app".to_string(),
        "Unhealthy".to_string(),
        "Liveness probe failed: boom".to_string()
    )));
    r.stop();
}

#[test]
fn hung_checks_fail_by_timeout_without_blocking_others() {
    let _serial = lock(&MANAGER_TESTS);
    let r = Running::start(4);
    for i in 0..2 {
        let ctr = container("app", Some(probe(1, 0, 1, 1)), None, None);
        r.add(&format!("h{i}"), ctr, &format!("hang-{i}"));
    }
    for i in 0..20 {
        let ctr = container("app", None, Some(probe(1, 0, 3, 1)), None);
        r.add(&format!("f{i}"), ctr, &format!("fast-{i}"));
    }
    thread::sleep(Duration::from_millis(4500));
    for i in 0..20 {
        assert!(r.manager.is_ready(&format!("f{i}"), "app"));
    }
    for i in 0..2 {
        assert!(r.manager.liveness_failed(&format!("hang-{i}")));
    }
    let events = lock(&r.events.0).clone();
    assert!(events
        .iter()
        .any(|(_, _, m)| m == "Liveness probe failed: command \"check\" timed out"));
    let lags = lock(&r.manager.lags).clone();
    let worst = lags.iter().max().copied().unwrap_or_default();
    assert!(
        worst < Duration::from_millis(500),
        "worst start delay {worst:?}"
    );
    r.stop();
}

/// Exec checks that run to their timeout hold no pool worker: with a
/// single worker, three hanging liveness checks do not delay twenty fast
/// readiness checks.
#[test]
fn slow_exec_checks_hold_no_worker() {
    let _serial = lock(&MANAGER_TESTS);
    let r = Running::start(1);
    for i in 0..3 {
        let ctr = container("app", Some(probe(1, 0, 1, 1)), None, None);
        r.add(&format!("s{i}"), ctr, &format!("async-hang-{i}"));
    }
    for i in 0..20 {
        let ctr = container("app", None, Some(probe(1, 0, 3, 1)), None);
        r.add(&format!("f{i}"), ctr, &format!("fast-{i}"));
    }
    thread::sleep(Duration::from_millis(3500));
    for i in 0..20 {
        assert!(
            r.manager.is_ready(&format!("f{i}"), "app"),
            "f{i} not ready"
        );
    }
    for i in 0..3 {
        assert!(r.manager.liveness_failed(&format!("async-hang-{i}")));
    }
    let lags = lock(&r.manager.lags).clone();
    let worst = lags.iter().max().copied().unwrap_or_default();
    assert!(
        worst < Duration::from_millis(300),
        "one worker, slow exec checks: worst start delay {worst:?}"
    );
    r.stop();
}

/// 110 pods × 3 probes with period 1 s on a pool of 4: the threads are the
/// pool plus the scheduler, and every probe keeps being checked.
#[test]
fn many_probes_few_threads_and_low_jitter() {
    let _serial = lock(&MANAGER_TESTS);
    let before = (process_threads(), probe_threads());
    let r = Running::start(4);
    let p = probe(1, 0, 3, 1);
    for i in 0..110 {
        let ctr = container("app", Some(p.clone()), Some(p.clone()), Some(p.clone()));
        r.add(&format!("pod-{i}"), ctr, &format!("c-{i}"));
    }
    thread::sleep(Duration::from_secs(10));
    let during = (process_threads(), probe_threads());
    let calls = r.exec.calls.load(Ordering::Relaxed);
    let mut lags = lock(&r.manager.lags).clone();
    r.stop();

    assert_eq!(
        during.1 - before.1,
        5,
        "probe threads: pool of 4 + scheduler"
    );
    lags.sort();
    let pct = |p: usize| lags[(lags.len() * p / 100).min(lags.len() - 1)];
    eprintln!(
        "330 probes, 10 s: {calls} checks, process threads {} -> {}, start delay p50 {:?} p99 {:?} max {:?}",
        before.0,
        during.0,
        pct(50),
        pct(99),
        lags.last().copied().unwrap_or_default()
    );
    // Startup runs once, then liveness and readiness every second. The
    // start delays are printed only: timing is `make bench`'s
    // (tests/bench/probes.sh), not a test's.
    assert!(calls > 110 * 2 * 5, "{calls} checks");
}

#[test]
fn only_a_pod_with_probes_changes_the_schedule() {
    let t0 = Now::real();
    let mut c = core(t0);
    let a = |id: &str| [running("a", id, t0.wall)];
    c.add_pod(&pod("plain", vec![container("a", None, None, None)]), t0);
    assert!(!c.update_pod_status("plain", None, &a("c1"), t0));
    assert_eq!(c.next_deadline(), None, "nothing to run for the plain pod");
    assert!(c.take_due(t0.plus(60 * SEC)).is_empty());
    // An unknown pod has no probes either.
    assert!(!c.update_pod_status("unknown", None, &a("c2"), t0));
    c.add_pod(
        &pod(
            "probed",
            vec![container("a", Some(probe(0, 5, 3, 1)), None, None)],
        ),
        t0,
    );
    assert!(c.update_pod_status("probed", None, &a("c3"), t0));
    assert!(!c.take_due(t0.plus(5 * SEC)).is_empty());
}
