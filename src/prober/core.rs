//! The prober's state, without threads: every probe, the deadline queue, the
//! results cache and the updates waiting to be sent. The scheduler thread
//! drives it; time is passed in, so tests drive it too.
//!
//! Per probe this follows upstream worker.doProbe: a probe ticks every
//! period from its first run; a tick does nothing until the container has an
//! ID, runs, is past its initial delay and (for liveness and readiness) has
//! started; thresholds turn runs of results into a verdict; a liveness
//! failure or a startup verdict holds the probe until the next container.

use std::cmp::Reverse;
use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{Container, Pod, Probe as ApiProbe};

use super::handlers::Outcome;
use super::results::Results;
use super::spec::{Check, ProbeSpec};
use super::{ContainerInfo, ProbeKind, ProbeResult, ResultUpdate};
use crate::podutil::PodExt;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ProbeKey {
    pub pod_uid: String,
    pub container: String,
    pub kind: ProbeKind,
}

impl ProbeKey {
    fn new(pod_uid: &str, container: &str, kind: ProbeKind) -> Self {
        ProbeKey {
            pod_uid: pod_uid.to_string(),
            container: container.to_string(),
            kind,
        }
    }

    fn with_kind(&self, kind: ProbeKind) -> Self {
        ProbeKey {
            kind,
            ..self.clone()
        }
    }
}

/// Both clocks: the monotonic one schedules, the wall one compares with
/// container start times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    pub mono: Instant,
    pub wall: SystemTime,
}

impl Now {
    pub fn real() -> Self {
        Now {
            mono: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    #[cfg(test)]
    pub fn plus(self, d: Duration) -> Self {
        Now {
            mono: self.mono + d,
            wall: self.wall + d,
        }
    }
}

/// A deadline queue entry; stale (and skipped) unless `due` is still the
/// probe's `next_due`.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    due: Instant,
    seq: u64,
    key: ProbeKey,
}

struct Probe {
    spec: ProbeSpec,
    /// The container instance probed; empty until one exists.
    container_id: String,
    started_at: SystemTime,
    /// Bumped for each new container, so late results are dropped.
    generation: u64,
    last: ProbeResult,
    run: u32,
    on_hold: bool,
    in_flight: bool,
    next_due: Option<Instant>,
    /// End of the start-up jitter: no run before it.
    not_before: Instant,
}

impl Probe {
    fn reset(&mut self, container_id: &str, started_at: SystemTime) {
        self.container_id = container_id.to_string();
        self.started_at = started_at;
        self.generation += 1;
        self.last = ProbeResult::Unknown;
        self.run = 0;
        self.on_hold = false;
    }

    /// Time left of initialDelaySeconds since the container started.
    fn delay_left(&self, now: Now) -> Duration {
        (self.started_at + self.spec.initial_delay)
            .duration_since(now.wall)
            .unwrap_or_default()
    }

    fn first_due(&self, now: Now) -> Instant {
        self.not_before.max(now.mono + self.delay_left(now))
    }

    /// Could run right now, as far as this probe alone knows.
    fn runnable(&self, now: Now) -> bool {
        !self.in_flight
            && !self.on_hold
            && !self.container_id.is_empty()
            && now.mono >= self.not_before
            && self.delay_left(now).is_zero()
    }
}

#[derive(Default)]
struct PodEntry {
    pod: Option<Arc<Pod>>,
    pod_ip: Option<String>,
    containers: HashMap<String, ContainerInfo>,
    keys: Vec<ProbeKey>,
}

/// A due check, for a worker.
pub(crate) struct Job {
    pub key: ProbeKey,
    pub generation: u64,
    pub container_id: String,
    pub check: Check,
    pub timeout: Duration,
    /// When it was scheduled to start (tests measure the lag).
    #[cfg(test)]
    pub due: Instant,
    pub pod: Arc<Pod>,
}

/// A finished check, for the scheduler.
pub(crate) struct Done {
    pub key: ProbeKey,
    pub generation: u64,
    pub outcome: Outcome,
}

pub(crate) struct Core {
    /// The manager's start: probes registered within one period of it get a
    /// random first delay (upstream, against a burst after a restart).
    start: Instant,
    pods: HashMap<String, PodEntry>,
    /// Boxed: a Probe is hundreds of bytes and the table keeps spare slots.
    probes: HashMap<ProbeKey, Box<Probe>>,
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
    results: Results,
    /// Result changes not sent yet.
    pub outbox: Vec<ResultUpdate>,
}

impl Core {
    pub fn new(start: Instant) -> Self {
        Core {
            start,
            pods: HashMap::new(),
            probes: HashMap::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            results: Results::default(),
            outbox: Vec::new(),
        }
    }

