//! The runtime's own floor for a burst and a delete, without a kubelet:
//! N pods (a sandbox on the runtime's CNI network, one busybox `sleep`
//! container) made straight through CRI, K at a time, then all stopped at
//! once with a grace period, as `tests/bench/realistic.sh` asks of
//! rkubelet. Each sandbox and container is configured as the kubelet
//! (upstream's and rkubelet's) configures realistic.sh's BestEffort pods,
//! in what costs the runtime work: the sandbox's RuntimeDefault seccomp
//! profile (which runc compiles for each pause container), the default
//! masked and read-only paths, the BestEffort CPU shares and OOM score,
//! and the /etc/hosts and termination-log mounts. Without these the
//! "floor" was about a second below the runtime's work for a kubelet.
//! Run by `tests/bench/runtime_floor.sh`, which starts the
//! harness containerd. Prints, in seconds from the first call:
//!
//!   the last StartContainer's return (the floor under "all Ready")
//!   the last StopPodSandbox's return (the floor under "all gone")
//!
//! each with the CPU the whole machine spent meanwhile (/proc/stat).
//!
//! Usage: runtime_floor ENDPOINT PODS PARALLEL GRACE_SECS CGROUP_PARENT LOG_DIR
use rkubelet_cri::defaults::{MASKED_PATHS, READONLY_PATHS};
use rkubelet_cri::{api, RemoteRuntime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IMAGE: &str = "docker.io/library/busybox:1.36";
/// The files the kubelet mounts into every container from the pod's
/// directory: the path in the container, the file, its first content.
const POD_FILES: &[(&str, &str, &str)] = &[
    ("/etc/hosts", "etc-hosts", "127.0.0.1\tlocalhost\n"),
    ("/dev/termination-log", "termination-log", ""),
];

struct Args {
    endpoint: String,
    pods: usize,
    parallel: usize,
    grace: Duration,
    cgroup_parent: String,
    log_dir: String,
}

fn args() -> Result<Args, String> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [endpoint, pods, parallel, grace, cgroup_parent, log_dir] = a.as_slice() else {
        return Err(
            "usage: runtime_floor ENDPOINT PODS PARALLEL GRACE_SECS CGROUP_PARENT LOG_DIR".into(),
        );
    };
    let num = |name: &str, v: &str| v.parse::<usize>().map_err(|e| format!("{name} {v:?}: {e}"));
    Ok(Args {
        endpoint: endpoint.clone(),
        pods: num("PODS", pods)?,
        parallel: num("PARALLEL", parallel)?.max(1),
        grace: Duration::from_secs(num("GRACE_SECS", grace)? as u64),
        cgroup_parent: cgroup_parent.clone(),
        log_dir: log_dir.clone(),
    })
}

/// What the kubelet asks for a pod without shareProcessNamespace: each
/// container its own PID namespace, so `sleep` is PID 1, ignores SIGTERM
/// and takes the whole grace period, as in realistic.sh.
fn namespaces() -> protobuf::MessageField<api::NamespaceOption> {
    Some(api::NamespaceOption {
        network: api::NamespaceMode::POD.into(),
        pid: api::NamespaceMode::CONTAINER.into(),
        ipc: api::NamespaceMode::POD.into(),
        ..Default::default()
    })
    .into()
}

