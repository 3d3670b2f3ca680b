//! The API PodStatus computed from the runtime's view (upstream
//! `generateAPIPodStatus`, `getPhase` and `convertToAPIContainerStatuses`
//! in `kubelet_pods.go`); the conditions come from `conditions`
//! (upstream `status/generate.go`).

use std::time::SystemTime;

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions;
use crate::container::{ContainerState, ContainerStatus, PodStatus};
use crate::kuberuntime::{actions, qos};
use crate::podutil::{is_restartable_init, PodExt, RestartPolicy};

/// Upstream activeDeadlineHandler's eviction reason and message.
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const DEADLINE_EXCEEDED_MESSAGE: &str =
    "Pod was active on the node longer than the specified deadline";

/// What status generation needs besides the pod and its runtime status.
pub struct StatusContext<'a> {
    /// `containerd`, from CRI Version: container IDs are `containerd://<id>`.
    pub runtime_name: &'a str,
    pub host_ip: Option<&'a str>,
    /// Why a container is waiting, as the last sync recorded it.
    pub waiting_reason: &'a dyn Fn(&str) -> Option<(String, String)>,
    /// Whether a running container passes its readiness probe.
    pub is_ready: &'a dyn Fn(&str) -> bool,
    /// Whether a running container passed its startup probe.
    pub is_started: &'a dyn Fn(&str) -> bool,
    /// The kubelet stopped the pod for good: its phase is final.
    pub pod_is_terminal: bool,
    /// The status the kubelet generated last (the status manager's), if any;
    /// upstream's oldPodStatus falls back to the API's.
    pub old: Option<&'a api::PodStatus>,
    /// The pod ran longer than `activeDeadlineSeconds` (upstream's
    /// activeDeadlineHandler asks for its eviction).
    pub deadline_exceeded: bool,
    /// Where an in-place resize of the pod stands.
    pub resize: &'a ResizeState<'a>,
    /// The pod's runtime handler supports recursive read-only mounts.
    pub supports_recursive_read_only: bool,
}

/// What a container was last given, by its name.
pub type Actuated<'a> = dyn Fn(&str) -> Option<api::ResourceRequirements> + 'a;

/// An in-place resize as the status shows it (InPlacePodVerticalScaling).
#[derive(Default)]
pub struct ResizeState<'a> {
    /// Why the resize the spec asks for waits (PodResizePending).
    pub pending: Option<crate::allocation::PendingResize>,
    /// An accepted resize is not yet in effect (PodResizeInProgress).
    pub in_progress: bool,
    /// What each container was last given, by name: what a running
    /// container's `resources` show.
    pub actuated: Option<&'a Actuated<'a>>,
}