    /// Registers the pod's probes not registered yet (upstream AddPod), and
    /// keeps the newest pod object, which the probes read (named ports,
    /// deletion). A pod without probes is not kept: the pod manager has it.
    pub fn add_pod(&mut self, pod: &Arc<Pod>, now: Now) {
        let uid = pod.uid().to_string();
        if uid.is_empty() {
            return;
        }
        let pod = Arc::clone(pod);
        let mut added = Vec::new();
        for c in probed_containers(&pod) {
            for kind in ProbeKind::ALL {
                let Some(api) = probe_of(c, kind) else {
                    continue;
                };
                let key = ProbeKey::new(&uid, &c.name, kind);
                if !self.probes.contains_key(&key) {
                    let probe = self.new_probe(ProbeSpec::new(api, kind), now);
                    self.probes.insert(key.clone(), probe);
                    added.push(key);
                }
            }
        }
        let entry = self.pods.entry(uid).or_default();
        entry.keys.extend(added.iter().cloned());
        entry.pod = (!entry.keys.is_empty()).then_some(pod);
        for key in added {
            let not_before = self.probes.get(&key).map(|p| p.not_before);
            if let Some(at) = not_before {
                self.schedule(&key, at);
            }
            let info = self.container_info(&key).cloned();
            if let Some(info) = info {
                self.apply_container(&key, &info, now);
            }
        }
    }

    fn new_probe(&self, spec: ProbeSpec, now: Now) -> Box<Probe> {
        let not_before = now.mono + self.jitter(spec.period, now.mono);
        Box::new(Probe {
            spec,
            container_id: String::new(),
            started_at: now.wall,
            generation: 0,
            last: ProbeResult::Unknown,
            run: 0,
            on_hold: false,
            in_flight: false,
            next_due: None,
            not_before,
        })
    }

    /// A random part of `period` while the manager is younger than it.
    fn jitter(&self, period: Duration, now: Instant) -> Duration {
        if now.saturating_duration_since(self.start) >= period {
            return Duration::ZERO;
        }
        let random = RandomState::new().build_hasher().finish();
        period.mul_f64((random >> 11) as f64 / (1u64 << 53) as f64)
    }

    /// A newer object of a pod already added (a status or metadata change):
    /// kept in place of the older one, so that the probes see its deletion
    /// and the older copy is freed now.
    pub fn refresh_pod(&mut self, pod: &Arc<Pod>) {
        if let Some(kept) = self.pods.get_mut(pod.uid()).and_then(|e| e.pod.as_mut()) {
            *kept = Arc::clone(pod);
        }
    }

    /// Drops the pod's probes, results and queue entries (upstream RemovePod).
    pub fn remove_pod(&mut self, uid: &str) {
        let Some(entry) = self.pods.remove(uid) else {
            return;
        };
        for key in entry.keys {
            if let Some(p) = self.probes.remove(&key) {
                if !p.container_id.is_empty() {
                    self.results.remove(key.kind, &p.container_id);
                }
            }
        }
        self.heap.retain(|Reverse(e)| e.key.pod_uid != uid);
    }

    /// Records the containers' state; a new container ID starts its probes
    /// afresh, and a readiness probe not passing yet is run now (upstream
    /// UpdatePodStatus's manual trigger). Returns whether the pod has a
    /// probe on any of these containers: without one, nothing the
    /// scheduler does changed.
    pub fn update_pod_status(
        &mut self,
        uid: &str,
        pod_ip: Option<&str>,
        containers: &[ContainerInfo],
        now: Now,
    ) -> bool {
        let entry = self.pods.entry(uid.to_string()).or_default();
        entry.pod_ip = pod_ip.map(str::to_string);
        entry.containers = containers
            .iter()
            .map(|c| (c.name.clone(), c.clone()))
            .collect();
        let work: Vec<(ProbeKey, ContainerInfo)> = entry
            .keys
            .iter()
            .filter_map(|k| {
                entry
                    .containers
                    .get(&k.container)
                    .map(|c| (k.clone(), c.clone()))
            })
            .collect();
        let probed = !work.is_empty();
        for (key, info) in work {
            self.apply_container(&key, &info, now);
            if key.kind == ProbeKind::Readiness {
                self.trigger_readiness(&key, &info, now);
            }
        }
        probed
    }

    fn apply_container(&mut self, key: &ProbeKey, info: &ContainerInfo, now: Now) {
        let Some(probe) = self.probes.get_mut(key) else {
            return;
        };
        if probe.container_id != info.id {
            let old = probe.container_id.clone();
            probe.reset(&info.id, info.started_at.unwrap_or(now.wall));
            let first = probe.first_due(now);
            if !old.is_empty() {
                self.results.remove(key.kind, &old);
            }
            if !info.id.is_empty() {
                self.set_result(key, &info.id, key.kind.initial_result());
                self.schedule(key, first);
            }
        }
        if !info.running && !info.id.is_empty() {
            self.not_running(key, &info.id);
        }
    }

