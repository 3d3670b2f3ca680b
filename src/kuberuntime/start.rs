//! Starting containers (upstream `kuberuntime_container.go`
//! startContainer): crash back-off, pull, create, start, the log symlink
//! and the postStart hook.

use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use super::lifecycle::HookAction;
use super::{
    container, ephemeral, labels, lifecycle, pull_secrets, sandbox, security_context,
    KubeRuntimeManager, SyncError, CRASH_BACKOFF_INITIAL, CRASH_BACKOFF_RESYNC,
    CRASH_BACKOFF_RESYNC_JITTER,
};
use crate::container::{ContainerState, PodStatus};
use crate::cri::api;
use crate::events::{self, EventType};
use crate::images::PullError;
use crate::lifecycle::handler_runner::HookDone;
use crate::podutil::PodExt;
use crate::prober::ContainerExec;

/// How soon a container waiting for its devices is looked at again when
/// no answer woke its pod first.
const DEVICE_WAIT_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a container starts: its pod, sandbox and the status it started from.
pub(super) struct StartTarget<'a> {
    pub pod: &'a Pod,
    pub sandbox_id: &'a str,
    pub sandbox_config: &'a api::PodSandboxConfig,
    pub pod_ips: &'a [String],
    pub status: &'a PodStatus,
}

impl KubeRuntimeManager {
    /// Pulls, creates and starts one container, unless it is backing off.
    pub(super) fn start_container(
        &self,
        t: &StartTarget<'_>,
        c: &Container,
    ) -> Result<(), SyncError> {
        let result = self.try_start_container(t, c);
        let mut reasons = lock(&self.reasons);
        match &result {
            Ok(()) => {
                if let Some(pod) = reasons.get_mut(t.pod.uid()) {
                    pod.remove(&c.name);
                    if pod.is_empty() {
                        reasons.remove(t.pod.uid());
                    }
                }
            }
            // A pull under way leaves the reason as it was: upstream's sync
            // blocks in the pull and its reason cache keeps the last error
            // (ImagePullBackOff goes straight to ErrImagePull, never back to
            // ContainerCreating in between).
            Err(e) if e.reason == PullError::IN_PROGRESS_REASON => {}
            Err(e) => {
                reasons
                    .entry(t.pod.uid().to_string())
                    .or_default()
                    .insert(c.name.clone(), (e.reason.to_string(), e.message.clone()));
            }
        }
        result
    }

