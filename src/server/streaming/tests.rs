use super::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::thread;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What the fake stream server saw.
#[derive(Default, Debug, Clone)]
struct Seen {
    request_line: String,
    headers: Vec<(String, String)>,
}

/// A fake runtime stream server on 127.0.0.1: answers `status` and, on 101,
/// echoes every byte upper-cased until EOF, then writes "bye" and closes.
fn fake_stream_server(status: u16) -> (u16, Arc<Mutex<Seen>>, thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = Arc::clone(&seen);
    let h = thread::spawn(move || {
        let (sock, _) = l.accept().unwrap();
        let mut r = BufReader::new(sock.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        *s2.lock().unwrap() = Seen {
            request_line: line.trim_end().to_string(),
            headers,
        };
        let mut w = sock;
        if status != 101 {
            let body = "token expired";
            write!(
                w,
                "HTTP/1.1 {status} Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            return;
        }
        // The 101 and the first protocol bytes in one write.
        w.write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nREADY")
            .unwrap();
        let mut buf = [0u8; 4096];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let up: Vec<u8> = buf[..n].to_ascii_uppercase();
                    if w.write_all(&up).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = w.write_all(b"bye");
    });
    (port, seen, h)
}

struct FakeRuntime {
    url: Mutex<String>,
    containers: HashMap<(String, String), String>,
    exec_reqs: Mutex<Vec<api::ExecRequest>>,
    attach_reqs: Mutex<Vec<api::AttachRequest>>,
    pf_reqs: Mutex<Vec<(String, Vec<i32>)>>,
    fail: Option<CriError>,
}

impl FakeRuntime {
    fn new(url: String) -> Self {
        FakeRuntime {
            url: Mutex::new(url),
            containers: HashMap::from([
                (
                    ("uid-1".to_string(), "app".to_string()),
                    "cid-app".to_string(),
                ),
                (
                    ("uid-1".to_string(), "shell".to_string()),
                    "cid-shell".to_string(),
                ),
            ]),
            exec_reqs: Mutex::default(),
            attach_reqs: Mutex::default(),
            pf_reqs: Mutex::default(),
            fail: None,
        }
    }

    fn result(&self) -> Result<String, CriError> {
        match &self.fail {
            Some(e) => Err(e.clone()),
            None => Ok(self.url.lock().unwrap().clone()),
        }
    }
}

impl StreamingRuntime for FakeRuntime {
    fn running_container_id(&self, pod_uid: &str, name: &str) -> Result<Option<String>, CriError> {
        Ok(self
            .containers
            .get(&(pod_uid.to_string(), name.to_string()))
            .cloned())
    }
    fn sandbox_id(&self, pod_uid: &str) -> Result<Option<String>, CriError> {
        Ok((pod_uid == "uid-1").then(|| "sb-1".to_string()))
    }
    fn exec(&self, req: api::ExecRequest) -> Result<String, CriError> {
        self.exec_reqs.lock().unwrap().push(req);
        self.result()
    }
    fn attach(&self, req: api::AttachRequest) -> Result<String, CriError> {
        self.attach_reqs.lock().unwrap().push(req);
        self.result()
    }
    fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String, CriError> {
        self.pf_reqs
            .lock()
            .unwrap()
            .push((sandbox_id.to_string(), ports));
        self.result()
    }
}

fn pod() -> Pod {
    let c = |name: &str, tty: bool| Container {
        name: name.into(),
        tty: Some(tty),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![c("app", false)],
            // A `kubectl debug` container: attach finds it and its tty.
            ephemeral_containers: Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
                name: "shell".into(),
                tty: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn server(rt: Arc<FakeRuntime>, cfg: StreamingConfig) -> Arc<StreamingServer> {
    let host = |ns: &str, name: &str| (ns == "default" && name == "web").then(pod);
    StreamingServer::new(Arc::new(host), rt, cfg)
}

fn spdy_headers() -> Vec<(String, String)> {
    vec![
        ("Host".into(), "node-a:10250".into()),
        ("Connection".into(), "Upgrade".into()),
        ("Upgrade".into(), "SPDY/3.1".into()),
        (
            "X-Stream-Protocol-Version".into(),
            "v4.channel.k8s.io".into(),
        ),
        (
            "X-Stream-Protocol-Version".into(),
            "v3.channel.k8s.io".into(),
        ),
        ("Authorization".into(), "Bearer secret".into()),
    ]
}

fn ws_headers() -> Vec<(String, String)> {
    vec![
        ("Connection".into(), "keep-alive, Upgrade".into()),
        ("Upgrade".into(), "websocket".into()),
        ("Sec-WebSocket-Protocol".into(), "v5.channel.k8s.io".into()),
    ]
}

fn request<'a>(
    method: &'a str,
    path: &'a str,
    query: &'a str,
    headers: &'a [(String, String)],
) -> StreamRequest<'a> {
    StreamRequest {
        method,
        path,
        query,
        headers,
        remote_addr: Some("10.1.2.3:4444".parse().unwrap()),
    }
}

fn status(r: &Reply) -> u16 {
    match r {
        Reply::Respond { status, .. } => *status,
        Reply::Upgrade(_) => 101,
    }
}

fn body(r: &Reply) -> String {
    match r {
        Reply::Respond { body, .. } => String::from_utf8_lossy(body).into_owned(),
        Reply::Upgrade(_) => String::new(),
    }
}

/// A connected pair: (the kubelet's accepted side, the client's side).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    // A stuck relay fails the test instead of hanging the suite (seen once
    // under heavy load: the test sat in a read for minutes).
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let (server, _) = l.accept().unwrap();
    (server, client)
}

fn read_until(s: &mut impl Read, needle: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    read_more_until(s, &mut got, needle);
    got
}

/// Reads into `got` until the needle appears anywhere in it. One read can
/// return the bytes of two relayed writes, so a caller waiting for the
/// second must search what it already holds too.
fn read_more_until(s: &mut impl Read, got: &mut Vec<u8>, needle: &[u8]) {
    let mut b = [0u8; 1024];
    while !got.windows(needle.len()).any(|w| w == needle) {
        let n = s.read(&mut b).unwrap();
        assert!(
            n > 0,
            "EOF before {:?}; got {:?}",
            String::from_utf8_lossy(needle),
            String::from_utf8_lossy(got)
        );
        got.extend_from_slice(&b[..n]);
    }
}

#[test]
fn exec_relays_upgrade_and_bytes_both_ways() {
    let (port, seen, backend) = fake_stream_server(101);
    let rt = Arc::new(FakeRuntime::new(format!(
        "http://127.0.0.1:{port}/exec/TOKEN123"
    )));
    let srv = server(rt.clone(), StreamingConfig::default());
    let headers = spdy_headers();
    let reply = srv.handle(&request(
        "POST",
        "/exec/default/web/app",
        "command=sh&command=-c&command=echo+hi%21&input=1&output=1&error=1",
        &headers,
    ));
    let Some(Reply::Upgrade(up)) = reply else {
        panic!(
            "expected an upgrade, got {:?}",
            reply.map(|r| (status(&r), body(&r)))
        );
    };
    assert_eq!(srv.active_streams(), 1);

    // The runtime saw the rewritten request.
    let s = seen.lock().unwrap().clone();
    assert_eq!(s.request_line, "POST /exec/TOKEN123 HTTP/1.1");
    let h = |n: &str| -> Vec<String> {
        s.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(h("host"), vec![format!("127.0.0.1:{port}")]);
    assert_eq!(h("upgrade"), vec!["SPDY/3.1"]);
    assert_eq!(h("x-stream-protocol-version").len(), 2);
    assert!(h("authorization").is_empty());
    assert_eq!(h("x-forwarded-for"), vec!["10.1.2.3"]);
    // ... and the CRI request carried the command and stream options.
    let er = rt.exec_reqs.lock().unwrap()[0].clone();
    assert_eq!(er.container_id, "cid-app");
    assert_eq!(er.cmd, vec!["sh", "-c", "echo hi!"]);
    assert!(er.stdin && er.stdout && er.stderr && !er.tty);

    let (kubelet_side, mut client) = tcp_pair();
    let srv2 = Arc::clone(&srv);
    let relay = thread::spawn(move || {
        up.run(Box::new(kubelet_side), b"early ");
        drop(srv2);
    });
    let mut got = read_until(&mut client, b"READY");
    let head = String::from_utf8_lossy(&got).into_owned();
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    assert!(head.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"));
    // Bytes the framework had already read go first.
    client.write_all(b"hello").unwrap();
    // "EARLY " may have come with the head's read (the flake CI hit).
    read_more_until(&mut client, &mut got, b"EARLY HELLO");
    // A larger payload, both ways.
    let big: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut writer = client.try_clone().unwrap();
    let big2 = big.clone();
    let w = thread::spawn(move || writer.write_all(&big2).unwrap());
    let mut got = Vec::new();
    let mut b = [0u8; 8192];
    while got.len() < big.len() {
        let n = client.read(&mut b).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&b[..n]);
    }
    w.join().unwrap();
    assert_eq!(got, big.to_ascii_uppercase());
    // Client hangs up: everything winds down, the slot is released.
    client.shutdown(std::net::Shutdown::Both).unwrap();
    relay.join().unwrap();
    backend.join().unwrap();
    assert_eq!(srv.active_streams(), 0);
}

#[test]
fn runtime_closing_ends_the_stream_for_the_client() {
    let (port, _seen, backend) = fake_stream_server(101);
    let rt = Arc::new(FakeRuntime::new(format!(
        "http://127.0.0.1:{port}/attach/T"
    )));
    let srv = server(rt.clone(), StreamingConfig::default());
    let headers = ws_headers();
    let Some(Reply::Upgrade(up)) = srv.handle(&request(
        "GET",
        "/attach/default/web/uid-1/shell",
        "input=1&output=1&error=1",
        &headers,
    )) else {
        panic!("expected upgrade");
    };
    // Attach takes tty from the container spec and folds stderr into it.
    let ar = rt.attach_reqs.lock().unwrap()[0].clone();
    assert_eq!(ar.container_id, "cid-shell");
    assert!(ar.tty && ar.stdin && ar.stdout && !ar.stderr);

    let (kubelet_side, mut client) = tcp_pair();
    let relay = thread::spawn(move || up.run(Box::new(kubelet_side), b""));
    read_until(&mut client, b"READY");
    // Half-close towards the runtime: it answers "bye" and closes; the client
    // then sees EOF (the proxy closes its side too).
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"bye");
    relay.join().unwrap();
    backend.join().unwrap();
}

#[test]
fn idle_stream_is_closed() {
    let (port, _seen, backend) = fake_stream_server(101);
    let rt = Arc::new(FakeRuntime::new(format!("http://127.0.0.1:{port}/exec/T")));
    let cfg = StreamingConfig {
        idle_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let srv = server(rt, cfg);
    let headers = spdy_headers();
    let Some(Reply::Upgrade(up)) = srv.handle(&request(
        "GET",
        "/exec/default/web/app",
        "command=ls&output=1",
        &headers,
    )) else {
        panic!("expected upgrade");
    };
    let (kubelet_side, mut client) = tcp_pair();
    let start = std::time::Instant::now();
    let relay = thread::spawn(move || up.run(Box::new(kubelet_side), b""));
    read_until(&mut client, b"READY");
    let mut rest = Vec::new();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = client.read_to_end(&mut rest);
    relay.join().unwrap();
    backend.join().unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn port_forward_websocket_ports_and_sandbox() {
    let (port, seen, backend) = fake_stream_server(101);
    let rt = Arc::new(FakeRuntime::new(format!(
        "http://127.0.0.1:{port}/portforward/T"
    )));
    let srv = server(rt.clone(), StreamingConfig::default());
    let ws = ws_headers();
    let r = srv
        .handle(&request(
            "GET",
            "/portForward/default/web",
            "port=80,8080&port=9090",
            &ws,
        ))
        .unwrap();
    assert_eq!(status(&r), 101);
    assert_eq!(
        *rt.pf_reqs.lock().unwrap(),
        vec![("sb-1".to_string(), vec![80, 8080, 9090])]
    );
    assert_eq!(
        seen.lock().unwrap().request_line,
        "GET /portforward/T HTTP/1.1"
    );
    drop(r);
    backend.join().unwrap();

    // Bad or missing ports for WebSocket clients are 400s.
    for q in ["", "port=0", "port=http", "port="] {
        let r = srv
            .handle(&request("GET", "/portForward/default/web", q, &ws))
            .unwrap();
        assert_eq!(status(&r), 400, "{q}: {}", body(&r));
    }
    // SPDY clients need no ports; a wrong UID is a 404.
    let spdy = spdy_headers();
    let r = srv
        .handle(&request(
            "POST",
            "/portForward/default/web/uid-other",
            "",
            &spdy,
        ))
        .unwrap();
    assert_eq!(status(&r), 404);
}

#[test]
fn request_errors() {
    let rt = Arc::new(FakeRuntime::new("http://127.0.0.1:1/exec/x".into()));
    let srv = server(rt.clone(), StreamingConfig::default());
    let h = spdy_headers();
    let cases: &[(&str, &str, &str, u16)] = &[
        ("GET", "/exec/default/nope/app", "command=ls&output=1", 404),
        (
            "GET",
            "/exec/default/web/missing",
            "command=ls&output=1",
            404,
        ),
        (
            "GET",
            "/exec/default/web/uid-2/app",
            "command=ls&output=1",
            404,
        ),
        ("GET", "/attach/default/web/missing", "output=1", 404),
        ("GET", "/exec/default/web/app", "output=1", 400),
        ("GET", "/exec/default/web/app", "command=&output=1", 400),
        ("GET", "/exec/default/web/app", "command=ls", 400),
        ("GET", "/exec/default/web", "command=ls&output=1", 404),
        ("GET", "/exec/default/web/a/b/c", "command=ls&output=1", 404),
        ("PUT", "/exec/default/web/app", "command=ls&output=1", 405),
    ];
    for (m, p, q, want) in cases {
        let r = srv.handle(&request(m, p, q, &h)).unwrap();
        assert_eq!(status(&r), *want, "{m} {p}?{q}: {}", body(&r));
    }
    // Not an upgrade request.
    let plain = vec![("Accept".to_string(), "*/*".to_string())];
    let r = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &plain,
        ))
        .unwrap();
    assert_eq!(status(&r), 400);
    assert!(body(&r).contains("Upgrade request required"));
    // Not ours.
    assert!(srv.handle(&request("GET", "/pods", "", &h)).is_none());
    assert!(
        rt.exec_reqs.lock().unwrap().is_empty(),
        "no CRI call for bad requests"
    );
    // The runtime's stream server is down: 502, slot released.
    let r = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &h,
        ))
        .unwrap();
    assert_eq!(status(&r), 502, "{}", body(&r));
    assert_eq!(srv.active_streams(), 0);
}

