use super::node::{memory_available, node_memory, parse_meminfo, parse_vmstat, working_set};
use super::*;
use std::path::Path;
use tempfile::TempDir;

const KIB: u64 = 1024;

/// A `/proc` with the given meminfo (and vmstat, when given), unique per test.
fn sample_proc(tag: &str, meminfo: &str, vmstat: Option<&str>) -> TempDir {
    let dir = sample_dir(tag, &[("meminfo", meminfo)]);
    if let Some(v) = vmstat {
        std::fs::write(dir.path().join("vmstat"), v).expect("write vmstat");
    }
    dir
}

#[test]
fn meminfo_is_bytes_by_field() {
    let m = parse_meminfo(
        "MemTotal:       16318936 kB\nMemFree:   1000 kB\nHugePages_Total:       3\n\
         Inactive(file):  42 kB\nbogus line\nNoValue:\nNotANumber: x kB\n",
    );
    assert_eq!(m["MemTotal"], 16318936 * KIB);
    assert_eq!(m["MemFree"], 1000 * KIB);
    assert_eq!(m["Inactive(file)"], 42 * KIB);
    // A count, not a size.
    assert_eq!(m["HugePages_Total"], 3);
    assert_eq!(m.len(), 4);
    // A value too large for bytes saturates rather than wrapping.
    assert_eq!(
        parse_meminfo("Huge: 18446744073709551615 kB")["Huge"],
        u64::MAX
    );
    assert!(parse_meminfo("").is_empty());
}

#[test]
fn vmstat_is_counters_by_name() {
    let v = parse_vmstat("pgfault 1234\npgmajfault 12\nbroken\nnr_x notanumber\n");
    assert_eq!(v["pgfault"], 1234);
    assert_eq!(v["pgmajfault"], 12);
    assert_eq!(v.len(), 2);
}

#[test]
fn available_is_capacity_less_working_set_clamped_at_zero() {
    // usage − inactive_file, at least 0.
    assert_eq!(working_set(800, 300), 500);
    assert_eq!(working_set(300, 800), 0);
    // capacity − working set, at least 0.
    assert_eq!(memory_available(1000, 500), 500);
    assert_eq!(memory_available(1000, 1000), 0);
    assert_eq!(memory_available(1000, 1500), 0);
    // Together: capacity − (usage − inactive_file).
    assert_eq!(memory_available(1000, working_set(900, 100)), 200);
    assert_eq!(memory_available(1000, working_set(100, 900)), 1000);
}

#[test]
fn node_memory_from_meminfo_and_vmstat() {
    let meminfo = parse_meminfo(
        "MemTotal: 16000 kB\nMemFree: 6000 kB\nMemAvailable: 9999 kB\n\
         Inactive(file): 2000 kB\nAnonPages: 3000 kB\nSwapTotal: 4000 kB\nSwapFree: 1000 kB\n",
    );
    let vmstat = parse_vmstat("pgfault 1234\npgmajfault 12\n");
    let m = node_memory(&meminfo, &vmstat).expect("MemTotal is there");
    assert_eq!(
        m,
        NodeMemory {
            capacity: 16000 * KIB,
            usage: 10000 * KIB,
            working_set: 8000 * KIB,
            // capacity − working set; MemAvailable plays no part.
            available: 8000 * KIB,
            rss: Some(3000 * KIB),
            page_faults: Some(1234),
            major_page_faults: Some(12),
            swap: Some(SwapInfo {
                available: 1000 * KIB,
                usage: 3000 * KIB,
            }),
        }
    );
    // The signal upstream eviction derives: capacity = available + working set.
    assert_eq!(m.available + m.working_set, m.capacity);
}

#[test]
fn node_memory_needs_only_mem_total() {
    let meminfo = parse_meminfo("MemTotal: 2048 kB\n");
    let m = node_memory(&meminfo, &Default::default()).expect("MemTotal is there");
    // Nothing free and nothing reclaimable: all of it is the working set.
    assert_eq!(
        (m.usage, m.working_set, m.available),
        (2048 * KIB, 2048 * KIB, 0)
    );
    assert_eq!((m.rss, m.page_faults, m.swap), (None, None, None));
    assert_eq!(
        node_memory(&parse_meminfo("MemFree: 1 kB\n"), &Default::default()),
        None
    );
}

