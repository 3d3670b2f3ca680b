//! A process's threads, as the tests count them.
//!
//! rkubelet's thread budget is its own threads (the README's thread map):
//! their number is fixed by the configuration, never by pods. gRPC's C core
//! sizes its pools itself, by its own rules (grpcio-sys 1.56):
//! - `grpc_global_timer` starts a second thread the first time one of its
//!   timers fires, and another whenever timers fire while no thread waits;
//! - `event_engine` keeps a reserve and adds threads while work queues;
//! - `default-executor` adds threads (up to 2 × cores) under queued work;
//! - `resolver-executor` and `timer_manager` keep one.
//!
//! So the tests compare our threads by name and only report gRPC's.

use std::fs;

/// gRPC's pools, by the 15-byte names the kernel keeps. The glibc build
/// names them so; the static musl build's core names no thread.
pub const GRPC_POOLS: &[&str] = &[
    "default-executo",
    "event_engine",
    "grpc_global_tim",
    "resolver-execut",
    "timer_manager",
];

/// Every thread's name (`/proc/<pid>/task/*/comm`), sorted.
pub fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    names.sort();
    names
}

/// rkubelet's own threads, sorted: every thread but gRPC's pools. A thread
/// nobody names keeps the name of the thread that started it: the main
/// thread carries the process's name. In the static build gRPC names none
/// of its pools, so those named after the process are left out there,
/// where their number is gRPC's; a gRPC thread
/// started later from one of our threads would carry that thread's name
/// and count as ours (not seen so far: the static panics test passes).
pub fn own_threads(pid: u32) -> Vec<String> {
    let process = fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|n| n.trim().to_string())
        .unwrap_or_default();
    let all = thread_names(pid);
    let grpc_named = all.iter().any(|n| GRPC_POOLS.contains(&n.as_str()));
    all.into_iter()
        .filter(|n| !GRPC_POOLS.contains(&n.as_str()))
        .filter(|n| grpc_named || *n != process)
        .collect()
}

/// How many of gRPC's pool threads there are now (0 in the static build,
/// whose pools are unnamed): for the figures, never asserted.
pub fn grpc_threads(pid: u32) -> usize {
    thread_names(pid)
        .iter()
        .filter(|n| GRPC_POOLS.contains(&n.as_str()))
        .count()
}

/// The names in `now` that `before` did not have (counting repeats).
pub fn added<'a>(before: &[String], now: &'a [String]) -> Vec<&'a String> {
    let mut left: Vec<&String> = before.iter().collect();
    now.iter()
        .filter(|n| match left.iter().position(|b| b == n) {
            Some(i) => {
                left.swap_remove(i);
                false
            }
            None => true,
        })
        .collect()
}
