//! NewMainKubelet (upstream `pkg/kubelet/kubelet.go`, with
//! `makePodSourceConfig`): the kubelet and the managers it holds, built
//! from the configuration. The pod sources are the only threads started
//! here; `run` starts every other module once the kubelet exists.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::api::core::v1::Node;

use super::cluster::node_uid;
use super::{eviction, volumes};
use super::{POD_WORKER_THREADS, PROBE_CHANNEL_CAPACITY, PROBE_WORKER_THREADS};
use crate::client::Client;
use crate::cm::cpumanager::CpuManager;
use crate::cm::devicemanager::{DeviceManager, DeviceManagerDeps};
use crate::cm::memorymanager::MemoryManager;
use crate::cm::topologymanager::TopologyManager;
use crate::cm::ContainerManager;
use crate::config::{self as podconfig, PodConfig};
use crate::container::cache::Cache;
use crate::cri::RemoteRuntime;
use crate::envvars::ApiEnvSource;
use crate::events::{EventRecorder, EventType, NODE_ALLOCATABLE_ENFORCED};
use crate::fieldpath::NodeAllocatable;
use crate::kubelet::{ClusterDeps, Kubelet, Managers, PodWork, Settings};
use crate::kubeletconfig::{KubeletConfiguration, KubeletFlags};
use crate::kuberuntime::lifecycle::RuntimeExec;
use crate::kuberuntime::swap::{SwapBehavior, SwapConfig, SwapController};
use crate::kuberuntime::{KubeRuntimeManager, RuntimeDeps, RuntimeManagerConfig};
use crate::lifecycle::handlers::SecurityAdmitHandlers;
use crate::pleg::{GenericPleg, PodLifecycleEvent, RelistSoon};
use crate::pod::mirror_client::MirrorClient;
use crate::podworkers::PodWorkers;
use crate::prober::{ProberManager, ResultUpdate};
use crate::server::stats::{StatsConfig, SummaryProvider};
use crate::types;
use crate::userns::{IdRange, UsernsManager};
use crate::util::worker::Worker;
use crate::util::workqueue::WorkQueue;
use crate::volume::csi::CsiPlugin;

/// The kubelet, and what `run` starts beside it.
pub(super) struct MainKubelet {
    pub kubelet: Arc<Kubelet>,
    /// The merged pod sources, which the sync loop reads.
    pub pod_config: Arc<PodConfig>,
    pub pleg_events: Receiver<PodLifecycleEvent>,
    pub prober: Arc<ProberManager>,
    pub probe_results: Receiver<ResultUpdate>,
    pub cpu_manager: CpuManager,
    pub memory_manager: MemoryManager,
    /// Cluster mode only.
    pub csi: Option<Arc<CsiPlugin>>,
    pub volumes: volumes::VolumeDeps,
    /// The managers' requests for a node status update.
    pub node_status_kicks: Receiver<()>,
    /// The pod sources' threads.
    pub threads: Vec<Worker>,
}

