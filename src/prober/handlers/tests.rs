//! Handlers against local servers on 127.0.0.1.

use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use grpcio::{
    Environment, Marshaller, Method, MethodType, RpcContext, ServerBuilder, ServerCredentials,
    ServiceBuilder, UnarySink,
};
use k8s_openapi::api::core::v1::{Container, ContainerPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::client::testing::{Reply, TestServer};
use crate::cri::health::health_check_response::ServingStatus;
use crate::cri::health::{HealthCheckRequest, HealthCheckResponse};
use crate::cri::CriError;
use crate::prober::ContainerExec;

const TIMEOUT: Duration = Duration::from_secs(1);

/// An HTTP server: `/ok` 200 echoing Host and User-Agent, `/fail` 500,
/// `/to-ok` a relative redirect to `/ok`, `/away` a redirect to another
/// host, `/loop` a redirect to itself.
fn http_server() -> TestServer {
    let port = Arc::new(OnceLock::new());
    let own_port = port.clone();
    let server = TestServer::start(move |req| {
        let header = |name| req.header(name).unwrap_or_default();
        let (status, body, location) = match req.path.as_str() {
            "/ok" => (
                200,
                format!("host={};ua={}", header("Host"), header("User-Agent")),
                None,
            ),
            "/fail" => (500, "secret body".to_string(), None),
            "/to-ok" => (302, String::new(), Some("/ok".to_string())),
            "/away" => {
                let port = own_port.get().copied().unwrap_or_default();
                let loc = format!("http://127.0.0.2:{port}/ok");
                (302, "moved".to_string(), Some(loc))
            }
            _ => (302, String::new(), Some("/loop".to_string())),
        };
        let headers = location.map(|l| ("Location".to_string(), l));
        Reply::Full {
            status,
            headers: headers.into_iter().collect(),
            body: body.into_bytes(),
        }
    });
    let _ = port.set(server.port());
    server
}

fn target(port: u16, path: &str) -> HttpTarget {
    HttpTarget {
        scheme: "http".into(),
        host: "127.0.0.1".into(),
        port,
        path: path.into(),
        headers: vec![],
    }
}

#[test]
fn http_success_sends_user_agent_and_host_override() {
    let server = http_server();
    let port = server.port();
    let (result, body) = run_http_get(&target(port, "/ok"), TIMEOUT);
    assert_eq!(result, ProbeResult::Success);
    assert_eq!(body, format!("host=127.0.0.1:{port};ua={USER_AGENT}"));

    let mut t = target(port, "/ok");
    t.headers.push(("Host".into(), "example.com".into()));
    let (result, body) = run_http_get(&t, TIMEOUT);
    assert_eq!(result, ProbeResult::Success);
    assert!(body.starts_with("host=example.com;"), "{body}");
}

#[test]
fn http_error_status_fails_without_body() {
    let server = http_server();
    let port = server.port();
    let (result, msg) = run_http_get(&target(port, "/fail"), TIMEOUT);
    assert_eq!(result, ProbeResult::Failure);
    assert_eq!(msg, "HTTP probe failed with statuscode: 500");
}

#[test]
fn http_redirects() {
    let server = http_server();
    let port = server.port();
    let same = http_get(&target(port, "/to-ok"), TIMEOUT);
    assert_eq!((same.result, same.warning), (ProbeResult::Success, false));

    let away = http_get(&target(port, "/away"), TIMEOUT);
    assert_eq!((away.result, away.warning), (ProbeResult::Success, true));
    assert_eq!(
        away.output,
        "Probe terminated redirects, Response body: moved"
    );

    let looping = http_get(&target(port, "/loop"), TIMEOUT);
    assert_eq!(looping.result, ProbeResult::Failure);
    assert!(
        looping.output.ends_with("stopped after 10 redirects"),
        "{}",
        looping.output
    );
}

/// A server that accepts and never answers.
fn silent_server() -> (u16, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let handle = thread::spawn(move || {
        let held: Vec<TcpStream> = listener.incoming().take(1).flatten().collect();
        thread::sleep(Duration::from_secs(3));
        drop(held);
    });
    (port, handle)
}

#[test]
fn http_hang_fails_by_timeout() {
    let (port, _server) = silent_server();
    let start = Instant::now();
    let (result, msg) = run_http_get(&target(port, "/"), TIMEOUT);
    let took = start.elapsed();
    assert_eq!(result, ProbeResult::Failure, "{msg}");
    assert!(took >= TIMEOUT && took < TIMEOUT * 2, "took {took:?}");
}

fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn tcp_open_and_closed() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    assert_eq!(run_tcp("127.0.0.1", port, TIMEOUT).0, ProbeResult::Success);
    drop(listener);
    let (result, msg) = run_tcp("127.0.0.1", closed_port(), TIMEOUT);
    assert_eq!(result, ProbeResult::Failure);
    assert!(msg.starts_with("dial tcp 127.0.0.1:"), "{msg}");
}