    fn try_start_container(&self, t: &StartTarget<'_>, c: &Container) -> Result<(), SyncError> {
        self.check_crash_backoff(t.pod, c, t.status)?;
        let env_source = self.env_source.as_deref();
        let pull_secrets = match env_source {
            Some(src) => pull_secrets(src, t.pod),
            None => Vec::new(),
        };
        let image_ref = self
            .images
            .ensure_image_exists(t.pod, c, t.sandbox_config, &pull_secrets)
            .map_err(|e| self.image_error(t.pod, c, &e))?;
        let image_volumes = self.image_volumes(t, c, &pull_secrets)?;
        let restart_count = t
            .status
            .find_container(&c.name)
            .map_or(0, |s| s.restart_count + 1);
        let volumes = self.volumes.mounted_volumes(t.pod.uid());
        let host_ips = (self.host_ips)();
        let image_user = self.image_user_if_needed(t.pod, c, &image_ref)?;
        let namespaces = t
            .sandbox_config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|sc| sc.namespace_options.as_ref())
            .cloned()
            .unwrap_or_default();
        let ctx = container::ContainerContext {
            namespaces: &namespaces,
            supports_recursive_read_only: self.supports_recursive_read_only(t.pod, c),
            image_user: image_user.as_ref(),
            volumes: &volumes,
            image_volumes: &image_volumes,
            host_ips: &host_ips,
            pod: t.pod,
            container: c,
            image_ref: &image_ref,
            restart_count,
            // A host-network sandbox has no IPs of its own: the node's
            // stand in, as upstream's SyncPod puts them in podStatus.IPs.
            pod_ips: if t.pod.is_host_network() && t.pod_ips.is_empty() {
                &host_ips
            } else {
                t.pod_ips
            },
            cfg: &self.cfg,
            env_source,
        };
        let devices = self.device_options(t.pod, c)?;
        let config = container::generate_container_config(&ctx)
            .and_then(|mut config| {
                ephemeral::set_pid_target(t.pod, &c.name, t.status, &mut config)?;
                Ok(config)
            })
            .map_err(|e| self.config_error(t.pod, c, e.to_string()))?;
        let mut config = container::with_devices(config, devices);
        config.cdi_devices = self.cdi_devices(t.pod, c)?;
        // upstream PreCreateContainer: the CPU and memory managers' sets
        let cpus = self.cpus.container_cpuset(t.pod.uid(), &c.name);
        let mems = self.memory.container_cpuset_mems(t.pod.uid(), &c.name);
        if let Some(r) = config.linux.mut_or_insert_default().resources.as_mut() {
            r.cpuset_cpus = cpus.map(|s| s.to_string()).unwrap_or_default();
            r.cpuset_mems = mems.unwrap_or_default();
        }
        let kind = container_metric_label(t.pod, c);
        crate::metrics::started_container(kind);
        let id = self
            .runtime
            .create_container(t.sandbox_id, config, t.sandbox_config.clone())
            .map_err(|e| {
                crate::metrics::started_container_error(kind, e.code_name());
                log::warn!("pod {}: container {}: {e}", t.pod.full_name(), c.name);
                let msg = format!("Error: {}", e.message);
                self.recorder.pod_container_event(
                    t.pod,
                    &c.name,
                    EventType::Warning,
                    events::FAILED_TO_CREATE_CONTAINER,
                    &msg,
                );
                SyncError::runtime_message(&c.name, "CreateContainerError", &e)
            })?;
        // What the new instance was given: a resize compares against it.
        self.allocation.set_actuated(
            t.pod.uid(),
            &c.name,
            c.resources.clone().unwrap_or_default(),
        );
        self.recorder.pod_container_event(
            t.pod,
            &c.name,
            EventType::Normal,
            events::CREATED_CONTAINER,
            &format!("Created container: {}", c.name),
        );
        self.runtime.start_container(&id).map_err(|e| {
            crate::metrics::started_container_error(kind, e.code_name());
            log::warn!("pod {}: container {}: {e}", t.pod.full_name(), c.name);
            let msg = format!("Error: {}", e.message);
            self.recorder.pod_container_event(
                t.pod,
                &c.name,
                EventType::Warning,
                events::FAILED_TO_START_CONTAINER,
                &msg,
            );
            SyncError::runtime_message(&c.name, "RunContainerError", &e)
        })?;
        self.recorder.pod_container_event(
            t.pod,
            &c.name,
            EventType::Normal,
            events::STARTED_CONTAINER,
            &format!("Started container {}", c.name),
        );
        self.link_container_log(t.pod, c, &id, restart_count);
        self.run_post_start(t, c, &id);
        Ok(())
    }

    /// Upstream's startContainer: an image that cannot be had is reported a
    /// second time, as "Error: <reason>" (ErrImagePull, ImagePullBackOff,
    /// ErrImageNeverPull, ...) beside the puller's own event. A pull still
    /// under way is no error upstream, whose pulls block: no event.
    pub(super) fn image_error(&self, pod: &Pod, c: &Container, e: &PullError) -> SyncError {
        if !matches!(e, PullError::InProgress { .. }) {
            self.recorder.pod_container_event(
                pod,
                &c.name,
                EventType::Warning,
                events::FAILED_TO_CREATE_CONTAINER,
                &format!("Error: {}", e.reason()),
            );
        }
        SyncError::from_image(&c.name, e)
    }

    /// What the container's device plugins give it (upstream
    /// GetResources): while their answer is not in, the container waits
    /// as `ContainerCreating` and the pod is woken when it is; a plugin's
    /// refusal is a `CreateContainerConfigError`.
    fn device_options(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Result<crate::cm::devicemanager::RunOptions, SyncError> {
        use crate::cm::devicemanager::DeviceWait;
        let Some(devices) = &self.devices else {
            return Ok(Default::default());
        };
        devices.run_options(pod, c).map_err(|w| match w {
            DeviceWait::Pending => {
                let mut e = SyncError::new(Some(&c.name), PullError::IN_PROGRESS_REASON, "");
                // The answer wakes the pod; this is the fallback.
                e.retry_after = Some(DEVICE_WAIT_RETRY);
                e
            }
            DeviceWait::Failed(why) => self.config_error(pod, c, why),
        })
    }

    /// Upstream PrepareDynamicResources, before the pod's sandbox: while
    /// the drivers prepare its claims the pod waits as `ContainerCreating`
    /// (their answer wakes it); a failure is upstream's event, and the
    /// pod's next sync tries again.
    pub(super) fn prepare_dynamic_resources(&self, pod: &Pod) -> Result<(), SyncError> {
        use crate::cm::dra::{PrepareWait, FAILED_PREPARE_DYNAMIC_RESOURCES};
        let Some(dra) = &self.dra else {
            return Ok(());
        };
        match dra.prepare_resources(pod) {
            Ok(()) => Ok(()),
            Err(PrepareWait::Pending) => {
                let msg = "waiting for the DRA drivers to prepare the pod's ResourceClaims";
                let mut e = SyncError::new(None, "CreatePodSandboxError", msg);
                e.retry_after = Some(DEVICE_WAIT_RETRY);
                Err(e)
            }
            Err(PrepareWait::Failed(why)) => {
                let msg = format!("Failed to prepare dynamic resources: {why}");
                self.recorder.pod_event(
                    pod,
                    EventType::Warning,
                    FAILED_PREPARE_DYNAMIC_RESOURCES,
                    &msg,
                );
                Err(SyncError::new(None, "CreatePodSandboxError", msg))
            }
        }
    }

    /// The CDI devices of the claims the container uses (upstream
    /// GetResources' CDIDevices), for CRI `cdi_devices`.
    fn cdi_devices(&self, pod: &Pod, c: &Container) -> Result<Vec<api::CDIDevice>, SyncError> {
        let Some(dra) = &self.dra else {
            return Ok(Vec::new());
        };
        let ids = dra
            .cdi_devices(pod, c)
            .map_err(|why| self.config_error(pod, c, why))?;
        Ok(ids
            .into_iter()
            .map(|name| api::CDIDevice {
                name,
                ..Default::default()
            })
            .collect())
    }

    /// Upstream's ErrCreateContainerConfig: the container waits with the
    /// message, and an event carries it after "Error: ".
    fn config_error(&self, pod: &Pod, c: &Container, msg: String) -> SyncError {
        self.recorder.pod_container_event(
            pod,
            &c.name,
            EventType::Warning,
            events::FAILED_TO_CREATE_CONTAINER,
            &format!("Error: {msg}"),
        );
        SyncError::new(Some(&c.name), "CreateContainerConfigError", msg)
    }

    /// The image's user from CRI ImageStatus (upstream getImageUser), only
    /// when `runAsNonRoot` needs it: the runtime applies the image's user
    /// itself otherwise, so the common start costs no extra call.
    fn image_user_if_needed(
        &self,
        pod: &Pod,
        c: &Container,
        image_ref: &str,
    ) -> Result<Option<security_context::ImageUser>, SyncError> {
        if !security_context::needs_image_user(pod, c) {
            return Ok(None);
        }
        match self.runtime.image_status(image_ref) {
            Ok(image) => Ok(Some(security_context::ImageUser::from_image(
                image.as_ref(),
            ))),
            Err(e) => Err(self.config_error(pod, c, e.to_string())),
        }
    }

    /// The /var/log/containers symlink log collectors look for.
    fn link_container_log(&self, pod: &Pod, c: &Container, id: &str, restart_count: u32) {
        let log = sandbox::pod_log_dir(&self.cfg.pod_logs_dir, pod)
            .join(&c.name)
            .join(format!("{restart_count}.log"));
        if let Err(e) = crate::logs::create_symlink(
            &self.cfg.container_logs_dir,
            pod.name(),
            pod.namespace(),
            &c.name,
            id,
            &log,
        ) {
            log::warn!("pod {}: container log symlink: {e}", pod.full_name());
        }
    }

    /// Starts the container's postStart hook off the worker (see
    /// `post_start`): an exec hook as an async ExecSync, an httpGet or sleep
    /// hook on the handler runner. A hook that cannot run fails at once;
    /// the pod's next sync kills the container, which then restarts per its
    /// restart policy (upstream).
    fn run_post_start(&self, t: &StartTarget<'_>, c: &Container, id: &str) {
        let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) else {
            return;
        };
        // Upstream leaves postStart unbounded; the request timeout bounds it here.
        let timeout = self.runtime.request_timeout();
        let pod_ip = || t.pod_ips.first().cloned();
        self.post_start.started(t.pod.uid(), &c.name, id);
        let done = self.post_start_done(t.pod, c, id);
        match lifecycle::hook_action(hook, c, pod_ip, timeout) {
            Ok(HookAction::Exec(cmd)) => {
                let started = std::time::Instant::now();
                let argv = cmd.clone();
                let exec = lifecycle::RuntimeExec(Arc::clone(&self.runtime));
                exec.exec_async(
                    id,
                    &cmd,
                    timeout,
                    Box::new(move |reply| {
                        let (result, msg) = crate::prober::handlers::exec_verdict(
                            reply,
                            &argv,
                            started.elapsed(),
                            timeout,
                        );
                        done(match result {
                            crate::prober::ProbeResult::Success => Ok(()),
                            _ => Err(msg),
                        });
                    }),
                );
            }
            Ok(HookAction::Run(action)) => self.hook_runner.run(action, done),
            Err(msg) => done(Err(msg)),
        }
    }

    /// Where a postStart hook's outcome goes, on whichever thread it
    /// completes: a failure is recorded, the outcome kept for the pod's
    /// next sync, and the pod woken.
    fn post_start_done(&self, pod: &Pod, c: &Container, id: &str) -> HookDone {
        let hooks = self.post_start.clone();
        let wake = self.killer.wake_handle();
        let recorder = Arc::clone(&self.recorder);
        let (pod, name, cid) = (pod.clone(), c.name.clone(), id.to_string());
        Box::new(move |outcome| {
            let outcome = outcome.map_err(|msg| {
                let msg = format!("PostStartHook failed: {msg}");
                recorder.pod_container_event(
                    &pod,
                    &name,
                    EventType::Warning,
                    events::FAILED_POST_START_HOOK,
                    &msg,
                );
                msg
            });
            hooks.finished(&cid, outcome);
            wake(pod.uid());
        })
    }

    /// Upstream `doBackOff`: a container that exited is restarted only after
    /// its CrashLoopBackOff delay, counted from when its newest exited
    /// instance finished. That instance, not the newest one: a container
    /// killed by its liveness probe is restarted in the sync that killed
    /// it, whose status still shows it running, and its restarts must
    /// back off as any other.
    fn check_crash_backoff(
        &self,
        pod: &Pod,
        c: &Container,
        status: &PodStatus,
    ) -> Result<(), SyncError> {
        let last = status
            .containers
            .iter()
            .find(|s| s.name == c.name && s.state == ContainerState::Exited);
        let Some(finished) = last.and_then(|s| s.finished_at) else {
            return Ok(());
        };
        let key = backoff_key(pod, c);
        if let Some(remaining) =
            self.crash_backoff
                .remaining_since(&key, finished, SystemTime::now())
        {
            let delay = self
                .crash_backoff
                .current(&key)
                .unwrap_or(CRASH_BACKOFF_INITIAL);
            self.recorder.pod_container_event(
                pod,
                &c.name,
                EventType::Warning,
                events::BACK_OFF_START_CONTAINER,
                "Back-off restarting failed container",
            );
            let mut err = SyncError::new(
                Some(&c.name),
                "CrashLoopBackOff",
                // upstream format.Pod: name_namespace(uid).
                format!(
                    "back-off {}s restarting failed container={} pod={}({})",
                    delay.as_secs(),
                    c.name,
                    pod.full_name(),
                    pod.uid()
                ),
            );
            // Looked at again on the pod worker's back-off (10 to 15 s),
            // not when the delay ends, as upstream: the restart comes at
            // the first sync after it.
            log::debug!(
                "pod {}: container {} backs off {remaining:?} more",
                pod.full_name(),
                c.name
            );
            err.retry_after = Some(rkubelet_util::jitter(
                CRASH_BACKOFF_RESYNC,
                CRASH_BACKOFF_RESYNC_JITTER,
            ));
            return Err(err);
        }
        self.crash_backoff.next(&key, finished);
        Ok(())
    }
}

/// Upstream's stable back-off key: pod name, namespace, uid, container
/// name and spec hash — a changed spec starts with a fresh back-off.
fn backoff_key(pod: &Pod, c: &Container) -> String {
    format!(
        "{}_{}_{}_{}_{}",
        pod.name(),
        pod.namespace(),
        pod.uid(),
        c.name,
        labels::container_hash(c)
    )
}

/// The `container_type` label of the started-containers metrics.
fn container_metric_label(pod: &Pod, c: &Container) -> &'static str {
    if pod.init_containers().iter().any(|i| i.name == c.name) {
        "init_container"
    } else if pod.ephemeral_containers().iter().any(|e| e.name == c.name) {
        "ephemeral_container"
    } else {
        "container"
    }
}
