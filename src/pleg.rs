//! The pod lifecycle event generator (upstream `pkg/kubelet/pleg/generic.go`).
//!
//! One thread relists the runtime every period, diffs each container's
//! state against the previous relist, refreshes the status cache for pods
//! that changed and reports the changes to the sync loop.
//!
//! It also relists when a pod worker asks ([`RelistSoon`]), after a sync
//! that made a sandbox or started a container, at most once per
//! [`RELIST_SOON_MIN_GAP`]. Upstream's generic PLEG waits for its period,
//! and a started pod's Running and Ready status waits with it (up to 1 s;
//! its pod worker calls that latency a TODO). A node that starts nothing
//! is never asked, so it relists exactly as upstream.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, select, tick, Receiver, Sender, TrySendError};
use rkubelet_util::lock;

use crate::container::cache::Cache;
use crate::container::{ContainerState, PodSource, PodStatus, RuntimePod};

/// Upstream's plegChannelCapacity.
pub const CHANNEL_CAPACITY: usize = 1000;
pub const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// PLEG is unhealthy when no relist has completed for this long.
pub const RELIST_THRESHOLD: Duration = Duration::from_secs(180);
/// Asked-for relists begin at least this long after the last one began,
/// so a burst of starts costs the runtime a few listings, not one each.
pub const RELIST_SOON_MIN_GAP: Duration = Duration::from_millis(100);

/// A pod worker's way to ask PLEG for a relist before its period ends.
/// Asks coalesce and never block: one pending ask is one relist, which
/// begins after the ask.
#[derive(Clone)]
pub struct RelistSoon(Sender<()>);

impl RelistSoon {
    /// The asking end and the end [`GenericPleg::start`] reads.
    pub fn channel() -> (RelistSoon, Receiver<()>) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        (RelistSoon(tx), rx)
    }

    pub fn ask(&self) {
        let _ = self.0.try_send(());
    }
}

/// Upstream's PodLifeCycleEventType names, kept so its docs map onto ours.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    ContainerStarted,
    ContainerDied,
    ContainerRemoved,
    ContainerChanged,
    /// A change no single container event captures (upstream PodSync).
    PodSync,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLifecycleEvent {
    pub pod_uid: String,
    pub kind: EventType,
    /// The container (or sandbox) ID the event is about.
    pub container_id: String,
}

/// What PLEG tracks per container or sandbox between relists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PlegState {
    Running,
    Exited,
    Unknown,
    NonExistent,
}

type Records = HashMap<String, HashMap<String, PlegState>>;

#[derive(Default)]
struct State {
    records: Records,
    /// Pods to inspect again on the next relist: their inspection failed,
    /// or an exit may yet turn out an OOM kill.
    reinspect: HashSet<String>,
    /// A relist failed since the last one that listed the pods.
    failed_since_inspection: bool,
    last_relist: Option<Instant>,
    /// The pods of the last successful relist, for housekeeping.
    pods: Arc<Vec<RuntimePod>>,
    /// When the relist that listed `pods` began.
    listed_at: Option<Instant>,
}

pub struct GenericPleg {
    runtime: Arc<dyn PodSource>,
    cache: Arc<Cache>,
    events: Sender<PodLifecycleEvent>,
    /// [`RelistSoon`]'s asks.
    asks: Receiver<()>,
    state: Mutex<State>,
}

