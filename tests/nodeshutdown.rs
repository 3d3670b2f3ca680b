//! Graceful node shutdown against a private dbus-daemon and a fake logind
//! (written with rkubelet's own D-Bus client, `crates/dbus`):
//! rkubelet takes the delay inhibitor lock, and on PrepareForShutdown(true)
//! stops the regular pods within shutdownGracePeriod −
//! shutdownGracePeriodCriticalPods, then the critical ones within
//! shutdownGracePeriodCriticalPods, marks them Failed/Terminated, rejects
//! new pods with NodeShutdown and closes the lock's fd.
//!
//! Test numbers 73 (standalone, every step timed) and 75 (cluster mode:
//! NotReady, statuses in the API, cancellation).

mod common;

use std::fs;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use common::cluster::*;
use common::*;
use rkubelet_dbus::testing::TestBus;
use rkubelet_dbus::{Connection, Kind, Message, Value};

const LOGIND: &str = "org.freedesktop.login1";
const MANAGER: &str = "org.freedesktop.login1.Manager";

fn private_bus(dir: &Path) -> TestBus {
    TestBus::start(dir).expect("run dbus-daemon (Debian package dbus)")
}

/// What the fake logind saw: each Inhibit's arguments and the read end of
/// the pipe whose write end it handed out.
struct Inhibited {
    args: Vec<String>,
    read_end: OwnedFd,
}

/// A logind on the private bus: InhibitDelayMaxUSec, Inhibit (a pipe's
/// write end as the lock), and PrepareForShutdown on demand.
fn fake_logind(address: &str, delay_max: Duration) -> (Sender<bool>, Receiver<Inhibited>) {
    let (signal_tx, signal_rx) = crossbeam_channel::unbounded::<bool>();
    let (inhibit_tx, inhibit_rx) = crossbeam_channel::unbounded();
    let mut conn = Connection::open(address, secs(5)).expect("fake logind connects");
    let reply = conn
        .call(
            Message::method_call(
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "RequestName",
                vec![Value::Str(LOGIND.into()), Value::U32(4)],
            ),
            secs(5),
        )
        .expect("RequestName");
    assert_eq!(reply.body, vec![Value::U32(1)], "fake logind owns {LOGIND}");
    std::thread::spawn(move || loop {
        while let Ok(b) = signal_rx.try_recv() {
            conn.send(Message::signal(
                "/org/freedesktop/login1",
                MANAGER,
                "PrepareForShutdown",
                vec![Value::Bool(b)],
            ))
            .expect("emit PrepareForShutdown");
        }
        let m = match conn.recv(Duration::from_millis(50)) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(_) => return,
        };
        if m.kind != Kind::MethodCall {
            continue;
        }
        let reply = if m.is("org.freedesktop.DBus.Properties", "Get")
            && m.body.get(1) == Some(&Value::Str("InhibitDelayMaxUSec".into()))
        {
            Message::method_return(
                &m,
                vec![Value::Variant(Box::new(Value::U64(
                    delay_max.as_micros() as u64
                )))],
            )
        } else if m.is(MANAGER, "Inhibit") {
            // CLOEXEC: a process the test spawns must not hold the lock open.
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
            let args = m
                .body
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect();
            let _ = inhibit_tx.send(Inhibited { args, read_end: r });
            let mut reply = Message::method_return(&m, vec![Value::Fd(0)]);
            reply.fds.push(w);
            reply
        } else {
            Message::error(&m, "org.freedesktop.DBus.Error.UnknownMethod", "not faked")
        };
        let _ = conn.send(reply);
    });
    (signal_tx, inhibit_rx)
}

/// Whether every write end of the pipe is closed (the lock released).
fn closed(read_end: &OwnedFd) -> bool {
    let mut fds = [nix::poll::PollFd::new(
        read_end.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap_or(0) > 0
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLHUP))
}

