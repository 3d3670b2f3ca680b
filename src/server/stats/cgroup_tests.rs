//! Pod-level figures from pod cgroups, and /metrics/cadvisor.

use super::*;
use crate::cm::{CgroupStats, MemoryUsage};

/// Pod cgroups with fixed figures, named as the cgroupfs driver does.
struct FakeCgroups(HashMap<String, (String, CgroupStats)>);

impl PodCgroups for FakeCgroups {
    fn pod_cgroup_stats(&self) -> HashMap<String, (String, CgroupStats)> {
        self.0.clone()
    }
    fn container_cgroup(&self, pod: &str, id: &str) -> String {
        format!("{pod}/{id}")
    }
}

fn web_cgroup() -> FakeCgroups {
    let stats = CgroupStats {
        cpu_usage_ns: Some(5 * SEC as u64),
        memory: Some(MemoryUsage {
            usage: 10_000,
            working_set: 8_000,
            rss: Some(4_000),
            page_faults: Some(70),
            major_page_faults: Some(3),
            limit: Some(32 << 20),
        }),
    };
    FakeCgroups(
        [(
            "uid-1".to_string(),
            ("/kubepods/burstable/poduid-1".to_string(), stats),
        )]
        .into(),
    )
}

fn provider_with_cgroups(tmp: &TempDir, rt: FakeRuntime) -> Arc<SummaryProvider> {
    let proc_root = tmp.path().join("proc");
    fake_proc(&proc_root, 1000);
    let mut cfg = StatsConfig::new("node-a", tmp.path().to_path_buf());
    cfg.proc_root = proc_root;
    cfg.pod_logs_dir = tmp.path().join("pods");
    SummaryProvider::with_pod_cgroups(Arc::new(rt), cfg, Some(Arc::new(web_cgroup())))
}

fn pod<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == name)
        .unwrap_or_else(|| panic!("no pod {name} in {v}"))
}

#[test]
fn pod_cpu_and_memory_come_from_the_pod_cgroup_else_the_containers() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-stats-podcg-").unwrap();
    let p = provider_with_cgroups(&tmp, runtime(&tmp));
    let v: Value = serde_json::to_value(p.summary(false).unwrap()).unwrap();
    let web = pod(&v, "web");
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 5_000_000_000u64);
    let m = &web["memory"];
    assert_eq!(m["usageBytes"], 10_000);
    assert_eq!(
        m["workingSetBytes"], 8_000,
        "not the containers' 1000 + 500"
    );
    assert_eq!(m["rssBytes"], 4_000);
    assert_eq!(m["availableBytes"], (32 << 20) - 8_000);
    assert_eq!(
        (m["pageFaults"].clone(), m["majorPageFaults"].clone()),
        (70.into(), 3.into())
    );
    // No pod cgroup (cgroupsPerQOS off, or not made yet): the sum.
    let db = pod(&v, "db");
    assert_eq!(db["memory"]["workingSetBytes"], 300);
    assert_eq!(db["cpu"]["usageCoreNanoSeconds"], 3_000_000_000u64);
}

#[test]
fn usage_nano_cores_of_a_pod_cgroup_comes_from_two_scrapes() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-stats-podcgcores-").unwrap();
    let p = provider_with_cgroups(&tmp, runtime(&tmp));
    let first = p.summary(true).unwrap();
    let web = |s: &Summary| {
        s.pods
            .iter()
            .find(|p| p.pod_ref.name == "web")
            .cloned()
            .unwrap()
    };
    assert_eq!(
        web(&first).cpu.unwrap().usage_nano_cores,
        None,
        "one sample"
    );
    std::thread::sleep(Duration::from_millis(5));
    let second = p.summary(true).unwrap();
    // Same cumulative usage a few ms later: zero cores, not nothing.
    assert_eq!(web(&second).cpu.unwrap().usage_nano_cores, Some(0));
}

#[test]
fn cadvisor_metrics_label_containers_and_pod_cgroups() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-stats-cadvisor-").unwrap();
    let p = provider_with_cgroups(&tmp, runtime(&tmp));
    let r = p.handle("GET", "/metrics/cadvisor", "").unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type, crate::metrics::TEXT_CONTENT_TYPE);
    let fams = crate::metrics::textparse::parse(&r.body).unwrap();
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_usage_bytes",
        "container_memory_working_set_bytes",
        "container_memory_rss",
        "container_oom_events_total",
        "container_start_time_seconds",
    ] {
        assert!(fams.contains_key(name), "{name} missing:\n{}", r.body);
    }
    let app = r#"container_memory_working_set_bytes{container="app",id="/kubepods/burstable/poduid-1/c1",image="",name="c1",namespace="default",pod="web"} 1000"#;
    assert!(r.body.contains(app), "{}", r.body);
    let pod_row = r#"container_memory_working_set_bytes{container="",id="/kubepods/burstable/poduid-1",image="",name="",namespace="default",pod="web"} 8000"#;
    assert!(r.body.contains(pod_row), "{}", r.body);
    // db has no pod cgroup: no id, and no pod series.
    assert!(r
        .body
        .contains(r#"container="db",id="",image="",name="c3""#));
    assert!(!r
        .body
        .contains(r#"container="",id="",image="",name="",namespace="default",pod="db""#));
    assert!(
        !r.body.contains("c-dead"),
        "exited containers are not listed"
    );
}
