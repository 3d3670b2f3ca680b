//! Against a real containerd (skipped unless RKUBELET_IT_CRI_SOCK names its
//! socket, e.g. one from tests/harness/containerd.sh): exec and port-forward
//! through the proxy with a WebSocket (v4.channel.k8s.io) client, the stats
//! summary from real CRI stats, and log rotation with ReopenContainerLog.

use super::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::thread;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::server::stats::{StatsConfig, SummaryProvider};

const UID: &str = "rkst-it-uid-0001";
const BUSYBOX: &str = "docker.io/library/busybox:1.36";

struct Cleanup {
    rt: Arc<RemoteRuntime>,
    sandbox: String,
    logdir: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.rt.stop_pod_sandbox(&self.sandbox);
        let _ = self.rt.remove_pod_sandbox(&self.sandbox);
        let _ = std::fs::remove_dir_all(&self.logdir);
    }
}

fn labels(container: Option<&str>) -> HashMap<String, String> {
    let mut l = HashMap::from([
        (POD_UID_LABEL.to_string(), UID.to_string()),
        ("io.kubernetes.pod.name".to_string(), "web".to_string()),
        (
            "io.kubernetes.pod.namespace".to_string(),
            "default".to_string(),
        ),
    ]);
    if let Some(c) = container {
        l.insert(CONTAINER_NAME_LABEL.to_string(), c.to_string());
    }
    l
}

fn ws_request_headers() -> Vec<(String, String)> {
    vec![
        ("Connection".into(), "Upgrade".into()),
        ("Upgrade".into(), "websocket".into()),
        ("Sec-WebSocket-Version".into(), "13".into()),
        (
            "Sec-WebSocket-Key".into(),
            "dGhlIHNhbXBsZSBub25jZQ==".into(),
        ),
        ("Sec-WebSocket-Protocol".into(), "v4.channel.k8s.io".into()),
        ("Origin".into(), "http://localhost".into()),
    ]
}

/// One WebSocket frame from the server: (opcode, payload).
fn read_frame(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).ok()?;
    let opcode = h[0] & 0x0f;
    let mut len = u64::from(h[1] & 0x7f);
    if len == 126 {
        let mut b = [0u8; 2];
        s.read_exact(&mut b).ok()?;
        len = u64::from(u16::from_be_bytes(b));
    } else if len == 127 {
        let mut b = [0u8; 8];
        s.read_exact(&mut b).ok()?;
        len = u64::from_be_bytes(b);
    }
    let mut p = vec![0u8; len as usize];
    s.read_exact(&mut p).ok()?;
    Some((opcode, p))
}

/// A masked binary client frame.
fn write_frame(s: &mut TcpStream, payload: &[u8]) {
    let mut f = vec![0x82u8];
    assert!(payload.len() < 126);
    f.push(0x80 | payload.len() as u8);
    let mask = [1u8, 2, 3, 4];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&f).unwrap();
}

fn read_head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).unwrap(),
            1,
            "EOF in head: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.push(b[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (server, _) = l.accept().unwrap();
    (server, client)
}

/// Runs one upgraded request through the proxy; returns the client side
/// (after the 101 head) and the relay thread.
fn open(srv: &StreamingServer, path: &str, query: &str) -> (TcpStream, thread::JoinHandle<()>) {
    let headers = ws_request_headers();
    let req = StreamRequest {
        method: "GET",
        path,
        query,
        headers: &headers,
        remote_addr: None,
    };
    let up = match srv.handle(&req) {
        Some(Reply::Upgrade(up)) => up,
        Some(Reply::Respond { status, body, .. }) => {
            panic!("{path}: {status} {}", String::from_utf8_lossy(&body))
        }
        None => panic!("not routed"),
    };
    let (kubelet_side, mut client) = tcp_pair();
    let relay = thread::spawn(move || up.run(Box::new(kubelet_side), b""));
    let head = read_head(&mut client);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-protocol: v4.channel.k8s.io"),
        "{head}"
    );
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    (client, relay)
}

