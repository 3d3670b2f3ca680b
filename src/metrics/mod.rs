//! The kubelet's own Prometheus metrics (upstream `pkg/kubelet/metrics`,
//! `pkg/kubelet/server/metrics` and client-go's `rest_client_*`), served on
//! `/metrics` through [`render`].
//!
//! One process-wide registry behind a `OnceLock`; the rest of the kubelet
//! calls the small recording functions below and never touches a metric
//! object. Names, label names, help texts (with component-base's `[ALPHA]`
//! stability prefix) and buckets follow upstream.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};
use rkubelet_util::lock;

/// Prometheus' DefBuckets.
const DEF_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Upstream podStartupDurationBuckets.
const POD_START_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, 180.0, 240.0,
    300.0, 360.0, 480.0, 600.0, 900.0, 1200.0, 1800.0, 2700.0, 3600.0,
];
/// client-go's rest_client_request_duration_seconds buckets.
const REST_CLIENT_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The kubelet API server's path buckets (upstream addMetricsBucketMatcher);
/// anything else is counted as "other".
const HTTP_PATH_BUCKETS: &[&str] = &[
    "attach",
    "checkpoint",
    "configz",
    "containerLogs",
    "cri",
    "debug",
    "exec",
    "healthz",
    "logs",
    "metrics",
    "metrics/cadvisor",
    "metrics/probes",
    "metrics/resource",
    "pods",
    "portForward",
    "run",
    "runningpods",
    "stats",
];
const HTTP_METHOD_BUCKETS: &[&str] = &[
    "OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT",
];

/// `kubelet_running_containers` states (upstream's container_state values).
pub const CONTAINER_STATES: &[&str] = &["created", "running", "exited", "unknown"];

struct Metrics {
    registry: Registry,
    node_name: IntGaugeVec,
    pleg_relist_duration: Histogram,
    pleg_relist_interval: Histogram,
    pleg_last_seen: Gauge,
    pleg_discard_events: IntCounter,
    pod_start_duration: Histogram,
    pod_worker_duration: HistogramVec,
    running_pods: IntGauge,
    running_containers: IntGaugeVec,
    runtime_ops: IntCounterVec,
    runtime_op_errors: IntCounterVec,
    runtime_op_duration: HistogramVec,
    started_pods: IntCounter,
    started_pods_errors: IntCounter,
    started_containers: IntCounterVec,
    started_containers_errors: IntCounterVec,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    http_inflight: IntGaugeVec,
    rest_client_requests: IntCounterVec,
    module_panics: IntCounterVec,
    evictions: IntCounterVec,
    rest_client_duration: HistogramVec,
    /// `kubelet_volume_stats_*`, in [`VOLUME_STATS`]' order.
    volume_stats: Vec<IntGaugeVec>,
}

/// The volume usage gauges (upstream's names and help), by claim.
const VOLUME_STATS: [(&str, &str); 6] = [
    (
        "volume_stats_capacity_bytes",
        "Capacity in bytes of the volume",
    ),
    (
        "volume_stats_available_bytes",
        "Number of available bytes in the volume",
    ),
    (
        "volume_stats_used_bytes",
        "Number of used bytes in the volume",
    ),
    (
        "volume_stats_inodes",
        "Maximum number of inodes in the volume",
    ),
    (
        "volume_stats_inodes_free",
        "Number of free inodes in the volume",
    ),
    (
        "volume_stats_inodes_used",
        "Number of used inodes in the volume",
    ),
];

fn alpha(help: &str) -> String {
    format!("[ALPHA] {help}")
}

fn kubelet_opts(name: &str, help: &str) -> Opts {
    Opts::new(name, alpha(help)).subsystem("kubelet")
}

fn kubelet_hist(name: &str, help: &str, buckets: Vec<f64>) -> HistogramOpts {
    HistogramOpts::new(name, alpha(help))
        .subsystem("kubelet")
        .buckets(buckets)
}

