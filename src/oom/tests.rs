use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;

use super::parser::*;
use super::*;

const CONTAINER_OOM: &[&str] = &[
    "6,1001,5000,-;sh invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-997",
    "6,1002,5001,-;CPU: 1 PID: 4242 Comm: sh Not tainted 6.1.0 #1",
    "6,1003,5002,-;memory: usage 32768kB, limit 32768kB, failcnt 12",
    "6,1004,5003,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=abc,mems_allowed=0,oom_memcg=/kubepods/burstable/pod1/abc,task_memcg=/kubepods/burstable/pod1/abc,task=sh,pid=4242,uid=0\n SUBSYSTEM=memory",
    "3,1005,5004,-;Memory cgroup out of memory: Killed process 4242 (sh) total-vm:1000kB, anon-rss:900kB",
];

const SYSTEM_OOM: &[&str] = &[
    "4,2001,9000,-;stress invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
    "6,2002,9001,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/system.slice/stress.service,task=stress,pid=999,uid=0",
    "3,2003,9002,-;Out of memory: Killed process 999 (stress) total-vm:2000kB, anon-rss:1800kB, file-rss:0kB",
];

fn parse_all(records: &[&str]) -> Vec<OomInstance> {
    let mut p = OomParser::default();
    records
        .iter()
        .filter_map(|r| kmsg_message(r))
        .filter_map(|m| p.feed(m))
        .collect()
}

#[test]
fn a_container_oom_names_both_cgroups_and_the_task() {
    let got = parse_all(CONTAINER_OOM);
    assert_eq!(
        got,
        vec![OomInstance {
            pid: 4242,
            process_name: "sh".into(),
            container_name: "/kubepods/burstable/pod1/abc".into(),
            victim_container_name: "/kubepods/burstable/pod1/abc".into(),
            constraint: "CONSTRAINT_MEMCG".into(),
        }],
        "the summary line closes the report; the Killed line after it is not a new one"
    );
}

#[test]
fn a_global_oom_is_closed_by_the_killed_line_with_the_root_as_victim() {
    let got = parse_all(SYSTEM_OOM);
    assert_eq!(
        got,
        vec![OomInstance {
            pid: 999,
            process_name: "stress".into(),
            container_name: "/".into(),
            victim_container_name: "/".into(),
            constraint: String::new(),
        }]
    );
}

#[test]
fn legacy_kernels_name_the_cgroups_in_the_task_in_line() {
    let got = parse_all(&[
        "4,1,1,-;java invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0",
        "6,2,2,-;Task in /mem2 killed as a result of limit of /mem2",
        "3,3,3,-;Memory cgroup out of memory: Kill process 10 (java) score 1 or sacrifice child",
        "3,4,4,-;Killed process 10 (java) total-vm:10kB, anon-rss:1kB, file-rss:0kB",
    ]);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].container_name, "/mem2");
    assert_eq!(got[0].victim_container_name, "/mem2");
    assert_eq!((got[0].pid, got[0].process_name.as_str()), (10, "java"));
}

#[test]
fn lines_outside_a_report_and_malformed_records_are_ignored() {
    let got = parse_all(&[
        "6,1,1,-;Killed process 5 (x) total-vm:1kB",
        "no separator here",
        "6,2;too few fields",
    ]);
    assert!(got.is_empty());
    assert_eq!(kmsg_message("6,1,1,-;hello\n KEY=v"), Some("hello"));
    assert_eq!(kmsg_message("6,1;x"), None);
}

#[test]
fn greedy_fields_keep_commas_in_task_names() {
    let mut p = OomParser::default();
    p.feed("a invoked oom-killer: x");
    let got = p
        .feed("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=we,ird,pid=7,uid=0")
        .expect("closed");
    assert_eq!(got.process_name, "we,ird");
    assert_eq!(
        (
            got.container_name.as_str(),
            got.victim_container_name.as_str()
        ),
        ("/a/b", "/a")
    );
    // A bad pid does not close the report; the Killed line does.
    p.feed("b invoked oom-killer: x");
    assert_eq!(p.feed("oom-kill:constraint=C,nodemask=n,cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a,task=t,pid=x,uid=0"), None);
    assert_eq!(p.feed("Killed process 8 (t)").map(|o| o.pid), Some(8));
}

#[test]
fn memory_events_are_parsed_exactly() {
    let text = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 5\noom_group_kill 0\n";
    assert_eq!(
        parse_memory_events(text),
        Some(MemoryEvents {
            oom: 3,
            oom_kill: 5
        })
    );
    assert_eq!(parse_memory_events("low 0\nhigh 0\n"), None, "no counters");
    assert_eq!(parse_memory_events("oom x\noom_kill 1\n"), None);
}

