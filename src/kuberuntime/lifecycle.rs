//! Lifecycle hooks (upstream `pkg/kubelet/lifecycle/handlers.go`): postStart
//! runs right after a container starts, preStop before it is stopped. None
//! runs on a pod worker: exec hooks are async ExecSync calls, httpGet and
//! sleep go to the handler runner (`crate::lifecycle::handler_runner`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use crate::cri::{CriError, RemoteRuntime};
use crate::lifecycle::handler_runner::Action;
use crate::prober::handlers::{resolve_port, HttpTarget};
use crate::prober::{ContainerExec, ExecDone, ExecReply};

/// CRI ExecSync as the handlers want it.
pub struct RuntimeExec(pub Arc<RemoteRuntime>);

impl ContainerExec for RuntimeExec {
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecReply, CriError> {
        self.0
            .exec_sync(container_id, cmd.to_vec(), timeout)
            .map(|r| (r.exit_code, r.stdout, r.stderr))
    }

    /// Exec probes complete on gRPC's completion-queue thread, so a slow
    /// one holds no probe worker.
    fn exec_async(&self, container_id: &str, cmd: &[String], timeout: Duration, done: ExecDone) {
        self.0
            .exec_sync_async(container_id, cmd.to_vec(), timeout, move |r| {
                done(r.map(|r| (r.exit_code, r.stdout, r.stderr)))
            });
    }
}

/// What running a hook takes.
#[derive(Debug, Clone, PartialEq)]
pub enum HookAction {
    /// An async ExecSync with this command.
    Exec(Vec<String>),
    /// An httpGet or sleep for the handler runner.
    Run(Action),
}

/// Resolves a hook against its container: the command, the request or the
/// sleep, bounded by `timeout`. `pod_ip` is asked only for an httpGet that
/// names no host. `Err` carries what to report.
pub fn hook_action(
    handler: &LifecycleHandler,
    container: &Container,
    pod_ip: impl FnOnce() -> Option<String>,
    timeout: Duration,
) -> Result<HookAction, String> {
    if let Some(e) = &handler.exec {
        return Ok(HookAction::Exec(e.command.clone().unwrap_or_default()));
    }
    if let Some(h) = &handler.http_get {
        let host = match h.host.clone().filter(|h| !h.is_empty()) {
            Some(host) => host,
            None => pod_ip().ok_or("httpGet hook: the pod has no IP and the hook names no host")?,
        };
        let target = HttpTarget {
            scheme: h.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            host,
            port: resolve_port(&h.port, container)?,
            path: h.path.clone().unwrap_or_default(),
            headers: h
                .http_headers
                .iter()
                .flatten()
                .map(|hd| (hd.name.clone(), hd.value.clone()))
                .collect(),
        };
        return Ok(HookAction::Run(Action::HttpGet { target, timeout }));
    }
    if let Some(s) = &handler.sleep {
        let secs = u64::try_from(s.seconds).unwrap_or(0);
        return Ok(HookAction::Run(Action::Sleep(
            Duration::from_secs(secs).min(timeout),
        )));
    }
    // tcpSocket is accepted by the API for compatibility but never ran
    // upstream either.
    Err("hook has no exec, httpGet or sleep action".into())
}
