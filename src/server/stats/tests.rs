use super::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use tempfile::TempDir;

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * SEC;

fn u(v: u64) -> MessageField<api::UInt64Value> {
    Some(api::UInt64Value {
        value: v,
        ..Default::default()
    })
    .into()
}

fn sandbox(id: &str, name: &str, uid: &str, ready: bool, created: i64) -> api::PodSandbox {
    api::PodSandbox {
        id: id.into(),
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            namespace: "default".into(),
            uid: uid.into(),
            ..Default::default()
        })
        .into(),
        state: if ready {
            api::PodSandboxState::SANDBOX_READY
        } else {
            api::PodSandboxState::SANDBOX_NOTREADY
        }
        .into(),
        created_at: created,
        ..Default::default()
    }
}

fn container(id: &str, sb: &str, name: &str, running: bool) -> api::Container {
    api::Container {
        id: id.into(),
        pod_sandbox_id: sb.into(),
        metadata: Some(api::ContainerMetadata {
            name: name.into(),
            ..Default::default()
        })
        .into(),
        state: if running {
            api::ContainerState::CONTAINER_RUNNING
        } else {
            api::ContainerState::CONTAINER_EXITED
        }
        .into(),
        created_at: T0 + 5 * SEC,
        ..Default::default()
    }
}

fn cstats(
    id: &str,
    name: &str,
    ts: i64,
    cpu_ns: u64,
    ws: u64,
    mountpoint: &str,
) -> api::ContainerStats {
    api::ContainerStats {
        attributes: Some(api::ContainerAttributes {
            id: id.into(),
            metadata: Some(api::ContainerMetadata {
                name: name.into(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        })
        .into(),
        cpu: Some(api::CpuUsage {
            timestamp: ts,
            usage_core_nano_seconds: u(cpu_ns),
            ..Default::default()
        })
        .into(),
        memory: Some(api::MemoryUsage {
            timestamp: ts,
            working_set_bytes: u(ws),
            usage_bytes: u(ws + 100),
            rss_bytes: u(ws / 2),
            page_faults: u(7),
            major_page_faults: u(1),
            available_bytes: u(1 << 30),
            ..Default::default()
        })
        .into(),
        writable_layer: Some(api::FilesystemUsage {
            timestamp: ts,
            fs_id: Some(api::FilesystemIdentifier {
                mountpoint: mountpoint.into(),
                ..Default::default()
            })
            .into(),
            used_bytes: u(4096),
            inodes_used: u(3),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }
}

#[derive(Default)]
struct FakeRuntime {
    sandboxes: Vec<api::PodSandbox>,
    containers: Vec<api::Container>,
    stats: Mutex<Vec<api::ContainerStats>>,
    sandbox_stats: Option<Vec<api::PodSandboxStats>>,
    image_fs_mount: String,
}

impl StatsRuntime for FakeRuntime {
    fn list_containers(&self) -> Result<Vec<api::Container>, CriError> {
        Ok(self.containers.clone())
    }
    fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>, CriError> {
        Ok(self.sandboxes.clone())
    }
    fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>, CriError> {
        Ok(self.stats.lock().unwrap().clone())
    }
    fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>, CriError> {
        self.sandbox_stats.clone().ok_or_else(|| CriError {
            method: "ListPodSandboxStats",
            code: Some(grpcio::RpcStatusCode::UNIMPLEMENTED),
            message: "unknown method".into(),
        })
    }
    fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        Ok(api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                timestamp: T0,
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint: self.image_fs_mount.clone(),
                    ..Default::default()
                })
                .into(),
                used_bytes: u(1 << 20),
                inodes_used: u(99),
                ..Default::default()
            }],
            ..Default::default()
        })
    }
}

