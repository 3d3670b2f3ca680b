//! Graceful node shutdown (upstream `pkg/kubelet/nodeshutdown`,
//! `nodeshutdown_manager_linux.go`): a delay inhibitor lock taken from
//! logind holds the shutdown back while the pods stop, lowest priority
//! group first, each within its share of `shutdownGracePeriod`; then the
//! lock is released and the machine goes down. While it runs the node is
//! NotReady ("node is shutting down") and new pods are rejected.
//!
//! One thread, `node-shutdown`, owns the bus connection; the pod stops
//! are the pod workers' async kills, so it only issues and watches them.

mod logind;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;

use crate::kubeletconfig::KubeletConfiguration;
use crate::lifecycle::admission::Rejection;
use crate::util::worker::{self, ShutdownStage, Worker};
use logind::{ConnectError, Logind};

/// The status reason and message of a pod stopped for the shutdown.
pub const NODE_SHUTDOWN_REASON: &str = "Terminated";
pub const NODE_SHUTDOWN_MESSAGE: &str = "Pod was terminated in response to imminent node shutdown.";
/// Admission's answer while the node shuts down.
pub const NODE_SHUTDOWN_NOT_ADMITTED_REASON: &str = "NodeShutdown";
pub const NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE: &str =
    "Pod was rejected as the node is shutting down.";
/// Node status's Ready error while the node shuts down.
pub const SHUTTING_DOWN_ERROR: &str = "node is shutting down";
/// upstream scheduling.SystemCriticalPriority.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// upstream dbusReconnectPeriod.
const RECONNECT_PERIOD: Duration = Duration::from_secs(1);
/// How often the thread looks at the kubelet's shutdown channel and at
/// the pods it is stopping.
const POLL: Duration = Duration::from_millis(200);

/// Pods up to `priority` get `grace` (upstream ShutdownGracePeriodByPodPriority).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    pub priority: i32,
    pub grace: Duration,
}

/// What the manager asks of the kubelet.
pub trait ShutdownDeps: Send + Sync {
    fn active_pods(&self) -> Vec<Arc<Pod>>;
    /// Stops the pod with `grace` seconds and marks it Failed/Terminated.
    fn kill_pod(&self, pod: &Arc<Pod>, grace_seconds: i64);
    fn pod_stopped(&self, pod: &Pod) -> bool;
    /// A Normal node event, reason Shutdown.
    fn node_event(&self, message: &str);
    /// Node status now, not at the next tick (upstream syncNodeStatus).
    fn sync_node_status(&self);
}

/// The node shutdown manager: its groups and whether the node is going down.
pub struct Manager {
    groups: Vec<Group>,
    shutting_down: AtomicBool,
}

impl Manager {
    /// Upstream NewManager: shutdownGracePeriodByPodPriority if set, else
    /// the two groups shutdownGracePeriod and shutdownGracePeriodCriticalPods
    /// make; none (the feature off) when the periods are zero.
    pub fn from_config(config: &KubeletConfiguration) -> Arc<Manager> {
        let mut groups: Vec<Group> = if config.shutdown_grace_period_by_pod_priority.is_empty() {
            migrate_config(
                config.shutdown_grace_period.0,
                config.shutdown_grace_period_critical_pods.0,
            )
        } else {
            config
                .shutdown_grace_period_by_pod_priority
                .iter()
                .map(|p| Group {
                    priority: p.priority,
                    grace: Duration::from_secs(
                        u64::try_from(p.shutdown_grace_period_seconds).unwrap_or(0),
                    ),
                })
                .collect()
        };
        groups.sort_by_key(|g| g.priority);
        if groups.is_empty() {
            log::info!("no graceful shutdown period configured: node shutdown will be immediate");
        } else {
            log::info!("node shutdown manager: groups {groups:?}");
        }
        Arc::new(Manager {
            groups,
            shutting_down: AtomicBool::new(false),
        })
    }

    pub fn enabled(&self) -> bool {
        !self.groups.is_empty()
    }

    /// Upstream ShutdownStatus: the node's Ready error while it shuts down.
    pub fn shutdown_status(&self) -> Option<String> {
        self.shutting_down
            .load(Ordering::SeqCst)
            .then(|| SHUTTING_DOWN_ERROR.to_string())
    }