const CHECK: Method<HealthCheckRequest, HealthCheckResponse> = Method {
    ty: MethodType::Unary,
    name: "/grpc.health.v1.Health/Check",
    req_mar: Marshaller {
        ser: grpcio::pb_ser,
        de: grpcio::pb_de,
    },
    resp_mar: Marshaller {
        ser: grpcio::pb_ser,
        de: grpcio::pb_de,
    },
};

/// A health server: every service is SERVING but "down".
fn grpc_server() -> (grpcio::Server, u16) {
    let service = ServiceBuilder::new()
        .add_unary_handler(
            &CHECK,
            |ctx: RpcContext<'_>, req: HealthCheckRequest, sink: UnarySink<HealthCheckResponse>| {
                let mut resp = HealthCheckResponse::new();
                resp.status = if req.service == "down" {
                    ServingStatus::NOT_SERVING
                } else {
                    ServingStatus::SERVING
                }
                .into();
                ctx.spawn(async move {
                    let _ = sink.success(resp).await;
                });
            },
        )
        .build();
    let env = Arc::new(Environment::new(1));
    let mut server = ServerBuilder::new(env)
        .register_service(service)
        .build()
        .expect("grpc server");
    let port = server
        .add_listening_port("127.0.0.1:0", ServerCredentials::insecure())
        .expect("bind");
    server.start();
    (server, port)
}

#[test]
fn grpc_health() {
    let (_server, port) = grpc_server();
    assert_eq!(
        run_grpc("127.0.0.1", port, None, TIMEOUT),
        (ProbeResult::Success, "service healthy".to_string())
    );
    let (result, msg) = run_grpc("127.0.0.1", port, Some("down"), TIMEOUT);
    assert_eq!(result, ProbeResult::Failure);
    assert_eq!(msg, "service unhealthy (responded with \"NOT_SERVING\")");

    let start = Instant::now();
    let (result, msg) = run_grpc("127.0.0.1", closed_port(), None, TIMEOUT);
    assert_eq!(result, ProbeResult::Failure);
    assert!(msg.starts_with("error: health rpc probe failed"), "{msg}");
    assert!(start.elapsed() < TIMEOUT * 2);
}

struct FakeExec(Result<crate::prober::ExecReply, CriError>);

impl ContainerExec for FakeExec {
    fn exec_sync(
        &self,
        _: &str,
        _: &[String],
        _: Duration,
    ) -> Result<crate::prober::ExecReply, CriError> {
        self.0.clone()
    }
}

fn exec_error(code: grpcio::RpcStatusCode, message: &str) -> CriError {
    CriError {
        method: "ExecSync",
        code: Some(code),
        message: message.into(),
    }
}

#[test]
fn exec_results() {
    let cmd = vec!["cat".to_string(), "/tmp/healthy".to_string()];
    let run = |r| run_exec(&FakeExec(r), "c1", &cmd, TIMEOUT);
    let not_found = exec_error(grpcio::RpcStatusCode::NOT_FOUND, "container not found");
    assert_eq!(
        run(Ok((0, b"fine".to_vec(), vec![]))),
        (ProbeResult::Success, "fine".into())
    );
    assert_eq!(
        run(Ok((1, b"out ".to_vec(), b"err".to_vec()))),
        (ProbeResult::Failure, "out err".into())
    );
    assert_eq!(
        run(Err(exec_error(
            grpcio::RpcStatusCode::DEADLINE_EXCEEDED,
            "Deadline Exceeded"
        ))),
        (
            ProbeResult::Failure,
            "command \"cat /tmp/healthy\" timed out".into()
        )
    );
    assert_eq!(
        run(Err(not_found.clone())),
        (ProbeResult::Unknown, not_found.to_string())
    );
    let (_, big) = run(Ok((0, vec![b'x'; 3 * MAX_PROBE_OUTPUT], vec![])));
    assert_eq!(big.len(), MAX_PROBE_OUTPUT);
}

#[test]
fn ports_by_number_and_name() {
    let c = Container {
        name: "c".into(),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
    assert_eq!(
        resolve_port(&IntOrString::String("http".into()), &c),
        Ok(8080)
    );
    assert!(resolve_port(&IntOrString::String("grpc".into()), &c).is_err());
    assert!(resolve_port(&IntOrString::Int(0), &c).is_err());
    assert!(resolve_port(&IntOrString::Int(70000), &c).is_err());
}
