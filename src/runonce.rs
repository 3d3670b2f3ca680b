//! `--runonce` (upstream `pkg/kubelet/runonce.go`): take the static pods
//! once, sync each until its containers run, print their status, exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;

use crate::container::ContainerState;
use crate::kubelet::Kubelet;
use crate::podutil::PodExt;
use crate::podworkers::{PodSyncer, UpdateType};
use crate::types::{PodOperation, PodUpdate};
use crate::util::backoff::Exponential;

const RUNTIME_WAIT: Duration = Duration::from_secs(30);
const SOURCES_WAIT: Duration = Duration::from_secs(30);
/// Upstream's runOnceMaxRetries / runOnceRetryDelay, capped.
const MAX_RETRIES: u32 = 10;
const FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(8);

/// Returns the exit code: 0 when every pod's containers run.
pub fn run_once(kl: &Kubelet, updates: &Receiver<PodUpdate>) -> i32 {
    if let Err(e) = wait_for_runtime(kl) {
        log::error!("runonce: {e}");
        return 1;
    }
    let pods = collect_pods(kl, updates);
    log::info!("runonce: {} pod(s) to run", pods.len());
    let mut failed = 0;
    for pod in &pods {
        if let Err(e) = run_pod(kl, pod) {
            log::error!("runonce: pod {}: {e}", pod.full_name());
            failed += 1;
        }
    }
    print_status(kl, &pods);
    i32::from(failed > 0)
}

fn wait_for_runtime(kl: &Kubelet) -> Result<(), String> {
    let deadline = Instant::now() + RUNTIME_WAIT;
    loop {
        kl.update_runtime_up();
        let errs = kl.runtime_state().runtime_errors();
        if errs.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("container runtime not ready: {}", errs.join("; ")));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Pods from every source's first snapshot.
fn collect_pods(kl: &Kubelet, updates: &Receiver<PodUpdate>) -> Vec<Arc<Pod>> {
    let deadline = Instant::now() + SOURCES_WAIT;
    let mut pods = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        match updates.recv_timeout(Duration::from_millis(200)) {
            Ok(u) => {
                if !seen.contains(&u.source) {
                    seen.push(u.source.clone());
                }
                if u.op == PodOperation::Add {
                    pods.extend(u.pods);
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
        if kl.sources_ready_with(&seen) {
            break;
        }
    }
    pods
}

fn run_pod(kl: &Kubelet, pod: &Arc<Pod>) -> Result<(), String> {
    let mut backoff = Exponential::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY);
    for _ in 0..MAX_RETRIES {
        let status = kl
            .runtime()
            .get_pod_status(pod.uid(), pod.name(), pod.namespace())
            .map_err(|e| e.to_string())?;
        let running = pod.containers().iter().all(|c| {
            status
                .find_container(&c.name)
                .is_some_and(|s| s.state == ContainerState::Running)
        });
        if running {
            return Ok(());
        }
        if let Err(e) = kl.syncer().sync_pod(UpdateType::Create, pod, &status) {
            log::warn!("runonce: pod {}: {}", pod.full_name(), e.error);
        }
        std::thread::sleep(backoff.next_delay());
    }
    Err(format!(
        "containers not running after {MAX_RETRIES} attempts"
    ))
}

fn print_status(kl: &Kubelet, pods: &[Arc<Pod>]) {
    println!("{:<40} {:<10} {:<8} CONTAINERS", "POD", "PHASE", "READY");
    for pod in pods {
        let fresh = kl
            .runtime()
            .get_pod_status(pod.uid(), pod.name(), pod.namespace());
        if let Ok(st) = &fresh {
            kl.syncer().refresh_status(pod, st);
        }
        let status = kl.status_manager().get(pod.uid()).unwrap_or_default();
        let cs = status.container_statuses.unwrap_or_default();
        let ready = cs.iter().filter(|c| c.ready).count();
        let states: Vec<String> = cs
            .iter()
            .map(|c| {
                let st = c.state.as_ref();
                let s = if st.is_some_and(|s| s.running.is_some()) {
                    "running".to_string()
                } else if let Some(w) = st.and_then(|s| s.waiting.as_ref()) {
                    format!("waiting({})", w.reason.clone().unwrap_or_default())
                } else if let Some(t) = st.and_then(|s| s.terminated.as_ref()) {
                    format!("exited({})", t.exit_code)
                } else {
                    "unknown".into()
                };
                format!("{}={s}", c.name)
            })
            .collect();
        println!(
            "{:<40} {:<10} {:<8} {}",
            pod.full_name(),
            status.phase.unwrap_or_else(|| "Unknown".into()),
            format!("{ready}/{}", pod.containers().len()),
            states.join(",")
        );
    }
}