pub fn generate_api_pod_status(
    pod: &api::Pod,
    status: &PodStatus,
    ctx: &StatusContext<'_>,
) -> api::PodStatus {
    let api_status = pod.status.clone().unwrap_or_default();
    let old = ctx.old.unwrap_or(&api_status);
    let has_inits = !pod.init_containers().is_empty();
    let old_inits = old.init_container_statuses.as_deref().unwrap_or_default();
    let old_apps = old.container_statuses.as_deref().unwrap_or_default();
    let init_statuses = container_statuses(
        pod,
        pod.init_containers(),
        Kind::Init,
        has_inits,
        old_inits,
        status,
        ctx,
    );
    let statuses = container_statuses(
        pod,
        pod.containers(),
        Kind::App,
        has_inits,
        old_apps,
        status,
        ctx,
    );
    // Ephemeral containers count for neither phase nor conditions.
    let ephemeral_specs: Vec<api::Container> = pod
        .ephemeral_containers()
        .iter()
        .map(crate::podutil::ephemeral_as_container)
        .collect();
    let ephemeral_statuses = container_statuses(
        pod,
        &ephemeral_specs,
        Kind::Ephemeral,
        has_inits,
        old.ephemeral_container_statuses
            .as_deref()
            .unwrap_or_default(),
        status,
        ctx,
    );
    // Upstream HasAnyActiveRegularContainerStarted.
    let initialized = pod
        .containers()
        .iter()
        .any(|c| status.created_in_current_sandbox(&c.name));
    let mut phase = phase(
        pod,
        &init_statuses,
        &statuses,
        ctx.pod_is_terminal,
        initialized,
    );
    let terminal = |p: Option<&str>| matches!(p, Some("Failed" | "Succeeded"));
    // A terminal phase is final: the kubelet's own first, then the API's.
    if !terminal(Some(phase)) {
        if terminal(old.phase.as_deref()) {
            phase = old.phase.as_deref().unwrap_or(phase);
        } else if terminal(api_status.phase.as_deref()) {
            phase = api_status.phase.as_deref().unwrap_or(phase);
        }
    }
    let mut s = api::PodStatus {
        phase: Some(phase.to_string()),
        ..Default::default()
    };
    // The reason and message belong to the phase: kept while it lasts.
    if old.phase.as_deref() == Some(phase) {
        s.reason = old.reason.clone().or_else(|| api_status.reason.clone());
        s.message = old.message.clone().or_else(|| api_status.message.clone());
    }
    if ctx.deadline_exceeded {
        s.phase = Some("Failed".into());
        s.reason = Some(DEADLINE_EXCEEDED.into());
        s.message = Some(DEADLINE_EXCEEDED_MESSAGE.into());
    }
    if terminal(api_status.phase.as_deref()) && s.phase != api_status.phase {
        log::error!(
            "pod {}: illegal phase transition from {:?} to {:?}; keeping the API's",
            pod.full_name(),
            api_status.phase,
            s.phase
        );
        s.phase = api_status.phase.clone();
    }
    let phase = s.phase.clone().unwrap_or_default();

    // Conditions other writers own come first, as the API has them.
    let mut conds: Vec<api::PodCondition> = api_status
        .conditions
        .iter()
        .flatten()
        .filter(|c| !super::is_kubelet_condition(&c.type_))
        .cloned()
        .collect();
    if let Some(dt) = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget")
    {
        match conds.iter_mut().find(|c| c.type_ == dt.type_) {
            Some(c) => *c = dt.clone(),
            None => conds.push(dt.clone()),
        }
    }
    conds.extend(super::resize::conditions(pod, ctx.resize, old));
    let sandbox_ok = !actions::sandbox_changed(pod, status).0;
    conds.push(conditions::ready_to_start_containers(pod, sandbox_ok));
    let all: Vec<api::ContainerStatus> = init_statuses.iter().chain(&statuses).cloned().collect();
    conds.push(conditions::initialized(pod, &all, &phase));
    let ready = conditions::pod_ready(pod, &conds, &all, &phase);
    conds.push(ready);
    conds.push(conditions::containers_ready(pod, &all, &phase));
    conds.push(conditions::scheduled(pod));
    let now = to_time(SystemTime::now());
    for c in conds
        .iter_mut()
        .filter(|c| super::is_kubelet_condition(&c.type_))
    {
        c.last_transition_time = now.clone();
    }
    s.conditions = Some(conds);

    let pod_ips = if pod.is_host_network() {
        ctx.host_ip
            .map(|ip| vec![ip.to_string()])
            .unwrap_or_default()
    } else if status.sandboxes.iter().any(|sb| sb.ready) {
        status.ips()
    } else {
        // A dead pod keeps the IPs it had (upstream's PLEG keeps them in
        // its cache when no sandbox is ready any more).
        let ips = status.ips();
        if ips.is_empty() {
            old.pod_ips
                .iter()
                .flatten()
                .map(|ip| ip.ip.clone())
                .collect()
        } else {
            ips
        }
    };
    s.host_ip = ctx.host_ip.map(str::to_string);
    s.host_ips = ctx
        .host_ip
        .map(|ip| vec![api::HostIP { ip: ip.to_string() }]);
    s.pod_ip = pod_ips.first().cloned();
    s.pod_ips = (!pod_ips.is_empty()).then(|| {
        pod_ips
            .iter()
            .map(|ip| api::PodIP { ip: ip.clone() })
            .collect()
    });
    s.init_container_statuses = has_inits.then_some(init_statuses);
    s.container_statuses = Some(statuses);
    s.ephemeral_container_statuses = (!ephemeral_statuses.is_empty()).then_some(ephemeral_statuses);
    // Set by the API server at creation and immutable; computed for pods
    // that have none (static pods).
    s.qos_class = api_status
        .qos_class
        .clone()
        .or_else(|| Some(qos::qos_class(pod).as_str().to_string()));
    s.observed_generation = pod.metadata.generation;
    s
}

pub fn to_time(t: SystemTime) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(t).ok().map(Time)
}