/// Builds the kubelet: the runtime client, the resource managers, the
/// volume side, the runtime manager, the pod sources, PLEG, the prober
/// and the stats provider, in the order each needs the others.
pub(super) fn new_main_kubelet(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    node: &str,
    client: Option<&Client>,
    recorder: &Arc<dyn EventRecorder>,
    shutdown: &Receiver<()>,
) -> anyhow::Result<MainKubelet> {
    let runtime = Arc::new(
        RemoteRuntime::with_image_endpoint(
            &config.container_runtime_endpoint,
            config.effective_image_service_endpoint(),
            config.runtime_request_timeout.0,
            Arc::new(crate::metrics::RuntimeOps),
        )
        .context("container runtime or image service endpoint")?,
    );
    let settings = Settings {
        node_ip: flags.node_ip.clone(),
        root_dir: flags.root_dir.clone(),
        pod_logs_dir: config.pod_logs_dir.clone().into(),
        sync_frequency: config.sync_frequency.0,
        max_pods: usize::try_from(config.max_pods).unwrap_or(0),
        pod_workers: POD_WORKER_THREADS,
        security: SecurityAdmitHandlers::for_node(&config.allowed_unsafe_sysctls)?,
    };
    std::fs::create_dir_all(&settings.root_dir)
        .with_context(|| format!("create root directory {}", settings.root_dir.display()))?;
    // The pod workers' pool before the managers that wake and re-queue
    // pods through it (see kubelet::PodWork).
    let work_queue = Arc::new(WorkQueue::new());
    let (relist_soon, relist_asks) = RelistSoon::channel();
    let pod_workers = PodWorkers::new(
        Arc::clone(&work_queue),
        settings.sync_frequency,
        relist_soon,
    );
    let cache = Arc::new(Cache::with_on_update(pod_workers.cache_listener()));
    // The runtime state and the device manager ask node status for an
    // update over this channel: node status is made after the kubelet,
    // whose health it reads.
    let (node_status_kick, node_status_kicks) = crossbeam_channel::bounded(1);
    let cm = container_managers(
        config,
        &settings.root_dir,
        &runtime,
        recorder,
        (&pod_workers, &node_status_kick, client),
    )?;
    let allocatable = volumes::node_allocatable(&settings.root_dir, cm.machine_memory);
    let node_object: Arc<RwLock<Option<Node>>> = Arc::new(RwLock::new(None));
    let csi = client.map(|c| {
        csi_plugin(
            &settings.root_dir,
            node,
            c,
            config,
            (&cm.devices, &node_object, &node_status_kick),
        )
    });
    let volume_deps = volumes::volume_managers(
        flags,
        config,
        client,
        allocatable,
        recorder,
        requeue(&work_queue),
        csi.clone(),
    )?;
    // What each pod was allocated and given, from its checkpoints.
    let allocation = Arc::new(crate::allocation::Manager::new(Some(&settings.root_dir)));
    let runtime_deps = RuntimeDeps {
        recorder: Arc::clone(recorder),
        env_source: volume_deps.objects.as_ref().map(|o| {
            Arc::new(ApiEnvSource::new(
                Arc::clone(&o.services),
                Arc::clone(&o.config_maps),
                Arc::clone(&o.secrets),
            )) as Arc<dyn crate::kuberuntime::container::EnvSource>
        }),
        volumes: Arc::clone(&volume_deps.volume_manager) as _,
        host_ips: {
            let (node_ip, node) = (flags.node_ip.clone(), Arc::clone(&node_object));
            Box::new(move || crate::kubelet::host_ips(node_ip.as_deref(), &node))
        },
        runtime_classes: match &volume_deps.watches {
            Some(w) => {
                Some(crate::runtimeclass::Manager::start(w).context("watch RuntimeClasses")?)
            }
            None => None,
        },
        on_image_pulled: requeue(&work_queue),
        // A finished container stop wakes its pod at once (the pod worker
        // did not wait for it).
        on_container_stopped: {
            let workers = Arc::clone(&pod_workers);
            Arc::new(move |uid| workers.wake_pod(uid))
        },
        devices: Some(cm.devices.clone()),
        dra: Some(cm.dra.clone()),
        cpus: cm.cpu.clone(),
        memory: cm.memory.clone(),
        allocation: Arc::clone(&allocation),
        userns: userns_manager(config, &settings.root_dir),
    };
    let oom_group_kill = crate::kuberuntime::oom_group::group_kill(
        config.single_process_oom_kill,
        crate::kuberuntime::oom_group::cgroup_v2(),
    )
    .map_err(anyhow::Error::msg)?;
    let manager = runtime_manager(
        config,
        &settings,
        (&runtime, &cm, allocatable, oom_group_kill),
        runtime_deps,
    );
    let pod_config = Arc::new(PodConfig::try_new().context("start the pod config merger")?);
    let threads = start_sources(config, node, &pod_config, shutdown)?;
    let (pleg, pleg_events) = GenericPleg::new(
        Arc::clone(&manager) as Arc<dyn crate::container::PodSource>,
        Arc::clone(&cache),
        relist_asks,
    );
    let cluster = client.map(|c| ClusterDeps {
        mirror_client: Arc::new(MirrorClient::new(
            c.clone(),
            node.to_string(),
            node_uid(&node_object),
        )),
        node: Arc::clone(&node_object),
        on_runtime_change: Box::new(move || {
            // Never blocks; kicks coalesce.
            let _ = node_status_kick.try_send(());
        }),
    });
    let (probe_tx, probe_results) = crossbeam_channel::bounded(PROBE_CHANNEL_CAPACITY);
    let prober = ProberManager::new(
        Arc::new(RuntimeExec(Arc::clone(manager.runtime()))),
        Arc::clone(recorder),
        probe_tx,
        PROBE_WORKER_THREADS,
    );
    let stats_provider = stats_provider(node, &settings, &runtime, csi.as_ref(), &cm);
    let topology_manager = Arc::new(
        TopologyManager::new(
            config,
            cm.numa_nodes.clone(),
            // upstream's order of AddHintProvider
            vec![
                Box::new(cm.devices.clone()),
                Box::new(cm.cpu.clone()),
                Box::new(cm.memory.clone()),
            ],
        )
        .context("topology manager")?,
    );
    let pc = Arc::clone(&pod_config);
    let kubelet = Kubelet::new(
        settings,
        manager,
        pleg,
        PodWork {
            queue: work_queue,
            workers: pod_workers,
            cache,
        },
        Box::new(move |seen| pc.seen_all_sources(seen)),
        cluster,
        Managers {
            prober: Arc::clone(&prober),
            volume_manager: Arc::clone(&volume_deps.volume_manager),
            token_manager: volume_deps.tokens.clone(),
            container_manager: cm.pods,
            eviction: eviction::eviction_manager(config)?,
            stats_provider,
            node_shutdown: crate::nodeshutdown::Manager::from_config(config),
            registrars: volume_deps.registrars.clone(),
            device_manager: cm.devices,
            dra_manager: cm.dra,
            cpu_manager: cm.cpu.clone(),
            memory_manager: cm.memory.clone(),
            topology_manager,
            allocation,
        },
    );
    Ok(MainKubelet {
        kubelet,
        pod_config,
        pleg_events,
        prober,
        probe_results,
        cpu_manager: cm.cpu,
        memory_manager: cm.memory,
        csi,
        volumes: volume_deps,
        node_status_kicks,
        threads,
    })
}