#[test]
fn cri_errors_map_to_http() {
    let mut rt = FakeRuntime::new(String::new());
    rt.fail = Some(CriError {
        method: "Exec",
        code: Some(grpcio::RpcStatusCode::NOT_FOUND),
        message: "container gone".into(),
    });
    let srv = server(Arc::new(rt), StreamingConfig::default());
    let h = spdy_headers();
    let r = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &h,
        ))
        .unwrap();
    assert_eq!(status(&r), 404);

    let mut rt = FakeRuntime::new(String::new());
    rt.fail = Some(CriError {
        method: "Exec",
        code: Some(grpcio::RpcStatusCode::RESOURCE_EXHAUSTED),
        message: "too many".into(),
    });
    let srv = server(Arc::new(rt), StreamingConfig::default());
    let r = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &h,
        ))
        .unwrap();
    assert_eq!(status(&r), 429);
}

#[test]
fn non_101_from_runtime_is_passed_back() {
    let (port, _seen, backend) = fake_stream_server(404);
    let rt = Arc::new(FakeRuntime::new(format!(
        "http://127.0.0.1:{port}/exec/OLD"
    )));
    let srv = server(rt, StreamingConfig::default());
    let h = spdy_headers();
    let r = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &h,
        ))
        .unwrap();
    assert_eq!(status(&r), 404);
    assert_eq!(body(&r), "token expired");
    assert!(matches!(&r, Reply::Respond { content_type, .. } if content_type == "text/plain"));
    assert_eq!(srv.active_streams(), 0);
    backend.join().unwrap();
}