fn fake_proc(dir: &Path, cpu_user_ticks: u64) {
    fs::create_dir_all(dir.join("net")).unwrap();
    fs::create_dir_all(dir.join("sys/kernel")).unwrap();
    fs::write(
        dir.join("stat"),
        format!(
            "cpu  {cpu_user_ticks} 0 100 5000 10 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nbtime 1699999000\n"
        ),
    )
    .unwrap();
    fs::write(
        dir.join("meminfo"),
        "MemTotal:       16000000 kB\nMemFree:         6000000 kB\nInactive(file):  2000000 kB\nAnonPages:       3000000 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n",
    )
    .unwrap();
    fs::write(dir.join("vmstat"), "pgfault 1234\npgmajfault 12\n").unwrap();
    fs::write(
        dir.join("net/dev"),
        "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:  100 1 0 0 0 0 0 0  100 1 0 0 0 0 0 0\n  ens3: 5000 10 1 0 0 0 0 0 7000 20 2 0 0 0 0 0\nveth12: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n",
    )
    .unwrap();
    fs::write(
        dir.join("net/route"),
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\nens3\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n",
    )
    .unwrap();
    fs::write(dir.join("sys/kernel/pid_max"), "4194304\n").unwrap();
    fs::write(dir.join("loadavg"), "0.10 0.20 0.30 2/350 4242\n").unwrap();
}

fn provider_and_runtime(
    tmp: &TempDir,
    rt: FakeRuntime,
) -> (Arc<SummaryProvider>, Arc<FakeRuntime>) {
    let proc_root = tmp.path().join("proc");
    fake_proc(&proc_root, 1000);
    let mut cfg = StatsConfig::new("node-a", tmp.path().to_path_buf());
    cfg.proc_root = proc_root;
    cfg.pod_logs_dir = tmp.path().join("pods");
    let rt = Arc::new(rt);
    (SummaryProvider::new(rt.clone(), cfg), rt)
}

fn provider(tmp: &TempDir, rt: FakeRuntime) -> Arc<SummaryProvider> {
    provider_and_runtime(tmp, rt).0
}