impl GenericPleg {
    /// `asks` is the reading end of [`RelistSoon::channel`].
    pub fn new(
        runtime: Arc<dyn PodSource>,
        cache: Arc<Cache>,
        asks: Receiver<()>,
    ) -> (Arc<Self>, Receiver<PodLifecycleEvent>) {
        let (tx, rx) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        let pleg = Arc::new(GenericPleg {
            runtime,
            cache,
            events: tx,
            asks,
            state: Mutex::new(State::default()),
        });
        (pleg, rx)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Relists every RELIST_PERIOD, and when asked, until `shutdown`
    /// fires. A panicking relist is contained by the supervisor.
    pub fn start(
        self: &Arc<Self>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<crate::util::worker::Worker> {
        let pleg = Arc::clone(self);
        crate::util::worker::spawn_supervised(
            "pleg",
            crate::util::worker::ShutdownStage::Workers,
            shutdown,
            move |shutdown| pleg.run(shutdown),
        )
    }

    fn run(&self, shutdown: &Receiver<()>) {
        let asks = &self.asks;
        let ticker = tick(RELIST_PERIOD);
        loop {
            let began = Instant::now();
            self.relist();
            select! {
                recv(ticker) -> _ => {}
                recv(asks) -> _ => {
                    let gap = RELIST_SOON_MIN_GAP.saturating_sub(began.elapsed());
                    select! {
                        recv(after(gap)) -> _ => {}
                        recv(shutdown) -> _ => return,
                    }
                }
                recv(shutdown) -> _ => return,
            }
        }
    }

    /// Healthy while relists keep completing (upstream `Healthy`).
    pub fn healthy(&self) -> Result<(), String> {
        match self.state().last_relist {
            None => Ok(()), // not started yet: upstream reports healthy too
            Some(t) if t.elapsed() > RELIST_THRESHOLD => Err(format!(
                "pleg was last seen active {:.0?} ago; threshold is {:?}",
                t.elapsed(),
                RELIST_THRESHOLD
            )),
            Some(_) => Ok(()),
        }
    }

    /// The pods seen by the last successful relist.
    pub fn running_pods(&self) -> Arc<Vec<RuntimePod>> {
        Arc::clone(&self.state().pods)
    }

    /// The pods seen by the last successful relist, and when it began:
    /// what was done to the runtime after then may not show in them.
    pub fn listed_pods(&self) -> (Arc<Vec<RuntimePod>>, Option<Instant>) {
        let st = self.state();
        (Arc::clone(&st.pods), st.listed_at)
    }

    /// The IDs of the containers running at the last successful relist.
    pub fn running_container_ids(&self) -> Vec<String> {
        crate::container::running_container_ids(&self.running_pods())
            .map(str::to_owned)
            .collect()
    }

    pub fn relist(&self) {
        let timestamp = Instant::now();
        let interval = self
            .state()
            .last_relist
            .map(|t| timestamp.duration_since(t));
        let pods = match self.runtime.get_pods() {
            Ok(p) => p,
            Err(e) => {
                log::error!("PLEG: unable to retrieve pods: {e}");
                self.state().failed_since_inspection = true;
                self.cache.mark_stale();
                return;
            }
        };
        let (old, mut reinspect, unchanged, after_failure) = {
            let mut st = self.state();
            st.last_relist = Some(Instant::now());
            (
                std::mem::take(&mut st.records),
                std::mem::take(&mut st.reinspect),
                // The runtime gives back its last snapshot when nothing
                // changed: then there is nothing to diff.
                Arc::ptr_eq(&st.pods, &pods),
                std::mem::take(&mut st.failed_since_inspection),
            )
        };
        if after_failure {
            // The runtime was unreachable (restarting): a status inspected
            // while it went down may say what it no longer holds, and a
            // listing that looks the same would keep it. Every pod is
            // inspected again.
            reinspect.extend(pods.iter().map(|p| p.uid.clone()));
        }
        let (current, events) = if unchanged {
            (old, Vec::new())
        } else {
            let current = records(&pods);
            let events = diff(&old, &current);
            record_running(&pods);
            (current, events)
        };
        let changed: HashSet<String> = events
            .iter()
            .map(|e| e.pod_uid.clone())
            .chain(reinspect.iter().cloned())
            .collect();
        let mut events = events;

        let by_uid: HashMap<&str, &RuntimePod> = pods.iter().map(|p| (p.uid.as_str(), p)).collect();
        let mut again = HashSet::new();
        for uid in &changed {
            // Not in the relist: nothing of the pod is left to inspect, so
            // its status goes, and reads as empty from this relist on
            // (upstream updateCache).
            let Some(p) = by_uid.get(uid.as_str()) else {
                self.cache.delete(uid);
                continue;
            };
            match self.runtime.get_pod_status(uid, &p.name, &p.namespace) {
                Ok(status) => {
                    if oom_may_settle(&status, SystemTime::now()) {
                        again.insert(uid.clone());
                    }
                    if reinspect.contains(uid) && self.reason_settled(uid, &status) {
                        // No container changed state, but what the runtime
                        // says of one did: the pod's status must go out.
                        events.push(PodLifecycleEvent {
                            pod_uid: uid.clone(),
                            kind: EventType::PodSync,
                            container_id: String::new(),
                        });
                    }
                    self.cache.set(uid, status, None, timestamp)
                }
                Err(e) => {
                    log::warn!("PLEG: inspect pod {uid}: {e}");
                    again.insert(uid.clone());
                    let (status, _) = self.cache.get(uid);
                    self.cache.set(uid, status, Some(e.to_string()), timestamp);
                }
            }
        }
        self.cache.update_time(timestamp);
        crate::metrics::pleg_relist(timestamp.elapsed(), interval);
        {
            let mut st = self.state();
            st.records = current;
            st.reinspect = again;
            st.pods = pods;
            st.listed_at = Some(timestamp);
        }
        for e in events
            .into_iter()
            .filter(|e| e.kind != EventType::ContainerChanged)
        {
            if let Err(TrySendError::Full(e)) = self.events.try_send(e) {
                crate::metrics::pleg_discard_events(1);
                log::error!("PLEG: event channel is full, discarding {e:?}");
            }
        }
    }
}

/// How long after a SIGKILL exit reported as `Error` the pod is inspected
/// again: the runtime's OOM event, or the OOM watcher's record of the
/// kill, arrives within it.
const OOM_SETTLE: Duration = Duration::from_secs(3);

/// A container of `status` exited by SIGKILL with `Error` less than
/// [`OOM_SETTLE`] ago, so its reason may still become `OOMKilled`.
fn oom_may_settle(status: &PodStatus, now: SystemTime) -> bool {
    status.containers.iter().any(|c| {
        c.may_be_unreported_oom_kill()
            && c.finished_at
                .and_then(|f| now.duration_since(f).ok())
                .is_some_and(|age| age < OOM_SETTLE)
    })
}

impl GenericPleg {
    /// The cached status of `uid` waited on an OOM reason, and `status`
    /// says something new of it.
    fn reason_settled(&self, uid: &str, status: &PodStatus) -> bool {
        let (cached, _) = self.cache.get(uid);
        let waited = cached
            .containers
            .iter()
            .any(|c| c.may_be_unreported_oom_kill());
        waited && cached != *status
    }
}

/// The events between two relists' records.
fn diff(old: &Records, current: &Records) -> Vec<PodLifecycleEvent> {
    let uids: HashSet<&String> = old.keys().chain(current.keys()).collect();
    uids.into_iter()
        .flat_map(|uid| pod_events(uid, old.get(uid), current.get(uid)))
        .collect()
}

/// kubelet_running_pods and kubelet_running_containers from a relist.
fn record_running(pods: &[RuntimePod]) {
    let running_pods = pods
        .iter()
        .filter(|p| p.sandboxes.iter().any(|s| s.ready))
        .count();
    let count = |st: ContainerState| {
        pods.iter()
            .flat_map(|p| &p.containers)
            .filter(|c| c.state == st)
            .count()
    };
    crate::metrics::set_running(
        running_pods,
        &[
            ("running", count(ContainerState::Running)),
            ("exited", count(ContainerState::Exited)),
            ("created", count(ContainerState::Created)),
            ("unknown", count(ContainerState::Unknown)),
        ],
    );
}

/// Sandboxes count as containers: a sandbox dying must trigger a sync too.
fn records(pods: &[RuntimePod]) -> Records {
    pods.iter()
        .map(|p| {
            let mut m: HashMap<String, PlegState> = p
                .containers
                .iter()
                .map(|c| (c.id.clone(), container_state(c.state)))
                .collect();
            for sb in &p.sandboxes {
                let s = if sb.ready {
                    PlegState::Running
                } else {
                    PlegState::Exited
                };
                m.insert(sb.id.clone(), s);
            }
            (p.uid.clone(), m)
        })
        .collect()
}

fn container_state(s: ContainerState) -> PlegState {
    match s {
        ContainerState::Running => PlegState::Running,
        ContainerState::Exited => PlegState::Exited,
        // The kubelet does not act on "created"; upstream maps it to unknown.
        ContainerState::Created | ContainerState::Unknown => PlegState::Unknown,
    }
}

fn pod_events(
    uid: &str,
    old: Option<&HashMap<String, PlegState>>,
    new: Option<&HashMap<String, PlegState>>,
) -> Vec<PodLifecycleEvent> {
    let empty = HashMap::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let ids: HashSet<&String> = old.keys().chain(new.keys()).collect();
    let mut out = Vec::new();
    for id in ids {
        let before = old.get(id).copied().unwrap_or(PlegState::NonExistent);
        let after = new.get(id).copied().unwrap_or(PlegState::NonExistent);
        for kind in generate_events(before, after) {
            out.push(PodLifecycleEvent {
                pod_uid: uid.to_string(),
                kind,
                container_id: id.clone(),
            });
        }
    }
    out
}

fn generate_events(old: PlegState, new: PlegState) -> Vec<EventType> {
    use EventType::*;
    if old == new {
        return vec![];
    }
    match new {
        PlegState::Running => vec![ContainerStarted],
        PlegState::Exited => vec![ContainerDied],
        PlegState::Unknown => vec![ContainerChanged],
        PlegState::NonExistent => match old {
            PlegState::Exited => vec![ContainerRemoved],
            _ => vec![ContainerDied, ContainerRemoved],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EventType::*;
    use PlegState::*;

    #[test]
    fn transitions() {
        assert_eq!(
            generate_events(NonExistent, Running),
            vec![ContainerStarted]
        );
        assert_eq!(generate_events(Running, Exited), vec![ContainerDied]);
        assert_eq!(
            generate_events(Running, NonExistent),
            vec![ContainerDied, ContainerRemoved]
        );
        assert_eq!(generate_events(Exited, NonExistent), vec![ContainerRemoved]);
        assert_eq!(generate_events(Unknown, Running), vec![ContainerStarted]);
        assert_eq!(
            generate_events(NonExistent, Unknown),
            vec![ContainerChanged]
        );
        assert!(generate_events(Running, Running).is_empty());
    }

    #[test]
    fn pod_level_diff() {
        let old = HashMap::from([("c1".to_string(), Running), ("c2".to_string(), Exited)]);
        let new = HashMap::from([("c1".to_string(), Exited), ("c3".to_string(), Running)]);
        let mut ev: Vec<(String, EventType)> = pod_events("u", Some(&old), Some(&new))
            .into_iter()
            .map(|e| (e.container_id, e.kind))
            .collect();
        ev.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            ev,
            vec![
                ("c1".into(), ContainerDied),
                ("c2".into(), ContainerRemoved),
                ("c3".into(), ContainerStarted)
            ]
        );
        // A pod that vanished entirely reports its containers gone.
        let gone = pod_events("u", Some(&new), None);
        assert_eq!(gone.len(), 3);
    }
}

#[cfg(test)]
#[path = "pleg_tests.rs"]
mod relist_tests;
