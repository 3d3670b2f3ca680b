//! `/stats/summary` and `/metrics/resource` (upstream
//! `pkg/kubelet/server/stats` with the CRI stats provider, and
//! `pkg/kubelet/metrics/collectors/resource_metrics.go`).
//!
//! Pods and containers come from the runtime (ListPodSandbox,
//! ListContainers, ListContainerStats, ListPodSandboxStats, ImageFsInfo);
//! the node from /proc and statvfs (no cAdvisor; memory and filesystems
//! through the host stats provider, [`crate::stats`]). usageNanoCores is derived
//! from two samples of cumulative CPU time when the runtime does not report
//! it, keeping the previous sample per container/sandbox as upstream's
//! cpuUsageCache.

mod cadvisor_metrics;
mod cgroups;
pub mod node;
mod resource_metrics;
pub mod types;

pub use cgroups::PodCgroups;
pub use resource_metrics::render_resource_metrics;
use rkubelet_util::lock;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protobuf::MessageField;

use crate::cri::{api, CriError, RemoteRuntime};
use crate::stats::{self as host, FsInfo};
use cgroups::SharedPodCgroups;
use types::*;

/// The runtime calls the summary needs; a seam for tests. Errors are the
/// CRI's own, so a caller can tell a runtime that lacks a call from one
/// that failed.
pub trait StatsRuntime: Send + Sync {
    fn list_containers(&self) -> Result<Vec<api::Container>, CriError>;
    fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>, CriError>;
    fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>, CriError>;
    /// UNIMPLEMENTED on runtimes without it (pod totals then sum containers).
    fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>, CriError>;
    fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError>;
    /// Image ID -> its first repo tag, to name a container's image as the
    /// pod did when the runtime lists it by ID (/metrics/cadvisor).
    fn image_names(&self) -> HashMap<String, String> {
        HashMap::new()
    }
}

impl StatsRuntime for RemoteRuntime {
    fn list_containers(&self) -> Result<Vec<api::Container>, CriError> {
        RemoteRuntime::list_containers(self, None)
    }
    fn list_pod_sandboxes(&self) -> Result<Vec<api::PodSandbox>, CriError> {
        self.list_pod_sandbox(None)
    }
    fn list_container_stats(&self) -> Result<Vec<api::ContainerStats>, CriError> {
        RemoteRuntime::list_container_stats(self, None)
    }
    fn list_pod_sandbox_stats(&self) -> Result<Vec<api::PodSandboxStats>, CriError> {
        RemoteRuntime::list_pod_sandbox_stats(self, None)
    }
    fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        RemoteRuntime::image_fs_info(self)
    }
    fn image_names(&self) -> HashMap<String, String> {
        self.list_images()
            .inspect_err(|e| log::debug!("ListImages: {e}"))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|i| Some((i.id.clone(), i.repo_tags.first()?.clone())))
            .collect()
    }
}

/// The volume usage of the pod with a UID.
pub type VolumeStatsFn = dyn Fn(&str) -> Vec<VolumeStats> + Send + Sync;

/// The volumes' usage of a pod by UID (the CSI drivers' last answers).
#[derive(Clone)]
pub struct VolumeStatsSource(pub Arc<VolumeStatsFn>);

impl std::fmt::Debug for VolumeStatsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VolumeStatsSource")
    }
}

#[derive(Clone, Debug)]
pub struct StatsConfig {
    pub node_name: String,
    /// The pods' volume usage; none without CSI.
    pub volume_stats: Option<VolumeStatsSource>,
    /// The kubelet's root dir (--root-dir): its filesystem is the node fs.
    pub root_dir: PathBuf,
    /// Where pod logs live (/var/log/pods): `<ns>_<name>_<uid>/<container>/`.
    pub pod_logs_dir: PathBuf,
    /// /proc (tests point it elsewhere).
    pub proc_root: PathBuf,
}