    /// Upstream Admit: every pod is rejected while the node shuts down.
    pub fn admit(&self) -> Result<(), Rejection> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(Rejection {
                reason: NODE_SHUTDOWN_NOT_ADMITTED_REASON.into(),
                message: NODE_SHUTDOWN_NOT_ADMITTED_MESSAGE.into(),
            });
        }
        Ok(())
    }

    /// The sum of the groups' periods (upstream periodRequested).
    fn period_requested(&self) -> Duration {
        self.groups.iter().map(|g| g.grace).sum()
    }

    /// Starts the `node-shutdown` thread; None when no period is set.
    pub fn start(
        self: &Arc<Self>,
        deps: Arc<dyn ShutdownDeps>,
        shutdown: Receiver<()>,
    ) -> std::io::Result<Option<Worker>> {
        if !self.enabled() {
            return Ok(None);
        }
        let m = Arc::clone(self);
        worker::spawn("node-shutdown", ShutdownStage::Workers, move || {
            m.run(deps.as_ref(), &shutdown)
        })
        .map(Some)
    }

    /// Watches logind until the kubelet stops; reconnects after a lost
    /// connection, as upstream. Without logind, logs once and ends.
    fn run(&self, deps: &dyn ShutdownDeps, shutdown: &Receiver<()>) {
        let mut started_once = false;
        loop {
            match self.watch(deps, shutdown) {
                Ok(()) => return,
                Err(WatchError::Absent(why)) if !started_once => {
                    log::info!("graceful node shutdown is off: {why}");
                    return;
                }
                Err(WatchError::Start(e)) if !started_once => {
                    log::error!("unable to start the node shutdown manager: {e}");
                    return;
                }
                Err(e) => log::warn!("node shutdown manager: {e}; reconnecting"),
            }
            started_once = true;
            if stopping_within(shutdown, RECONNECT_PERIOD) {
                return;
            }
        }
    }

    /// One connection's life (upstream start + its goroutine). Ok when the
    /// kubelet is stopping.
    fn watch(&self, deps: &dyn ShutdownDeps, shutdown: &Receiver<()>) -> Result<(), WatchError> {
        let mut logind = Logind::connect().map_err(|e| match e {
            ConnectError::Absent(why) => WatchError::Absent(why),
            ConnectError::Failed(e) => WatchError::Start(e.to_string()),
        })?;
        self.check_inhibit_delay(&mut logind)
            .map_err(WatchError::Start)?;
        let mut lock = Some(
            logind
                .inhibit_shutdown()
                .map_err(|e| WatchError::Start(format!("take the inhibitor lock: {e}")))?,
        );
        logind
            .monitor_shutdown()
            .map_err(|e| WatchError::Start(format!("monitor shutdown: {e}")))?;
        log::info!(
            "node shutdown manager: holding logind's delay lock for {:?}",
            self.period_requested()
        );
        loop {
            if stopping(shutdown) {
                return Ok(());
            }
            let event = logind
                .next_event(POLL * 5)
                .map_err(|e| WatchError::Lost(e.to_string()))?;
            match event {
                Some(true) => {
                    deps.node_event("Shutdown manager detected shutdown event");
                    self.shutting_down.store(true, Ordering::SeqCst);
                    deps.sync_node_status();
                    self.process_shutdown(deps, shutdown);
                    // Releasing the lock lets the shutdown go on.
                    drop(lock.take());
                    log::info!("node shutdown manager: pods stopped, inhibitor lock released");
                }
                Some(false) => {
                    deps.node_event("Shutdown manager detected shutdown cancellation");
                    self.shutting_down.store(false, Ordering::SeqCst);
                    deps.sync_node_status();
                    match logind.inhibit_shutdown() {
                        Ok(fd) => lock = Some(fd),
                        Err(e) => log::error!("retake the inhibitor lock: {e}"),
                    }
                }
                None => {}
            }
        }
    }

    /// Upstream start's check: logind's InhibitDelayMaxUSec must cover the
    /// requested period; if not, write the override, reload logind and
    /// read it again.
    fn check_inhibit_delay(&self, logind: &mut Logind) -> Result<(), String> {
        let requested = self.period_requested();
        let current = logind
            .inhibit_delay_max()
            .map_err(|e| format!("read InhibitDelayMaxUSec: {e}"))?;
        if requested <= current {
            return Ok(());
        }
        log::warn!(
            "logind's InhibitDelayMaxSec ({current:?}) is below shutdownGracePeriod ({requested:?}); raising it"
        );
        logind::override_inhibit_delay(requested)
            .map_err(|e| format!("unable to override inhibit delay by shutdown manager: {e}"))?;
        logind
            .reload_logind_conf()
            .map_err(|e| format!("reload logind: {e}"))?;
        let updated = logind
            .inhibit_delay_max()
            .map_err(|e| format!("read InhibitDelayMaxUSec: {e}"))?;
        if requested > updated {
            return Err(format!(
                "node shutdown manager was unable to update logind InhibitDelayMaxSec to {requested:?} (ShutdownGracePeriod), current value of InhibitDelayMaxSec ({updated:?}) is less than requested ShutdownGracePeriod"
            ));
        }
        Ok(())
    }

    /// Upstream processShutdownEvent: group by group, lowest priority
    /// first, every pod of the group stopped at once and waited for up to
    /// the group's period.
    fn process_shutdown(&self, deps: &dyn ShutdownDeps, shutdown: &Receiver<()>) {
        let pods = deps.active_pods();
        for (group, pods) in group_by_priority(&self.groups, pods) {
            if pods.is_empty() {
                continue;
            }
            let grace = group.grace.as_secs() as i64;
            for pod in &pods {
                let g = pod_grace(pod, grace);
                log::info!(
                    "shutdown manager killing pod {} with grace period {g}s",
                    pod_name(pod)
                );
                deps.kill_pod(pod, g);
            }
            let deadline = Instant::now() + group.grace;
            while !pods.iter().all(|p| deps.pod_stopped(p)) {
                if Instant::now() >= deadline {
                    log::info!(
                        "shutdown manager pod killing time out: grace period {grace}s, priority {}",
                        group.priority
                    );
                    break;
                }
                if stopping_within(shutdown, POLL) {
                    return;
                }
            }
        }
    }
}

