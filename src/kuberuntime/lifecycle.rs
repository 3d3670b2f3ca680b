//! Lifecycle hooks (upstream `pkg/kubelet/lifecycle/handlers.go`): postStart
//! runs right after a container starts, preStop before it is stopped. They
//! use the same exec and HTTP handlers as probes.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

use crate::cri::RemoteRuntime;
use crate::prober::handlers::{resolve_port, run_exec, run_http_get, HttpTarget};
use crate::prober::{ContainerExec, ExecDone, ProbeResult};

/// CRI ExecSync as the handlers want it.
pub struct RuntimeExec(pub Arc<RemoteRuntime>);

impl ContainerExec for RuntimeExec {
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(i32, Vec<u8>, Vec<u8>), String> {
        self.0
            .exec_sync(container_id, cmd.to_vec(), timeout)
            .map(|r| (r.exit_code, r.stdout, r.stderr))
            .map_err(|e| e.to_string())
    }

    /// Exec probes complete on gRPC's completion-queue thread, so a slow
    /// one holds no probe worker.
    fn exec_async(&self, container_id: &str, cmd: &[String], timeout: Duration, done: ExecDone) {
        self.0
            .exec_sync_async(container_id, cmd.to_vec(), timeout, move |r| {
                done(
                    r.map(|r| (r.exit_code, r.stdout, r.stderr))
                        .map_err(|e| e.to_string()),
                )
            });
    }
}

/// Runs one hook, bounded by `timeout`. `Err` carries what to report.
pub fn run_hook(
    exec: &dyn ContainerExec,
    handler: &LifecycleHandler,
    container: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
    timeout: Duration,
) -> Result<(), String> {
    let verdict = |(result, msg): (ProbeResult, String)| match result {
        ProbeResult::Success => Ok(()),
        _ => Err(msg),
    };
    if let Some(e) = &handler.exec {
        let cmd = e.command.clone().unwrap_or_default();
        return verdict(run_exec(exec, container_id, &cmd, timeout));
    }
    if let Some(h) = &handler.http_get {
        let host = h
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .or_else(|| pod_ip.map(str::to_string))
            .ok_or("httpGet hook: the pod has no IP and the hook names no host")?;
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
        return verdict(run_http_get(&target, timeout));
    }
    if let Some(s) = &handler.sleep {
        let secs = u64::try_from(s.seconds).unwrap_or(0);
        std::thread::sleep(Duration::from_secs(secs).min(timeout));
        return Ok(());
    }
    // tcpSocket is accepted by the API for compatibility but never ran
    // upstream either.
    Err("hook has no exec, httpGet or sleep action".into())
}
