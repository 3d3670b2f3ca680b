//! The wiring of what runs only with an API server (upstream server.go's
//! buildKubeletClientConfig and the cluster half of NewMainKubelet): the TLS
//! bootstrap, the API client, the event recorder, and the modules that talk
//! to the API: the API pod source, the Node and Service reflectors, the
//! status manager's sync, node status and the node lease.

use std::sync::{Arc, RwLock};

use anyhow::Context;
use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::{Node, Taint};

use super::{kubelet_health, volumes};
use crate::client::{kubeconfig, paths, start_reflector, Client, ReflectorEvent};
use crate::config::{self as podconfig, PodConfig};
use crate::envvars::Service;
use crate::events::{ApiRecorder, EventRecorder, LogRecorder};
use crate::kubelet::Kubelet;
use crate::kubeletconfig::{self, KubeletConfiguration, KubeletFlags};
use crate::nodelease::LeaseController;
use crate::nodestatus::{NodeStatusConfig, NodeStatusLinks, NodeStatusManager};
use crate::pod::mirror_client::NodeUid;
use crate::types;
use crate::util::worker::{ShutdownStage, Worker};

/// With --bootstrap-kubeconfig (upstream server.go buildKubeletClientConfig):
/// with `rotateCertificates`, LoadClientConfig, whose bootstrap the
/// certificate manager does in the background (Some when it must); without
/// it, LoadClientCert, which blocks until --kubeconfig holds a valid client
/// certificate.
pub(super) fn tls_bootstrap(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    node: &str,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Option<crate::certificate::bootstrap::Background>> {
    let Some(boot) = &flags.bootstrap_kubeconfig else {
        return Ok(None);
    };
    let Some(kubeconfig) = &flags.kubeconfig else {
        anyhow::bail!("--bootstrap-kubeconfig {} needs --kubeconfig: the path the bootstrapped kubeconfig is written to", boot.display());
    };
    let paths = crate::certificate::bootstrap::Paths {
        kubeconfig,
        bootstrap_kubeconfig: boot,
        cert_dir: &flags.cert_dir,
    };
    if config.rotate_certificates {
        return crate::certificate::bootstrap::load_client_config(&paths).context("TLS bootstrap");
    }
    crate::certificate::bootstrap::load_client_cert(&paths, node, shutdown)
        .context("TLS bootstrap")
        .map(|()| None)
}

/// The API client when --kubeconfig is given, with kubeAPIQPS/kubeAPIBurst;
/// `bootstrapping` is its configuration while the TLS bootstrap runs in the
/// background (the kubeconfig's certificate does not exist yet).
pub(super) fn api_client(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    bootstrapping: Option<crate::client::RestConfig>,
) -> anyhow::Result<Option<Client>> {
    let Some(path) = &flags.kubeconfig else {
        return Ok(None);
    };
    let mut rest = match bootstrapping {
        Some(rest) => rest,
        None => kubeconfig::load(path)?,
    };
    rest.qps = config.kube_api_qps as f32;
    rest.burst = u32::try_from(config.kube_api_burst).unwrap_or(0);
    log::info!("API server {} (kubeconfig {})", rest.server, path.display());
    Ok(Some(Client::new(
        rest,
        std::sync::Arc::new(crate::metrics::RestClientRequests),
    )?))
}

/// The recorder, and its sender thread when there is one.
pub(super) type RecorderAndThread = (Arc<dyn EventRecorder>, Option<Worker>);

/// Events go to the API server when there is one (rate limited by
/// eventRecordQPS/eventBurst on their own thread), else to the log.
pub(super) fn event_recorder(
    client: Option<&Client>,
    node: &str,
    config: &KubeletConfiguration,
    shutdown: &Receiver<()>,
) -> anyhow::Result<RecorderAndThread> {
    let Some(client) = client else {
        return Ok((Arc::new(LogRecorder), None));
    };
    let recorder = ApiRecorder::new(
        client.clone(),
        node.to_string(),
        config.event_record_qps as f32,
        u32::try_from(config.event_burst).unwrap_or(0),
    );
    let thread = recorder
        .start(shutdown.clone())
        .context("start the event recorder")?;
    Ok((recorder, Some(thread)))
}

pub(super) fn node_status_config(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    node: &str,
) -> NodeStatusConfig {
    let mut cfg = NodeStatusConfig::new(node);
    cfg.node_ip = flags
        .node_ip
        .as_deref()
        .and_then(|ip| ip.split(',').next()?.trim().parse().ok());
    cfg.node_labels = flags.node_labels.clone();
    cfg.register_with_taints = config
        .register_with_taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: Some(t.value.clone()).filter(|v| !v.is_empty()),
            effect: t.effect.clone(),
            time_added: None,
        })
        .collect();
    cfg.register_node = config.register_node;
    cfg.max_pods = i64::from(config.max_pods);
    cfg.kubelet_port = config.port;
    cfg.root_dir = flags.root_dir.clone();
    cfg.system_reserved = config.system_reserved.clone();
    cfg.kube_reserved = config.kube_reserved.clone();
    cfg.eviction_hard = config.eviction_hard.clone();
    cfg.node_status_update_frequency = config.node_status_update_frequency.0;
    cfg.node_status_report_frequency = config.node_status_report_frequency.0;
    cfg.node_status_max_images = config.node_status_max_images;
    cfg.kubelet_version = kubeletconfig::KUBERNETES_VERSION.to_string();
    cfg.provider_id = config.provider_id.clone();
    cfg.enable_controller_attach_detach = config.enable_controller_attach_detach;
    cfg
}