impl StatsConfig {
    pub fn new(node_name: &str, root_dir: impl Into<PathBuf>) -> Self {
        StatsConfig {
            node_name: node_name.to_string(),
            volume_stats: None,
            root_dir: root_dir.into(),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

/// A previous cumulative CPU sample (ns timestamp, core-ns used).
#[derive(Clone, Copy, Debug)]
struct CpuSample {
    timestamp: i64,
    usage: u64,
    nano_cores: Option<u64>,
}

/// A reply: status, content type, body.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Reply {
    fn text(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

pub struct SummaryProvider {
    runtime: Arc<dyn StatsRuntime>,
    cfg: StatsConfig,
    /// The node's memory, read from `cfg.proc_root`.
    host: host::Provider,
    /// Previous CPU sample per container ID / sandbox ID.
    cpu_cache: Mutex<HashMap<String, CpuSample>>,
    /// Previous node CPU sample.
    node_cpu: Mutex<Option<CpuSample>>,
    /// ListPodSandboxStats failed (unimplemented, or sandboxes without a
    /// cgroup parent): not asked again before this instant, so a runtime
    /// that logs each failure is not flooded on every scrape.
    sandbox_stats_retry: Mutex<Option<std::time::Instant>>,
    /// The pod cgroups (None without cgroupsPerQOS: pod totals then come
    /// from the runtime or the containers' sum).
    pod_cgroups: SharedPodCgroups,
}

/// After a failed ListPodSandboxStats, how long pod totals are summed from
/// containers before it is asked again.
const SANDBOX_STATS_RETRY: Duration = Duration::from_secs(10);
/// The same for a runtime that does not implement it (it may be upgraded).
const SANDBOX_STATS_UNIMPLEMENTED_RETRY: Duration = Duration::from_secs(3600);

/// On the first request, the gap between two node CPU samples.
const FIRST_NODE_SAMPLE_GAP: Duration = Duration::from_millis(100);

fn u64v(f: &MessageField<api::UInt64Value>) -> Option<u64> {
    f.as_ref().map(|v| v.value)
}

/// The node's memory as read, or None (logged) when it cannot be.
fn node_memory(read: Result<host::NodeMemory, host::StatsError>) -> Option<host::NodeMemory> {
    read.inspect_err(|e| log::debug!("node memory: {e}")).ok()
}

/// The filesystem holding `path`; None (logged) when statvfs fails.
fn statvfs(path: impl AsRef<std::path::Path>) -> Option<FsInfo> {
    host::statvfs(path.as_ref())
        .inspect_err(|e| log::debug!("filesystem stats: {e}"))
        .ok()
}

/// Cumulative CPU -> nano-cores over the interval since `prev`.
fn nano_cores(prev: &CpuSample, ts: i64, usage: u64) -> Option<u64> {
    let dt = ts - prev.timestamp;
    if dt <= 0 || usage < prev.usage {
        return None;
    }
    Some(((usage - prev.usage) as f64 / dt as f64 * 1e9) as u64)
}

impl SummaryProvider {
    /// `runtime` is usually `Arc<RemoteRuntime>` (coerces).
    #[cfg(test)]
    pub fn new(runtime: Arc<dyn StatsRuntime>, cfg: StatsConfig) -> Arc<Self> {
        Self::with_pod_cgroups(runtime, cfg, None)
    }

    /// Pod-level cpu and memory from `pod_cgroups` when the pod has one.
    pub fn with_pod_cgroups(
        runtime: Arc<dyn StatsRuntime>,
        cfg: StatsConfig,
        pod_cgroups: SharedPodCgroups,
    ) -> Arc<Self> {
        Arc::new(SummaryProvider {
            pod_cgroups,
            runtime,
            host: host::Provider::new(&cfg.proc_root),
            cfg,
            cpu_cache: Mutex::new(HashMap::new()),
            node_cpu: Mutex::new(None),
            sandbox_stats_retry: Mutex::new(None),
        })
    }

    /// Serves `/stats/summary[?only_cpu_and_memory=true]` and
    /// `/metrics/resource`; None for any other path.
    pub fn handle(&self, method: &str, path: &str, query: &str) -> Option<Reply> {
        let path = path.trim_end_matches('/');
        if !matches!(
            path,
            "/stats/summary" | "/metrics/resource" | "/metrics/cadvisor"
        ) {
            return None;
        }
        if method != "GET" && method != "HEAD" {
            return Some(Reply::text(405, "405: Method Not Allowed"));
        }
        if path != "/stats/summary" {
            let body = if path == "/metrics/resource" {
                self.resource_metrics()
            } else {
                self.cadvisor_metrics()
            };
            return Some(Reply {
                status: 200,
                content_type: crate::metrics::TEXT_CONTENT_TYPE,
                body,
            });
        }
        let only_cpu_and_memory = query.split('&').any(|kv| {
            matches!(
                kv.split_once('='),
                Some(("only_cpu_and_memory", v)) if v.eq_ignore_ascii_case("true") || v == "1"
            )
        });
        Some(match self.summary(only_cpu_and_memory) {
            Ok(s) => match serde_json::to_string_pretty(&s) {
                Ok(body) => Reply {
                    status: 200,
                    content_type: "application/json",
                    body,
                },
                Err(e) => Reply::text(500, format!("Internal Error: {e}")),
            },
            Err(e) => Reply::text(
                500,
                format!("Internal Error: failed to get summary stats: {e}"),
            ),
        })
    }

    /// The summary (upstream summaryProvider.Get / GetCPUAndMemoryStats).
    pub fn summary(&self, only_cpu_and_memory: bool) -> Result<Summary, CriError> {
        let node = self.node_stats(only_cpu_and_memory);
        let pods = self.pod_stats(only_cpu_and_memory, node.fs.as_ref())?;
        Ok(Summary { node, pods })
    }

    /// The node's figures the eviction signals are made from, without the
    /// pods: memory, the node and image filesystems and the task count.
    /// Upstream's manager reads the whole summary each round; the CPU, the
    /// network and the page faults feed no signal, so they are not read.
    pub fn eviction_node_summary(&self) -> Summary {
        let now = Time::now();
        let memory = node_memory(self.host.memory_without_page_faults());
        let mut node = NodeStats {
            node_name: self.cfg.node_name.clone(),
            memory: memory.as_ref().map(|m| node::memory_stats(m, now)),
            ..Default::default()
        };
        self.add_signal_sources(&mut node, now);
        Summary {
            node,
            pods: Vec::new(),
        }
    }

    fn read_proc(&self, rel: &str) -> String {
        std::fs::read_to_string(self.cfg.proc_root.join(rel)).unwrap_or_default()
    }

    fn node_stats(&self, only_cpu_and_memory: bool) -> NodeStats {
        let now = Time::now();
        let stat = self.read_proc("stat");
        let start_time = node::boot_time(&stat)
            .map(Time::from_secs)
            .unwrap_or_default();
        let cpu = self.node_cpu(&stat, now);
        let memory = node_memory(self.host.memory());
        let mut stats = NodeStats {
            node_name: self.cfg.node_name.clone(),
            start_time,
            cpu,
            memory: memory.as_ref().map(|m| node::memory_stats(m, now)),
            swap: memory
                .and_then(|m| m.swap)
                .map(|s| node::swap_stats(s, now)),
            ..Default::default()
        };
        if only_cpu_and_memory {
            return stats;
        }
        let default_iface = node::default_route_interface(&self.read_proc("net/route"));
        stats.network =
            node::network_stats(&self.read_proc("net/dev"), default_iface.as_deref(), now);
        self.add_signal_sources(&mut stats, now);
        stats
    }

    /// The node filesystem, the runtime's filesystems and the task count:
    /// with the memory, what the eviction signals read.
    fn add_signal_sources(&self, stats: &mut NodeStats, now: Time) {
        stats.fs = statvfs(&self.cfg.root_dir).map(|i| node::fs_stats(i, now));
        stats.runtime = self.runtime_stats();
        // The pid.available signal's one definition (the host provider's).
        let pids = self.host.pids();
        stats.rlimit = Some(RlimitStats {
            time: now,
            max_pid: pids.and_then(|(max, _)| i64::try_from(max).ok()),
            num_of_running_processes: pids.and_then(|(_, n)| i64::try_from(n).ok()),
        });
    }

    fn node_cpu(&self, stat: &str, now: Time) -> Option<CpuStats> {
        let tck = node::clk_tck();
        let mut usage = node::cpu_usage_ns(stat, tck)?;
        let mut now = now;
        let mut prev = lock(&self.node_cpu);
        if prev.is_none() {
            // First call: take a short second sample so usageNanoCores is
            // there from the start (cAdvisor always has a previous sample).
            let first = CpuSample {
                timestamp: now.0,
                usage,
                nano_cores: None,
            };
            std::thread::sleep(FIRST_NODE_SAMPLE_GAP);
            if let Some(u) = node::cpu_usage_ns(&self.read_proc("stat"), tck) {
                usage = u;
                now = Time::now();
                *prev = Some(first);
            }
        }
        let cores = match *prev {
            Some(p) if now.0 > p.timestamp => nano_cores(&p, now.0, usage),
            Some(p) => p.nano_cores,
            None => None,
        };
        *prev = Some(CpuSample {
            timestamp: now.0,
            usage,
            nano_cores: cores,
        });
        Some(CpuStats {
            time: now,
            usage_nano_cores: cores,
            usage_core_nano_seconds: Some(usage),
        })
    }

    fn fs_usage_to_stats(&self, u: &api::FilesystemUsage) -> FsStats {
        let mut s = FsStats {
            time: Time(u.timestamp),
            used_bytes: u64v(&u.used_bytes),
            inodes_used: u64v(&u.inodes_used),
            ..Default::default()
        };
        if let Some(info) = u.fs_id.as_ref().and_then(|id| statvfs(&id.mountpoint)) {
            node::set_fs_capacity(&mut s, &info);
        }
        s
    }

    fn runtime_stats(&self) -> Option<RuntimeStats> {
        let info = match self.runtime.image_fs_info() {
            Ok(i) => i,
            Err(e) => {
                log::debug!("ImageFsInfo: {e}");
                return None;
            }
        };
        let image_fs = info
            .image_filesystems
            .first()
            .map(|u| self.fs_usage_to_stats(u));
        let container_fs = info
            .container_filesystems
            .first()
            .map(|u| self.fs_usage_to_stats(u))
            .or_else(|| image_fs.clone());
        Some(RuntimeStats {
            image_fs,
            container_fs,
        })
    }

    /// usageNanoCores for one cumulative sample, updating the cache
    /// (upstream getAndUpdateContainerUsageNanoCores).
    fn usage_nano_cores(
        &self,
        cache: &mut HashMap<String, CpuSample>,
        id: &str,
        cpu: &api::CpuUsage,
    ) -> Option<u64> {
        if let Some(v) = u64v(&cpu.usage_nano_cores) {
            return Some(v);
        }
        let usage = u64v(&cpu.usage_core_nano_seconds)?;
        let cores = match cache.get(id) {
            Some(prev) if cpu.timestamp == prev.timestamp => prev.nano_cores,
            Some(prev) => nano_cores(prev, cpu.timestamp, usage),
            None => None,
        };
        cache.insert(
            id.to_string(),
            CpuSample {
                timestamp: cpu.timestamp,
                usage,
                nano_cores: cores,
            },
        );
        cores
    }

    fn cpu_stats(
        &self,
        cache: &mut HashMap<String, CpuSample>,
        id: &str,
        cpu: Option<&api::CpuUsage>,
    ) -> CpuStats {
        match cpu {
            Some(c) => CpuStats {
                time: Time(c.timestamp),
                usage_nano_cores: self.usage_nano_cores(cache, id, c),
                usage_core_nano_seconds: u64v(&c.usage_core_nano_seconds),
            },
            // Upstream reports zeros rather than nothing.
            None => CpuStats {
                time: Time::now(),
                usage_nano_cores: Some(0),
                usage_core_nano_seconds: Some(0),
            },
        }
    }

    fn pod_stats(
        &self,
        only_cpu_and_memory: bool,
        node_fs: Option<&FsStats>,
    ) -> Result<Vec<PodStats>, CriError> {
        let sandboxes = self.runtime.list_pod_sandboxes()?;
        let containers = self.runtime.list_containers()?;
        let container_stats = self.runtime.list_container_stats()?;
        let sandbox_stats = self.sandbox_stats();
        let sandboxes: HashMap<String, api::PodSandbox> = remove_terminated_pods(sandboxes)
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let running: HashMap<&str, &api::Container> = containers
            .iter()
            .filter(|c| c.state.enum_value_or_default() == api::ContainerState::CONTAINER_RUNNING)
            .map(|c| (c.id.as_str(), c))
            .collect();

        let mut cache = lock(&self.cpu_cache);
        let mut seen: HashSet<String> = HashSet::new();
        // Sandbox ID -> pod, in a stable order.
        let mut pods: BTreeMap<String, PodStats> = BTreeMap::new();
        for (id, sb) in &sandboxes {
            if sb.state.enum_value_or_default() == api::PodSandboxState::SANDBOX_READY {
                pods.insert(id.clone(), new_pod_stats(sb));
            }
        }
        let fs_stats_for = |id: &MessageField<api::FilesystemIdentifier>| {
            id.as_ref().and_then(|i| statvfs(&i.mountpoint))
        };
        let mut fs_cache: HashMap<String, Option<FsInfo>> = HashMap::new();

        for cs in &container_stats {
            let Some(attrs) = cs.attributes.as_ref() else {
                continue;
            };
            let Some(container) = running.get(attrs.id.as_str()) else {
                continue;
            };
            let Some(sb) = sandboxes.get(&container.pod_sandbox_id) else {
                continue;
            };
            seen.insert(attrs.id.clone());
            let pod = pods
                .entry(sb.id.clone())
                .or_insert_with(|| new_pod_stats(sb));
            let name = attrs
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .or_else(|| container.metadata.as_ref().map(|m| m.name.clone()))
                .unwrap_or_default();
            let mut c = ContainerStats {
                name: name.clone(),
                start_time: Time(container.created_at),
                cpu: Some(self.cpu_stats(&mut cache, &attrs.id, cs.cpu.as_ref())),
                memory: Some(memory_stats(cs.memory.as_ref())),
                swap: cs.swap.as_ref().map(|s| SwapStats {
                    time: Time(s.timestamp),
                    swap_available_bytes: u64v(&s.swap_available_bytes),
                    swap_usage_bytes: u64v(&s.swap_usage_bytes),
                }),
                ..Default::default()
            };
            if !only_cpu_and_memory {
                let mut rootfs = FsStats::default();
                if let Some(wl) = cs.writable_layer.as_ref() {
                    rootfs.time = Time(wl.timestamp);
                    rootfs.used_bytes = u64v(&wl.used_bytes);
                    rootfs.inodes_used = u64v(&wl.inodes_used);
                    let key = wl
                        .fs_id
                        .as_ref()
                        .map(|i| i.mountpoint.clone())
                        .unwrap_or_default();
                    let info = *fs_cache
                        .entry(key)
                        .or_insert_with(|| fs_stats_for(&wl.fs_id));
                    if let Some(info) = info {
                        node::set_fs_capacity(&mut rootfs, &info);
                    }
                }
                c.rootfs = Some(rootfs);
                c.logs = Some(self.container_log_stats(&pod.pod_ref, &name, node_fs));
            }
            pod.containers.push(c);
        }

        let pod_cgroups = self.read_pod_cgroups();
        for (sb_id, pod) in pods.iter_mut() {
            pod.containers.sort_by(|a, b| a.name.cmp(&b.name));
            match sandbox_stats.get(sb_id).and_then(|s| s.linux.as_ref()) {
                Some(linux) => {
                    seen.insert(sb_id.clone());
                    pod.cpu = Some(self.cpu_stats(&mut cache, sb_id, linux.cpu.as_ref()));
                    pod.memory = Some(memory_stats(linux.memory.as_ref()));
                    pod.network = linux.network.as_ref().map(network_stats);
                    pod.process_stats = linux.process.as_ref().map(|p| ProcessStats {
                        process_count: u64v(&p.process_count),
                    });
                }
                None => sum_containers(pod),
            }
            // The pod cgroup, where there is one, as upstream's default
            // provider (cadvisor) reads it.
            if let Some((_, cg)) = pod_cgroups.get(&pod.pod_ref.uid) {
                let key = format!("pod{}", pod.pod_ref.uid);
                seen.insert(key.clone());
                self.set_from_cgroup(&mut cache, &key, pod, cg);
            }
            if !only_cpu_and_memory {
                if let Some(v) = &self.cfg.volume_stats {
                    pod.volume_stats = (v.0)(&pod.pod_ref.uid);
                }
                pod.ephemeral_storage = Some(ephemeral_storage(pod, node_fs));
            } else {
                pod.network = None;
                pod.process_stats = None;
            }
        }
        // Forget samples of containers and sandboxes that are gone.
        cache.retain(|id, _| seen.contains(id));
        Ok(pods.into_values().collect())
    }

    /// ListPodSandboxStats by sandbox ID; empty (pod totals are then summed
    /// from containers) when the runtime cannot answer.
    fn sandbox_stats(&self) -> HashMap<String, api::PodSandboxStats> {
        let mut retry = lock(&self.sandbox_stats_retry);
        if retry.is_some_and(|t| std::time::Instant::now() < t) {
            return HashMap::new();
        }
        match self.runtime.list_pod_sandbox_stats() {
            Ok(v) => {
                *retry = None;
                v.into_iter()
                    .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                    .collect()
            }
            Err(e) => {
                log::debug!("ListPodSandboxStats: {e}; pod totals are summed from containers");
                let wait = if e.code == Some(grpcio::RpcStatusCode::UNIMPLEMENTED) {
                    SANDBOX_STATS_UNIMPLEMENTED_RETRY
                } else {
                    SANDBOX_STATS_RETRY
                };
                *retry = Some(std::time::Instant::now() + wait);
                HashMap::new()
            }
        }
    }

    fn container_log_stats(
        &self,
        pod: &PodReference,
        container: &str,
        node_fs: Option<&FsStats>,
    ) -> FsStats {
        let dir = self
            .cfg
            .pod_logs_dir
            .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid))
            .join(container);
        let mut s = FsStats {
            time: Time::now(),
            ..Default::default()
        };
        if let Some(fs) = node_fs {
            s.available_bytes = fs.available_bytes;
            s.capacity_bytes = fs.capacity_bytes;
            s.inodes_free = fs.inodes_free;
            s.inodes = fs.inodes;
        }
        if let Some((bytes, inodes)) = node::disk_usage(&dir) {
            s.used_bytes = Some(bytes);
            s.inodes_used = Some(inodes);
        }
        s
    }

    /// `/metrics/resource` in the Prometheus text format.
    pub fn resource_metrics(&self) -> String {
        render_resource_metrics(self.summary(true).as_ref().ok())
    }
}

fn new_pod_stats(sb: &api::PodSandbox) -> PodStats {
    let md = sb.metadata.as_ref();
    PodStats {
        pod_ref: PodReference {
            name: md.map(|m| m.name.clone()).unwrap_or_default(),
            namespace: md.map(|m| m.namespace.clone()).unwrap_or_default(),
            uid: md.map(|m| m.uid.clone()).unwrap_or_default(),
        },
        start_time: Time(sb.created_at),
        ..Default::default()
    }
}

fn memory_stats(m: Option<&api::MemoryUsage>) -> MemoryStats {
    match m {
        Some(m) => MemoryStats {
            time: Time(m.timestamp),
            available_bytes: u64v(&m.available_bytes),
            usage_bytes: u64v(&m.usage_bytes),
            working_set_bytes: u64v(&m.working_set_bytes),
            rss_bytes: u64v(&m.rss_bytes),
            page_faults: u64v(&m.page_faults),
            major_page_faults: u64v(&m.major_page_faults),
        },
        None => MemoryStats {
            time: Time::now(),
            working_set_bytes: Some(0),
            ..Default::default()
        },
    }
}

fn iface(i: &api::NetworkInterfaceUsage) -> InterfaceStats {
    InterfaceStats {
        name: i.name.clone(),
        rx_bytes: u64v(&i.rx_bytes),
        rx_errors: u64v(&i.rx_errors),
        tx_bytes: u64v(&i.tx_bytes),
        tx_errors: u64v(&i.tx_errors),
    }
}

fn network_stats(n: &api::NetworkUsage) -> NetworkStats {
    NetworkStats {
        time: Time(n.timestamp),
        default: n.default_interface.as_ref().map(iface).unwrap_or_default(),
        interfaces: n.interfaces.iter().map(iface).collect(),
    }
}

/// Pod CPU/memory as the sum of its containers (when the runtime has no
/// ListPodSandboxStats).
fn sum_containers(pod: &mut PodStats) {
    if pod.containers.is_empty() {
        return;
    }
    let sum = |f: &dyn Fn(&ContainerStats) -> Option<u64>| -> Option<u64> {
        pod.containers.iter().map(f).sum::<Option<u64>>()
    };
    let time = |f: &dyn Fn(&ContainerStats) -> Option<Time>| {
        pod.containers
            .iter()
            .filter_map(f)
            .max()
            .unwrap_or_default()
    };
    pod.cpu = Some(CpuStats {
        time: time(&|c| c.cpu.as_ref().map(|x| x.time)),
        usage_nano_cores: sum(&|c| c.cpu.as_ref()?.usage_nano_cores),
        usage_core_nano_seconds: sum(&|c| c.cpu.as_ref()?.usage_core_nano_seconds),
    });
    pod.memory = Some(MemoryStats {
        time: time(&|c| c.memory.as_ref().map(|x| x.time)),
        usage_bytes: sum(&|c| c.memory.as_ref()?.usage_bytes),
        working_set_bytes: sum(&|c| c.memory.as_ref()?.working_set_bytes),
        rss_bytes: sum(&|c| c.memory.as_ref()?.rss_bytes),
        page_faults: sum(&|c| c.memory.as_ref()?.page_faults),
        major_page_faults: sum(&|c| c.memory.as_ref()?.major_page_faults),
        ..Default::default()
    });
}

/// Containers' writable layers plus their logs (upstream calcEphemeralStorage,
/// without volumes), against the node filesystem's capacity.
fn ephemeral_storage(pod: &PodStats, node_fs: Option<&FsStats>) -> FsStats {
    let mut s = FsStats {
        time: Time::now(),
        used_bytes: Some(0),
        inodes_used: Some(0),
        ..Default::default()
    };
    if let Some(fs) = node_fs {
        s.available_bytes = fs.available_bytes;
        s.capacity_bytes = fs.capacity_bytes;
        s.inodes_free = fs.inodes_free;
        s.inodes = fs.inodes;
    }
    for c in &pod.containers {
        for fs in [c.rootfs.as_ref(), c.logs.as_ref()].into_iter().flatten() {
            s.used_bytes = Some(s.used_bytes.unwrap_or(0) + fs.used_bytes.unwrap_or(0));
            s.inodes_used = Some(s.inodes_used.unwrap_or(0) + fs.inodes_used.unwrap_or(0));
        }
    }
    s
}

/// upstream removeTerminatedPods: of the sandboxes of one pod (name,
/// namespace), keep the ready ones, or else the newest.
fn remove_terminated_pods(mut sandboxes: Vec<api::PodSandbox>) -> Vec<api::PodSandbox> {
    sandboxes.sort_by_key(|s| s.created_at);
    let mut by_ref: BTreeMap<(String, String), Vec<api::PodSandbox>> = BTreeMap::new();
    for s in sandboxes {
        let md = s.metadata.as_ref();
        let key = (
            md.map(|m| m.name.clone()).unwrap_or_default(),
            md.map(|m| m.namespace.clone()).unwrap_or_default(),
        );
        by_ref.entry(key).or_default().push(s);
    }
    let mut out = Vec::new();
    for (_, mut refs) in by_ref {
        if refs.len() == 1 {
            out.append(&mut refs);
            continue;
        }
        let ready: Vec<api::PodSandbox> = refs
            .iter()
            .filter(|s| s.state.enum_value_or_default() == api::PodSandboxState::SANDBOX_READY)
            .cloned()
            .collect();
        if ready.is_empty() {
            out.extend(refs.pop());
        } else {
            out.extend(ready);
        }
    }
    out
}

#[cfg(test)]
mod tests;