#[test]
fn only_kills_without_a_limit_hit_are_system_ooms() {
    let ev = |oom, oom_kill| MemoryEvents { oom, oom_kill };
    assert_eq!(system_oom_kills(ev(1, 1), ev(1, 3)), 2, "global OOM kills");
    assert_eq!(system_oom_kills(ev(1, 1), ev(2, 2)), 0, "a limit was hit");
    assert_eq!(system_oom_kills(ev(1, 1), ev(1, 1)), 0);
    assert_eq!(system_oom_kills(ev(1, 5), ev(1, 0)), 0, "counter reset");
}

#[test]
fn upstream_wording_of_the_system_oom_message() {
    let mut oom = OomInstance {
        pid: 999,
        process_name: "stress".into(),
        ..Default::default()
    };
    assert_eq!(
        system_oom_message(&oom),
        "System OOM encountered, victim process: stress, pid: 999"
    );
    oom.pid = 0;
    assert_eq!(system_oom_message(&oom), "System OOM encountered");
}

#[derive(Default)]
struct NodeEvents(Mutex<Vec<(EventType, String, String)>>);

impl EventRecorder for NodeEvents {
    fn pod_event(&self, _: &Pod, _: EventType, _: &str, _: &str) {}
    fn node_event(&self, kind: EventType, reason: &str, message: &str) {
        self.0
            .lock()
            .unwrap()
            .push((kind, reason.into(), message.into()));
    }
}

/// Hands out canned batches, then reports itself broken.
struct Canned(Vec<Vec<OomInstance>>);

impl OomSource for Canned {
    fn next(&mut self, _: &Shutdown) -> Result<Vec<OomInstance>, String> {
        if self.0.is_empty() {
            return Err("done".into());
        }
        Ok(self.0.remove(0))
    }
}

#[test]
fn only_system_ooms_become_node_events_and_every_kill_is_counted() {
    let events = Arc::new(NodeEvents::default());
    let mut w = Watcher {
        source: Box::new(Canned(vec![
            parse_all(CONTAINER_OOM),
            parse_all(SYSTEM_OOM),
        ])),
        recorder: events.clone(),
    };
    let (stop_tx, stop) = rkubelet_util::shutdown::channel().unwrap();
    // The broken source ends in a wait for shutdown.
    let t = std::thread::spawn(move || w.run(&stop));
    std::thread::sleep(Duration::from_millis(50));
    drop(stop_tx);
    t.join().unwrap();
    let got = events.0.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![(
            EventType::Warning,
            "SystemOOM".to_string(),
            "System OOM encountered, victim process: stress, pid: 999".to_string()
        )]
    );
    assert!(container_oom_events("abc") >= 1);
    assert_eq!(container_oom_events("zzz-none"), 0);
    assert_eq!(container_oom_events(""), 0);
}

#[test]
fn memory_events_source_reports_system_kills_after_its_baseline() {
    let dir = std::env::temp_dir().join(format!("rk-oom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("memory.events");
    std::fs::write(&path, "oom 1\noom_kill 4\n").unwrap();
    let mut src = MemoryEventsSource {
        path: path.clone(),
        period: Duration::ZERO,
        last: None,
    };
    let (_tx, stop) = rkubelet_util::shutdown::channel().unwrap();
    let src_next = |s: &mut MemoryEventsSource| s.next(&stop);
    assert!(
        src_next(&mut src).unwrap().is_empty(),
        "old kills are not replayed"
    );
    std::fs::write(&path, "oom 1\noom_kill 6\n").unwrap();
    let got = src_next(&mut src).unwrap();
    assert_eq!(got.len(), 2);
    assert!(got
        .iter()
        .all(|o| o.victim_container_name == "/" && o.pid == 0));
    std::fs::remove_file(&path).unwrap();
    assert!(
        src_next(&mut src).is_err(),
        "a missing file breaks the source"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_kmsg_read_is_bounded_by_its_timeout() {
    // Only where this process may read the kernel log (root, as the tests run).
    let Ok(mut k) = super::kmsg::Kmsg::open_at_end() else {
        return;
    };
    let (trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
    let t = std::time::Instant::now();
    let _ = k.read(Duration::from_millis(50), &shutdown.fd).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // A long wait ends at shutdown.
    let waiter = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let records = k.read(Duration::from_secs(60), &shutdown.fd).unwrap();
        (t.elapsed(), records.is_empty())
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(trigger);
    let (waited, _) = waiter.join().unwrap();
    assert!(waited < Duration::from_secs(5), "{waited:?}");
}
