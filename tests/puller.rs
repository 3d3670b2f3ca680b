//! End-to-end: image pulls run on the puller's threads, so pods whose
//! registry never answers hold no pod worker (issue 9). The real rkubelet
//! against a real, private containerd, as tests/e2e.rs.
//!
//!     cargo test --release --test puller

mod common;

use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::threads::*;
use common::*;

/// A registry that accepts connections and never answers: every accepted
/// connection is kept open and silent until the test ends.
fn hanging_registry() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let port = l.local_addr().expect("listener address").port();
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

/// A registry that takes each connection, holds it for a second and closes
/// it: every pull fails, after a second of pulling.
fn slow_failing_registry() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let port = l.local_addr().expect("listener address").port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(1));
                drop(s);
            });
        }
    });
    port
}

/// The Waiting reason of the pod's first container, from /pods.
fn waiting_reason(ro_port: u16, pod: &str) -> Option<String> {
    let list = read_only_get(ro_port, "/pods")?;
    let item = list["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == pod)?
        .clone();
    let reason = &item["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
    reason.as_str().map(str::to_string)
}

#[test]
fn hanging_registry_does_not_delay_a_pod_with_a_present_image() {
    let mut env = Env::new("puller_hanging_registry", 61);
    let ro_port = env.open_read_only_port();
    let registry = hanging_registry();
    env.start_kubelet_healthy();
    let pid = env.kubelet_pid().expect("rkubelet runs");
    // Let the start-up threads settle (gRPC sizes its pools on first use).
    env.put_pod(&pod("warmup", vec![ctn("warmup", SLEEPER)]));
    env.wait_running("warmup-node1", &["warmup"], secs(30));
    std::thread::sleep(secs(2));
    let before = own_threads(pid);

    // Four pods, more than there are pod workers, each pulling from the
    // registry that never answers.
    let stuck: Vec<String> = (1..=4).map(|i| format!("stuck{i}")).collect();
    for (i, name) in stuck.iter().enumerate() {
        let image = format!("127.0.0.1:{registry}/x{i}:1");
        env.put_pod(&pod(name, vec![ctn("c", SLEEPER).image(&image, "Always")]));
    }
    for name in &stuck {
        let full = format!("{name}-node1");
        let reason = eventually(secs(20), &format!("{full} waits on its image"), || {
            waiting_reason(ro_port, &full)
        });
        assert!(
            ["ContainerCreating", "ErrImagePull", "ImagePullBackOff"].contains(&reason.as_str()),
            "{full}: {reason}"
        );
    }
    wait_until(secs(10), "the Pulling events in the log", || {
        env.log()
            .matches(&format!("Pulling image \\\"127.0.0.1:{registry}/"))
            .count()
            >= 4
            || env
                .log()
                .matches(&format!("Pulling image \"127.0.0.1:{registry}/"))
                .count()
                >= 4
    });

    // A fifth pod with a present image starts at once.
    let started = Instant::now();
    env.put_pod(&pod("fifth", vec![ctn("fifth", SLEEPER)]));
    env.wait_running("fifth-node1", &["fifth"], secs(10));
    let took = started.elapsed();
    eprintln!("the fifth pod ran {took:?} after its manifest");
    assert!(took < Duration::from_secs(10));

    // The four still wait; none of them is running.
    let s = env.snapshot();
    for name in &stuck {
        let full = format!("{name}-node1");
        assert!(s.running(&full, "c").is_none(), "{full} cannot run");
        let reason = waiting_reason(ro_port, &full).unwrap_or_default();
        assert!(
            ["ContainerCreating", "ErrImagePull", "ImagePullBackOff"].contains(&reason.as_str()),
            "{full}: {reason}"
        );
    }
    // No thread per pull or per pod: ours settle where they were.
    let after = poll(secs(5), || {
        let now = own_threads(pid);
        (now == before).then_some(now)
    })
    .unwrap_or_else(|| own_threads(pid));
    eprintln!(
        "threads of ours: {} before the hanging pulls, {} after (gRPC's pools: {})",
        before.len(),
        after.len(),
        grpc_threads(pid)
    );
    assert_eq!(before, after, "our threads changed with the hanging pulls");
}

/// A failing pull that is retried keeps its reason while the retry runs,
/// as upstream's (whose sync blocks in the pull and whose reason cache keeps
/// the last error): it never goes back to ContainerCreating. Each failure
/// also gets upstream's "Error: ErrImagePull" event.
#[test]
fn a_retried_pull_keeps_its_reason() {
    let mut env = Env::new("puller_retried_pull_keeps_its_reason", 76);
    let ro_port = env.open_read_only_port();
    let registry = slow_failing_registry();
    env.start_kubelet_healthy();
    let image = format!("127.0.0.1:{registry}/x:1");
    env.put_pod(&pod(
        "failing",
        vec![ctn("c", SLEEPER).image(&image, "Always")],
    ));
    let full = "failing-node1";
    eventually(secs(30), "the first ErrImagePull", || {
        (waiting_reason(ro_port, full)? == "ErrImagePull").then_some(())
    });
    let pulls = |env: &Env| {
        env.log()
            .matches(&format!("Pulling image \"{image}\""))
            .count()
    };
    let first = pulls(&env);
    // Through the 10 s back-off and the retry, whose pull takes a second.
    let mut seen = Vec::new();
    let until = Instant::now() + secs(16);
    while Instant::now() < until {
        if let Some(r) = waiting_reason(ro_port, full) {
            if seen.last() != Some(&r) {
                seen.push(r);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(pulls(&env) > first, "no retry in the window: {seen:?}");
    assert!(
        !seen.iter().any(|r| r == "ContainerCreating"),
        "back to ContainerCreating while the retry ran: {seen:?}"
    );
    assert!(
        env.log().contains("Failed: Error: ErrImagePull"),
        "no \"Error: ErrImagePull\" event in the log"
    );
}
