//! Which init containers to start, restart or kill (upstream
//! `computeInitContainerActions` in `kuberuntime_container.go`, the
//! SidecarContainers version, GA in 1.33).
//!
//! Init containers run in order. A regular one is done once it exited 0. A
//! sidecar (`restartPolicy: Always`) is done as soon as it has started —
//! running, and past its startup probe if it has one — and must then be kept
//! running: restarted whenever it exits, whatever the pod's restartPolicy.
//!
//! The list is walked backwards, as upstream: finished init containers may
//! have been removed from the runtime since, so the last one with a status
//! tells how far initialization got.

use k8s_openapi::api::core::v1::{Container, Pod};

use super::actions::{ContainerToKill, PodActions, ProbeResults};
use super::labels::container_hash;
use crate::container::{ContainerState, ContainerStatus, PodStatus};
use crate::podutil::{is_restartable_init, PodExt, RestartPolicy};
use crate::prober::ProbeKind;

/// Fills `actions.init_to_start`, `containers_to_kill` and `kill_pod` for
/// the init containers. True once the pod is initialized, i.e. its app
/// containers may be looked at.
pub(super) fn compute_init_actions(
    pod: &Pod,
    status: &PodStatus,
    probes: &ProbeResults,
    actions: &mut PodActions,
) -> bool {
    let inits = pod.init_containers();
    if inits.is_empty() {
        return true;
    }
    let initialized = regular_container_active(pod, status);
    let mut pass = Pass {
        probes,
        last: inits.len() - 1,
        initialized,
        // Everything before an initialized pod's app containers ran once.
        previously_initialized: initialized,
        restart_on_failure: pod.restart_policy() != RestartPolicy::Never,
        to_start: Vec::new(),
    };
    for (i, c) in inits.iter().enumerate().rev() {
        if let Step::FailPod = pass.visit(i, c, status.find_container(&c.name), actions) {
            actions.kill_pod = true;
            actions.init_to_start.clear();
            return false;
        }
    }
    if !pass.previously_initialized {
        // Nothing ran yet: begin at the beginning.
        pass.to_start.push(0);
    }
    // Collected backwards; started in declaration order.
    pass.to_start.reverse();
    if pod.is_being_deleted() {
        // A pod on its way out restarts nothing, sidecars included.
        pass.to_start.clear();
    }
    actions.init_to_start = pass.to_start;
    pass.initialized
}

/// A regular container exists in the current sandbox: initialization
/// completed, even if the init containers' instances are gone since.
/// Upstream looks for a created or running one only, as it cannot tell which
/// sandbox an exited one ran in; without an exited app container counting, a
/// finished pod whose sidecar also exited would start that sidecar again.
fn regular_container_active(pod: &Pod, status: &PodStatus) -> bool {
    pod.containers().iter().any(|c| {
        let active = status
            .find_container(&c.name)
            .is_some_and(|s| matches!(s.state, ContainerState::Created | ContainerState::Running));
        active || status.created_in_current_sandbox(&c.name)
    })
}

enum Step {
    Continue,
    /// A regular init container failed under restartPolicy Never.
    FailPod,
}

struct Pass<'a> {
    probes: &'a ProbeResults,
    last: usize,
    initialized: bool,
    /// An init container after the one visited has run (or the pod is
    /// initialized): the visited one got its turn before.
    previously_initialized: bool,
    restart_on_failure: bool,
    /// Indices to start, in reverse order.
    to_start: Vec<usize>,
}

impl Pass<'_> {
    fn visit(
        &mut self,
        i: usize,
        c: &Container,
        s: Option<&ContainerStatus>,
        actions: &mut PodActions,
    ) -> Step {
        let sidecar = is_restartable_init(c);
        let Some(s) = s else {
            // A sidecar whose instance is gone (removed by GC, say) must run
            // again; a regular init container that ran needs nothing.
            if self.previously_initialized && sidecar {
                self.to_start.push(i);
            }
            return Step::Continue;
        };
        // After initialization only sidecars are kept running.
        if self.previously_initialized && !sidecar {
            return Step::Continue;
        }
        let step = if sidecar {
            self.visit_sidecar(i, c, s, actions);
            Step::Continue
        } else {
            self.visit_regular(i, c, s, actions)
        };
        self.previously_initialized = true;
        step
    }

    fn visit_sidecar(
        &mut self,
        i: usize,
        c: &Container,
        s: &ContainerStatus,
        actions: &mut PodActions,
    ) {
        match s.state {
            ContainerState::Running => self.running_sidecar(i, c, s, actions),
            // Created but not started: the start failed half-way; start anew.
            ContainerState::Created => self.to_start.push(i),
            // Sidecars restart whatever the pod's restartPolicy (crash
            // back-off applies when it is started).
            ContainerState::Exited => self.to_start.push(i),
            ContainerState::Unknown => {
                kill(
                    actions,
                    c,
                    s,
                    "is in an unknown state, killing it before restart",
                );
                self.to_start.push(i);
            }
        }
    }

    /// A running sidecar lets the next init container start once it has
    /// started; it is restarted when its startup or liveness probe failed or
    /// its spec changed.
    fn running_sidecar(
        &mut self,
        i: usize,
        c: &Container,
        s: &ContainerStatus,
        actions: &mut PodActions,
    ) {
        let probe_failed = self.probes.failed.get(&s.id).copied();
        if c.startup_probe.is_some() && !self.probes.started.contains(&s.id) {
            // Before its startup probe passes, no other probe runs.
            if probe_failed.is_some() {
                actions
                    .containers_to_kill
                    .push(ContainerToKill::probe_failed(
                        "Init container",
                        c,
                        s,
                        ProbeKind::Startup,
                    ));
                self.to_start.push(i);
            }
            // Not started yet: the next init container waits for it.
            return;
        }
        if i == self.last {
            self.initialized = true;
        } else if !self.previously_initialized {
            // Started for the first time: on to the next one.
            self.to_start.push(i + 1);
        }
        if s.hash != container_hash(c) {
            kill(actions, c, s, "definition changed, will be restarted");
            self.to_start.push(i);
        } else if let Some(kind) = probe_failed {
            actions
                .containers_to_kill
                .push(ContainerToKill::probe_failed("Init container", c, s, kind));
            self.to_start.push(i);
        }
    }

    fn visit_regular(
        &mut self,
        i: usize,
        c: &Container,
        s: &ContainerStatus,
        actions: &mut PodActions,
    ) -> Step {
        match s.state {
            // Nothing to do but wait for it to finish.
            ContainerState::Running => {}
            ContainerState::Created => self.to_start.push(i),
            ContainerState::Exited if s.exit_code != 0 => {
                if !self.restart_on_failure {
                    return Step::FailPod;
                }
                self.to_start.push(i);
            }
            ContainerState::Exited if i == self.last => self.initialized = true,
            ContainerState::Exited => self.to_start.push(i + 1),
            ContainerState::Unknown => {
                if !self.restart_on_failure {
                    return Step::FailPod;
                }
                kill(
                    actions,
                    c,
                    s,
                    "is in an unknown state, killing it before restart",
                );
                self.to_start.push(i);
            }
        }
        Step::Continue
    }
}

fn kill(actions: &mut PodActions, c: &Container, s: &ContainerStatus, why: &str) {
    actions.containers_to_kill.push(ContainerToKill {
        id: s.id.clone(),
        name: c.name.clone(),
        reason: format!("Init container {} {why}", c.name),
        probe_grace: None,
    });
}

#[cfg(test)]
#[path = "init_actions_tests.rs"]
mod tests;