    /// A stopped container is not ready (upstream sets Failure for every
    /// kind; liveness and startup are left alone here, as a stopped
    /// container is neither started nor a restart candidate).
    fn not_running(&mut self, key: &ProbeKey, container_id: &str) {
        if key.kind == ProbeKind::Readiness {
            self.set_result(key, container_id, ProbeResult::Failure);
        }
    }

    fn trigger_readiness(&mut self, key: &ProbeKey, info: &ContainerInfo, now: Now) {
        let passing = self.results.get(key.kind, &info.id) == Some(ProbeResult::Success);
        if info.running && !passing && self.started(key, &info.id) {
            self.trigger(key, now);
        }
    }

    /// Runs the probe now if it could run.
    fn trigger(&mut self, key: &ProbeKey, now: Now) {
        let due_later = self
            .probes
            .get(key)
            .is_some_and(|p| p.runnable(now) && p.next_due.is_none_or(|d| d > now.mono));
        if due_later {
            self.schedule(key, now.mono);
        }
    }

    /// Whether the container of `key` has started: its startup probe has
    /// succeeded, or it has none.
    fn started(&self, key: &ProbeKey, container_id: &str) -> bool {
        let startup = key.with_kind(ProbeKind::Startup);
        !self.probes.contains_key(&startup)
            || self.results.get(ProbeKind::Startup, container_id) == Some(ProbeResult::Success)
    }

    fn container_info(&self, key: &ProbeKey) -> Option<&ContainerInfo> {
        self.pods.get(&key.pod_uid)?.containers.get(&key.container)
    }

    fn set_result(&mut self, key: &ProbeKey, container_id: &str, result: ProbeResult) {
        if self.results.set(key.kind, container_id, result) {
            self.outbox.push(ResultUpdate {
                pod_uid: key.pod_uid.clone(),
                container_id: container_id.to_string(),
                container_name: key.container.clone(),
                kind: key.kind,
                result,
            });
        }
    }

    fn schedule(&mut self, key: &ProbeKey, due: Instant) {
        let Some(probe) = self.probes.get_mut(key) else {
            return;
        };
        probe.next_due = Some(due);
        self.seq += 1;
        self.heap.push(Reverse(Entry {
            due,
            seq: self.seq,
            key: key.clone(),
        }));
    }

    fn is_current(&self, e: &Entry) -> bool {
        self.probes
            .get(&e.key)
            .is_some_and(|p| p.next_due == Some(e.due))
    }

