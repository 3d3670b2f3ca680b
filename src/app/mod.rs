//! Startup, in upstream's order (`cmd/kubelet/app/server.go`): parse flags,
//! load and validate the KubeletConfiguration, build the dependencies, start
//! healthz, create the kubelet (constructors do no work), start each module
//! on its own thread, then run the sync loop on the main thread.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use crossbeam_channel::Receiver;
use nix::sys::signal::{SigSet, Signal};
use rkubelet_util::shutdown::Shutdown;

use std::sync::RwLock;

use k8s_openapi::api::core::v1::Node;

use crate::nodestatus::{ImageInfo, KubeletHealth};

use crate::client::Client;
use crate::config::{self as podconfig, PodConfig};
use crate::container::cache::Cache;
use crate::cri::RemoteRuntime;
use crate::envvars::ApiEnvSource;
use crate::events::{self, EventRecorder, EventType};
use crate::kubelet::{ClusterDeps, Kubelet, LoopChannels, Managers, PodWork, Settings};
use crate::kubeletconfig::{self, KubeletConfiguration, KubeletFlags, LoadError};
use crate::kuberuntime::lifecycle::RuntimeExec;
use crate::kuberuntime::{KubeRuntimeManager, RuntimeDeps, RuntimeManagerConfig};
use crate::lifecycle::handlers::SecurityAdmitHandlers;
use crate::metrics;
use crate::pleg::GenericPleg;
use crate::pod::mirror_client::MirrorClient;
use crate::podworkers::PodWorkers;
use crate::prober::ProberManager;
use crate::server::healthz::{Healthz, NamedCheck};
use crate::server::host::{self as server_host, ServerHost};
use crate::server::kubelet::{self as kubelet_server, ServerConfig};
use crate::server::stats::{StatsConfig, SummaryProvider};
use crate::types;
use crate::util::worker::{self, ShutdownStage, Worker};
use crate::util::workqueue::WorkQueue;

mod certificates;
mod check;
mod cluster;
mod eviction;
mod nodeshutdown;
mod servers;
mod shutdown;
mod volumes;

use cluster::*;
use servers::*;
use shutdown::*;

/// Threads that run pod syncs; fixed, whatever the number of pods.
pub const POD_WORKER_THREADS: usize = 4;
/// Threads that run probe checks; fixed, whatever the number of probes.
const PROBE_WORKER_THREADS: usize = 4;
/// Probe result changes waiting for the sync loop.
const PROBE_CHANNEL_CAPACITY: usize = 1000;
const RUNTIME_UP_PERIOD: Duration = Duration::from_secs(5);
/// Container GC period (upstream ContainerGCPeriod).
const GC_PERIOD: Duration = Duration::from_secs(60);
/// The sync loop is unhealthy if an iteration has not begun for this long
/// (upstream: twice syncFrequency, at least 5 minutes).
const MIN_SYNC_LOOP_HEALTH: Duration = Duration::from_secs(300);

/// The process entry point: returns the exit code.
pub fn main() -> i32 {
    crate::util::memory::tune_malloc();
    // `rkubelet check FLAGS...`: the preflight, with the flags a start takes.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let check = args.get(1).is_some_and(|a| a == "check");
    if check {
        args.remove(1);
    }
    let (flags, mut config) = match kubeletconfig::load(args) {
        Ok(v) => v,
        Err(LoadError::Clap(e)) => e.exit(),
        Err(LoadError::Invalid(e)) if check => {
            println!("FAIL  configuration: {e:#}\n      fix: correct the named flag or field");
            return 1;
        }
        Err(LoadError::Invalid(e)) => {
            eprintln!("rkubelet: {e:#}");
            return 1;
        }
    };
    crate::util::logging::init(flags.verbosity);
    // Upstream's --reserved-cpus: checked against the machine, then it
    // stands for the reserved cpu quantities.
    if let Err(e) =
        crate::cm::cpumanager::reserve_system_cpus(&mut config, std::path::Path::new("/sys"))
    {
        match check {
            true => println!("FAIL  configuration: {e}\n      fix: name CPUs the machine has"),
            false => log::error!("{e}"),
        }
        return 1;
    }
    if check {
        return check::run(&flags, &config);
    }
    log::info!(
        "rkubelet {} (Kubernetes {})",
        kubeletconfig::VERSION,
        kubeletconfig::KUBERNETES_VERSION
    );
    match run(&flags, &config) {
        Ok(code) => code,
        Err(e) => {
            log::error!("{e:#}");
            1
        }
    }
}

