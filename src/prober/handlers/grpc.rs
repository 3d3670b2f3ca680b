//! gRPC probes (upstream `pkg/probe/grpc`): grpc.health.v1.Health/Check
//! over an insecure channel; SERVING is success, anything else fails.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, EnvBuilder, Environment, RpcStatusCode};

use super::{join_host_port, USER_AGENT};
use crate::cri::health::health_check_response::ServingStatus;
use crate::cri::health::HealthCheckRequest;
use crate::cri::health_grpc::HealthClient;
use crate::prober::ProbeResult;

/// One completion-queue thread for every gRPC probe, created on first use.
fn env() -> Arc<Environment> {
    static ENV: OnceLock<Arc<Environment>> = OnceLock::new();
    ENV.get_or_init(|| {
        crate::cri::core_plugins::link();
        Arc::new(
            EnvBuilder::new()
                .cq_count(1)
                .name_prefix("grpc-probe")
                .build(),
        )
    })
    .clone()
}

/// Calls Check on `host:port`. Every error is a failure, as upstream (which
/// mimics grpc_health_probe); the call, connection included, is bounded by
/// `timeout`.
pub fn run_grpc(
    host: &str,
    port: u16,
    service: Option<&str>,
    timeout: Duration,
) -> (ProbeResult, String) {
    let addr = join_host_port(host, port);
    let channel = ChannelBuilder::new(env())
        .primary_user_agent(USER_AGENT)
        .connect(&addr);
    let client = HealthClient::new(channel);
    let req = HealthCheckRequest {
        service: service.unwrap_or_default().to_string(),
        ..Default::default()
    };
    match client.check(&req, CallOption::default().timeout(timeout)) {
        Ok(resp) => match resp.status.enum_value() {
            Ok(ServingStatus::SERVING) => (ProbeResult::Success, "service healthy".to_string()),
            other => (
                ProbeResult::Failure,
                format!(
                    "service unhealthy (responded with {:?})",
                    status_name(other)
                ),
            ),
        },
        Err(e) => (ProbeResult::Failure, call_error(e, timeout)),
    }
}

fn status_name(status: Result<ServingStatus, i32>) -> String {
    match status {
        Ok(s) => format!("{s:?}"),
        Err(n) => n.to_string(),
    }
}

fn call_error(err: grpcio::Error, timeout: Duration) -> String {
    match &err {
        grpcio::Error::RpcFailure(s) if s.code() == RpcStatusCode::UNIMPLEMENTED => format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            s.message()
        ),
        grpcio::Error::RpcFailure(s) if s.code() == RpcStatusCode::DEADLINE_EXCEEDED => {
            format!("timeout: health rpc did not complete within {timeout:?}")
        }
        _ => format!("error: health rpc probe failed: {err}"),
    }
}
