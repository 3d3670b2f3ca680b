//! Stopping containers and pods (upstream `killContainer`,
//! `killContainersWithSyncResult` and `KillPod`). Every stop goes through
//! the [`Killer`](super::killer::Killer), so a kill never holds the pod
//! worker for a grace period: it reports `Stopping`, and the pod is synced
//! again when its stops finish.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use super::killer::{OnDone, PreStop, Progress, StopRequest, ThenStop};
use super::lifecycle::HookAction;
use super::{lifecycle, sidecar, KubeRuntimeManager, SyncError, MINIMUM_GRACE_PERIOD_SECONDS};
use crate::container::{ContainerState, PodStatus, RuntimePod};
use crate::events::{self, EventRecorder, EventType};
use crate::podutil::{find_container, PodExt};
use crate::prober::handlers::exec_verdict;
use crate::prober::ProbeResult;

/// How far a kill got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillProgress {
    /// Everything asked for is stopped.
    Done,
    /// Stops are under way; the pod is woken when they finish.
    Stopping,
}

/// A container of a pod to stop.
pub(super) struct Victim {
    id: String,
    name: String,
    grace: Option<i64>,
}

impl KubeRuntimeManager {
    /// Stops one container of a known pod, honouring the grace period.
    /// `reason` is the Killing event's message (a failed liveness probe, a
    /// changed spec); by default "Stopping container <name>", as upstream.
    pub fn kill_container(
        &self,
        pod: &Pod,
        id: &str,
        name: &str,
        grace: Option<i64>,
        reason: Option<&str>,
    ) -> Result<KillProgress, SyncError> {
        self.stop_one(pod.uid(), Some(pod), id, name, grace, reason)
    }

    /// The event comes before the preStop hook, as upstream records it, and
    /// both only for the request that starts the stop.
    fn stop_one(
        &self,
        uid: &str,
        pod: Option<&Pod>,
        id: &str,
        name: &str,
        grace: Option<i64>,
        reason: Option<&str>,
    ) -> Result<KillProgress, SyncError> {
        let grace = Duration::from_secs(grace.unwrap_or(30).max(0) as u64);
        let mut pre_stop = None;
        let mut on_done = None;
        if let Some(pod) = pod.filter(|_| !self.killer.knows(id)) {
            let default = format!("Stopping container {name}");
            self.recorder.pod_container_event(
                pod,
                name,
                EventType::Normal,
                events::KILLING_CONTAINER,
                reason.unwrap_or(&default),
            );
            let container = find_container(pod, name);
            let hook = container.and_then(|c| c.lifecycle.as_ref()?.pre_stop.as_ref());
            if let (Some(container), Some(hook)) = (container, hook) {
                (pre_stop, on_done) = self.pre_stop(pod, id, container, hook, grace);
            }
        }
        let req = StopRequest {
            pod_uid: uid.to_string(),
            id: id.to_string(),
            grace,
            min_grace: Duration::from_secs(MINIMUM_GRACE_PERIOD_SECONDS),
            pre_stop,
            on_done,
        };
        match self.killer.stop(req) {
            Ok(Progress::Stopped) => Ok(KillProgress::Done),
            Ok(Progress::Issued | Progress::InFlight) => Ok(KillProgress::Stopping),
            Err(e) => Err(SyncError::runtime(Some(name), "KillContainerError", &e)),
        }
    }

    /// The preStop hook to run before the stop: an exec hook chained as an
    /// async ExecSync, an httpGet or sleep hook on the handler runner. A
    /// hook that cannot run is reported at once and the stop goes ahead.
    fn pre_stop(
        &self,
        pod: &Pod,
        id: &str,
        container: &Container,
        hook: &LifecycleHandler,
        grace: Duration,
    ) -> (Option<PreStop>, Option<OnDone>) {
        let pod_ip = || {
            self.get_pod_status(pod.uid(), pod.name(), pod.namespace())
                .ok()
                .and_then(|s| s.ips().into_iter().next())
        };
        let recorder = Arc::clone(&self.recorder);
        match lifecycle::hook_action(hook, container, pod_ip, grace) {
            Ok(HookAction::Exec(cmd)) => {
                let on_done =
                    hook_failure_event(recorder, pod, &container.name, cmd.clone(), grace);
                (Some(PreStop::Exec(cmd)), Some(on_done))
            }
            Ok(HookAction::Run(action)) => {
                let runner = Arc::clone(&self.hook_runner);
                let (pod, name) = (pod.clone(), container.name.clone());
                let run = move |then: ThenStop| {
                    runner.run(
                        action,
                        Box::new(move |outcome| {
                            if let Err(msg) = outcome {
                                record_pre_stop_failure(&*recorder, &pod, &name, &msg);
                            }
                            then();
                        }),
                    );
                };
                (Some(PreStop::Deferred(Box::new(run))), None)
            }
            Err(msg) => {
                log::debug!("pod {}: preStop of {id}: {msg}", pod.full_name());
                record_pre_stop_failure(&*recorder, pod, &container.name, &msg);
                (None, None)
            }
        }
    }