fn runtime(tmp: &TempDir) -> FakeRuntime {
    let mount = tmp.path().to_string_lossy().into_owned();
    FakeRuntime {
        sandboxes: vec![
            sandbox("sb-old", "web", "uid-old", false, T0 - 100 * SEC),
            sandbox("sb1", "web", "uid-1", true, T0),
            sandbox("sb2", "db", "uid-2", false, T0),
        ],
        containers: vec![
            container("c1", "sb1", "app", true),
            container("c2", "sb1", "sidecar", true),
            container("c-dead", "sb1", "app", false),
            container("c3", "sb2", "db", true),
        ],
        stats: Mutex::new(vec![
            cstats("c1", "app", T0 + 10 * SEC, 2 * SEC as u64, 1000, &mount),
            cstats("c2", "sidecar", T0 + 10 * SEC, SEC as u64, 500, &mount),
            cstats("c-dead", "app", T0 + 10 * SEC, 99 * SEC as u64, 9, &mount),
            cstats("c3", "db", T0 + 10 * SEC, 3 * SEC as u64, 300, &mount),
        ]),
        sandbox_stats: None,
        image_fs_mount: mount,
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn summary_json_uses_upstream_field_names() {
    let tmp = TempDir::with_prefix("rkubelet-stats-json-").unwrap();
    let p = provider(&tmp, runtime(&tmp));
    // Log files for the app container: counted in logs and ephemeral storage.
    let logdir = tmp.path().join("pods/default_web_uid-1/app");
    fs::create_dir_all(&logdir).unwrap();
    fs::write(logdir.join("0.log"), vec![b'x'; 10000]).unwrap();

    let reply = p.handle("GET", "/stats/summary", "").unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.content_type, "application/json");
    let v: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(keys(&v), set(&["node", "pods"]));

    let node = &v["node"];
    assert_eq!(
        keys(node),
        set(&[
            "nodeName",
            "startTime",
            "cpu",
            "memory",
            "network",
            "fs",
            "runtime",
            "rlimit",
            "swap"
        ])
    );
    assert_eq!(node["nodeName"], "node-a");
    assert_eq!(node["startTime"], "2023-11-14T21:56:40Z");
    assert_eq!(
        keys(&node["cpu"]),
        set(&["time", "usageNanoCores", "usageCoreNanoSeconds"])
    );
    // 1000 user + 100 system ticks at USER_HZ.
    assert_eq!(
        node["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap(),
        1100 * 1_000_000_000 / node::clk_tck()
    );
    assert_eq!(
        keys(&node["memory"]),
        set(&[
            "time",
            "availableBytes",
            "usageBytes",
            "workingSetBytes",
            "rssBytes",
            "pageFaults",
            "majorPageFaults"
        ])
    );
    assert_eq!(node["memory"]["usageBytes"], 10_000_000u64 * 1024);
    assert_eq!(node["memory"]["workingSetBytes"], 8_000_000u64 * 1024);
    assert_eq!(node["memory"]["availableBytes"], 8_000_000u64 * 1024);
    assert_eq!(node["memory"]["majorPageFaults"], 12);
    assert_eq!(
        keys(&node["network"]),
        set(&[
            "time",
            "name",
            "rxBytes",
            "rxErrors",
            "txBytes",
            "txErrors",
            "interfaces"
        ])
    );
    assert_eq!(node["network"]["name"], "ens3");
    assert_eq!(node["network"]["interfaces"].as_array().unwrap().len(), 1);
    assert_eq!(
        keys(&node["fs"]),
        set(&[
            "time",
            "availableBytes",
            "capacityBytes",
            "usedBytes",
            "inodesFree",
            "inodes",
            "inodesUsed"
        ])
    );
    assert_eq!(keys(&node["runtime"]), set(&["imageFs", "containerFs"]));
    assert_eq!(node["runtime"]["imageFs"]["usedBytes"], 1 << 20);
    assert_eq!(node["runtime"]["imageFs"]["inodesUsed"], 99);
    assert!(
        node["runtime"]["imageFs"]["capacityBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(keys(&node["rlimit"]), set(&["time", "maxpid", "curproc"]));
    assert_eq!(node["rlimit"]["maxpid"], 4194304);
    assert_eq!(node["rlimit"]["curproc"], 350);
    assert_eq!(
        keys(&node["swap"]),
        set(&["time", "swapAvailableBytes", "swapUsageBytes"])
    );

    // Only the ready sandbox's pod: the old NotReady "web" sandbox is
    // superseded, and "db" has only a NotReady sandbox (still reported, as
    // upstream keeps the newest when none is ready).
    let pods = v["pods"].as_array().unwrap();
    let names: Vec<&str> = pods
        .iter()
        .map(|p| p["podRef"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["web", "db"], "{}", reply.body);
    let web = &pods[0];
    assert_eq!(
        keys(web),
        set(&[
            "podRef",
            "startTime",
            "containers",
            "cpu",
            "memory",
            "ephemeral-storage"
        ])
    );
    assert_eq!(keys(&web["podRef"]), set(&["name", "namespace", "uid"]));
    assert_eq!(web["podRef"]["uid"], "uid-1");
    assert_eq!(web["startTime"], "2023-11-14T22:13:20Z");
    let containers = web["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "the exited container is left out");
    let app = &containers[0];
    assert_eq!(app["name"], "app");
    assert_eq!(
        keys(app),
        set(&["name", "startTime", "cpu", "memory", "rootfs", "logs"])
    );
    assert_eq!(app["startTime"], "2023-11-14T22:13:25Z");
    assert_eq!(app["cpu"]["usageCoreNanoSeconds"], 2_000_000_000u64);
    assert!(
        app["cpu"].get("usageNanoCores").is_none(),
        "one sample only"
    );
    assert_eq!(app["memory"]["workingSetBytes"], 1000);
    assert_eq!(app["rootfs"]["usedBytes"], 4096);
    assert_eq!(app["rootfs"]["inodesUsed"], 3);
    assert!(app["rootfs"]["capacityBytes"].as_u64().unwrap() > 0);
    assert!(app["logs"]["usedBytes"].as_u64().unwrap() >= 10000);
    assert_eq!(app["logs"]["inodesUsed"], 1);
    // Pod totals summed from containers (no ListPodSandboxStats).
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 3_000_000_000u64);
    assert_eq!(web["memory"]["workingSetBytes"], 1500);
    let eph = web["ephemeral-storage"]["usedBytes"].as_u64().unwrap();
    assert!(eph >= 2 * 4096 + 10000, "{eph}");

    // The round trip through our own types is lossless.
    let s: Summary = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(s.pods.len(), 2);
}

#[test]
fn usage_nano_cores_from_two_samples() {
    let tmp = TempDir::with_prefix("rkubelet-stats-nanocores-").unwrap();
    let rt = runtime(&tmp);
    let mount = rt.image_fs_mount.clone();
    let (p, fake) = provider_and_runtime(&tmp, rt);
    let s1 = p.summary(true).unwrap();
    assert_eq!(
        s1.pods[0].containers[0]
            .cpu
            .as_ref()
            .unwrap()
            .usage_nano_cores,
        None
    );
    // Node: first call takes two samples (same fake file: 0 cores).
    assert_eq!(s1.node.cpu.as_ref().unwrap().usage_nano_cores, Some(0));

    // 2 s later the app container used another 0.5 s of CPU: 0.25 cores.
    let ts = T0 + 12 * SEC;
    let rt_stats = vec![
        cstats(
            "c1",
            "app",
            ts,
            2 * SEC as u64 + SEC as u64 / 2,
            1000,
            &mount,
        ),
        cstats("c2", "sidecar", ts, SEC as u64, 500, &mount),
    ];
    *fake.stats.lock().unwrap() = rt_stats;
    let s2 = p.summary(true).unwrap();
    let web = &s2.pods[0];
    assert_eq!(
        web.containers[0].cpu.as_ref().unwrap().usage_nano_cores,
        Some(250_000_000)
    );
    assert_eq!(
        web.containers[1].cpu.as_ref().unwrap().usage_nano_cores,
        Some(0)
    );
    assert_eq!(
        web.cpu.as_ref().unwrap().usage_nano_cores,
        Some(250_000_000)
    );
    // The same sample again keeps the last rate instead of dividing by zero.
    let s3 = p.summary(true).unwrap();
    assert_eq!(
        s3.pods[0].containers[0]
            .cpu
            .as_ref()
            .unwrap()
            .usage_nano_cores,
        Some(250_000_000)
    );
    // c3 (db) vanished from the stats: its cache entry is dropped.
    assert!(!p.cpu_cache.lock().unwrap().contains_key("c3"));
    assert!(p.cpu_cache.lock().unwrap().contains_key("c1"));

    // Node: the next /proc/stat sample, some time later.
    fake_proc(&tmp.path().join("proc"), 1000 + node::clk_tck());
    std::thread::sleep(Duration::from_millis(50));
    let s4 = p.summary(true).unwrap();
    let cores = s4.node.cpu.as_ref().unwrap().usage_nano_cores.unwrap();
    // One core-second within ~50-200 ms: well above one core.
    assert!(cores > 1_000_000_000, "{cores}");
}

#[test]
fn pod_level_stats_from_sandbox_stats() {
    let tmp = TempDir::with_prefix("rkubelet-stats-sbstats-").unwrap();
    let mut rt = runtime(&tmp);
    rt.sandbox_stats = Some(vec![api::PodSandboxStats {
        attributes: Some(api::PodSandboxAttributes {
            id: "sb1".into(),
            ..Default::default()
        })
        .into(),
        linux: Some(api::LinuxPodSandboxStats {
            cpu: Some(api::CpuUsage {
                timestamp: T0 + 10 * SEC,
                usage_core_nano_seconds: u(4 * SEC as u64),
                usage_nano_cores: u(123),
                ..Default::default()
            })
            .into(),
            memory: Some(api::MemoryUsage {
                timestamp: T0 + 10 * SEC,
                working_set_bytes: u(2000),
                ..Default::default()
            })
            .into(),
            network: Some(api::NetworkUsage {
                timestamp: T0 + 10 * SEC,
                default_interface: Some(api::NetworkInterfaceUsage {
                    name: "eth0".into(),
                    rx_bytes: u(10),
                    tx_bytes: u(20),
                    ..Default::default()
                })
                .into(),
                ..Default::default()
            })
            .into(),
            process: Some(api::ProcessUsage {
                process_count: u(4),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }]);
    let p = provider(&tmp, rt);
    let v: Value = serde_json::to_value(p.summary(false).unwrap()).unwrap();
    let web = &v["pods"][0];
    assert_eq!(web["cpu"]["usageNanoCores"], 123);
    assert_eq!(web["cpu"]["usageCoreNanoSeconds"], 4_000_000_000u64);
    assert_eq!(web["memory"]["workingSetBytes"], 2000);
    assert_eq!(
        keys(&web["network"]),
        set(&["time", "name", "rxBytes", "txBytes"])
    );
    assert_eq!(web["network"]["name"], "eth0");
    assert_eq!(web["process_stats"]["process_count"], 4);
}

#[test]
fn only_cpu_and_memory_skips_fs() {
    let tmp = TempDir::with_prefix("rkubelet-stats-cpumem-").unwrap();
    let p = provider(&tmp, runtime(&tmp));
    let r = p
        .handle("GET", "/stats/summary", "only_cpu_and_memory=true")
        .unwrap();
    let v: Value = serde_json::from_str(&r.body).unwrap();
    assert!(v["node"].get("fs").is_none());
    assert!(v["node"].get("runtime").is_none());
    let app = &v["pods"][0]["containers"][0];
    assert_eq!(keys(app), set(&["name", "startTime", "cpu", "memory"]));
    assert!(p.handle("GET", "/pods", "").is_none());
    assert_eq!(p.handle("POST", "/stats/summary", "").unwrap().status, 405);
}

#[test]
fn eviction_node_summary_reads_only_what_the_signals_need() {
    let tmp = TempDir::with_prefix("rkubelet-stats-eviction-").unwrap();
    let p = provider(&tmp, runtime(&tmp));
    let full = p.summary(false).unwrap().node;
    let s = p.eviction_node_summary();
    assert!(s.pods.is_empty());
    let n = s.node;
    // The signals' sources agree with the full summary's.
    let mem = n.memory.expect("memory");
    let full_mem = full.memory.expect("full memory");
    assert_eq!(mem.available_bytes, full_mem.available_bytes);
    assert_eq!(mem.working_set_bytes, full_mem.working_set_bytes);
    assert_eq!(
        n.fs.map(|f| f.capacity_bytes),
        full.fs.map(|f| f.capacity_bytes)
    );
    let image_fs = |r: Option<RuntimeStats>| r.and_then(|r| r.image_fs).map(|f| f.used_bytes);
    assert_eq!(image_fs(n.runtime), Some(Some(1 << 20)));
    let rlimit = n.rlimit.expect("rlimit");
    assert_eq!(
        (rlimit.max_pid, rlimit.num_of_running_processes),
        (Some(4194304), Some(350))
    );
    // What no signal reads is left out: /proc/stat, net/dev, vmstat.
    assert!(full.cpu.is_some() && full.network.is_some());
    assert!(full_mem.page_faults.is_some());
    assert!(n.cpu.is_none(), "{:?}", n.cpu);
    assert!(n.network.is_none(), "{:?}", n.network);
    assert_eq!(mem.page_faults, None);
}

#[test]
fn resource_metrics_parse_with_upstream_names() {
    let tmp = TempDir::with_prefix("rkubelet-stats-resource-").unwrap();
    let p = provider(&tmp, runtime(&tmp));
    let r = p.handle("GET", "/metrics/resource", "").unwrap();
    assert_eq!(r.status, 200);
    let fams =
        crate::metrics::textparse::parse(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.body));
    for (name, kind) in [
        ("node_cpu_usage_seconds_total", "counter"),
        ("node_memory_working_set_bytes", "gauge"),
        ("container_cpu_usage_seconds_total", "counter"),
        ("container_memory_working_set_bytes", "gauge"),
        ("container_start_time_seconds", "gauge"),
        ("pod_cpu_usage_seconds_total", "counter"),
        ("pod_memory_working_set_bytes", "gauge"),
        ("resource_scrape_error", "gauge"),
        ("scrape_error", "gauge"),
    ] {
        let f = fams
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing:\n{}", r.body));
        assert_eq!(f.kind, kind, "{name}");
        assert!(f.help.starts_with('['), "{name}");
    }
    let c = &fams["container_cpu_usage_seconds_total"].samples;
    let app = c
        .iter()
        .find(|s| s.label("container") == Some("app"))
        .unwrap();
    assert_eq!(app.label("pod"), Some("web"));
    assert_eq!(app.label("namespace"), Some("default"));
    assert_eq!(app.value, 2.0);
    assert_eq!(app.timestamp_ms, Some((T0 + 10 * SEC) / 1_000_000));
    let mem = &fams["pod_memory_working_set_bytes"].samples;
    assert!(mem
        .iter()
        .any(|s| s.label("pod") == Some("web") && s.value == 1500.0));
    assert_eq!(fams["resource_scrape_error"].samples[0].value, 0.0);
    assert!(fams["node_cpu_usage_seconds_total"].samples[0]
        .timestamp_ms
        .is_some());
    let start = &fams["container_start_time_seconds"].samples;
    assert!(start.iter().any(|s| s.value == (T0 + 5 * SEC) as f64 / 1e9));

    // A failing runtime: only the error gauges, set to 1.
    let failed = render_resource_metrics(None);
    let fams = crate::metrics::textparse::parse(&failed).unwrap();
    assert_eq!(fams["resource_scrape_error"].samples[0].value, 1.0);
    assert!(!fams.contains_key("node_cpu_usage_seconds_total"));
}

#[test]
fn label_values_are_escaped() {
    let mut s = Summary::default();
    s.pods.push(PodStats {
        pod_ref: PodReference {
            name: "we\"ird\\pod".into(),
            namespace: "ns".into(),
            uid: "u".into(),
        },
        memory: Some(MemoryStats {
            time: Time(T0),
            working_set_bytes: Some(5),
            ..Default::default()
        }),
        ..Default::default()
    });
    let text = render_resource_metrics(Some(&s));
    let fams = crate::metrics::textparse::parse(&text).unwrap();
    assert_eq!(
        fams["pod_memory_working_set_bytes"].samples[0].label("pod"),
        Some("we\"ird\\pod")
    );
}

#[test]
fn time_serializes_as_metav1() {
    assert_eq!(serde_json::to_string(&Time(0)).unwrap(), "null");
    assert_eq!(
        serde_json::to_string(&Time(T0 + 999_999_999)).unwrap(),
        "\"2023-11-14T22:13:20Z\""
    );
    let t: Time = serde_json::from_str("\"2023-11-14T22:13:20Z\"").unwrap();
    assert_eq!(t, Time(T0));
}

#[test]
fn proc_parsers() {
    assert_eq!(
        node::cpu_usage_ns("cpu  1 2 3 4 5 6 7 8 9 10\n", 100),
        Some(27 * 10_000_000)
    );
    assert_eq!(node::boot_time("cpu 1\nbtime 42\n"), Some(42));
    let mi = crate::stats::node::parse_meminfo("MemTotal: 10 kB\nHugePages_Total: 3\n");
    assert_eq!(mi["MemTotal"], 10240);
    assert_eq!(mi["HugePages_Total"], 3);
    assert_eq!(
        node::default_route_interface(
            "Iface\tDestination\tGateway\neth1\t0000FEA9\t0\neth9\t00000000\t0102A8C0\n"
        )
        .as_deref(),
        Some("eth9")
    );
    let (bytes, inodes) = node::disk_usage(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/server/stats")
            .as_path(),
    )
    .unwrap();
    assert!(bytes > 0 && inodes >= 4);
    assert!(node::disk_usage(Path::new("/nonexistent/dir")).is_none());
}

#[path = "cgroup_tests.rs"]
mod cgroup_tests;