/// The node's UID, once its Node object has been seen.
pub(super) fn node_uid(node: &Arc<RwLock<Option<Node>>>) -> NodeUid {
    let node = Arc::clone(node);
    Arc::new(move || {
        let n = node.read().unwrap_or_else(|e| e.into_inner());
        n.as_ref().and_then(|n| n.metadata.uid.clone())
    })
}

/// What runs only with an API server: the pod source for pods bound to
/// this node, the Node reflector, and the status manager's API sync.
/// `node_status_kicks` are the runtime state's (see `ClusterDeps`).
#[allow(clippy::too_many_arguments)] // startup wiring: one argument per dependency
pub(super) fn start_cluster_modules(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    recorder: &Arc<dyn EventRecorder>,
    (client, objects): (&Client, &volumes::ApiObjects),
    node: &str,
    kubelet: &Arc<Kubelet>,
    (pod_config, node_status_kicks): (&PodConfig, Receiver<()>),
    shutdown: &Receiver<()>,
) -> anyhow::Result<Vec<Worker>> {
    if !client.waiting_for_cert() {
        // Read and log what the kubelet adapts to this control plane now;
        // while a certificate is bootstrapped, at its first use.
        client.server_version();
    }
    let mut handles = Vec::new();
    handles.push(
        podconfig::start_api_source(
            client.clone(),
            node,
            pod_config.channel(types::API_SOURCE),
            shutdown.clone(),
        )
        .context("start the API pod source")?,
    );
    let holder = Arc::clone(kubelet.node());
    let node_path = paths::with_query(
        &paths::nodes(),
        &[("fieldSelector", &format!("metadata.name={node}"))],
    );
    handles.push(Worker::adopt(
        start_reflector(
            "api-node",
            client.clone(),
            node_path,
            Box::new(move |e: ReflectorEvent<Node>| {
                let mut slot = holder.write().unwrap_or_else(|e| e.into_inner());
                match e {
                    ReflectorEvent::Replace(mut nodes) => *slot = nodes.pop(),
                    ReflectorEvent::Added(n) | ReflectorEvent::Modified(n) => *slot = Some(n),
                    ReflectorEvent::Deleted(_) => *slot = None,
                }
            }),
            shutdown.clone(),
        )
        .context("start the Node reflector")?,
        ShutdownStage::Sources,
    ));
    handles.push(
        kubelet
            .status_manager()
            .start(client.clone(), shutdown.clone())
            .context("start the status manager")?,
    );
    // Services, for the service-link variables of container environments.
    let store = Arc::clone(&objects.services);
    handles.push(Worker::adopt(
        start_reflector(
            "api-services",
            client.clone(),
            paths::services(),
            Box::new(move |e: ReflectorEvent<Service>| {
                let mut all = store.write().unwrap_or_else(|e| e.into_inner());
                let key = |s: &Service| (s.metadata.namespace.clone(), s.metadata.name.clone());
                match e {
                    ReflectorEvent::Replace(list) => *all = list,
                    ReflectorEvent::Added(s) | ReflectorEvent::Modified(s) => {
                        all.retain(|x| key(x) != key(&s));
                        all.push(s);
                    }
                    ReflectorEvent::Deleted(s) => all.retain(|x| key(x) != key(&s)),
                }
            }),
            shutdown.clone(),
        )
        .context("start the services reflector")?,
        ShutdownStage::Sources,
    ));
    let nsm = NodeStatusManager::new(
        node_status_config(flags, config, node),
        client.clone(),
        kubelet_health(kubelet),
        NodeStatusLinks {
            recorder: Some(Arc::clone(recorder)),
            // The Ready condition follows the runtime at once, not at the
            // next tick.
            kicks: node_status_kicks,
            after_sync: Some({
                let wiper = kubelet.dra_manager().slice_wiper();
                Box::new(move |client, node| wiper.run_due(client, node))
            }),
        },
    );
    let initial = Arc::clone(&nsm);
    kubelet.set_initial_node(Box::new(move || initial.initial_node_now()));
    handles.push(nsm.start(shutdown.clone()).context("start node status")?);
    let lease_nsm = Arc::clone(&nsm);
    let lease = LeaseController::new(
        client.clone(),
        node.to_string(),
        config.node_lease_duration_seconds,
        Box::new(move || lease_nsm.node().and_then(|n| n.metadata.uid)),
    );
    handles.push(
        lease
            .start(shutdown.clone())
            .context("start the node lease")?,
    );
    Ok(handles)
}