/// upstream's ContainerManager and what it holds: the CPU, memory and
/// device managers, the machine's NUMA nodes for the topology manager and,
/// with cgroupsPerQOS, the kubepods hierarchy.
struct ContainerManagers {
    machine_memory: u64,
    cpu: CpuManager,
    memory: MemoryManager,
    devices: DeviceManager,
    dra: crate::cm::dra::DraManager,
    numa_nodes: Vec<u32>,
    /// None when cgroupsPerQOS is off.
    pods: Option<Arc<ContainerManager>>,
}

/// The cgroup driver checked against the runtime's, then each manager
/// started with its state restored. The device manager wakes a pod whose
/// devices were allocated and asks for a node status update when its
/// capacity changed.
fn container_managers(
    config: &KubeletConfiguration,
    root_dir: &std::path::Path,
    runtime: &Arc<RemoteRuntime>,
    recorder: &Arc<dyn EventRecorder>,
    (pod_workers, node_status_kick, client): (&Arc<PodWorkers>, &Sender<()>, Option<&Client>),
) -> anyhow::Result<ContainerManagers> {
    let sysfs = std::path::Path::new("/sys");
    let machine_memory = machine_memory();
    check_cgroup_driver(config, runtime)?;
    let cpu = CpuManager::start(config, root_dir, sysfs).context("start cpu manager error")?;
    let memory = MemoryManager::start(config, root_dir, sysfs, machine_memory)
        .context("start memory manager error")?;
    let pods = start_container_manager(config, machine_memory)?;
    if pods.is_some() {
        // upstream's enforceNodeAllocatableCgroups, once kubepods is capped.
        recorder.node_event(
            EventType::Normal,
            NODE_ALLOCATABLE_ENFORCED,
            "Updated Node Allocatable limit across pods",
        );
    }
    let numa_nodes = TopologyManager::machine_numa_nodes(config, sysfs)
        .context("topology manager: the machine's NUMA nodes")?;
    let devices = {
        let workers = Arc::clone(pod_workers);
        let kick = node_status_kick.clone();
        DeviceManager::new(
            root_dir,
            DeviceManagerDeps {
                grpc_env: Arc::clone(runtime.grpc_env()),
                recorder: Arc::clone(recorder),
                numa_nodes: numa_nodes.clone(),
                on_allocated: Arc::new(move |uid| workers.wake_pod(uid)),
                // Never blocks; kicks coalesce.
                on_capacity_changed: Box::new(move || {
                    let _ = kick.try_send(());
                }),
            },
        )
    };
    let dra = {
        let workers = Arc::clone(pod_workers);
        crate::cm::dra::DraManager::new(
            root_dir,
            crate::cm::dra::DraManagerDeps {
                grpc_env: Arc::clone(runtime.grpc_env()),
                client: client.cloned(),
                on_prepared: Arc::new(move |uid| workers.wake_pod(uid)),
            },
        )
        .context("start the DRA manager")?
    };
    Ok(ContainerManagers {
        machine_memory,
        cpu,
        memory,
        devices,
        dra,
        numa_nodes,
        pods,
    })
}

/// MemTotal in bytes; 0, logged, when it cannot be read.
fn machine_memory() -> u64 {
    crate::stats::Provider::default()
        .memory_capacity()
        .unwrap_or_else(|e| {
            log::warn!("machine memory unknown: {e}");
            0
        })
}