fn node_name(flags: &KubeletFlags) -> anyhow::Result<String> {
    let name = match flags
        .hostname_override
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        Some(n) => n.to_string(),
        None => nix::unistd::gethostname()
            .context("read the hostname")?
            .to_string_lossy()
            .into_owned(),
    };
    let name = name.trim().to_lowercase();
    if name.is_empty() {
        bail!("empty node name: set --hostname-override");
    }
    Ok(name)
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

/// SIGTERM and SIGINT close the returned shutdown's channel, which every
/// module's loop watches, and then make its descriptor readable. The
/// signals are blocked in every thread (the mask is inherited) and taken
/// by one thread with sigwait.
fn shutdown_on_signals() -> anyhow::Result<Shutdown> {
    let (trigger, shutdown) =
        rkubelet_util::shutdown::channel().context("create the shutdown pipe")?;
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().context("block termination signals")?;
    // Not joined at shutdown: it ends with the signal, or with the process.
    worker::spawn_helper("signals", move || {
        if let Ok(sig) = set.wait() {
            log::info!("received {sig}, shutting down (containers keep running)");
        }
        drop(trigger);
    })
    .context("spawn signal thread")?;
    Ok(shutdown)
}

fn run(flags: &KubeletFlags, config: &KubeletConfiguration) -> anyhow::Result<i32> {
    let node = node_name(flags)?;
    // The threads that wait in poll(2) take both halves (`stop`); the
    // rest watch the channel.
    let stop = shutdown_on_signals()?;
    let shutdown = stop.channel.clone();
    let background = tls_bootstrap(flags, config, &node, &shutdown)?;
    let client = api_client(flags, config, background.as_ref().map(|b| b.rest.clone()))?;
    if client.is_none() {
        log::info!(
            "no API server defined: running in standalone mode, no node status will be sent"
        );
    } else {
        for w in kubeletconfig::insecure_settings(config) {
            log::warn!("insecure: {w}");
        }
    }
    let (recorder, events_thread) = event_recorder(client.as_ref(), &node, config, &shutdown)?;
    // Every module thread, joined in order at shutdown.
    let mut owned: Vec<Worker> = events_thread.into_iter().collect();
    // Upstream's BirthCry.
    recorder.node_event(
        EventType::Normal,
        events::STARTING_KUBELET,
        "Starting kubelet.",
    );

    // Dependencies.
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
    let machine_memory = machine_memory();
    check_cgroup_driver(config, &runtime)?;
    let cpu_manager = crate::cm::cpumanager::CpuManager::start(
        config,
        &settings.root_dir,
        std::path::Path::new("/sys"),
    )
    .context("start cpu manager error")?;
    let memory_manager = crate::cm::memorymanager::MemoryManager::start(
        config,
        &settings.root_dir,
        std::path::Path::new("/sys"),
        machine_memory,
    )
    .context("start memory manager error")?;
    let container_manager = start_container_manager(config, machine_memory)?;
    if container_manager.is_some() {
        // upstream's enforceNodeAllocatableCgroups, once kubepods is capped.
        recorder.node_event(
            crate::events::EventType::Normal,
            crate::events::NODE_ALLOCATABLE_ENFORCED,
            "Updated Node Allocatable limit across pods",
        );
    }
    let kubepods_v2 = container_manager
        .as_ref()
        .and_then(|cm| cm.kubepods_dir_v2());
    let allocatable = volumes::node_allocatable(&settings.root_dir, machine_memory);
    // The pod workers' pool before the managers that wake and re-queue
    // pods through it (see kubelet::PodWork).
    let work_queue = Arc::new(WorkQueue::new());
    let (relist_soon, relist_asks) = crate::pleg::RelistSoon::channel();
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
    let numa_nodes = crate::cm::topologymanager::TopologyManager::machine_numa_nodes(
        config,
        std::path::Path::new("/sys"),
    )
    .context("topology manager: the machine's NUMA nodes")?;
    let device_manager = {
        let workers = Arc::clone(&pod_workers);
        let kick = node_status_kick.clone();
        crate::cm::devicemanager::DeviceManager::new(
            &settings.root_dir,
            crate::cm::devicemanager::DeviceManagerDeps {
                grpc_env: Arc::clone(runtime.grpc_env()),
                recorder: Arc::clone(&recorder),
                numa_nodes: numa_nodes.clone(),
                on_allocated: Arc::new(move |uid| workers.wake_pod(uid)),
                // Never blocks; kicks coalesce.
                on_capacity_changed: Box::new(move || {
                    let _ = kick.try_send(());
                }),
            },
        )
    };
    let node_object: Arc<RwLock<Option<Node>>> = Arc::new(RwLock::new(None));
    // CSI drivers are dialled on the runtime's gRPC environment, which the
    // device plugins share: no thread of their own.
    let csi = client.as_ref().map(|c| {
        let csi = crate::volume::csi::CsiPlugin::new(
            settings.root_dir.clone(),
            node.clone(),
            Arc::clone(device_manager.grpc_env()),
            c.clone(),
            config.volume_stats_agg_period.0,
            Arc::clone(&node_object),
        );
        // A volume joins volumesInUse before it is staged, and the
        // attach-detach controller must see it there first.
        let kick = node_status_kick.clone();
        csi.set_status_kick(Box::new(move || {
            let _ = kick.try_send(());
        }));
        csi
    });
    let volume_deps = volumes::volume_managers(
        flags,
        config,
        client.as_ref(),
        allocatable,
        &recorder,
        requeue(&work_queue),
        csi.clone(),
    )?;
    let runtime_deps = RuntimeDeps {
        recorder: Arc::clone(&recorder),
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
        devices: Some(device_manager.clone()),
        cpus: cpu_manager.clone(),
        memory: memory_manager.clone(),
    };
    let manager = Arc::new(KubeRuntimeManager::new(
        Arc::clone(&runtime),
        RuntimeManagerConfig {
            root_dir: settings.root_dir.clone(),
            pod_logs_dir: settings.pod_logs_dir.clone(),
            resolv_conf: config.resolv_conf.clone().into(),
            cluster_dns: config.cluster_dns.clone(),
            cluster_domain: config.cluster_domain.clone(),
            cpu_cfs_quota: config.cpu_cfs_quota,
            cpu_cfs_quota_period_us: config.cpu_cfs_quota_period.0.as_micros() as i64,
            machine_memory,
            image_pulls: crate::images::PullerConfig::from_kubelet_config(config),
            container_logs_dir: container_logs_dir(&config.pod_logs_dir),
            node_allocatable: allocatable,
            pod_cgroups: container_manager.as_ref().map(|cm| cm.namer()),
            seccomp_default: config.seccomp_default,
        },
        runtime_deps,
    ));
    let pod_config = Arc::new(PodConfig::try_new().context("start the pod config merger")?);
    owned.extend(start_sources(config, &node, &pod_config, &shutdown)?);
    let (pleg, pleg_rx) = GenericPleg::new(
        Arc::clone(&manager) as Arc<dyn crate::container::PodSource>,
        Arc::clone(&cache),
        relist_asks,
    );
    let pc = Arc::clone(&pod_config);
    let cluster = client.as_ref().map(|c| ClusterDeps {
        mirror_client: Arc::new(MirrorClient::new(
            c.clone(),
            node.clone(),
            node_uid(&node_object),
        )),
        node: Arc::clone(&node_object),
        on_runtime_change: Box::new(move || {
            // Never blocks; kicks coalesce.
            let _ = node_status_kick.try_send(());
        }),
    });
    let (probe_tx, probe_rx) = crossbeam_channel::bounded(PROBE_CHANNEL_CAPACITY);
    let prober = ProberManager::new(
        Arc::new(RuntimeExec(Arc::clone(manager.runtime()))),
        Arc::clone(&recorder),
        probe_tx,
        PROBE_WORKER_THREADS,
    );
    // The one stats provider: /stats/summary and the eviction manager read
    // it; pod memory comes from the pod cgroups when there are some.
    let mut stats_cfg = StatsConfig::new(&node, settings.root_dir.clone());
    stats_cfg.pod_logs_dir = settings.pod_logs_dir.clone();
    stats_cfg.volume_stats = csi.clone().map(volumes::csi_volume_stats);
    let stats_provider = SummaryProvider::with_pod_cgroups(
        Arc::clone(&runtime) as Arc<dyn crate::server::stats::StatsRuntime>,
        stats_cfg,
        container_manager
            .clone()
            .map(|cm| cm as Arc<dyn crate::server::stats::PodCgroups>),
    );
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
            container_manager,
            eviction: eviction::eviction_manager(config)?,
            stats_provider,
            node_shutdown: crate::nodeshutdown::Manager::from_config(config),
            registrars: volume_deps.registrars.clone(),
            device_manager: device_manager.clone(),
            cpu_manager: cpu_manager.clone(),
            memory_manager: memory_manager.clone(),
            topology_manager: Arc::new(
                crate::cm::topologymanager::TopologyManager::new(
                    config,
                    numa_nodes,
                    // upstream's order of AddHintProvider
                    vec![
                        Box::new(device_manager.clone()),
                        Box::new(cpu_manager.clone()),
                        Box::new(memory_manager.clone()),
                    ],
                )
                .context("topology manager")?,
            ),
        },
    );
    owned.push(
        device_manager
            .start(shutdown.clone())
            .context("start the device-manager thread")?,
    );
    let cpu_runtime = Arc::clone(&runtime) as Arc<dyn crate::cm::cpumanager::UpdateCpuset>;
    owned.extend(
        cpu_manager
            .start_reconciler(cpu_runtime, shutdown.clone())
            .context("cpu manager")?,
    );
    owned.push(start_plugin_manager(
        csi.as_ref(),
        &kubelet,
        &device_manager,
        &recorder,
        &stop,
    )?);
    // Served until the kubelet exits; monitoring agents read it, pods do
    // not need it, so failing to serve it is reported, not fatal.
    let _pod_resources = {
        let root_dir = kubelet.settings().root_dir.clone();
        let k = Arc::clone(&kubelet);
        crate::apis::podresources::serve(
            device_manager.grpc_env(),
            &root_dir,
            Arc::new(move || k.active_pods()),
            device_manager.clone(),
            cpu_manager.clone(),
            memory_manager.clone(),
        )
        .inspect_err(|e| log::error!("{e}; continuing without the pod resources API"))
        .ok()
    };
    let cluster_threads = match (&client, &volume_deps.objects) {
        (Some(c), Some(objects)) => start_cluster_modules(
            flags,
            config,
            &recorder,
            (c, objects),
            &node,
            &kubelet,
            (&pod_config, node_status_kicks),
            &shutdown,
        )?,
        _ => Vec::new(),
    };
    owned.extend(cluster_threads);

    // Before runonce too: its pods wait for their volumes like any other.
    let vm = Arc::clone(kubelet.volume_manager());
    let changes = volume_deps.object_changes.clone();
    owned.push(
        worker::spawn_supervised(
            "volume-manager",
            ShutdownStage::Workers,
            shutdown.clone(),
            move |stop| vm.run(stop, &changes),
        )
        .context("spawn volume-manager thread")?,
    );
    owned.extend(
        kubelet
            .runtime()
            .start_threads(&shutdown)
            .context("start the image puller and the hook runner")?,
    );
    let healthz = healthz_checks(config, &kubelet);
    owned.extend(
        start_healthz(config, &healthz, &stop)?.map(|h| Worker::adopt(h, ShutdownStage::Servers)),
    );
    metrics::set_node_name(&node);
    // Pods run without the API server on 10250 (logs, exec, metrics):
    // failing to start it is reported, not fatal (upstream exits).
    let certs = certificates::certificate_managers(
        flags,
        config,
        (client.as_ref(), background.map(|b| b.bootstrap)),
        &recorder,
        &node,
        &node_object,
    );
    let server = if flags.runonce {
        Vec::new()
    } else {
        start_kubelet_server(
            flags,
            config,
            (&kubelet, &node, &healthz),
            client.as_ref(),
            certs.serving_slot.clone(),
            &stop,
        )
        .unwrap_or_else(|e| {
            log::error!("{e:#}; continuing without it");
            Vec::new()
        })
    };
    owned.extend(server);
    owned.extend(certificates::start(certs, &shutdown)?);
    if flags.runonce {
        return Ok(crate::runonce::run_once(&kubelet, &pod_config.updates()));
    }
    let cri = kubelet.runtime().runtime();
    let image_gc = Arc::new(crate::images::gc::ImageGcManager::new(
        Arc::clone(cri) as Arc<dyn crate::cri::ImageService>,
        Arc::clone(cri) as Arc<dyn crate::cri::RuntimeService>,
        crate::images::gc::ImageGcPolicy::from_kubelet_config(config),
        flags.pod_infra_container_image.clone(),
        Arc::clone(&recorder),
    ));
    owned.extend(start_modules(
        &kubelet,
        Arc::clone(&image_gc),
        volume_deps.tokens.clone(),
        &shutdown,
    )?);
    owned.push(eviction::start_eviction_manager(
        &kubelet, image_gc, &shutdown,
    )?);
    owned.extend(prober.start(shutdown.clone()).context("start the prober")?);
    owned.push(start_log_manager(config, &kubelet, &shutdown)?);
    owned.extend(nodeshutdown::start_node_shutdown_manager(
        &kubelet, &recorder, &shutdown,
    )?);
    owned.extend(
        crate::oom::start(Arc::clone(&recorder), kubepods_v2, &stop).context("spawn oom thread")?,
    );
    // Upstream notifies once RunKubelet has started the kubelet and healthz.
    crate::util::sd_notify::notify_logged(crate::util::sd_notify::READY);
    kubelet.sync_loop(&LoopChannels {
        config: pod_config.updates(),
        pleg: pleg_rx,
        probes: probe_rx,
        shutdown,
    });
    log::info!("sync loop stopped; stopping the modules");
    kubelet.pod_workers().wake_all();
    crate::util::sd_notify::notify_logged(crate::util::sd_notify::STOPPING);
    stop_modules(owned);
    log::info!("exiting");
    Ok(0)
}

