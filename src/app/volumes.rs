//! Startup of the volume side (upstream NewMainKubelet's tokenManager,
//! secretManager, configMapManager and volumeManager): which VolumeHost the
//! plugins get, and the node facts they report.

use std::sync::{Arc, RwLock};

use anyhow::Context;

use crossbeam_channel::Receiver;

use crate::client::multiwatch::MultiWatch;
use crate::envvars::Service;
use crate::kubeletconfig::KubeletConfiguration;
use crate::pod::PodRegistrar;
use crate::util::manager::cache_based::DEFAULT_TTL;
use crate::util::manager::{ManagerError, ObjectRef, OnChange, Strategy};
use crate::volume::HostError;
use crate::volumemanager::PodReadyFn;
use crate::{configmap, secret};

use crate::client::Client;
use crate::events::EventRecorder;
use crate::fieldpath::NodeAllocatable;
use crate::kubeletconfig::KubeletFlags;
use crate::token::{ApiTokenRequester, TokenManager};
use crate::volumemanager::host::{ApiHost, NodeFacts, ObjectGetter, StandaloneHost};
use crate::volumemanager::VolumeManager;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

/// What downward API limits fall back to: the node's capacity (no
/// reservations are subtracted yet, as the node status reports it).
pub fn node_allocatable(root_dir: &std::path::Path, memory: u64) -> NodeAllocatable {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let storage = crate::stats::statvfs(root_dir).map_or(0, |fs| fs.capacity);
    NodeAllocatable {
        cpu_milli: cores as i128 * 1000,
        memory: i128::from(memory),
        ephemeral_storage: i128::from(storage),
    }
}

fn host_ips(flags: &KubeletFlags) -> Vec<String> {
    flags
        .node_ip
        .as_deref()
        .map(crate::kubeletconfig::node_ips)
        .unwrap_or_default()
}

/// `/stats/summary`'s volume usage: the CSI drivers' last answers.
pub fn csi_volume_stats(
    csi: Arc<crate::volume::csi::CsiPlugin>,
) -> crate::server::stats::VolumeStatsSource {
    use crate::server::stats::types::{FsStats, PvcReference, Time, VolumeStats};
    crate::server::stats::VolumeStatsSource(Arc::new(move |uid| {
        csi.usage_of(uid)
            .into_iter()
            .map(|u| VolumeStats {
                fs: FsStats {
                    time: Time(
                        u.time
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_nanos() as i64),
                    ),
                    available_bytes: u.available_bytes,
                    capacity_bytes: u.capacity_bytes,
                    used_bytes: u.used_bytes,
                    inodes_free: u.inodes_free,
                    inodes: u.inodes,
                    inodes_used: u.inodes_used,
                },
                name: u.volume,
                pvc_ref: u
                    .claim
                    .map(|(namespace, name)| PvcReference { name, namespace }),
            })
            .collect()
    }))
}

/// Watched Secret and ConfigMap changes waiting for the volume manager;
/// beyond these a change is dropped and the pods see it at their next sync.
const OBJECT_CHANGES_CAPACITY: usize = 256;

/// How ConfigMaps and Secrets are read, for volumes and env alike, and the
/// Services container environments read.
#[derive(Clone)]
pub struct ApiObjects {
    pub config_maps: ObjectGetter<ConfigMap>,
    pub secrets: ObjectGetter<Secret>,
    /// Filled by the `api-services` reflector.
    pub services: Arc<RwLock<Vec<Service>>>,
}

/// What the volume side gives the kubelet.
pub struct VolumeDeps {
    pub tokens: Option<Arc<TokenManager>>,
    pub volume_manager: Arc<VolumeManager>,
    /// Watched Secrets and ConfigMaps that changed, for the volume
    /// manager's thread (never any in standalone mode).
    pub object_changes: Receiver<ObjectRef>,
    /// With an API server.
    pub objects: Option<ApiObjects>,
    /// For the pod manager: the secret and configMap managers.
    pub registrars: Vec<Arc<dyn PodRegistrar>>,
    /// The `object-watches` multiplexer (cluster mode), which the
    /// RuntimeClass watch shares.
    pub watches: Option<Arc<MultiWatch>>,
}

