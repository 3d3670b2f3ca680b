//! Shutdown: every module thread joined within a deadline, in order.

use super::*;

/// How long shutdown waits for the module threads, all stages together.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(5);

/// The shutdown order, by thread name: sources stop feeding pods, then the
/// workers drain, then status reaches the API, then the servers go. Every
/// thread has seen the closed shutdown channel already; this only decides
/// whose end is waited for first, and names any that does not stop.
const SHUTDOWN_STAGES: &[(&str, &[&str])] = &[
    (
        "sources",
        &["file-source", "http-source", "pod-config", "api-"],
    ),
    (
        "workers",
        &[
            "pleg",
            "pod-worker",
            "volume-manager",
            "object-watches",
            "prober",
            "probe-worker",
            "runtime-status",
            "gc",
            "eviction-manager",
            "log-manager",
            "oom",
            "node-shutdown",
        ],
    ),
    (
        "status",
        &[
            "status-manager",
            "node-status",
            "node-lease",
            "certificate-manager",
            "events",
        ],
    ),
];

pub(super) fn stop_modules(owned: Vec<Worker>) {
    let deadline = std::time::Instant::now() + SHUTDOWN_DEADLINE;
    let mut rest = owned;
    let mut late = Vec::new();
    for (stage, prefixes) in SHUTDOWN_STAGES {
        let (now, later): (Vec<Worker>, Vec<Worker>) = rest
            .into_iter()
            .partition(|w| prefixes.iter().any(|p| w.name().starts_with(p)));
        rest = later;
        late.extend(worker::join_all(stage, now, deadline));
    }
    late.extend(worker::join_all("servers", rest, deadline));
    if !late.is_empty() {
        log::warn!(
            "shutdown: {} did not stop within {SHUTDOWN_DEADLINE:?}",
            late.join(", ")
        );
    }
}