impl Metrics {
    fn build() -> prometheus::Result<Metrics> {
        let http_labels = &["method", "path", "server_type", "long_running"];
        let m = Metrics {
            registry: Registry::new(),
            node_name: IntGaugeVec::new(
                kubelet_opts("node_name", "The node's name. The count is always 1."),
                &["node"],
            )?,
            pleg_relist_duration: Histogram::with_opts(kubelet_hist(
                "pleg_relist_duration_seconds",
                "Duration in seconds for relisting pods in PLEG.",
                DEF_BUCKETS.to_vec(),
            ))?,
            pleg_relist_interval: Histogram::with_opts(kubelet_hist(
                "pleg_relist_interval_seconds",
                "Interval in seconds between relisting in PLEG.",
                DEF_BUCKETS.to_vec(),
            ))?,
            pleg_last_seen: Gauge::with_opts(kubelet_opts(
                "pleg_last_seen_seconds",
                "Timestamp in seconds when PLEG was last seen active.",
            ))?,
            pleg_discard_events: IntCounter::with_opts(kubelet_opts(
                "pleg_discard_events",
                "The number of discard events in PLEG.",
            ))?,
            pod_start_duration: Histogram::with_opts(kubelet_hist(
                "pod_start_duration_seconds",
                "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run",
                POD_START_BUCKETS.to_vec(),
            ))?,
            pod_worker_duration: HistogramVec::new(
                kubelet_hist(
                    "pod_worker_duration_seconds",
                    "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync",
                    DEF_BUCKETS.to_vec(),
                ),
                &["operation_type"],
            )?,
            running_pods: IntGauge::with_opts(kubelet_opts(
                "running_pods",
                "Number of pods that have a running pod sandbox",
            ))?,
            running_containers: IntGaugeVec::new(
                kubelet_opts("running_containers", "Number of containers currently running"),
                &["container_state"],
            )?,
            runtime_ops: IntCounterVec::new(
                kubelet_opts(
                    "runtime_operations_total",
                    "Cumulative number of runtime operations by operation type.",
                ),
                &["operation_type"],
            )?,
            runtime_op_errors: IntCounterVec::new(
                kubelet_opts(
                    "runtime_operations_errors_total",
                    "Cumulative number of runtime operation errors by operation type.",
                ),
                &["operation_type"],
            )?,
            runtime_op_duration: HistogramVec::new(
                kubelet_hist(
                    "runtime_operations_duration_seconds",
                    "Duration in seconds of runtime operations. Broken down by operation type.",
                    prometheus::exponential_buckets(0.005, 2.5, 14)?,
                ),
                &["operation_type"],
            )?,
            started_pods: IntCounter::with_opts(kubelet_opts(
                "started_pods_total",
                "Cumulative number of pods started",
            ))?,
            started_pods_errors: IntCounter::with_opts(kubelet_opts(
                "started_pods_errors_total",
                "Cumulative number of errors when starting pods",
            ))?,
            started_containers: IntCounterVec::new(
                kubelet_opts("started_containers_total", "Cumulative number of containers started"),
                &["container_type"],
            )?,
            started_containers_errors: IntCounterVec::new(
                kubelet_opts(
                    "started_containers_errors_total",
                    "Cumulative number of errors when starting containers",
                ),
                &["container_type", "code"],
            )?,
            http_requests: IntCounterVec::new(
                kubelet_opts(
                    "http_requests_total",
                    "Number of the http requests received since the server started",
                ),
                http_labels,
            )?,
            http_duration: HistogramVec::new(
                kubelet_hist(
                    "http_requests_duration_seconds",
                    "Duration in seconds to serve http requests",
                    DEF_BUCKETS.to_vec(),
                ),
                http_labels,
            )?,
            http_inflight: IntGaugeVec::new(
                kubelet_opts("http_inflight_requests", "Number of the inflight http requests"),
                http_labels,
            )?,
            rest_client_requests: IntCounterVec::new(
                Opts::new(
                    "rest_client_requests_total",
                    alpha("Number of HTTP requests, partitioned by status code, method, and host."),
                ),
                &["code", "method", "host"],
            )?,
            module_panics: IntCounterVec::new(
                kubelet_opts(
                    "module_panics_total",
                    "Panics contained in a module's thread or a pod's sync (rkubelet)",
                ),
                &["module"],
            )?,
            evictions: IntCounterVec::new(
                kubelet_opts(
                    "evictions",
                    "Cumulative number of pod evictions by eviction signal",
                ),
                &["eviction_signal"],
            )?,
            rest_client_duration: HistogramVec::new(
                HistogramOpts::new(
                    "rest_client_request_duration_seconds",
                    alpha("Request latency in seconds. Broken down by verb, and host."),
                )
                .buckets(REST_CLIENT_BUCKETS.to_vec()),
                &["verb", "host"],
            )?,
            volume_stats: VOLUME_STATS
                .iter()
                .map(|(name, help)| {
                    IntGaugeVec::new(kubelet_opts(name, help), &["namespace", "persistentvolumeclaim"])
                })
                .collect::<prometheus::Result<_>>()?,
        };
        let r = &m.registry;
        for g in &m.volume_stats {
            r.register(Box::new(g.clone()))?;
        }
        r.register(Box::new(m.node_name.clone()))?;
        r.register(Box::new(m.pleg_relist_duration.clone()))?;
        r.register(Box::new(m.pleg_relist_interval.clone()))?;
        r.register(Box::new(m.pleg_last_seen.clone()))?;
        r.register(Box::new(m.pleg_discard_events.clone()))?;
        r.register(Box::new(m.pod_start_duration.clone()))?;
        r.register(Box::new(m.pod_worker_duration.clone()))?;
        r.register(Box::new(m.running_pods.clone()))?;
        r.register(Box::new(m.running_containers.clone()))?;
        r.register(Box::new(m.runtime_ops.clone()))?;
        r.register(Box::new(m.runtime_op_errors.clone()))?;
        r.register(Box::new(m.runtime_op_duration.clone()))?;
        r.register(Box::new(m.started_pods.clone()))?;
        r.register(Box::new(m.started_pods_errors.clone()))?;
        r.register(Box::new(m.started_containers.clone()))?;
        r.register(Box::new(m.started_containers_errors.clone()))?;
        r.register(Box::new(m.http_requests.clone()))?;
        r.register(Box::new(m.http_duration.clone()))?;
        r.register(Box::new(m.http_inflight.clone()))?;
        r.register(Box::new(m.rest_client_requests.clone()))?;
        r.register(Box::new(m.rest_client_duration.clone()))?;
        r.register(Box::new(m.module_panics.clone()))?;
        r.register(Box::new(m.evictions.clone()))?;
        Ok(m)
    }
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    // The definitions are constants: a failure here is a programming error
    // that the unit tests catch.
    METRICS.get_or_init(|| Metrics::build().expect("kubelet metric definitions are valid"))
}