/// The token manager, the secret and configMap managers (cluster mode
/// only) and the volume manager. The managers learn of pods through the
/// pod manager's registrars (the caller gives it [`VolumeDeps::registrars`]).
/// `on_pod_ready` re-queues a pod whose volumes became ready.
pub fn volume_managers(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    client: Option<&Client>,
    allocatable: NodeAllocatable,
    recorder: &Arc<dyn EventRecorder>,
    on_pod_ready: PodReadyFn,
    csi: Option<Arc<crate::volume::csi::CsiPlugin>>,
) -> anyhow::Result<VolumeDeps> {
    let node = NodeFacts {
        allocatable,
        host_ips: host_ips(flags),
    };
    let Some(c) = client else {
        let host = Arc::new(StandaloneHost { node });
        return Ok(VolumeDeps {
            tokens: None,
            volume_manager: VolumeManager::new(
                host,
                flags.root_dir.clone(),
                Arc::clone(recorder),
                on_pod_ready,
            ),
            object_changes: crossbeam_channel::never(),
            objects: None,
            registrars: Vec::new(),
            watches: None,
        });
    };
    let tokens = Arc::new(TokenManager::new(Box::new(ApiTokenRequester::new(
        c.clone(),
    ))));
    let strategy = Strategy::parse(&config.config_map_and_secret_change_detection_strategy)
        .with_context(|| {
            format!(
                "configMapAndSecretChangeDetectionStrategy {:?}: must be Watch, Cache or Get",
                config.config_map_and_secret_change_detection_strategy
            )
        })?;
    let watches = MultiWatch::new(c).context("start the object watches")?;
    if strategy == Strategy::Watch {
        watches.start().context("start the object-watches thread")?;
    }
    // The volume manager reads through the managers (its host), so a
    // change reaches it over a channel its thread drains.
    let (changes_tx, object_changes) = crossbeam_channel::bounded(OBJECT_CHANGES_CAPACITY);
    let on_change: OnChange = Arc::new(move |obj: ObjectRef| {
        if changes_tx.try_send(obj).is_err() {
            log::debug!(
                "volume manager busy: a watched object's change waits for its pods' next sync"
            );
        }
    });
    let secrets = secret::new_manager(strategy, c, &watches, DEFAULT_TTL, Some(on_change.clone()));
    let config_maps = configmap::new_manager(strategy, c, &watches, DEFAULT_TTL, Some(on_change));
    let registrars: Vec<Arc<dyn PodRegistrar>> = vec![secrets.clone(), config_maps.clone()];
    let objects = ApiObjects {
        config_maps: Arc::new(move |ns, name| found(config_maps.get(ns, name))),
        secrets: Arc::new(move |ns, name| found(secrets.get(ns, name))),
        services: Arc::default(),
    };
    let host = ApiHost {
        client: c.clone(),
        tokens: Arc::clone(&tokens),
        config_maps: Arc::clone(&objects.config_maps),
        secrets: Arc::clone(&objects.secrets),
        node,
        csi,
    };
    let volume_manager = VolumeManager::new(
        Arc::new(host),
        flags.root_dir.clone(),
        Arc::clone(recorder),
        on_pod_ready,
    );
    Ok(VolumeDeps {
        tokens: Some(tokens),
        volume_manager,
        object_changes,
        objects: Some(objects),
        registrars,
        watches: Some(watches),
    })
}

/// A manager's answer as the plugins and env want it: NotFound is `None`.
fn found<T>(r: Result<Arc<T>, ManagerError>) -> Result<Option<Arc<T>>, HostError> {
    match r {
        Ok(o) => Ok(Some(o)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}