/// Exits when the runtime names a cgroup driver other than cgroupDriver.
/// A runtime that cannot say (UNIMPLEMENTED before containerd 2.0) or is
/// not up yet is taken at its word: the configured driver stands.
pub(super) fn check_cgroup_driver(
    config: &KubeletConfiguration,
    runtime: &RemoteRuntime,
) -> anyhow::Result<()> {
    let configured = crate::cm::Driver::parse(&config.cgroup_driver)?;
    let resp = match runtime.runtime_config() {
        Ok(resp) => resp,
        Err(e) => {
            log::info!(
                "the runtime's cgroup driver is unknown ({e}); using cgroupDriver {:?}",
                config.cgroup_driver
            );
            return Ok(());
        }
    };
    match crate::cm::Driver::from_runtime_config(&resp) {
        Some(runtime_driver) => Ok(crate::cm::check_runtime_driver(configured, runtime_driver)?),
        None => Ok(()),
    }
}

/// failSwapOn, cgroupDriver, and with cgroupsPerQOS the kubepods
/// hierarchy, capped by node allocatable over the same machine figures
/// node status reports (upstream NewContainerManager + Start).
fn start_container_manager(
    config: &KubeletConfiguration,
    machine_memory: u64,
) -> anyhow::Result<Option<Arc<ContainerManager>>> {
    let paths = crate::nodestatus::machine::HostPaths::default();
    let cores = crate::nodestatus::machine::read_machine_info(&paths)
        .map(|m| m.num_cores)
        .map_err(|e| anyhow::anyhow!("machine info: {e}"))?;
    let capacity = crate::cm::Capacity::read(cores, machine_memory);
    crate::cm::start_from_config(config, capacity).context("container manager")
}

/// The CSI volume plugin. Drivers are dialled on the runtime's gRPC
/// environment, which the device plugins share: no thread of their own.
fn csi_plugin(
    root_dir: &std::path::Path,
    node: &str,
    client: &Client,
    config: &KubeletConfiguration,
    (devices, node_object, node_status_kick): (
        &DeviceManager,
        &Arc<RwLock<Option<Node>>>,
        &Sender<()>,
    ),
) -> Arc<CsiPlugin> {
    let csi = CsiPlugin::new(
        root_dir.to_path_buf(),
        node.to_string(),
        Arc::clone(devices.grpc_env()),
        client.clone(),
        config.volume_stats_agg_period.0,
        Arc::clone(node_object),
    );
    // A volume joins volumesInUse before it is staged, and the
    // attach-detach controller must see it there first.
    let kick = node_status_kick.clone();
    csi.set_status_kick(Box::new(move || {
        let _ = kick.try_send(());
    }));
    csi
}

/// The runtime manager (upstream kuberuntime's NewKubeGenericRuntimeManager).
fn runtime_manager(
    config: &KubeletConfiguration,
    settings: &Settings,
    (runtime, cm, node_allocatable, oom_group_kill): (
        &Arc<RemoteRuntime>,
        &ContainerManagers,
        NodeAllocatable,
        bool,
    ),
    deps: RuntimeDeps,
) -> Arc<KubeRuntimeManager> {
    Arc::new(KubeRuntimeManager::new(
        Arc::clone(runtime),
        RuntimeManagerConfig {
            root_dir: settings.root_dir.clone(),
            pod_logs_dir: settings.pod_logs_dir.clone(),
            resolv_conf: config.resolv_conf.clone().into(),
            cluster_dns: config.cluster_dns.clone(),
            cluster_domain: config.cluster_domain.clone(),
            cpu_cfs_quota: config.cpu_cfs_quota,
            cpu_cfs_quota_period_us: config.cpu_cfs_quota_period.0.as_micros() as i64,
            machine_memory: cm.machine_memory,
            image_pulls: crate::images::PullerConfig::from_kubelet_config(config),
            container_logs_dir: container_logs_dir(&config.pod_logs_dir),
            node_allocatable,
            pod_cgroups: cm.pods.as_ref().map(|p| p.namer()),
            seccomp_default: config.seccomp_default,
            swap: swap_config(config, cm.machine_memory),
            hugepage_sizes: crate::nodestatus::machine::read_hugepages(std::path::Path::new(
                "/sys/kernel/mm/hugepages",
            ))
            .iter()
            .map(|h| h.page_size)
            .collect(),
            oom_group_kill,
            image_volumes: config.gate_on("ImageVolume"),
        },
        deps,
    ))
}