/// A pod whose container logs SIGTERM and ignores it (so it is killed at
/// the end of its grace period), at `priority`.
fn stubborn(name: &str, priority: Option<i32>) -> String {
    let mut p = pod(
        name,
        vec![ctn(
            "c",
            "trap 'echo got-term' TERM; echo started; while true; do sleep 0.2; done",
        )],
    );
    p.grace_seconds = Some(30);
    let yaml = p.yaml();
    match priority {
        Some(pr) => yaml.replacen("spec:\n", &format!("spec:\n  priority: {pr}\n"), 1),
        None => yaml,
    }
}

fn pod_status(port: u16, full_name: &str) -> Option<serde_json::Value> {
    let pods = read_only_get(port, "/pods")?;
    pods["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full_name)
        .map(|p| p["status"].clone())
}

#[test]
fn prepare_for_shutdown_stops_regular_then_critical_pods_and_releases_the_lock() {
    let mut env = Env::new("node_shutdown", 73);
    let bus = private_bus(&env.dir);
    let (signal, inhibits) = fake_logind(bus.address(), secs(30));
    env.set_config("shutdownGracePeriod", "6s");
    env.set_config("shutdownGracePeriodCriticalPods", "3s");
    let ro = env.open_read_only_port();
    env.write_manifest("regular.yaml", &stubborn("regular", None));
    env.write_manifest("critical.yaml", &stubborn("critical", Some(2_000_000_000)));
    env.kubelet_env
        .push(("DBUS_SYSTEM_BUS_ADDRESS".into(), bus.address().into()));
    env.start_kubelet_healthy();
    env.wait_running(&format!("regular-{NODE}"), &["c"], secs(60));
    env.wait_running(&format!("critical-{NODE}"), &["c"], secs(60));
    let lock = inhibits
        .recv_timeout(secs(20))
        .unwrap_or_else(|_| panic!("no Inhibit call:\n{}", env.log_tail(30)));
    assert_eq!(
        lock.args,
        [
            "shutdown",
            "kubelet",
            "Kubelet needs time to handle node shutdown",
            "delay"
        ]
    );
    assert!(!closed(&lock.read_end), "the lock is held");
    // Subscribed to PrepareForShutdown (after the lock, as upstream).
    wait_until(secs(10), "the manager watches for shutdown", || {
        !env.log_lines_with("holding logind's delay lock").is_empty()
    });
    for (p, c) in [("regular", "c"), ("critical", "c")] {
        wait_until(secs(10), "the containers log their start", || {
            container_log(&env.pod_logs, &format!("{p}-{NODE}"), c).contains("started")
        });
    }

    let t0 = Instant::now();
    signal.send(true).unwrap();
    let (mut regular_term, mut critical_term, mut released) = (None, None, None);
    while t0.elapsed() < secs(15) && released.is_none() {
        let now = t0.elapsed();
        if regular_term.is_none()
            && container_log(&env.pod_logs, &format!("regular-{NODE}"), "c").contains("got-term")
        {
            regular_term = Some(now);
        }
        if critical_term.is_none()
            && container_log(&env.pod_logs, &format!("critical-{NODE}"), "c").contains("got-term")
        {
            critical_term = Some(now);
        }
        if closed(&lock.read_end) {
            released = Some(now);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "TERM: regular {regular_term:?}, critical {critical_term:?}; lock released {released:?}"
    );
    let regular_term = regular_term.expect("the regular pod got SIGTERM");
    let critical_term = critical_term.expect("the critical pod got SIGTERM");
    let released = released.unwrap_or_else(|| panic!("lock never released:\n{}", env.log_tail(40)));
    // Regular pods first, at once; critical ones once the regular pod is
    // gone, which it is only when killed at the end of the regular
    // group's 3 s (it ignores TERM); the lock once the critical pod is
    // killed the same way, within the critical group's 3 s.
    assert!(regular_term < secs(2), "regular TERM at {regular_term:?}");
    assert!(
        critical_term >= regular_term + Duration::from_millis(1500) && critical_term < secs(5),
        "critical TERM at {critical_term:?}"
    );
    assert!(
        released >= critical_term + Duration::from_millis(1500) && released < secs(7),
        "lock released at {released:?}"
    );
    // Both were killed at the end of their group's period (they ignore
    // TERM): nothing runs any more.
    eventually(secs(10), "both containers stopped", || {
        let snap = env.snapshot();
        (snap.running(&format!("regular-{NODE}"), "c").is_none()
            && snap.running(&format!("critical-{NODE}"), "c").is_none())
        .then_some(())
    });
    for p in ["regular", "critical"] {
        let status = eventually(secs(10), "phase Failed, reason Terminated", || {
            pod_status(ro, &format!("{p}-{NODE}")).filter(|s| s["phase"] == "Failed")
        });
        assert_eq!(status["reason"], "Terminated", "{status}");
        assert_eq!(
            status["message"],
            "Pod was terminated in response to imminent node shutdown."
        );
        let cond = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "DisruptionTarget").cloned())
            .unwrap_or_else(|| panic!("no DisruptionTarget condition: {status}"));
        assert_eq!(cond["reason"], "TerminationByKubelet");
    }
    // A pod arriving now is refused.
    env.write_manifest("late.yaml", &stubborn("late", None));
    let late = eventually(secs(15), "the late pod is rejected", || {
        pod_status(ro, &format!("late-{NODE}")).filter(|s| s["phase"] == "Failed")
    });
    assert_eq!(late["reason"], "NodeShutdown", "{late}");
    assert_eq!(
        late["message"],
        "Pod was rejected: Pod was rejected as the node is shutting down."
    );
    drop(bus);
}

