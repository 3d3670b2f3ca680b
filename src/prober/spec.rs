//! A probe's settings with the API defaults applied, and the check a due
//! probe turns into once the pod IP and ports are known.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};

use super::handlers::{http_target, resolve_port, HttpTarget};
use super::ProbeKind;
use crate::kuberuntime::container::expand_vars;

#[derive(Debug, Clone)]
pub(crate) struct ProbeSpec {
    pub action: Probe,
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeSpec {
    /// Upstream defaults (period 10 s, timeout 1 s, thresholds 1 and 3);
    /// liveness and startup succeed on their first success.
    pub fn new(probe: &Probe, kind: ProbeKind) -> Self {
        let success = match kind {
            ProbeKind::Readiness => threshold(probe.success_threshold, 1),
            ProbeKind::Liveness | ProbeKind::Startup => 1,
        };
        ProbeSpec {
            action: probe.clone(),
            initial_delay: seconds(probe.initial_delay_seconds, 0, 0),
            period: seconds(probe.period_seconds, 10, 1),
            timeout: seconds(probe.timeout_seconds, 1, 1),
            success_threshold: success,
            failure_threshold: threshold(probe.failure_threshold, 3),
        }
    }
}

fn seconds(value: Option<i32>, default: i32, min: i32) -> Duration {
    let secs = value.filter(|v| *v > 0).unwrap_or(default).max(min);
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

fn threshold(value: Option<i32>, default: u32) -> u32 {
    value
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

/// What a worker runs for one due probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    Exec(Vec<String>),
    Http(HttpTarget),
    Tcp {
        host: String,
        port: u16,
    },
    Grpc {
        host: String,
        port: u16,
        service: Option<String>,
    },
    /// The probe cannot run (no handler, unknown port, no pod IP).
    Invalid(String),
}

impl Check {
    pub fn new(probe: &Probe, container: &Container, pod_ip: Option<&str>) -> Self {
        Self::resolve(probe, container, pod_ip).unwrap_or_else(Check::Invalid)
    }

    fn resolve(probe: &Probe, container: &Container, pod_ip: Option<&str>) -> Result<Self, String> {
        if let Some(exec) = &probe.exec {
            return Ok(Check::Exec(expand_command(
                exec.command.as_deref().unwrap_or_default(),
                container,
            )));
        }
        if let Some(http) = &probe.http_get {
            return http_target(http, container, pod_ip).map(Check::Http);
        }
        if let Some(tcp) = &probe.tcp_socket {
            let host = tcp.host.as_deref().filter(|h| !h.is_empty());
            return Ok(Check::Tcp {
                host: host_or_pod_ip(host, pod_ip)?,
                port: resolve_port(&tcp.port, container)?,
            });
        }
        if let Some(grpc) = &probe.grpc {
            let port = u16::try_from(grpc.port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("invalid port number: {}", grpc.port))?;
            return Ok(Check::Grpc {
                host: host_or_pod_ip(None, pod_ip)?,
                port,
                service: grpc.service.clone(),
            });
        }
        Err(format!(
            "missing probe handler for container {}",
            container.name
        ))
    }
}

fn host_or_pod_ip(host: Option<&str>, pod_ip: Option<&str>) -> Result<String, String> {
    host.or(pod_ip.filter(|ip| !ip.is_empty()))
        .map(str::to_string)
        .ok_or_else(|| "the pod has no IP yet".to_string())
}

/// `$(VAR)` references to the container's literal env values expanded
/// (upstream ExpandContainerCommandOnlyStatic).
fn expand_command(cmd: &[String], container: &Container) -> Vec<String> {
    let env: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        .filter(|e| e.value_from.is_none())
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    cmd.iter().map(|arg| expand_vars(arg, &env)).collect()
}