    /// When the earliest probe is due; stale entries are dropped on the way.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(Reverse(top)) = self.heap.peek() {
            if self.is_current(top) {
                return Some(top.due);
            }
            self.heap.pop();
        }
        None
    }

    /// Pops every probe due by `now`, schedules its next tick, and returns
    /// the checks to run, earliest first.
    pub fn take_due(&mut self, now: Now) -> Vec<Job> {
        let mut jobs = Vec::new();
        while self.heap.peek().is_some_and(|Reverse(e)| e.due <= now.mono) {
            let Some(Reverse(entry)) = self.heap.pop() else {
                break;
            };
            let Some(period) = self
                .is_current(&entry)
                .then(|| self.probes.get(&entry.key).map(|p| p.spec.period))
                .flatten()
            else {
                continue;
            };
            self.schedule(&entry.key, next_tick(entry.due, period, now.mono));
            if let Some(job) = self.prepare(&entry.key, entry.due, now) {
                jobs.push(job);
            }
        }
        jobs
    }

    /// The checks before a run (upstream doProbe); a job when it should run.
    fn prepare(&mut self, key: &ProbeKey, due: Instant, now: Now) -> Option<Job> {
        let entry = self.pods.get(&key.pod_uid)?;
        let pod = entry.pod.clone()?;
        let pod_ip = entry.pod_ip.clone();
        let info = entry.containers.get(&key.container)?.clone();
        let probe = self.probes.get(key)?;
        if info.id.is_empty() || info.id != probe.container_id || probe.on_hold || probe.in_flight {
            return None;
        }
        if !info.running {
            self.not_running(key, &info.id);
            return None;
        }
        if pod.is_being_deleted() && key.kind != ProbeKind::Readiness {
            // Quiet shutdown: the container is going away anyway.
            self.hold(key);
            self.set_result(key, &info.id, ProbeResult::Success);
            return None;
        }
        if !probe.delay_left(now).is_zero() {
            return None;
        }
        // Startup probes stop once started; the others wait for it.
        if (key.kind == ProbeKind::Startup) == self.started(key, &info.id) {
            return None;
        }
        // The pod's current spec (shared, not copied per probe) resolves
        // named ports.
        let container = probed_containers(&pod).find(|c| c.name == key.container)?;
        let check = Check::new(&probe.spec.action, container, pod_ip.as_deref());
        let probe = self.probes.get_mut(key)?;
        probe.in_flight = true;
        #[cfg(not(test))]
        let _ = due;
        Some(Job {
            key: key.clone(),
            generation: probe.generation,
            container_id: info.id,
            check,
            timeout: probe.spec.timeout,
            #[cfg(test)]
            due,
            pod,
        })
    }

    fn hold(&mut self, key: &ProbeKey) {
        if let Some(p) = self.probes.get_mut(key) {
            p.on_hold = true;
            p.run = 0;
        }
    }

    /// Applies a finished check: thresholds, the cached result, holds.
    pub fn on_result(&mut self, done: Done, now: Now) {
        let Some(probe) = self.probes.get_mut(&done.key) else {
            return;
        };
        probe.in_flight = false;
        let result = done.outcome.result;
        // Stale, held, or a probe error: the result is thrown away.
        if done.generation != probe.generation || probe.on_hold || result == ProbeResult::Unknown {
            return;
        }
        if probe.last == result {
            probe.run += 1;
        } else {
            probe.last = result;
            probe.run = 1;
        }
        let threshold = match result {
            ProbeResult::Failure => probe.spec.failure_threshold,
            _ => probe.spec.success_threshold,
        };
        if probe.run < threshold {
            return;
        }
        let key = done.key;
        let container_id = probe.container_id.clone();
        // A failed container will be restarted, and a startup verdict is
        // final: probe again only the next container.
        if (key.kind == ProbeKind::Liveness && result == ProbeResult::Failure)
            || key.kind == ProbeKind::Startup
        {
            self.hold(&key);
        }
        self.set_result(&key, &container_id, result);
        if key.kind == ProbeKind::Startup && result == ProbeResult::Success {
            self.trigger(&key.with_kind(ProbeKind::Readiness), now);
            self.trigger(&key.with_kind(ProbeKind::Liveness), now);
        }
    }

    /// Ready: running, started, and its readiness probe passed or it has none.
    pub fn is_ready(&self, uid: &str, container: &str) -> bool {
        let key = ProbeKey::new(uid, container, ProbeKind::Readiness);
        let Some(info) = self.container_info(&key).filter(|i| i.running) else {
            return false;
        };
        if !self.started(&key, &info.id) {
            return false;
        }
        self.results.get(ProbeKind::Readiness, &info.id) == Some(ProbeResult::Success)
            || !self.probes.contains_key(&key)
    }

    /// Started: running, and its startup probe passed or it has none.
    pub fn is_started(&self, uid: &str, container: &str) -> bool {
        let key = ProbeKey::new(uid, container, ProbeKind::Startup);
        self.container_info(&key)
            .filter(|i| i.running)
            .is_some_and(|i| self.started(&key, &i.id))
    }

    #[cfg(test)]
    pub fn liveness_failed(&self, container_id: &str) -> bool {
        self.results.get(ProbeKind::Liveness, container_id) == Some(ProbeResult::Failure)
    }

    /// Live queue entries (tests: nothing stays scheduled for removed pods).
    #[cfg(test)]
    pub fn scheduled(&self) -> usize {
        self.heap
            .iter()
            .filter(|Reverse(e)| self.is_current(e))
            .count()
    }

    #[cfg(test)]
    pub fn probe_count(&self) -> usize {
        self.probes.len()
    }

    #[cfg(test)]
    pub fn result_count(&self) -> usize {
        self.results.len()
    }
}

/// The first tick after `now` on the grid `due + k·period`: ticks missed
/// while busy are dropped, as a Go ticker does.
fn next_tick(due: Instant, period: Duration, now: Instant) -> Instant {
    let behind = now.saturating_duration_since(due).as_nanos() / period.as_nanos().max(1);
    let ticks = u32::try_from(behind).unwrap_or(u32::MAX - 1) + 1;
    due + period * ticks
}

/// Regular containers and sidecars (restartable init containers).
fn probed_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let sidecars = pod
        .init_containers()
        .iter()
        .filter(|c| crate::podutil::is_restartable_init(c));
    pod.containers().iter().chain(sidecars)
}

fn probe_of(c: &Container, kind: ProbeKind) -> Option<&ApiProbe> {
    match kind {
        ProbeKind::Liveness => c.liveness_probe.as_ref(),
        ProbeKind::Readiness => c.readiness_probe.as_ref(),
        ProbeKind::Startup => c.startup_probe.as_ref(),
    }
}