/// `kubelet_node_name{node}` = 1. Call once at startup.
pub fn set_node_name(node: &str) {
    metrics().node_name.with_label_values(&[node]).set(1);
}

/// One CRI call: `kubelet_runtime_operations_total`,
/// `kubelet_runtime_operations_duration_seconds` and, when it failed,
/// `kubelet_runtime_operations_errors_total`. `op` is upstream's
/// operation_type: the snake_case CRI method (`list_containers`,
/// `create_container`, `pull_image`, `exec_sync`, ...).
pub fn runtime_op(op: &str, duration: Duration, ok: bool) {
    let m = metrics();
    m.runtime_ops.with_label_values(&[op]).inc();
    m.runtime_op_duration
        .with_label_values(&[op])
        .observe(duration.as_secs_f64());
    if !ok {
        m.runtime_op_errors.with_label_values(&[op]).inc();
    }
}

/// Records the CRI client's calls ([`crate::cri::Observer`]) with
/// [`runtime_op`].
pub struct RuntimeOps;

impl crate::cri::Observer for RuntimeOps {
    fn runtime_op(&self, op: &str, took: Duration, ok: bool) {
        runtime_op(op, took, ok);
    }
}

/// Records the API client's requests ([`crate::client::Observer`]) with
/// [`rest_client_request`].
pub struct RestClientRequests;

impl crate::client::Observer for RestClientRequests {
    fn request(&self, code: &str, verb: &str, host: &str, took: Duration) {
        rest_client_request(code, verb, host, took);
    }
}