#[test]
fn real_containerd() {
    let Ok(sock) = std::env::var("RKUBELET_IT_CRI_SOCK") else {
        eprintln!("RKUBELET_IT_CRI_SOCK unset: skipped");
        return;
    };
    let endpoint = format!("unix://{sock}");
    let timeout = Duration::from_secs(60);
    let rt = RemoteRuntime::with_image_endpoint(&endpoint, &endpoint, timeout, Arc::new(()));
    let rt = Arc::new(rt.unwrap());
    let logdir = std::env::temp_dir().join(format!("rkst-it-logs-{}", std::process::id()));
    std::fs::create_dir_all(&logdir).unwrap();
    // Left over from an earlier, interrupted run.
    for sb in rt.list_pod_sandbox(None).unwrap() {
        if sb.labels.get(POD_UID_LABEL).map(String::as_str) == Some(UID) {
            let _ = rt.stop_pod_sandbox(&sb.id);
            let _ = rt.remove_pod_sandbox(&sb.id);
        }
    }

    let sb_cfg = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: "web".into(),
            namespace: "default".into(),
            uid: UID.into(),
            ..Default::default()
        })
        .into(),
        hostname: "web".into(),
        log_directory: logdir.to_string_lossy().into_owned(),
        labels: labels(None),
        // With a cgroup parent containerd can answer ListPodSandboxStats.
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: "/rkst-it".into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let sandbox = rt
        .run_pod_sandbox(sb_cfg.clone(), "")
        .expect("RunPodSandbox");
    let _cleanup = Cleanup {
        rt: Arc::clone(&rt),
        sandbox: sandbox.clone(),
        logdir: logdir.clone(),
    };
    let mk = |name: &str, cmd: &[&str]| {
        let cfg = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                ..Default::default()
            })
            .into(),
            image: Some(api::ImageSpec {
                image: BUSYBOX.into(),
                ..Default::default()
            })
            .into(),
            command: cmd.iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}/0.log"),
            labels: labels(Some(name)),
            ..Default::default()
        };
        let id = rt
            .create_container(&sandbox, cfg, sb_cfg.clone())
            .expect("CreateContainer");
        rt.start_container(&id).expect("StartContainer");
        id
    };
    let app = mk(
        "app",
        &[
            "sh",
            "-c",
            "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done",
        ],
    );
    let _web = mk("httpd", &["httpd", "-f", "-p", "8080", "-h", "/tmp"]);

    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("default".into()),
            uid: Some(UID.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![
                Container {
                    name: "app".into(),
                    ..Default::default()
                },
                Container {
                    name: "httpd".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let host = move |ns: &str, name: &str| (ns == "default" && name == "web").then(|| pod.clone());
    let srv = StreamingServer::new(Arc::new(host), rt.clone(), StreamingConfig::default());

    // --- exec with stdin, through the proxy (WebSocket, v4.channel.k8s.io).
    let (mut client, relay) = open(
        &srv,
        "/exec/default/web/app",
        "command=sh&command=-c&command=read+x%3B+echo+got%3A%24x%3B+echo+oops+%3E%262&input=1&output=1&error=1",
    );
    write_frame(&mut client, b"\x00hello\n");
    let (mut stdout, mut stderr, mut status) = (Vec::new(), Vec::new(), Vec::new());
    while let Some((op, p)) = read_frame(&mut client) {
        if op == 8 {
            break;
        }
        match p.first() {
            Some(1) => stdout.extend_from_slice(&p[1..]),
            Some(2) => stderr.extend_from_slice(&p[1..]),
            Some(3) => status.extend_from_slice(&p[1..]),
            _ => {}
        }
    }
    drop(client);
    relay.join().unwrap();
    eprintln!(
        "exec: stdout={:?} stderr={:?} status={}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr),
        String::from_utf8_lossy(&status)
    );
    assert_eq!(stdout, b"got:hello\n");
    assert_eq!(stderr, b"oops\n");
    assert!(String::from_utf8_lossy(&status).contains("Success"));
    assert_eq!(srv.active_streams(), 0);

    // --- port-forward to busybox httpd on 8080.
    let (mut client, relay) = open(&srv, "/portForward/default/web", "port=8080");
    // Each port's data (0) and error (1) channels first announce the port.
    let mut announced = 0;
    while announced < 2 {
        let (_, p) = read_frame(&mut client).expect("port announcement");
        if p.len() == 3 {
            assert_eq!(u16::from_le_bytes([p[1], p[2]]), 8080);
            announced += 1;
        }
    }
    write_frame(&mut client, b"\x00GET / HTTP/1.0\r\n\r\n");
    let mut data = Vec::new();
    while let Some((op, p)) = read_frame(&mut client) {
        if op == 8 {
            break;
        }
        if p.first() == Some(&0) {
            data.extend_from_slice(&p[1..]);
            if data.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    }
    drop(client);
    relay.join().unwrap();
    let data = String::from_utf8_lossy(&data);
    eprintln!("port-forward: {:?}", data.lines().next());
    assert!(data.starts_with("HTTP/1."), "{data}");

    // --- unknown container / pod.
    let headers = ws_request_headers();
    let r = srv.handle(&StreamRequest {
        method: "GET",
        path: "/exec/default/web/nope",
        query: "command=ls&output=1",
        headers: &headers,
        remote_addr: None,
    });
    assert!(matches!(r, Some(Reply::Respond { status: 404, .. })));

    // --- stats summary from real CRI stats.
    let mut cfg = StatsConfig::new("rkst-node", std::env::temp_dir());
    cfg.pod_logs_dir = PathBuf::from("/nonexistent");
    let stats = SummaryProvider::new(rt.clone(), cfg);
    let _ = stats.summary(false).unwrap();
    thread::sleep(Duration::from_millis(1500));
    let reply = stats.handle("GET", "/stats/summary", "").unwrap();
    assert_eq!(reply.status, 200);
    let v: serde_json::Value = serde_json::from_str(&reply.body).unwrap();
    let pod = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["uid"] == UID)
        .unwrap_or_else(|| panic!("pod missing:\n{}", reply.body));
    eprintln!(
        "summary pod: {}",
        serde_json::to_string_pretty(pod).unwrap()
    );
    eprintln!(
        "summary node: {}",
        serde_json::to_string_pretty(&v["node"]).unwrap()
    );
    let app_stats = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "app")
        .unwrap();
    assert!(app_stats["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
    assert!(app_stats["cpu"]["usageNanoCores"].as_u64().is_some());
    assert!(app_stats["memory"]["workingSetBytes"].as_u64().unwrap() > 0);
    assert!(app_stats["rootfs"].is_object());
    assert!(pod["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0);
    // From ListPodSandboxStats: the pod's own network namespace.
    assert!(pod["network"]["name"].is_string(), "{pod}");
    assert!(
        v["node"]["runtime"]["imageFs"]["usedBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    let metrics = stats.resource_metrics();
    let fams = crate::metrics::textparse::parse(&metrics).unwrap();
    assert!(fams["container_cpu_usage_seconds_total"]
        .samples
        .iter()
        .any(|s| s.label("container") == Some("app") && s.label("pod") == Some("web")));
    assert_eq!(fams["resource_scrape_error"].samples[0].value, 0.0);

    // --- log rotation with ReopenContainerLog.
    let log_path = logdir.join("app/0.log");
    let lister = Arc::clone(&rt);
    let listed = crate::logs::RunningLogs::new(
        Arc::clone(&rt),
        // The running app container as the runtime lists it (the kubelet
        // takes it from the PLEG's relist).
        Box::new(move || {
            lister
                .running_container_id(UID, "app")
                .expect("ListContainers")
                .into_iter()
                .collect()
        }),
    )
    .list();
    assert!(
        listed.iter().any(|(id, p)| *id == app && *p == log_path),
        "{listed:?}"
    );
    let mgr = crate::logs::LogManager::new(
        rt.clone(),
        crate::logs::LogConfig {
            max_size: 10,
            max_files: 3,
            monitor_interval: Duration::from_secs(10),
        },
        Box::new(move || vec![(app.clone(), log_path.clone())]),
    );
    let log_path = logdir.join("app/0.log");
    for _ in 0..3 {
        mgr.rotate_once();
        thread::sleep(Duration::from_millis(1100));
    }
    let mut names: Vec<String> = std::fs::read_dir(logdir.join("app"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    eprintln!("log files after rotations: {names:?}");
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.iter().any(|n| n.ends_with(".gz")), "{names:?}");
    let fresh = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        fresh.contains("tick"),
        "runtime writes to the reopened file: {fresh:?}"
    );
}