/// The plugin manager on `<root-dir>/plugins_registry`, its registration
/// calls on the plugins' gRPC environment: device plugins that register
/// there go to the device manager; a failed registration is a node event.
fn start_plugin_manager(
    csi: Option<&Arc<crate::volume::csi::CsiPlugin>>,
    kubelet: &Arc<Kubelet>,
    device_manager: &crate::cm::devicemanager::DeviceManager,
    recorder: &Arc<dyn crate::events::EventRecorder>,
    shutdown: &Shutdown,
) -> anyhow::Result<Worker> {
    use crate::pluginmanager::{GrpcDialer, Reconciler, CSI_PLUGIN, DEVICE_PLUGIN};
    let dialer = GrpcDialer::new(Arc::clone(device_manager.grpc_env()));
    let mut reconciler = Reconciler::new(Box::new(dialer));
    reconciler.add_handler(DEVICE_PLUGIN, Arc::new(device_manager.watcher_handler()));
    if let Some(csi) = csi {
        reconciler.add_handler(
            CSI_PLUGIN,
            Arc::new(crate::volume::csi::registration::RegistrationHandler::new(
                Arc::clone(csi),
            )),
        );
        reconciler.on_start(Box::new({
            let csi = Arc::clone(csi);
            move |shutdown| csi.initialize_csinode(shutdown)
        }));
    }
    let recorder = Arc::clone(recorder);
    reconciler.on_failure(Box::new(move |msg| {
        recorder.node_event(
            crate::events::EventType::Warning,
            "FailedPluginRegistration",
            msg,
        );
    }));
    crate::pluginmanager::start(&kubelet.settings().root_dir, reconciler, shutdown.clone())
        .context("start the plugin manager")
}