#[derive(Debug)]
enum WatchError {
    Absent(String),
    Start(String),
    Lost(String),
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchError::Absent(s) | WatchError::Start(s) => f.write_str(s),
            WatchError::Lost(s) => write!(f, "connection lost: {s}"),
        }
    }
}

fn stopping(shutdown: &Receiver<()>) -> bool {
    !matches!(
        shutdown.try_recv(),
        Err(crossbeam_channel::TryRecvError::Empty)
    )
}

fn stopping_within(shutdown: &Receiver<()>, d: Duration) -> bool {
    !matches!(
        shutdown.recv_timeout(d),
        Err(crossbeam_channel::RecvTimeoutError::Timeout)
    )
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// The group's period, or the pod's own terminationGracePeriodSeconds
/// when shorter.
pub fn pod_grace(pod: &Pod, group_grace: i64) -> i64 {
    match pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        Some(own) if own <= group_grace => own,
        _ => group_grace,
    }
}

/// Upstream migrateConfig: regular pods get shutdownGracePeriod −
/// shutdownGracePeriodCriticalPods, critical ones the rest.
pub fn migrate_config(total: Duration, critical: Duration) -> Vec<Group> {
    if total.is_zero() || critical > total {
        return Vec::new();
    }
    vec![
        Group {
            priority: 0,
            grace: total - critical,
        },
        Group {
            priority: SYSTEM_CRITICAL_PRIORITY,
            grace: critical,
        },
    ]
}

/// Upstream groupByPriority: each pod to the highest group whose priority
/// is at most the pod's (pods below every group to the lowest).
pub fn group_by_priority(groups: &[Group], pods: Vec<Arc<Pod>>) -> Vec<(Group, Vec<Arc<Pod>>)> {
    let mut out: Vec<(Group, Vec<Arc<Pod>>)> = groups.iter().map(|g| (*g, Vec::new())).collect();
    if out.is_empty() {
        return out;
    }
    for pod in pods {
        let priority = pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        // The first group at or above the pod's priority; above them all,
        // or strictly between two, means the one below.
        let mut i = groups.partition_point(|g| g.priority < priority);
        if i == groups.len() || (i > 0 && groups[i].priority > priority) {
            i -= 1;
        }
        out[i].1.push(pod);
    }
    out
}