/// Which of the pod's container lists a status list is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Init,
    App,
    Ephemeral,
}

/// Upstream `convertToAPIContainerStatuses` for one list. `old` is the
/// previous status of that list.
fn container_statuses(
    pod: &api::Pod,
    specs: &[api::Container],
    kind: Kind,
    has_inits: bool,
    old: &[api::ContainerStatus],
    status: &PodStatus,
    ctx: &StatusContext<'_>,
) -> Vec<api::ContainerStatus> {
    // Until a container has an instance it waits for the init containers,
    // or to be created.
    let default_reason = if has_inits {
        "PodInitializing"
    } else {
        "ContainerCreating"
    };
    specs
        .iter()
        .map(|spec| {
            let prev = old.iter().find(|o| o.name == spec.name);
            let mut instances = status.containers.iter().filter(|c| c.name == spec.name);
            let newest = instances.next();
            let previous = instances.next();
            let mut s = match (newest, prev) {
                // A finished container the runtime no longer has keeps its
                // last known status.
                (None, Some(p)) if is_terminated(p) => p.clone(),
                _ => api::ContainerStatus {
                    name: spec.name.clone(),
                    image: spec.image.clone().unwrap_or_default(),
                    state: Some(waiting(default_reason, "")),
                    restart_count: prev.map_or(0, |p| p.restart_count),
                    last_state: prev.and_then(|p| p.last_state.clone()),
                    ..Default::default()
                },
            };
            if let Some(c) = newest {
                let was_running = prev.is_some_and(is_running);
                s.state = Some(to_state(c, was_running, ctx.runtime_name));
                s.container_id = Some(api_container_id(ctx.runtime_name, &c.id));
                // What the runtime resolved the image to (upstream's cs.Image
                // and, historically, ImageRef as imageID).
                if !c.image.is_empty() {
                    s.image = c.image.clone();
                }
                s.image_id = c.image_ref.clone();
                s.user = c.user.as_ref().map(api_container_user);
                s.restart_count = c.restart_count as i32;
                if c.state == ContainerState::Unknown && was_running {
                    s.restart_count = prev.map_or(0, |p| p.restart_count) + 1;
                }
                s.last_state = previous.map(|p| to_state(p, false, ctx.runtime_name));
                if kind != Kind::Ephemeral {
                    let running = c.state == ContainerState::Running;
                    let actuated = ctx.resize.actuated.filter(|_| running);
                    (s.resources, s.allocated_resources) =
                        super::resize::resource_statuses(spec, actuated);
                }
            }
            s.volume_mounts = volume_mount_statuses(spec, ctx.supports_recursive_read_only);
            // Go encodes the empty struct: the API always shows `lastState: {}`.
            if s.last_state.is_none() {
                s.last_state = Some(api::ContainerState::default());
            }
            let running = newest.is_some_and(|c| c.state == ContainerState::Running);
            // Upstream prober UpdatePodStatus: started once running (and past
            // its startup probe); an app container or a sidecar is ready when
            // started and its readiness probe passes; a regular init
            // container is ready once it exited 0. It leaves ephemeral
            // containers alone: never ready, `started` unset.
            let sidecar = kind == Kind::Init && is_restartable_init(spec);
            match kind {
                Kind::Init if !sidecar => {
                    s.started = Some(running);
                    s.ready = is_terminated(&s) && terminated_exit(&s) == Some(0);
                }
                Kind::Init | Kind::App => {
                    let started = running && (ctx.is_started)(&spec.name);
                    s.started = Some(started);
                    s.ready = started && (ctx.is_ready)(&spec.name);
                }
                Kind::Ephemeral => {
                    s.started = None;
                    s.ready = false;
                }
            }
            let done_init = kind == Kind::Init
                && !sidecar
                && newest.is_some_and(|c| c.state == ContainerState::Exited && c.exit_code == 0);
            // A container the last sync could not (re)start shows why it
            // waits; its finished instance becomes the last state.
            if !done_init && will_restart(pod, newest, sidecar) {
                if let Some((reason, message)) = (ctx.waiting_reason)(&spec.name) {
                    if is_terminated(&s) {
                        s.last_state = s.state.take();
                    }
                    s.state = Some(waiting(&reason, &message));
                }
            }
            s
        })
        .collect()
}