/// One PLEG relist: its duration, the interval since the previous relist
/// started (None on the first), and `kubelet_pleg_last_seen_seconds` = now.
pub fn pleg_relist(duration: Duration, interval: Option<Duration>) {
    let m = metrics();
    m.pleg_relist_duration.observe(duration.as_secs_f64());
    if let Some(i) = interval {
        m.pleg_relist_interval.observe(i.as_secs_f64());
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    m.pleg_last_seen.set(now.as_secs_f64());
}

/// PLEG events dropped because the event channel was full.
pub fn pleg_discard_events(n: u64) {
    metrics().pleg_discard_events.inc_by(n);
}

/// `kubelet_pod_start_duration_seconds`: from the kubelet first seeing the
/// pod to all its containers running.
pub fn pod_started(duration: Duration) {
    metrics().pod_start_duration.observe(duration.as_secs_f64());
}

/// `kubelet_pod_worker_duration_seconds{operation_type}`: one syncPod;
/// `op` is "create", "update" or "sync" (upstream's SyncPodType strings).
pub fn pod_worker(op: &str, duration: Duration) {
    metrics()
        .pod_worker_duration
        .with_label_values(&[op])
        .observe(duration.as_secs_f64());
}

/// A RunPodSandbox attempt: `kubelet_started_pods_total` and, on failure,
/// `kubelet_started_pods_errors_total` (upstream counts both on error).
pub fn started_pod(ok: bool) {
    let m = metrics();
    m.started_pods.inc();
    if !ok {
        m.started_pods_errors.inc();
    }
}

/// A container start attempt: `kubelet_started_containers_total{container_type}`.
/// `container_type` is "container", "init_container" or "ephemeral_container".
pub fn started_container(container_type: &str) {
    metrics()
        .started_containers
        .with_label_values(&[container_type])
        .inc();
}

/// Its CreateContainer or StartContainer failing:
/// `kubelet_started_containers_errors_total{container_type,code}`, `code`
/// being the gRPC code's name (upstream: s.Code().String(), e.g. "Unknown").
pub fn started_container_error(container_type: &str, code: &str) {
    metrics()
        .started_containers_errors
        .with_label_values(&[container_type, code])
        .inc();
}

/// A panic contained by a module thread's supervisor:
/// `kubelet_module_panics_total{module}` (no upstream counterpart: Go's
/// HandleCrash only logs).
pub fn module_panicked(module: &str) {
    metrics().module_panics.with_label_values(&[module]).inc();
    let mut last = lock(recent_panics());
    let entry = last
        .entry(module.to_string())
        .or_insert((0, Instant::now()));
    entry.0 += 1;
    entry.1 = Instant::now();
}

/// A pod evicted by the eviction manager: `kubelet_evictions{eviction_signal}`.
pub fn evicted(signal: &str) {
    metrics().evictions.with_label_values(&[signal]).inc();
}

/// Per module: panics so far and when the last one was (for /healthz).
type PanicLog = std::sync::Mutex<HashMap<String, (u64, Instant)>>;

fn recent_panics() -> &'static PanicLog {
    static LOG: std::sync::OnceLock<PanicLog> = std::sync::OnceLock::new();
    LOG.get_or_init(Default::default)
}

/// Modules that panicked within `window`: (module, panics so far, how long
/// ago the last one was), by name. /healthz reports them as failing so an
/// operator sees a module that was restarted.
pub fn modules_panicked_within(window: Duration) -> Vec<(String, u64, Duration)> {
    let log = lock(recent_panics());
    let mut out: Vec<_> = log
        .iter()
        .filter(|(_, (_, at))| at.elapsed() < window)
        .map(|(m, (n, at))| (m.clone(), *n, at.elapsed()))
        .collect();
    out.sort();
    out
}