#[test]
fn max_streams_gives_429() {
    let (port, _seen, backend) = fake_stream_server(101);
    let rt = Arc::new(FakeRuntime::new(format!("http://127.0.0.1:{port}/exec/T")));
    let cfg = StreamingConfig {
        max_streams: 1,
        ..Default::default()
    };
    let srv = server(rt, cfg);
    let h = spdy_headers();
    let first = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &h,
        ))
        .unwrap();
    assert_eq!(status(&first), 101);
    let second = srv
        .handle(&request(
            "GET",
            "/exec/default/web/app",
            "command=ls&output=1",
            &h,
        ))
        .unwrap();
    assert_eq!(status(&second), 429);
    drop(first);
    assert_eq!(srv.active_streams(), 0);
    backend.join().unwrap();
}

#[test]
fn stream_url_parsing() {
    let u = proxy::StreamUrl::parse("http://127.0.0.1:35000/exec/abc").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.request_target.as_str()),
        ("127.0.0.1", 35000, "/exec/abc")
    );
    let u = proxy::StreamUrl::parse("http://[::1]:8080/pf/x?y=1").unwrap();
    assert_eq!(
        (u.host.as_str(), u.port, u.request_target.as_str()),
        ("::1", 8080, "/pf/x?y=1")
    );
    let u = proxy::StreamUrl::parse("http://localhost").unwrap();
    assert_eq!((u.port, u.request_target.as_str()), (80, "/"));
    assert!(proxy::StreamUrl::parse("https://x/y").is_err());
    assert!(proxy::StreamUrl::parse("/exec/x").is_err());
    assert!(proxy::StreamUrl::parse("http://:80/x").is_err());
    assert!(proxy::StreamUrl::parse("http://h:notaport/x").is_err());
}