/// The container's mounts as status reports them (RecursiveReadOnlyMounts,
/// on by default since 1.31): a read-only mount is `Enabled` where it is
/// made recursively read-only, else `Disabled` (a mount that cannot be made
/// as asked keeps its container from being created).
fn volume_mount_statuses(
    spec: &api::Container,
    supports_recursive_read_only: bool,
) -> Option<Vec<api::VolumeMountStatus>> {
    let mounts = spec.volume_mounts.as_deref()?;
    Some(
        mounts
            .iter()
            .map(|m| {
                let ro = m.read_only == Some(true);
                let rro = crate::kuberuntime::recursive_read_only::resolve(
                    m,
                    supports_recursive_read_only,
                ) == Ok(true);
                api::VolumeMountStatus {
                    name: m.name.clone(),
                    mount_path: m.mount_path.clone(),
                    read_only: ro.then_some(true),
                    recursive_read_only: ro
                        .then(|| if rro { "Enabled" } else { "Disabled" }.to_string()),
                }
            })
            .collect(),
    )
}

/// Upstream `ShouldContainerBeRestarted`. A sidecar is restarted whatever
/// the pod's restartPolicy and exit code (as the runtime manager does).
fn will_restart(pod: &api::Pod, newest: Option<&ContainerStatus>, sidecar: bool) -> bool {
    if pod.is_being_deleted() {
        return false;
    }
    match newest {
        None => true,
        Some(c) => match (c.state, pod.restart_policy()) {
            (ContainerState::Running, _) => false,
            _ if sidecar => true,
            (ContainerState::Exited, RestartPolicy::Never) => false,
            (ContainerState::Exited, RestartPolicy::OnFailure) => c.exit_code != 0,
            _ => true,
        },
    }
}

fn waiting(reason: &str, message: &str) -> api::ContainerState {
    api::ContainerState {
        waiting: Some(api::ContainerStateWaiting {
            reason: (!reason.is_empty()).then(|| reason.to_string()),
            message: (!message.is_empty()).then(|| message.to_string()),
        }),
        ..Default::default()
    }
}

/// One runtime instance as an API state (upstream convertContainerStatus).
/// A container's ID as the API shows it, `<runtime>://<id>` (upstream
/// kubecontainer.ContainerID.String), in the status and in a terminated
/// state alike.
fn api_container_id(runtime: &str, id: &str) -> String {
    format!("{runtime}://{id}")
}

/// `was_running`: the previous status had it running.
fn to_state(c: &ContainerStatus, was_running: bool, runtime: &str) -> api::ContainerState {
    match c.state {
        ContainerState::Running => api::ContainerState {
            running: Some(api::ContainerStateRunning {
                started_at: c.started_at.and_then(to_time),
            }),
            ..Default::default()
        },
        ContainerState::Exited => api::ContainerState {
            terminated: Some(api::ContainerStateTerminated {
                exit_code: c.exit_code,
                reason: Some(if c.reason.is_empty() {
                    if c.exit_code == 0 {
                        "Completed"
                    } else {
                        "Error"
                    }
                    .to_string()
                } else {
                    c.reason.clone()
                }),
                message: (!c.message.is_empty()).then(|| c.message.clone()),
                started_at: c.started_at.and_then(to_time),
                finished_at: c.finished_at.and_then(to_time),
                container_id: Some(api_container_id(runtime, &c.id)),
                ..Default::default()
            }),
            ..Default::default()
        },
        // It ran, and the runtime lost it: not "never ran".
        ContainerState::Unknown if was_running => api::ContainerState {
            terminated: Some(api::ContainerStateTerminated {
                exit_code: 137,
                reason: Some("ContainerStatusUnknown".into()),
                message: Some(
                    "The container could not be located when the pod was terminated".into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        },
        // Created but not running: waiting to run.
        ContainerState::Created | ContainerState::Unknown => waiting("", ""),
    }
}

fn is_terminated(s: &api::ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.terminated.is_some())
}

fn is_running(s: &api::ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.running.is_some())
}

fn terminated_exit(s: &api::ContainerStatus) -> Option<i32> {
    s.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code)
}

fn last_terminated_exit(s: &api::ContainerStatus) -> Option<i32> {
    s.last_state
        .as_ref()?
        .terminated
        .as_ref()
        .map(|t| t.exit_code)
}