#[test]
fn in_a_cluster_the_node_is_not_ready_while_it_shuts_down() {
    let mut cl = Cluster::new("node_shutdown_cluster", 75);
    let bus = private_bus(&cl.env.dir);
    let (signal, inhibits) = fake_logind(bus.address(), secs(30));
    fs::write(
        &cl.config,
        kubelet_config(
            &cl.env,
            "shutdownGracePeriod: 4s\nshutdownGracePeriodCriticalPods: 2s\n",
        ),
    )
    .unwrap();
    cl.env
        .kubelet_env
        .push(("DBUS_SYSTEM_BUS_ADDRESS".into(), bus.address().into()));
    cl.start_kubelet();
    cl.wait_node_ready(secs(30));
    let first = inhibits.recv_timeout(secs(20)).expect("an Inhibit call");
    wait_until(secs(10), "the manager watches for shutdown", || {
        !cl.env
            .log_lines_with("holding logind's delay lock")
            .is_empty()
    });
    cl.api.create_pod(&api_pod("web", SLEEPER));
    cl.wait_pod_ready("web", secs(60));

    signal.send(true).unwrap();
    let ready = cl.eventually(secs(15), "the node NotReady", |api| {
        let n = api.node()?;
        let c = condition(&n, "Ready")?.clone();
        (c["status"] == "False").then_some(c)
    });
    assert_eq!(ready["reason"], "KubeletNotReady", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("node is shutting down")),
        "{ready}"
    );
    let pod = cl.eventually(secs(15), "the pod Failed in the API", |api| {
        let p = api.pod("web")?;
        (phase(&p) == "Failed").then_some(p)
    });
    assert_eq!(
        pod["status"]["reason"],
        "Terminated",
        "{}",
        pretty_status(&pod)
    );
    wait_until(secs(10), "the lock released", || closed(&first.read_end));
    cl.api.create_pod(&api_pod("late", SLEEPER));
    let late = cl.eventually(secs(15), "the late pod rejected", |api| {
        let p = api.pod("late")?;
        (phase(&p) == "Failed").then_some(p)
    });
    assert_eq!(
        late["status"]["reason"],
        "NodeShutdown",
        "{}",
        pretty_status(&late)
    );

    // Cancelled: the lock is taken again and the node is Ready again.
    signal.send(false).unwrap();
    let again = inhibits
        .recv_timeout(secs(10))
        .expect("the lock taken again");
    assert!(!closed(&again.read_end));
    cl.wait_node_ready(secs(15));
    drop(bus);
}