#[test]
fn provider_reads_its_own_proc() {
    let tmp = sample_proc(
        "read",
        "MemTotal: 2048 kB\nMemFree: 512 kB\nInactive(file): 512 kB\n",
        Some("pgfault 7\n"),
    );
    let dir = tmp.path();
    let p = Provider::new(dir);
    assert_eq!(p.memory_capacity().expect("MemTotal"), 2048 * KIB);
    let m = p.memory().expect("node memory");
    assert_eq!(m.available, 1024 * KIB);
    assert_eq!(m.page_faults, Some(7));
    // Without vmstat the page faults are unknown, the rest is there.
    std::fs::remove_file(dir.join("vmstat")).expect("remove vmstat");
    let m = p.memory().expect("node memory without vmstat");
    assert_eq!((m.available, m.page_faults), (1024 * KIB, None));
}

#[test]
fn provider_errors_name_the_file() {
    let tmp = sample_proc("errors", "MemFree: 512 kB\n", None);
    let dir = tmp.path();
    let p = Provider::new(dir);
    let meminfo = dir.join("meminfo");
    assert!(matches!(p.memory(), Err(StatsError::MissingField { .. })));
    let e = p.memory_capacity().expect_err("no MemTotal");
    assert!(matches!(
        e,
        StatsError::MissingField {
            field: "MemTotal",
            ..
        }
    ));
    assert_eq!(
        e.to_string(),
        format!("no MemTotal in {}", meminfo.display())
    );

    std::fs::remove_file(&meminfo).expect("remove meminfo");
    let e = p.memory().expect_err("no meminfo");
    assert!(matches!(&e, StatsError::Read { path, .. } if path == &meminfo));
    assert!(e
        .to_string()
        .starts_with(&format!("reading {}: ", meminfo.display())));
    assert!(std::error::Error::source(&e).is_some());
}

#[test]
fn host_memory() {
    let m = Provider::default().memory().expect("host /proc/meminfo");
    assert!(m.capacity > 0);
    assert!(m.working_set <= m.usage && m.usage <= m.capacity);
    assert_eq!(m.available, m.capacity - m.working_set);
}

#[test]
fn statvfs_of_root() {
    let fs = statvfs(Path::new("/")).expect("statvfs /");
    assert!(fs.capacity > 0);
    assert!(fs.capacity >= fs.available);
    assert!(fs.capacity >= fs.used);
    assert!(fs.inodes >= fs.inodes_free);
}

#[test]
fn statvfs_error_names_the_path() {
    let missing = Path::new("/nonexistent/rkubelet-stats");
    let e = statvfs(missing).expect_err("no such path");
    assert!(matches!(
        &e,
        StatsError::Statvfs { path, errno: nix::errno::Errno::ENOENT } if path == missing
    ));
    assert!(e
        .to_string()
        .starts_with("statvfs /nonexistent/rkubelet-stats: "));
}

/// A directory holding `files` (path, text), removed on drop.
fn sample_dir(tag: &str, files: &[(&str, &str)]) -> TempDir {
    let dir =
        TempDir::with_prefix(format!("rkubelet-hoststats-{tag}-")).expect("create sample dir");
    for (name, text) in files {
        let p = dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("create sample subdir");
        }
        std::fs::write(p, text).expect("write sample file");
    }
    dir
}

/// pid.available's inputs: the smaller of pid_max and threads-max, and
/// the task count of /proc/loadavg.
#[test]
fn pids_are_the_task_limit_and_count() {
    let tmp = sample_dir(
        "pids",
        &[
            ("sys/kernel/pid_max", "4194304\n"),
            ("sys/kernel/threads-max", "95000\n"),
            ("loadavg", "1.36 3.49 4.53 2/3518 3715089\n"),
        ],
    );
    let dir = tmp.path();
    assert_eq!(Provider::new(dir).pids(), Some((95000, 3518)));
    std::fs::remove_file(dir.join("loadavg")).expect("remove loadavg");
    assert_eq!(Provider::new(dir).pids(), None);
}

/// The emptyDir walk counts allocated blocks and stops at its bound.
#[test]
fn bounded_dir_usage() {
    let big = "x".repeat(64 * 1024);
    let tmp = sample_dir("du", &[("a", &big), ("sub/b", &big), ("sub/c", "y")]);
    let dir = tmp.path();
    let all = fs::dir_usage_bounded(dir, 100).expect("usage");
    assert!(all >= 128 * 1024, "{all}");
    let cut = fs::dir_usage_bounded(dir, 1).expect("usage");
    assert!(cut < all, "{cut} < {all}");
    assert_eq!(fs::dir_usage_bounded(&dir.join("missing"), 10), None);
}