#[test]
fn query_and_options() {
    let q = parse_query("command=echo&command=a+b%20c&tty=1&input=true&error=1");
    assert_eq!(query_all(&q, "command"), vec!["echo", "a b c"]);
    // tty folds stderr away.
    assert_eq!(
        stream_options(&q).unwrap(),
        Options {
            stdin: true,
            stdout: false,
            stderr: false,
            tty: true
        }
    );
    assert!(stream_options(&parse_query("tty=1")).is_err());
    assert_eq!(percent_decode("%zz%4"), "%zz%4");
}

/// The TLS halves: a rustls server stream split across two threads relays
/// correctly (the kubelet's API server is TLS).
#[test]
fn tls_client_stream_relays() {
    use crate::client::tls::{parse_certs, parse_key, parse_roots};
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/client/testdata/");
    let certs = parse_certs(&std::fs::read(format!("{dir}server.crt")).unwrap()).unwrap();
    let key = parse_key(&std::fs::read(format!("{dir}server.key")).unwrap()).unwrap();
    let roots = parse_roots(&std::fs::read(format!("{dir}ca.crt")).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server_cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    );
    let client_cfg = Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );

    let (port, _seen, backend) = fake_stream_server(101);
    let rt = Arc::new(FakeRuntime::new(format!("http://127.0.0.1:{port}/exec/T")));
    let srv = server(rt, StreamingConfig::default());
    let h = spdy_headers();
    let Some(Reply::Upgrade(up)) = srv.handle(&request(
        "GET",
        "/exec/default/web/app",
        "command=ls&input=1&output=1",
        &h,
    )) else {
        panic!("expected upgrade");
    };

    let (kubelet_side, client_sock) = tcp_pair();
    let relay = thread::spawn(move || {
        let conn = rustls::ServerConnection::new(server_cfg).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, kubelet_side);
        // Drive the handshake as the framework would while reading the request.
        while tls.conn.is_handshaking() {
            tls.conn.complete_io(&mut tls.sock).unwrap();
        }
        up.run(Box::new(tls), b"");
    });
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(client_cfg, name).unwrap();
    let mut client = rustls::StreamOwned::new(conn, client_sock);
    read_until(&mut client, b"READY");
    let payload: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    // Interleave writes and reads on one thread in chunks (the fake echoes).
    let mut got = Vec::new();
    let mut b = [0u8; 16384];
    for chunk in payload.chunks(10_000) {
        client.write_all(chunk).unwrap();
        client.flush().unwrap();
        let want = got.len() + chunk.len();
        while got.len() < want {
            let n = client.read(&mut b).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&b[..n]);
        }
    }
    assert_eq!(got, payload.to_ascii_uppercase());
    client.conn.send_close_notify();
    client.flush().unwrap();
    // The runtime says "bye" on EOF, then the proxy sends close_notify.
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    assert_eq!(rest, b"bye");
    relay.join().unwrap();
    backend.join().unwrap();
}
