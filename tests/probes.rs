//! Probe and lifecycle-hook tests: the real rkubelet binary against a real,
//! private containerd per test (tests/harness/containerd.sh), in standalone
//! mode (static pod manifests) except readiness, which is only visible in the
//! API: that test runs rkubelet against the kube-apiserver double
//! (`target/release/apiserver-double`, as tests/cluster.rs does).
//!
//! Each test has its own containerd, bridge rke<N>, subnet 10.88.<100+N>.0/24,
//! healthz port 20000+N (and API port 21000+N), N in 51..=60, and sets
//! `enableServer: false` so parallel rkubelets never fight over port 10250:
//!
//!     cargo test --release --test probes -- --test-threads=2
//!
//! Manifests are written as JSON (a YAML subset) built with serde_json.

mod common;

use std::fs;
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

// --- helpers ----------------------------------------------------------------------

/// An Env whose kubelet config also disables the kubelet API server.
fn env(name: &str, n: u32) -> Env {
    assert!((51..=60).contains(&n), "probe tests use N in 51..=60");
    let env = Env::new(name, n);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(&env.config)
        .unwrap();
    writeln!(f, "enableServer: false").unwrap();
    env
}

/// A pod with one busybox container "c" running `script`; `extra` is merged
/// into the container (probes, lifecycle), `spec_extra` into the spec.
fn probe_pod(name: &str, script: &str, extra: Value, spec_extra: Value) -> Value {
    let mut c = json!({
        "name": "c",
        "image": BUSYBOX,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    });
    merge(&mut c, extra);
    let mut spec = json!({
        "terminationGracePeriodSeconds": 5,
        "containers": [c],
    });
    merge(&mut spec, spec_extra);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": spec,
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(a), Value::Object(b)) = (into.as_object_mut(), from) {
        for (k, v) in b {
            a.insert(k, v);
        }
    }
}

fn put(env: &Env, pod: &Value) {
    let name = pod["metadata"]["name"].as_str().unwrap();
    env.write_manifest(
        &format!("{name}.yaml"),
        &serde_json::to_string_pretty(pod).unwrap(),
    );
}

/// A busybox httpd on 8080 serving /www (which holds index.html), in the
/// background, then a TERM-aware sleep loop.
const HTTPD: &str = "mkdir -p /www; echo ok > /www/index.html; httpd -f -p 8080 -h /www & \
                     trap 'exit 0' TERM INT; while true; do sleep 1; done";

fn max_restart(s: &Snapshot, pod: &str) -> Option<u32> {
    s.instances(pod, "c")
        .iter()
        .filter_map(|o| o.restart_count())
        .max()
}

/// Event lines of rkubelet's log for `pod` (full name) with `reason`.
fn events(env: &Env, pod: &str, reason: &str) -> Vec<String> {
    let who = format!("event: pod default/{pod} ");
    env.log()
        .lines()
        .filter(|l| l.contains(&who) && l.contains(&format!(": {reason}: ")))
        .map(String::from)
        .collect()
}

/// Waits until the pod's container "c" has an instance with restartCount
/// >= `want`; returns the snapshot.
fn wait_restarts(env: &mut Env, pod: &str, want: u32, timeout: Duration) -> Snapshot {
    let mut last = Snapshot::default();
    let got = poll(timeout, || {
        env.assert_kubelet_alive();
        let s = env.try_snapshot().ok()?;
        let ok = max_restart(&s, pod).is_some_and(|r| r >= want);
        last = s.clone();
        ok.then_some(s)
    });
    got.unwrap_or_else(|| {
        panic!(
            "pod {pod}: no container instance with restartCount >= {want} within {timeout:?}; containerd has:\n{}",
            last.summary()
        )
    })
}

// 1 -------------------------------------------------------------------------------