/// The ID allocator of `hostUsers: false` pods (upstream MakeUserNsManager).
/// Where it cannot start (a bad range, a checkpoint it cannot read) the
/// error is logged and such pods are refused; the other pods run.
fn userns_manager(
    config: &KubeletConfiguration,
    root_dir: &std::path::Path,
) -> Option<Arc<UsernsManager>> {
    let ids = config.user_namespaces.as_ref().and_then(|u| u.ids_per_pod);
    if ids.is_some_and(|n| n != i64::from(crate::userns::USERNS_LENGTH)) {
        // As upstream v1.34, which honours it only from v1.35.
        log::warn!(
            "userNamespaces.idsPerPod is parsed but not honoured: every pod gets {} IDs",
            crate::userns::USERNS_LENGTH
        );
    }
    let max_pods = config.max_pods;
    let pods_dir = root_dir.join("pods");
    let max_pods = u32::try_from(max_pods).unwrap_or(0);
    let made = IdRange::kubelet_mappings()
        .and_then(|range| UsernsManager::with_max_pods(pods_dir, range, max_pods));
    match made {
        Ok(m) => Some(Arc::new(m)),
        Err(e) => {
            log::error!(
                "create user namespace manager: {e}; pods with hostUsers: false are refused"
            );
            None
        }
    }
}

/// memorySwap.swapBehavior with the node's swap controller and sizes.
fn swap_config(config: &KubeletConfiguration, machine_memory: u64) -> SwapConfig {
    let swap_capacity = crate::stats::Provider::default()
        .meminfo()
        .ok()
        .and_then(|m| m.get("SwapTotal").copied())
        .unwrap_or(0);
    let swap = SwapConfig {
        behavior: SwapBehavior::from_config(&config.memory_swap.swap_behavior),
        controller: SwapController::detect(),
        memory_capacity: machine_memory,
        swap_capacity,
    };
    log::info!(
        "swap: {:?} for containers, controller {:?}, {} bytes of swap",
        swap.behavior,
        swap.controller,
        swap.swap_capacity
    );
    swap
}

/// The one stats provider: /stats/summary and the eviction manager read
/// it; pod memory comes from the pod cgroups when there are some.
fn stats_provider(
    node: &str,
    settings: &Settings,
    runtime: &Arc<RemoteRuntime>,
    csi: Option<&Arc<CsiPlugin>>,
    cm: &ContainerManagers,
) -> Arc<SummaryProvider> {
    let mut stats_cfg = StatsConfig::new(node, settings.root_dir.clone());
    stats_cfg.pod_logs_dir = settings.pod_logs_dir.clone();
    stats_cfg.volume_stats = csi.cloned().map(volumes::csi_volume_stats);
    SummaryProvider::with_pod_cgroups(
        Arc::clone(runtime) as Arc<dyn crate::server::stats::StatsRuntime>,
        stats_cfg,
        cm.pods
            .clone()
            .map(|p| p as Arc<dyn crate::server::stats::PodCgroups>),
    )
}

/// The static pod path and URL sources, each on its own thread, feeding
/// the merger.
fn start_sources(
    config: &KubeletConfiguration,
    node: &str,
    pod_config: &PodConfig,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Vec<Worker>> {
    let mut handles = Vec::new();
    if !config.static_pod_path.is_empty() {
        log::info!("adding static pod path {}", config.static_pod_path);
        handles.push(
            podconfig::start_file_source(
                config.static_pod_path.as_str(),
                node,
                config.file_check_frequency.0,
                pod_config.channel(types::FILE_SOURCE),
                shutdown.clone(),
            )
            .context("start the file pod source")?,
        );
    }
    if !config.static_pod_url.is_empty() {
        log::info!("adding pod URL {} with headers", config.static_pod_url);
        let headers = config
            .static_pod_url_header
            .iter()
            .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), v.clone())))
            .collect();
        handles.push(
            podconfig::start_http_source(
                &config.static_pod_url,
                headers,
                node,
                config.http_check_frequency.0,
                pod_config.channel(types::HTTP_SOURCE),
                shutdown.clone(),
            )
            .context("start the URL pod source")?,
        );
    }
    Ok(handles)
}

/// /var/log/containers for the default /var/log/pods, else `containers`
/// beside a custom podLogsDir, so a node (or a test) with its own log
/// directory keeps its symlinks there too.
fn container_logs_dir(pod_logs_dir: &str) -> PathBuf {
    std::path::Path::new(pod_logs_dir).parent().map_or_else(
        || crate::logs::CONTAINER_LOGS_DIR.into(),
        |p| p.join("containers"),
    )
}

/// Re-queues a pod for sync at once.
fn requeue(queue: &Arc<WorkQueue>) -> Box<dyn Fn(&str) + Send + Sync> {
    let queue = Arc::clone(queue);
    Box::new(move |uid| queue.enqueue(uid, Duration::ZERO))
}
