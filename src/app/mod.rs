//! Startup, in upstream's order (`cmd/kubelet/app/server.go`): parse flags,
//! load and validate the KubeletConfiguration, bootstrap the client, build
//! the kubelet and its managers (`kubelet.rs`, upstream NewMainKubelet),
//! start the resource managers, the cluster modules, healthz and the
//! servers, then each module of upstream's Kubelet.Run on its own thread,
//! and run the sync loop on the main thread.

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
use crate::events::{self, EventRecorder, EventType};
use crate::kubelet::{Kubelet, LoopChannels};
use crate::kubeletconfig::{self, KubeletConfiguration, KubeletFlags, LoadError};
use crate::metrics;
use crate::server::healthz::{Healthz, NamedCheck};
use crate::server::host::{self as server_host, ServerHost};
use crate::server::kubelet::{self as kubelet_server, ServerConfig};
use crate::util::worker::{self, ShutdownStage, Worker};

mod certificates;
mod check;
mod cluster;
mod eviction;
mod kubelet;
mod nodeshutdown;
mod servers;
mod shutdown;
mod volumes;

use cluster::*;
use kubelet::{new_main_kubelet, MainKubelet};
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

    let MainKubelet {
        kubelet,
        pod_config,
        pleg_events,
        prober,
        probe_results,
        cpu_manager,
        memory_manager,
        csi,
        volumes: volume_deps,
        node_status_kicks,
        threads,
    } = new_main_kubelet(flags, config, &node, client.as_ref(), &recorder, &shutdown)?;
    owned.extend(threads);
    let (resource_threads, _pod_resources) = start_resource_managers(
        &kubelet,
        (&cpu_manager, &memory_manager),
        csi.as_ref(),
        &recorder,
        &stop,
    )?;
    owned.extend(resource_threads);
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
    owned.extend(start_servers(
        flags,
        config,
        (&kubelet, &node),
        (client.as_ref(), background.map(|b| b.bootstrap)),
        &recorder,
        &stop,
    )?);
    if flags.runonce {
        return Ok(crate::runonce::run_once(&kubelet, &pod_config.updates()));
    }
    owned.extend(start_kubelet_modules(
        flags,
        config,
        &kubelet,
        (&recorder, &prober),
        volume_deps.tokens.clone(),
        &stop,
    )?);
    // Upstream notifies once RunKubelet has started the kubelet and healthz.
    crate::util::sd_notify::notify_logged(crate::util::sd_notify::READY);
    kubelet.sync_loop(&LoopChannels {
        config: pod_config.updates(),
        pleg: pleg_events,
        probes: probe_results,
        shutdown,
    });
    log::info!("sync loop stopped; stopping the modules");
    kubelet.pod_workers().wake_all();
    crate::util::sd_notify::notify_logged(crate::util::sd_notify::STOPPING);
    stop_modules(owned);
    log::info!("exiting");
    Ok(0)
}

/// The device manager's thread, the CPU manager's reconciler, the plugin
/// manager that registers device plugins and CSI drivers, and the pod
/// resources API. The API is served until the kubelet exits; monitoring
/// agents read it and pods do not need it, so failing to serve it is
/// reported, not fatal.
fn start_resource_managers(
    kubelet: &Arc<Kubelet>,
    (cpu_manager, memory_manager): (
        &crate::cm::cpumanager::CpuManager,
        &crate::cm::memorymanager::MemoryManager,
    ),
    csi: Option<&Arc<crate::volume::csi::CsiPlugin>>,
    recorder: &Arc<dyn EventRecorder>,
    stop: &Shutdown,
) -> anyhow::Result<(Vec<Worker>, Option<grpcio::Server>)> {
    let device_manager = kubelet.device_manager();
    let mut threads = vec![device_manager
        .start(stop.channel.clone())
        .context("start the device-manager thread")?];
    let cpu_runtime =
        Arc::clone(kubelet.runtime().runtime()) as Arc<dyn crate::cm::cpumanager::UpdateCpuset>;
    threads.extend(
        cpu_manager
            .start_reconciler(cpu_runtime, stop.channel.clone())
            .context("cpu manager")?,
    );
    threads.push(start_plugin_manager(
        csi,
        kubelet,
        device_manager,
        recorder,
        stop,
    )?);
    let k = Arc::clone(kubelet);
    let pod_resources = crate::apis::podresources::serve(
        device_manager.grpc_env(),
        &kubelet.settings().root_dir,
        Arc::new(move || k.active_pods()),
        device_manager.clone(),
        cpu_manager.clone(),
        memory_manager.clone(),
        kubelet.dra_manager().clone(),
    )
    .inspect_err(|e| log::error!("{e}; continuing without the pod resources API"))
    .ok();
    Ok((threads, pod_resources))
}

/// What upstream's Kubelet.Run starts beside the sync loop once the
/// kubelet serves (not in runonce mode): the runtime status check, PLEG,
/// the pod workers and the garbage collectors, the eviction manager, the
/// prober, container log rotation, graceful node shutdown and the OOM
/// watcher.
fn start_kubelet_modules(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    kubelet: &Arc<Kubelet>,
    (recorder, prober): (&Arc<dyn EventRecorder>, &Arc<crate::prober::ProberManager>),
    tokens: Option<Arc<crate::token::TokenManager>>,
    stop: &Shutdown,
) -> anyhow::Result<Vec<Worker>> {
    let shutdown = &stop.channel;
    let cri = kubelet.runtime().runtime();
    let image_gc = Arc::new(crate::images::gc::ImageGcManager::new(
        Arc::clone(cri) as Arc<dyn crate::cri::ImageService>,
        Arc::clone(cri) as Arc<dyn crate::cri::RuntimeService>,
        crate::images::gc::ImageGcPolicy::from_kubelet_config(config),
        flags.pod_infra_container_image.clone(),
        Arc::clone(recorder),
    ));
    let mut threads = start_modules(kubelet, Arc::clone(&image_gc), tokens, shutdown)?;
    threads.push(eviction::start_eviction_manager(
        kubelet, image_gc, shutdown,
    )?);
    threads.extend(prober.start(shutdown.clone()).context("start the prober")?);
    threads.push(start_log_manager(config, kubelet, shutdown)?);
    threads.extend(nodeshutdown::start_node_shutdown_manager(
        kubelet, recorder, shutdown,
    )?);
    // On cgroup v2, kubepods' memory.events feeds the OOM watcher.
    let kubepods_v2 = kubelet
        .container_manager()
        .and_then(|cm| cm.kubepods_dir_v2());
    threads.extend(
        crate::oom::start(Arc::clone(recorder), kubepods_v2, stop).context("spawn oom thread")?,
    );
    Ok(threads)
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
    use crate::pluginmanager::{GrpcDialer, Reconciler, CSI_PLUGIN, DEVICE_PLUGIN, DRA_PLUGIN};
    let dialer = GrpcDialer::new(Arc::clone(device_manager.grpc_env()));
    let mut reconciler = Reconciler::new(Box::new(dialer));
    reconciler.add_handler(DEVICE_PLUGIN, Arc::new(device_manager.watcher_handler()));
    reconciler.add_handler(
        DRA_PLUGIN,
        Arc::new(kubelet.dra_manager().registration_handler()),
    );
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