    /// Stops the running containers and ready sandboxes in `status`.
    pub fn kill_pod_status(
        &self,
        pod: Option<&Pod>,
        status: &PodStatus,
        grace: Option<i64>,
    ) -> Result<KillProgress, SyncError> {
        let victims = status
            .running_containers()
            .map(|c| Victim {
                id: c.id.clone(),
                name: c.name.clone(),
                grace: None,
            })
            .collect();
        let sandboxes = status
            .sandboxes
            .iter()
            .filter(|s| s.ready)
            .map(|s| s.id.clone())
            .collect();
        self.kill(pod, &status.uid, victims, sandboxes, grace)
    }

    /// Stops a pod found in the runtime: its running containers, then its
    /// sandboxes. `pod` is the spec when the kubelet still has it.
    pub fn kill_pod(
        &self,
        pod: Option<&Pod>,
        running: &RuntimePod,
        grace: Option<i64>,
    ) -> Result<KillProgress, SyncError> {
        let victims = running
            .containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
            .map(|c| Victim {
                id: c.id.clone(),
                name: c.name.clone(),
                grace: c.grace_seconds,
            })
            .collect();
        let sandboxes = running
            .sandboxes
            .iter()
            .filter(|s| s.ready)
            .map(|s| s.id.clone())
            .collect();
        self.kill(pod, &running.uid, victims, sandboxes, grace)
    }

    /// Starts the stops of a wave at once, so each container gets the whole
    /// grace period as with upstream's per-container goroutines. Sidecars
    /// come in later waves (see `sidecar`): a wave starts only when the
    /// ones before it are stopped, with what is left of the grace period
    /// counted from the first stop. The sandboxes stop only once no
    /// container stop is under way.
    fn kill(
        &self,
        pod: Option<&Pod>,
        uid: &str,
        victims: Vec<Victim>,
        sandboxes: Vec<String>,
        grace: Option<i64>,
    ) -> Result<KillProgress, SyncError> {
        let pod_grace = pod.map(|p| p.kill_grace_seconds());
        for wave in sidecar::termination_waves(pod, victims, |v| v.name.as_str()) {
            let waited = self
                .killer
                .stopping_since(uid)
                .map_or(0, |t| t.elapsed().as_secs());
            let mut first_err = None;
            for v in &wave {
                let g = sidecar::remaining_grace(grace.or(pod_grace).or(v.grace), waited);
                if let Err(e) = self.stop_one(uid, pod, &v.id, &v.name, g, None) {
                    first_err.get_or_insert(e);
                }
            }
            if let Some(err) = first_err {
                return Err(err);
            }
            if self.killer.stopping(uid) {
                return Ok(KillProgress::Stopping);
            }
        }
        // The sandboxes too stop off the worker: the CNI teardowns of many
        // pods overlap instead of queueing behind four workers.
        let mut progress = KillProgress::Done;
        for id in sandboxes {
            match self.killer.stop_sandbox(uid, &id) {
                Ok(Progress::Stopped) => {}
                Ok(Progress::Issued | Progress::InFlight) => progress = KillProgress::Stopping,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(SyncError::runtime(None, "KillPodSandboxError", &e)),
            }
        }
        Ok(progress)
    }
}

/// Records FailedPreStopHook when an async exec hook did not pass. Runs on
/// the completion thread; recording an event only queues it.
fn hook_failure_event(
    recorder: Arc<dyn EventRecorder>,
    pod: &Pod,
    name: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> OnDone {
    let (pod, name) = (pod.clone(), name.to_string());
    Box::new(move |outcome| {
        let Some(reply) = &outcome.hook else {
            return;
        };
        let reply = reply
            .as_ref()
            .map(|r| (r.exit_code, r.stdout.clone(), r.stderr.clone()))
            .map_err(Clone::clone);
        let (result, msg) = exec_verdict(reply, &cmd, outcome.hook_took, timeout);
        if result != ProbeResult::Success {
            record_pre_stop_failure(&*recorder, &pod, &name, &msg);
        }
    })
}

fn record_pre_stop_failure(recorder: &dyn EventRecorder, pod: &Pod, name: &str, msg: &str) {
    recorder.pod_container_event(
        pod,
        name,
        EventType::Warning,
        events::FAILED_PRE_STOP_HOOK,
        &format!("PreStopHook failed: {msg}"),
    );
}