/// The container counts upstream `getPhase` decides on.
#[derive(Default)]
struct PhaseCounts {
    /// Regular init containers not done yet.
    pending_init: usize,
    failed_init: usize,
    /// Sidecars not started yet.
    pending_sidecars: usize,
    /// Sidecars and app containers from here on.
    running: usize,
    waiting: usize,
    /// App containers only: a sidecar's exit never makes a pod done.
    stopped: usize,
    succeeded: usize,
    unknown: usize,
}

impl PhaseCounts {
    fn regular_init(&mut self, s: &api::ContainerStatus) {
        match (terminated_exit(s), last_terminated_exit(s)) {
            _ if is_running(s) => self.pending_init += 1,
            (Some(code), _) => self.failed_init += usize::from(code != 0),
            (None, Some(code)) if is_waiting(s) => self.failed_init += usize::from(code != 0),
            _ => self.pending_init += 1,
        }
    }

    /// A sidecar counts as running while it runs, pending until it started;
    /// one that exited (and is being restarted) counts for nothing.
    fn sidecar(&mut self, s: &api::ContainerStatus) {
        if is_running(s) {
            self.running += 1;
            self.pending_sidecars += usize::from(s.started != Some(true));
        } else if is_terminated(s) || last_terminated_exit(s).is_some() {
            // Exited: to be restarted, neither running nor stopped.
        } else if is_waiting(s) {
            self.pending_sidecars += 1;
            self.waiting += 1;
        } else {
            self.pending_sidecars += 1;
            self.unknown += 1;
        }
    }

    fn app(&mut self, s: &api::ContainerStatus) {
        if is_running(s) {
            self.running += 1;
        } else if let Some(code) = terminated_exit(s) {
            self.stopped += 1;
            self.succeeded += usize::from(code == 0);
        } else if is_waiting(s) {
            if last_terminated_exit(s).is_some() {
                self.stopped += 1;
            } else {
                self.waiting += 1;
            }
        } else {
            self.unknown += 1;
        }
    }
}

fn is_waiting(s: &api::ContainerStatus) -> bool {
    s.state.as_ref().is_some_and(|st| st.waiting.is_some())
}

/// Upstream `getPhase`. `initialized`: a regular container of the current
/// sandbox exists, so sidecars being restarted do not make the pod Pending
/// again.
fn phase(
    pod: &api::Pod,
    inits: &[api::ContainerStatus],
    apps: &[api::ContainerStatus],
    terminal: bool,
    initialized: bool,
) -> &'static str {
    let mut n = PhaseCounts::default();
    // `inits` is in spec order, one status per init container.
    for (spec, s) in pod.init_containers().iter().zip(inits) {
        if is_restartable_init(spec) {
            n.sidecar(s);
        } else {
            n.regular_init(s);
        }
    }
    apps.iter().for_each(|s| n.app(s));
    let policy = pod.restart_policy();
    if n.failed_init > 0 && policy == RestartPolicy::Never {
        return "Failed";
    }
    let sidecars_pending = n.pending_sidecars > 0 && !initialized;
    if n.pending_init > 0 || n.failed_init > 0 || sidecars_pending || n.waiting > 0 {
        return "Pending";
    }
    // A running sidecar keeps the pod Running until the kubelet stops it,
    // which it does once the app containers are done.
    if n.running > 0 && n.unknown == 0 {
        return "Running";
    }
    if n.running == 0 && n.stopped > 0 && n.unknown == 0 {
        return stopped_phase(policy, terminal, n.stopped == n.succeeded);
    }
    "Pending"
}

/// The phase of a pod whose containers all stopped.
fn stopped_phase(policy: RestartPolicy, terminal: bool, all_succeeded: bool) -> &'static str {
    if terminal {
        return if all_succeeded { "Succeeded" } else { "Failed" };
    }
    match policy {
        RestartPolicy::Always => "Running",
        _ if all_succeeded => "Succeeded",
        RestartPolicy::OnFailure => "Running",
        RestartPolicy::Never => "Failed",
    }
}

/// upstream convertContainerStatusUser: the runtime's report of the
/// newest instance, `user: {}` where it sent no Linux part.
fn api_container_user(u: &crate::container::ContainerUser) -> api::ContainerUser {
    api::ContainerUser {
        linux: u.linux.as_ref().map(|l| api::LinuxContainerUser {
            uid: l.uid,
            gid: l.gid,
            supplemental_groups: (!l.supplemental_groups.is_empty())
                .then(|| l.supplemental_groups.clone()),
        }),
    }
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "generate_sidecar_tests.rs"]
mod sidecar_tests;