#[test]
fn liveness_failure_restarts_container() {
    let mut env = env("liveness_failure_restarts_container", 51);
    let p = probe_pod(
        "live",
        &format!("touch /tmp/healthy; sleep 3; rm -f /tmp/healthy; {SLEEPER}"),
        json!({"livenessProbe": {
            "exec": {"command": ["cat", "/tmp/healthy"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        }}),
        json!({}),
    );
    put(&env, &p);
    env.start_kubelet();
    let s = env.wait_running("live-node1", &["c"], secs(20));
    let first = s.running("live-node1", "c").unwrap().clone();
    assert_eq!(first.restart_count(), Some(0), "{}", s.summary());
    let t0 = Instant::now();

    let s = wait_restarts(&mut env, "live-node1", 1, secs(15));
    eprintln!("restarted after {:?}:\n{}", t0.elapsed(), s.summary());
    assert!(
        s.instances("live-node1", "c").len() >= 2,
        "a new container instance expected:\n{}",
        s.summary()
    );
    let unhealthy = events(&env, "live-node1", "Unhealthy");
    assert!(
        unhealthy
            .iter()
            .any(|l| l.contains("Liveness probe failed")),
        "no Unhealthy event with 'Liveness probe failed': {unhealthy:#?}"
    );
    let killing = events(&env, "live-node1", "Killing");
    assert!(
        killing
            .iter()
            .any(|l| l.contains("failed liveness probe, will be restarted")),
        "no Killing event 'Container c failed liveness probe, will be restarted': {killing:#?}"
    );
    // The new instance runs again.
    env.wait_running("live-node1", &["c"], secs(10));
}

// 2 -------------------------------------------------------------------------------

// The apiserver double and its admin client: tests/common/cluster.rs.

fn condition_status(pod: &Value, ty: &str) -> String {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("-")
        .to_string()
}

#[test]
fn readiness_flips_both_ways() {
    let mut env = env("readiness_flips_both_ways", 52);
    let n = env.n;
    let double = Double::new(env.dir.join("api"), 21000 + n as u16);
    let api = Api::new(&double.dir, double.port);
    let config = env.dir.join("cluster-config.yaml");
    fs::write(&config, kubelet_config(&env, "enableServer: false\n")).unwrap();
    let args = cluster_kubelet_args(&double, &env, &config, &[]);
    env.start_kubelet_with_args(&args);

    // Not ready for ~5 s, ready for ~10 s, then not ready again.
    let script = "trap 'exit 0' TERM INT; mkdir -p /www; httpd -f -p 8080 -h /www & \
                  sleep 5; touch /www/ready; sleep 10; rm -f /www/ready; \
                  while true; do sleep 1; done";
    let mut p = probe_pod(
        "rdy",
        script,
        json!({"readinessProbe": {
            "httpGet": {"path": "/ready", "port": 8080},
            "periodSeconds": 1,
            "failureThreshold": 1,
            "successThreshold": 1,
        }}),
        json!({"nodeName": NODE}),
    );
    p["metadata"]["namespace"] = json!("default");
    let mut created = false;
    let t0 = Instant::now();
    // (Ready, ContainersReady, containerStatuses[0].ready, .started) while Running.
    let mut seen: Vec<(String, String, Value, Value)> = Vec::new();
    let mut stage = 0; // 0: want not-ready, 1: want ready, 2: want not-ready again
    let mut last = Value::Null;
    while t0.elapsed() < secs(60) && stage < 3 {
        env.assert_kubelet_alive();
        if !created {
            match api.call("POST", "/api/v1/namespaces/default/pods", Some(&p)) {
                Ok((201, _)) => created = true,
                Ok((c, v)) if c < 500 => panic!("create pod: {c}: {v}"),
                _ => {}
            }
        } else if let Some(pod) = api.pod("rdy") {
            last = pod.clone();
            if pod["status"]["phase"] == "Running" {
                let cs = &pod["status"]["containerStatuses"][0];
                let obs = (
                    condition_status(&pod, "Ready"),
                    condition_status(&pod, "ContainersReady"),
                    cs["ready"].clone(),
                    cs["started"].clone(),
                );
                if seen.last() != Some(&obs) {
                    eprintln!("+{:?}: {obs:?}", t0.elapsed());
                    seen.push(obs.clone());
                }
                let ready = obs.0 == "True" && obs.1 == "True" && obs.2 == true;
                let unready = obs.0 == "False" && obs.1 == "False" && obs.2 == false;
                match stage {
                    0 | 2 if unready => {
                        assert_eq!(
                            obs.3, true,
                            "a running container without startup probe is started"
                        );
                        stage += 1;
                    }
                    1 if ready => stage += 1,
                    _ => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        stage,
        3,
        "wanted Ready False -> True -> False (with ContainersReady and containerStatuses[0].ready); \
         saw {seen:?}; last status:\n{}",
        serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
    );
    let unhealthy = events(&env, "rdy", "Unhealthy");
    assert!(
        unhealthy
            .iter()
            .any(|l| l.contains("Readiness probe failed") && l.contains("404")),
        "no Unhealthy event 'Readiness probe failed: HTTP probe failed with statuscode: 404': {unhealthy:#?}"
    );
    // Readiness never restarts a container.
    let s = env.snapshot();
    assert_eq!(max_restart(&s, "rdy"), Some(0), "{}", s.summary());
    drop(env);
    drop(double);
}

// 3 -------------------------------------------------------------------------------

#[test]
fn startup_probe_delays_liveness() {
    let mut env = env("startup_probe_delays_liveness", 53);
    let p = probe_pod(
        "slow",
        &format!("sleep 6; touch /tmp/started; {SLEEPER}"),
        json!({
            "startupProbe": {
                "exec": {"command": ["test", "-f", "/tmp/started"]},
                "periodSeconds": 1,
                "failureThreshold": 30,
            },
            "livenessProbe": {
                "exec": {"command": ["false"]},
                "periodSeconds": 1,
                "failureThreshold": 1,
            },
        }),
        json!({}),
    );
    put(&env, &p);
    env.start_kubelet();
    env.wait_running("slow-node1", &["c"], secs(20));
    let s = wait_restarts(&mut env, "slow-node1", 1, secs(25));
    let first = s
        .instances("slow-node1", "c")
        .into_iter()
        .find(|o| o.restart_count() == Some(0))
        .cloned()
        .unwrap_or_else(|| panic!("the first instance is gone:\n{}", s.summary()));
    let st = first
        .status
        .clone()
        .unwrap_or_else(|| panic!("no CRI status of {}", first.id));
    assert!(
        st.started_at > 0 && st.finished_at > 0,
        "first instance not finished: {st:?}"
    );
    let lived = Duration::from_nanos((st.finished_at - st.started_at) as u64);
    eprintln!("first instance lived {lived:?}:\n{}", s.summary());
    assert!(
        lived >= Duration::from_millis(5500),
        "liveness killed the container before the startup probe succeeded (after {lived:?})"
    );
    assert!(
        lived <= secs(15),
        "liveness did not kick in promptly after startup succeeded (lived {lived:?})"
    );
    let log = env.log();
    let startup_fail = log
        .find("Startup probe failed")
        .unwrap_or_else(|| panic!("no 'Startup probe failed' event before /tmp/started existed"));
    let live_fail = log
        .find("Liveness probe failed")
        .unwrap_or_else(|| panic!("no 'Liveness probe failed' event"));
    assert!(
        startup_fail < live_fail,
        "liveness failed before startup did"
    );
}

// 4 -------------------------------------------------------------------------------

#[test]
fn tcp_and_http_probes_pass_and_fail() {
    let mut env = env("tcp_and_http_probes_pass_and_fail", 54);
    // The pods served by httpd wait 2 s before their first probe, as a real
    // pod whose server needs time to listen would: with a threshold of 1, a
    // probe in the milliseconds between the container's start and httpd's
    // listen(2) fails ("connection refused") and restarts it, and a busy
    // machine widens that window. http-bad must fail on its 404, not there.
    let live = |probe: Value, threshold: u32, delay: u32| {
        let mut p = probe;
        merge(
            &mut p,
            json!({"periodSeconds": 1, "failureThreshold": threshold,
                   "initialDelaySeconds": delay}),
        );
        json!({ "livenessProbe": p })
    };
    let pods = [
        ("tcp-ok", live(json!({"tcpSocket": {"port": 8080}}), 1, 2)),
        ("tcp-bad", live(json!({"tcpSocket": {"port": 9999}}), 2, 0)),
        (
            "http-ok",
            live(
                json!({"httpGet": {"path": "/index.html", "port": 8080}}),
                1,
                2,
            ),
        ),
        (
            "http-bad",
            live(json!({"httpGet": {"path": "/nope", "port": 8080}}), 1, 2),
        ),
    ];
    for (name, extra) in &pods {
        put(&env, &probe_pod(name, HTTPD, extra.clone(), json!({})));
    }
    env.start_kubelet();
    let t0 = Instant::now();
    for (name, _) in &pods {
        env.wait_running(&format!("{name}-node1"), &["c"], secs(30));
    }
    let all_running = Instant::now();
    eprintln!("all running after {:?}", t0.elapsed());

    wait_restarts(&mut env, "tcp-bad-node1", 1, secs(20));
    wait_restarts(&mut env, "http-bad-node1", 1, secs(20));
    if let Some(rest) = secs(12).checked_sub(all_running.elapsed()) {
        std::thread::sleep(rest);
    }
    let s = env.snapshot();
    for good in ["tcp-ok-node1", "http-ok-node1"] {
        let inst = s.instances(good, "c");
        assert_eq!(inst.len(), 1, "{good}: restarted:\n{}", s.summary());
        assert!(inst[0].running, "{good}: not running:\n{}", s.summary());
        assert_eq!(inst[0].restart_count(), Some(0), "{}", s.summary());
        assert!(
            events(&env, good, "Unhealthy").is_empty(),
            "{good}: {:#?}",
            events(&env, good, "Unhealthy")
        );
    }
    let http_bad = events(&env, "http-bad-node1", "Unhealthy");
    assert!(
        http_bad
            .iter()
            .any(|l| l.contains("Liveness probe failed: HTTP probe failed with statuscode: 404")),
        "{http_bad:#?}"
    );
    let tcp_bad = events(&env, "tcp-bad-node1", "Unhealthy");
    assert!(
        tcp_bad.iter().any(|l| l.contains("Liveness probe failed")),
        "{tcp_bad:#?}"
    );
}

// 7 -------------------------------------------------------------------------------

/// A grpc.health.v1 server on 127.0.0.1:`port`: SERVING for every service
/// except "down", which is NOT_SERVING.
fn health_server(port: u16) -> grpcio::Server {
    // The grpc.health.v1 messages the prober uses (rkubelet-cri's protos).
    use grpcio::{Marshaller, Method, MethodType, RpcContext, UnarySink};
    use rkubelet_cri::health::{health_check_response::ServingStatus, *};
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
    let service = grpcio::ServiceBuilder::new()
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
    let env = std::sync::Arc::new(grpcio::Environment::new(1));
    let mut server = grpcio::ServerBuilder::new(env)
        .register_service(service)
        .build()
        .expect("grpc server");
    server
        .add_listening_port(
            format!("127.0.0.1:{port}"),
            grpcio::ServerCredentials::insecure(),
        )
        .expect("bind the health server");
    server.start();
    server
}

/// gRPC liveness probes (grpc.health.v1 Check on status.podIP): a SERVING
/// service keeps the container, a NOT_SERVING one restarts it with an
/// Unhealthy event naming the answer. The pods use the host network, whose
/// pod IP is the node IP (--node-ip 127.0.0.1), so the health server can run
/// in this test: no gRPC server binary exists in the offline images.
#[test]
fn grpc_probes_pass_and_fail() {
    let mut env = env("grpc_probes_pass_and_fail", 57);
    let port = 22000 + 57;
    let _server = health_server(port);
    let live = |service: &str| {
        json!({"livenessProbe": {
            "grpc": {"port": port, "service": service},
            "periodSeconds": 1,
            "failureThreshold": 2,
        }})
    };
    for (name, service) in [("grpc-ok", "up"), ("grpc-bad", "down")] {
        put(
            &env,
            &probe_pod(name, SLEEPER, live(service), json!({"hostNetwork": true})),
        );
    }
    env.start_kubelet_with(&["--node-ip", "127.0.0.1"]);
    for name in ["grpc-ok-node1", "grpc-bad-node1"] {
        env.wait_running(name, &["c"], secs(30));
    }
    let all_running = Instant::now();
    wait_restarts(&mut env, "grpc-bad-node1", 1, secs(20));
    if let Some(rest) = secs(8).checked_sub(all_running.elapsed()) {
        std::thread::sleep(rest);
    }
    let s = env.snapshot();
    let inst = s.instances("grpc-ok-node1", "c");
    assert_eq!(inst.len(), 1, "grpc-ok restarted:\n{}", s.summary());
    assert_eq!(inst[0].restart_count(), Some(0), "{}", s.summary());
    assert!(
        events(&env, "grpc-ok-node1", "Unhealthy").is_empty(),
        "{:#?}",
        events(&env, "grpc-ok-node1", "Unhealthy")
    );
    let bad = events(&env, "grpc-bad-node1", "Unhealthy");
    assert!(
        bad.iter().any(|l| l
            .contains("Liveness probe failed: service unhealthy (responded with \"NOT_SERVING\")")),
        "{bad:#?}"
    );
}

// 5 -------------------------------------------------------------------------------

#[test]
fn prestop_hook_runs_before_sigterm() {
    let mut env = env("prestop_hook_runs_before_sigterm", 55);
    let hook_dir = env.dir.join("hook");
    fs::create_dir_all(&hook_dir).unwrap();
    let p = probe_pod(
        "stop",
        "trap 'echo term >> /hook/out; exit 0' TERM; echo start >> /hook/out; \
         while true; do sleep 1; done",
        json!({
            "volumeMounts": [{"name": "hook", "mountPath": "/hook"}],
            "lifecycle": {"preStop": {"exec": {"command":
                ["sh", "-c", "echo prestop >> /hook/out; sleep 1"]}}},
        }),
        json!({
            "terminationGracePeriodSeconds": 15,
            "volumes": [{"name": "hook", "hostPath": {"path": hook_dir.display().to_string()}}],
        }),
    );
    put(&env, &p);
    env.start_kubelet();
    env.wait_running("stop-node1", &["c"], secs(20));
    let out = hook_dir.join("out");
    wait_until(secs(5), "the container wrote 'start'", || {
        fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("start")
    });
    let t0 = Instant::now();
    env.remove_manifest("stop.yaml");
    // The container's own end is what preStop and TERM decide; the sandbox
    // teardown after it can be retried (a CNI error under parallel tests
    // costs a 10 s worker back-off), so it is only bounded loosely below.
    wait_until(secs(15), "the container wrote 'term'", || {
        fs::read_to_string(&out)
            .unwrap_or_default()
            .contains("term")
    });
    let took = t0.elapsed();
    let mut last = String::new();
    let gone = poll(secs(25), || {
        let s = env.try_snapshot().ok()?;
        last = s.summary();
        (s.containers("stop-node1").is_empty() && s.sandboxes("stop-node1").is_empty())
            .then_some(())
    });
    assert!(gone.is_some(), "pod not removed within 25 s:\n{last}");
    let text = fs::read_to_string(&out).unwrap_or_default();
    eprintln!("pod gone after {took:?}; file: {text:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        ["start", "prestop", "term"],
        "preStop must run (and finish) before SIGTERM"
    );
    assert!(
        took < secs(12),
        "stop took {took:?}: the container should exit on TERM right after preStop"
    );
}

// 6 -------------------------------------------------------------------------------

#[test]
fn failed_poststart_kills_container() {
    let mut env = env("failed_poststart_kills_container", 56);
    let p = probe_pod(
        "post",
        SLEEPER,
        json!({"lifecycle": {"postStart": {"exec": {"command": ["false"]}}}}),
        json!({}),
    );
    put(&env, &p);
    env.start_kubelet();
    let t0 = Instant::now();
    wait_until(secs(30), "a FailedPostStartHook event", || {
        env.assert_kubelet_alive();
        !events(&env, "post-node1", "FailedPostStartHook").is_empty()
    });
    eprintln!("FailedPostStartHook after {:?}", t0.elapsed());
    let s = wait_restarts(&mut env, "post-node1", 1, secs(30));
    eprintln!("restarted after {:?}:\n{}", t0.elapsed(), s.summary());
    let first = s
        .instances("post-node1", "c")
        .into_iter()
        .find(|o| o.restart_count() == Some(0))
        .cloned();
    if let Some(f) = first {
        assert!(
            !f.running,
            "the first instance still runs:\n{}",
            s.summary()
        );
    }
    let s = wait_restarts(&mut env, "post-node1", 2, secs(40));
    eprintln!("second restart after {:?}:\n{}", t0.elapsed(), s.summary());
}

// 8 -------------------------------------------------------------------------------

/// A container that ignores SIGTERM: it stops only when its grace ends.
const STUBBORN: &str = "trap '' TERM INT; while true; do sleep 1; done";

/// Restarts caused by a liveness probe back off as any other exit (upstream
/// doBackOff reads the newest exited instance): a container whose probe
/// always fails is restarted a few times, then waits in CrashLoopBackOff,
/// rather than every few seconds.
#[test]
fn liveness_restarts_back_off() {
    let mut env = env("liveness_restarts_back_off", 58);
    // It takes its whole grace (2 s) to stop: the sync woken by the stop
    // may still see it running.
    let p = probe_pod(
        "unlive",
        STUBBORN,
        json!({"livenessProbe": {
            "exec": {"command": ["false"]},
            "periodSeconds": 2,
            "failureThreshold": 1,
        }}),
        json!({"terminationGracePeriodSeconds": 2}),
    );
    put(&env, &p);
    env.start_kubelet();
    env.wait_running("unlive-node1", &["c"], secs(20));
    let t0 = Instant::now();
    // Upstream: 3 restarts in 60 s, the last after back-off 10 s, then
    // back-off 20s. Without the back-off: about one every 3 s.
    std::thread::sleep(secs(45));
    let s = env.snapshot();
    let restarts = max_restart(&s, "unlive-node1").unwrap_or(0);
    eprintln!(
        "{restarts} restarts in {:?}:\n{}",
        t0.elapsed(),
        s.summary()
    );
    assert!(
        (2..=4).contains(&restarts),
        "want 2 to 4 restarts in 45 s of failing liveness, got {restarts}:\n{}",
        s.summary()
    );
    let log = env.log();
    assert!(
        log.contains(
            "CrashLoopBackOff: back-off 10s restarting failed container=c pod=unlive-node1_default"
        ),
        "no back-off after a liveness restart in the log:\n{}",
        env.log_tail(40)
    );
}

/// upstream's sequence: the first exit restarts at once, then 10 s, 20 s,
/// 40 s ..., each restart at the first sync after its delay (the pod
/// worker's 10 to 15 s back-off), so 75 s in there are 3 restarts and the
/// wait is back-off 40s (the captures of v1.32 and v1.34 alike).
#[test]
fn crash_loop_backs_off_as_upstream() {
    let mut env = env("crash_loop_backs_off_as_upstream", 60);
    let p = probe_pod("crash", "echo bye >&2; exit 2", json!({}), json!({}));
    put(&env, &p);
    env.start_kubelet();
    wait_restarts(&mut env, "crash-node1", 0, secs(20));
    let t0 = Instant::now();
    std::thread::sleep(secs(75));
    let s = env.snapshot();
    let restarts = max_restart(&s, "crash-node1").unwrap_or(0);
    eprintln!(
        "{restarts} restarts in {:?}:\n{}",
        t0.elapsed(),
        s.summary()
    );
    assert_eq!(restarts, 3, "restarts 75 s in:\n{}", s.summary());
    let log = env.log();
    let last = log
        .lines()
        .rfind(|l| l.contains("back-off") && l.contains("restarting failed container=c"))
        .unwrap_or_default();
    assert!(last.contains("back-off 40s"), "the last back-off: {last}");
}

/// A probe's own terminationGracePeriodSeconds replaces the pod's when that
/// probe kills the container (upstream e2e "should override
/// timeoutGracePeriodSeconds when LivenessProbe/StartupProbe field is
/// set"): a container that ignores SIGTERM, in a pod with 600 s of grace,
/// is restarted within seconds.
#[test]
fn probe_termination_grace_overrides_the_pods() {
    let mut env = env("probe_termination_grace_overrides_the_pods", 59);
    let failing = |kind: &str| {
        json!({kind: {
            "exec": {"command": ["false"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
            "terminationGracePeriodSeconds": 3,
        }})
    };
    for (name, probe) in [("live", "livenessProbe"), ("start", "startupProbe")] {
        let p = probe_pod(
            name,
            STUBBORN,
            failing(probe),
            json!({"terminationGracePeriodSeconds": 600}),
        );
        put(&env, &p);
    }
    env.start_kubelet();
    let t0 = Instant::now();
    for pod in ["live-node1", "start-node1"] {
        let s = wait_restarts(&mut env, pod, 1, secs(40));
        eprintln!("{pod} restarted after {:?}:\n{}", t0.elapsed(), s.summary());
    }
}