/// `kubelet_running_pods` and `kubelet_running_containers{container_state}`
/// (upstream sets them from each PLEG relist). States not named are set to 0.
pub fn set_running(pods: usize, containers_by_state: &[(&str, usize)]) {
    let m = metrics();
    m.running_pods.set(to_i64(pods));
    for state in CONTAINER_STATES {
        let n = containers_by_state
            .iter()
            .filter(|(s, _)| s == state)
            .map(|(_, n)| *n)
            .sum::<usize>();
        m.running_containers
            .with_label_values(&[state])
            .set(to_i64(n));
    }
    for (state, n) in containers_by_state {
        if !CONTAINER_STATES.contains(state) {
            m.running_containers
                .with_label_values(&[state])
                .set(to_i64(*n));
        }
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// upstream getURLRootPath + getMetricBucket: "/exec/ns/pod/c" -> "exec",
/// "/metrics/resource" -> "metrics/resource", unknown roots -> "other".
pub fn http_path_bucket(path: &str) -> String {
    let path = path.split('?').next().unwrap_or("");
    let mut parts = path.trim_start_matches('/').splitn(3, '/');
    let first = parts.next().unwrap_or("");
    let root = match (first, parts.next()) {
        ("metrics", Some(second)) => format!("metrics/{second}"),
        _ => first.to_string(),
    };
    if HTTP_PATH_BUCKETS.contains(&root.as_str()) {
        root
    } else {
        "other".to_string()
    }
}

fn http_labels(method: &str, path: &str, server_type: &str) -> [String; 4] {
    let method = if HTTP_METHOD_BUCKETS.contains(&method) {
        method
    } else {
        "other"
    };
    let bucket = http_path_bucket(path);
    let long_running = matches!(bucket.as_str(), "exec" | "attach" | "portForward" | "debug");
    [
        method.to_string(),
        bucket,
        server_type.to_string(),
        long_running.to_string(),
    ]
}

fn label_refs(l: &[String; 4]) -> [&str; 4] {
    [&l[0], &l[1], &l[2], &l[3]]
}

/// One served request, as upstream's ServeHTTP: counts
/// `kubelet_http_requests_total` and `kubelet_http_inflight_requests` now and
/// `kubelet_http_requests_duration_seconds` on drop. `path` is the raw request
/// path (bucketed here); `server_type` is "readwrite" (the authenticated
/// server) or "readonly".
pub struct HttpRequestGuard {
    labels: [String; 4],
    start: Instant,
}

pub fn http_request_start(method: &str, path: &str, server_type: &str) -> HttpRequestGuard {
    let m = metrics();
    let labels = http_labels(method, path, server_type);
    let l = label_refs(&labels);
    m.http_requests.with_label_values(&l).inc();
    m.http_inflight.with_label_values(&l).inc();
    HttpRequestGuard {
        labels,
        start: Instant::now(),
    }
}

impl Drop for HttpRequestGuard {
    fn drop(&mut self) {
        let m = metrics();
        let l = label_refs(&self.labels);
        m.http_inflight.with_label_values(&l).dec();
        m.http_duration
            .with_label_values(&l)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// One API-server request (client-go's metrics): `rest_client_requests_total
/// {code,method,host}` and `rest_client_request_duration_seconds{verb,host}`.
/// `code` is the HTTP status as a string, or "<error>" when no response came
/// back (client-go's spelling).
pub fn rest_client_request(code: &str, method: &str, host: &str, duration: Duration) {
    let m = metrics();
    m.rest_client_requests
        .with_label_values(&[code, method, host])
        .inc();
    m.rest_client_duration
        .with_label_values(&[method, host])
        .observe(duration.as_secs_f64());
}

/// One claim's volume usage: capacity, available and used bytes, then
/// inodes, free and used inodes, each when the driver reported it.
pub struct VolumeStatsSample<'a> {
    pub namespace: &'a str,
    pub claim: &'a str,
    pub values: [Option<u64>; 6],
}

/// Replaces every `kubelet_volume_stats_*` series with `samples`, so a
/// torn-down volume's series go.
pub fn set_volume_stats(samples: &[VolumeStatsSample<'_>]) {
    let m = metrics();
    for g in &m.volume_stats {
        g.reset();
    }
    for s in samples {
        for (g, v) in m.volume_stats.iter().zip(s.values) {
            if let Some(v) = v {
                g.with_label_values(&[s.namespace, s.claim])
                    .set(i64::try_from(v).unwrap_or(i64::MAX));
            }
        }
    }
}

/// Content-Type of [`render`]'s output.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The whole registry in the Prometheus text exposition format (`/metrics`).
pub fn render() -> String {
    let families = metrics().registry.gather();
    let mut buf = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&families, &mut buf) {
        log::warn!("encoding metrics: {e}");
    }
    String::from_utf8(buf).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod textparse;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_is_valid_prometheus_text_with_upstream_names() {
        set_node_name("node-a");
        runtime_op("list_containers", Duration::from_millis(3), true);
        runtime_op("create_container", Duration::from_millis(300), false);
        pleg_relist(Duration::from_millis(20), Some(Duration::from_secs(1)));
        pod_started(Duration::from_secs(4));
        pod_worker("sync", Duration::from_millis(40));
        set_running(2, &[("running", 3), ("exited", 1)]);
        started_pod(true);
        started_container("container");
        started_container("init_container");
        started_container_error("init_container", "Unknown");
        {
            let _g = http_request_start("POST", "/exec/ns/pod/c?command=ls", "readwrite");
        }
        rest_client_request("200", "GET", "10.0.0.1:6443", Duration::from_millis(12));

        let text = render();
        let families = textparse::parse(&text).expect("valid exposition text");
        for (name, kind) in [
            ("kubelet_node_name", "gauge"),
            ("kubelet_pleg_relist_duration_seconds", "histogram"),
            ("kubelet_pleg_relist_interval_seconds", "histogram"),
            ("kubelet_pleg_last_seen_seconds", "gauge"),
            ("kubelet_pod_start_duration_seconds", "histogram"),
            ("kubelet_pod_worker_duration_seconds", "histogram"),
            ("kubelet_running_pods", "gauge"),
            ("kubelet_running_containers", "gauge"),
            ("kubelet_runtime_operations_total", "counter"),
            ("kubelet_runtime_operations_errors_total", "counter"),
            ("kubelet_runtime_operations_duration_seconds", "histogram"),
            ("kubelet_started_pods_total", "counter"),
            ("kubelet_started_containers_total", "counter"),
            ("kubelet_started_containers_errors_total", "counter"),
            ("kubelet_http_requests_total", "counter"),
            ("kubelet_http_requests_duration_seconds", "histogram"),
            ("kubelet_http_inflight_requests", "gauge"),
            ("rest_client_requests_total", "counter"),
            ("rest_client_request_duration_seconds", "histogram"),
        ] {
            let f = families
                .get(name)
                .unwrap_or_else(|| panic!("{name} missing in\n{text}"));
            assert_eq!(f.kind, kind, "{name}");
            assert!(f.help.starts_with("[ALPHA] "), "{name}: {}", f.help);
        }
        let has = |needle: &str| text.lines().any(|l| l.starts_with(needle));
        assert!(has("kubelet_node_name{node=\"node-a\"} 1"), "{text}");
        assert!(has(
            "kubelet_runtime_operations_errors_total{operation_type=\"create_container\"} 1"
        ));
        assert!(has(
            "kubelet_running_containers{container_state=\"running\"} 3"
        ));
        assert!(has(
            "kubelet_running_containers{container_state=\"created\"} 0"
        ));
        assert!(has("kubelet_running_pods 2"));
        assert!(text.contains(
            "kubelet_http_requests_total{long_running=\"true\",method=\"POST\",path=\"exec\",server_type=\"readwrite\"} 1"
        ), "{text}");
        assert!(has(
            "kubelet_http_inflight_requests{long_running=\"true\",method=\"POST\",path=\"exec\",server_type=\"readwrite\"} 0"
        ));
        assert!(has(
            "rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"GET\"} 1"
        ));
        assert!(
            has("kubelet_pod_start_duration_seconds_bucket{le=\"5\"} 1"),
            "{text}"
        );
        // A histogram's family holds its _bucket/_sum/_count samples.
        let starts = &families["kubelet_pod_start_duration_seconds"];
        assert!(starts
            .samples
            .iter()
            .any(|s| s.name == "kubelet_pod_start_duration_seconds_count" && s.value == 1.0));
    }

    #[test]
    fn path_buckets() {
        assert_eq!(http_path_bucket("/exec/ns/p/c"), "exec");
        assert_eq!(http_path_bucket("/metrics/resource"), "metrics/resource");
        assert_eq!(http_path_bucket("/metrics"), "metrics");
        assert_eq!(
            http_path_bucket("/stats/summary?only_cpu_and_memory=true"),
            "stats"
        );
        assert_eq!(http_path_bucket("/secret/thing"), "other");
        assert_eq!(http_path_bucket("/"), "other");
    }
}