/// Exits when the runtime names a cgroup driver other than cgroupDriver.
/// A runtime that cannot say (UNIMPLEMENTED before containerd 2.0) or is
/// not up yet is taken at its word: the configured driver stands.
fn check_cgroup_driver(
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
) -> anyhow::Result<Option<Arc<crate::cm::ContainerManager>>> {
    let paths = crate::nodestatus::machine::HostPaths::default();
    let cores = crate::nodestatus::machine::read_machine_info(&paths)
        .map(|m| m.num_cores)
        .map_err(|e| anyhow::anyhow!("machine info: {e}"))?;
    let capacity = crate::cm::Capacity::read(cores, machine_memory);
    crate::cm::start_from_config(config, capacity).context("container manager")
}

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
fn container_logs_dir(pod_logs_dir: &str) -> std::path::PathBuf {
    std::path::Path::new(pod_logs_dir).parent().map_or_else(
        || crate::logs::CONTAINER_LOGS_DIR.into(),
        |p| p.join("containers"),
    )
}

/// Rotates container logs by containerLogMaxSize/containerLogMaxFiles.
fn start_log_manager(
    config: &KubeletConfiguration,
    kubelet: &Arc<Kubelet>,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Worker> {
    let rt = Arc::clone(kubelet.runtime().runtime());
    let pleg = Arc::clone(kubelet.pleg());
    let running = crate::logs::RunningLogs::new(
        Arc::clone(&rt),
        Box::new(move || pleg.running_container_ids()),
    );
    let mgr = crate::logs::LogManager::new(
        rt,
        crate::logs::LogConfig::from_kubelet_config(config)?,
        Box::new(move || running.list()),
    );
    mgr.start(shutdown.clone())
        .context("start the container log manager")
}

/// Starts every module that runs beside the sync loop, each on its own
/// named thread.
fn start_modules(
    kubelet: &Arc<Kubelet>,
    image_gc: Arc<crate::images::gc::ImageGcManager>,
    tokens: Option<Arc<crate::token::TokenManager>>,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Vec<Worker>> {
    let mut handles = Vec::new();
    handles.push(
        kubelet
            .pleg()
            .start(shutdown.clone())
            .context("start PLEG")?,
    );
    handles.extend(
        kubelet
            .start_pod_workers(shutdown.clone())
            .context("start pod workers")?,
    );
    handles.push(periodic(
        "runtime-status",
        RUNTIME_UP_PERIOD,
        Duration::ZERO,
        shutdown,
        {
            let k = Arc::clone(kubelet);
            move || k.update_runtime_up()
        },
    )?);
    let gc = worker::spawn_supervised("gc", ShutdownStage::Workers, shutdown.clone(), {
        let k = Arc::clone(kubelet);
        let deletions = kubelet.container_deletor().queue();
        move |shutdown| {
            let ticker = crossbeam_channel::tick(GC_PERIOD);
            loop {
                crossbeam_channel::select! {
                    recv(ticker) -> _ => garbage_collect(&k, &image_gc, tokens.as_deref()),
                    // Dead instances a ContainerDied event named.
                    recv(deletions) -> id => if let Ok(id) = id {
                        if let Err(e) = k.runtime().remove_container(&id) {
                            log::warn!("remove dead container {id}: {e}");
                        }
                    },
                    recv(shutdown) -> _ => return,
                }
            }
        }
    });
    handles.push(gc.context("spawn gc thread")?);
    Ok(handles)
}

/// One round of the `gc` thread: containers and sandboxes every minute,
/// images every 5 min, expired tokens.
fn garbage_collect(
    k: &Kubelet,
    image_gc: &crate::images::gc::ImageGcManager,
    tokens: Option<&crate::token::TokenManager>,
) {
    let desired = k.pod_manager().uids();
    if let Err(e) = k.runtime().garbage_collect(&desired, k.sources_ready()) {
        log::warn!("container garbage collection failed: {e}");
    }
    // After the container GC, so the images of containers it just
    // removed can go in the same round (every 5 min).
    image_gc.maybe_garbage_collect();
    if let Some(tokens) = tokens {
        tokens.cleanup();
    }
}

/// Re-queues a pod for sync at once.
fn requeue(queue: &Arc<WorkQueue>) -> Box<dyn Fn(&str) + Send + Sync> {
    let queue = Arc::clone(queue);
    Box::new(move |uid| queue.enqueue(uid, Duration::ZERO))
}

/// Runs `f` every `period` (first after `delay`) on its own named,
/// supervised thread, a worker at shutdown, until `shutdown` closes.
fn periodic<F>(
    name: &str,
    period: Duration,
    delay: Duration,
    shutdown: &Receiver<()>,
    f: F,
) -> anyhow::Result<Worker>
where
    F: FnMut() + Send + 'static,
{
    worker::spawn_periodic(
        name,
        ShutdownStage::Workers,
        period,
        delay,
        shutdown.clone(),
        f,
    )
    .with_context(|| format!("spawn {name} thread"))
}