fn sandbox_config(i: usize, a: &Args) -> api::PodSandboxConfig {
    let name = format!("floor-{i}");
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.clone(),
            namespace: "default".into(),
            uid: format!("floor-uid-{i}"),
            ..Default::default()
        })
        .into(),
        hostname: name.clone(),
        log_directory: format!("{}/{name}", a.log_dir),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/{name}", a.cgroup_parent),
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: namespaces(),
                // (upstream forces RuntimeDefault on every sandbox)
                seccomp: Some(api::SecurityProfile {
                    profile_type: api::security_profile::ProfileType::RuntimeDefault.into(),
                    ..Default::default()
                })
                .into(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

fn container_config(pod_dir: &str) -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: "sleep".into(),
            ..Default::default()
        })
        .into(),
        image: Some(api::ImageSpec {
            image: IMAGE.into(),
            ..Default::default()
        })
        .into(),
        command: vec!["sleep".into(), "100000".into()],
        log_path: "sleep/0.log".into(),
        mounts: POD_FILES
            .iter()
            .map(|(to, file, _)| api::Mount {
                container_path: to.to_string(),
                host_path: format!("{pod_dir}/{file}"),
                ..Default::default()
            })
            .collect(),
        linux: Some(api::LinuxContainerConfig {
            security_context: Some(api::LinuxContainerSecurityContext {
                namespace_options: namespaces(),
                masked_paths: MASKED_PATHS.iter().map(|p| p.to_string()).collect(),
                readonly_paths: READONLY_PATHS.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            })
            .into(),
            // BestEffort: the least CPU shares, the first to be OOM-killed.
            resources: Some(api::LinuxContainerResources {
                cpu_shares: 2,
                oom_score_adj: 1000,
                ..Default::default()
            })
            .into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

/// Seconds of CPU the machine has spent busy: user, nice, system, irq,
/// softirq and steal (not idle, iowait, or guest, which user counts);
/// /proc/stat counts in USER_HZ, which is 100 on Linux.
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .enumerate()
        .filter(|(i, _)| matches!(i, 0 | 1 | 2 | 5 | 6 | 7))
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum();
    ticks as f64 / 100.0
}

/// One pod made: its sandbox and container IDs.
type Made = (String, String);

fn make_pod(rt: &RemoteRuntime, i: usize, a: &Args) -> Result<Made, String> {
    let sandbox = sandbox_config(i, a);
    let pod_dir = &sandbox.log_directory;
    std::fs::create_dir_all(pod_dir).map_err(|e| format!("{pod_dir}: {e}"))?;
    for (_, file, text) in POD_FILES {
        std::fs::write(format!("{pod_dir}/{file}"), text)
            .map_err(|e| format!("{pod_dir}/{file}: {e}"))?;
    }
    let sid = rt
        .run_pod_sandbox(sandbox.clone(), "")
        .map_err(|e| e.to_string())?;
    let cid = rt
        .create_container(&sid, container_config(pod_dir), sandbox)
        .map_err(|e| e.to_string())?;
    rt.start_container(&cid).map_err(|e| e.to_string())?;
    Ok((sid, cid))
}

/// Runs `job` for 0..n on `parallel` threads; returns each result and
/// the time from `t0` at which the last one finished.
fn fan_out<T: Send>(
    n: usize,
    parallel: usize,
    t0: Instant,
    job: impl Fn(usize) -> Result<T, String> + Sync,
) -> Result<(Vec<T>, Duration), String> {
    let next = AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| {
        for _ in 0..parallel.min(n) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = job(i).map(|v| (v, t0.elapsed()));
                results.lock().unwrap_or_else(|e| e.into_inner()).push(r);
            });
        }
    });
    let mut out = Vec::with_capacity(n);
    let mut last = Duration::ZERO;
    for r in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        let (v, at) = r?;
        last = last.max(at);
        out.push(v);
    }
    Ok((out, last))
}

fn run(a: &Args) -> Result<(), String> {
    let rt = RemoteRuntime::with_image_endpoint(
        &a.endpoint,
        &a.endpoint,
        Duration::from_secs(120),
        Arc::new(()),
    )
    .map_err(|e| e.to_string())?;
    rt.version().map_err(|e| format!("runtime: {e}"))?;

    let (t0, busy) = (Instant::now(), machine_busy());
    let (made, ready) = fan_out(a.pods, a.parallel, t0, |i| make_pod(&rt, i + 1, a))?;
    println!(
        "runtime_floor_{}_pods_parallel_{}_started_seconds {:.2} (machine CPU {:.2} s)",
        a.pods,
        a.parallel,
        ready.as_secs_f64(),
        machine_busy() - busy
    );

    // The delete as the kubelet does it: every container stopped at once
    // with the grace period, then each pod's sandbox as its container is
    // gone. Every pod on its own thread: the floor, not a pool's.
    let (t0, busy) = (Instant::now(), machine_busy());
    let (_, gone) = fan_out(made.len(), made.len(), t0, |i| {
        let (sid, cid) = &made[i];
        let (tx, rx) = std::sync::mpsc::channel();
        rt.stop_container_async(cid, None, a.grace, a.grace, move |r| {
            let _ = tx.send(r.stopped);
        });
        rx.recv()
            .map_err(|_| "StopContainer: no answer".to_string())?
            .map_err(|e| e.to_string())?;
        rt.stop_pod_sandbox(sid).map_err(|e| e.to_string())
    })?;
    println!(
        "runtime_floor_{}_pods_grace_{}s_sandboxes_stopped_seconds {:.2} (machine CPU {:.2} s)",
        made.len(),
        a.grace.as_secs(),
        gone.as_secs_f64(),
        machine_busy() - busy
    );
    for (sid, _) in &made {
        rt.remove_pod_sandbox(sid).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() {
    if let Err(e) = args().and_then(|a| run(&a)) {
        eprintln!("runtime_floor: {e}");
        std::process::exit(1);
    }
}
