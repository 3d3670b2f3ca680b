//! Startup of the volume side (upstream NewMainKubelet's tokenManager,
//! secretManager, configMapManager and volumeManager): which VolumeHost the
//! plugins get, and the node facts they report.

use std::sync::Arc;

use crate::client::{paths, Client};
use crate::events::EventRecorder;
use crate::fieldpath::NodeAllocatable;
use crate::kubeletconfig::KubeletFlags;
use crate::token::{ApiTokenRequester, TokenManager};
use crate::volumemanager::host::{direct_getter, ApiHost, NodeFacts, ObjectGetter, StandaloneHost};
use crate::volumemanager::VolumeManager;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

/// What downward API limits fall back to: the node's capacity (no
/// reservations are subtracted yet, as the node status reports it).
pub fn node_allocatable(root_dir: &std::path::Path, memory: u64) -> NodeAllocatable {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let storage = nix::sys::statvfs::statvfs(root_dir)
        .map(|s| u128::from(s.blocks()) * u128::from(s.fragment_size()))
        .unwrap_or(0);
    NodeAllocatable {
        cpu_milli: cores as i128 * 1000,
        memory: i128::from(memory),
        ephemeral_storage: i128::try_from(storage).unwrap_or(i128::MAX),
    }
}

fn host_ips(flags: &KubeletFlags) -> Vec<String> {
    flags
        .node_ip
        .iter()
        .flat_map(|ips| ips.split(','))
        .map(|ip| ip.trim().to_string())
        .filter(|ip| !ip.is_empty())
        .collect()
}

/// How ConfigMaps and Secrets are read, for volumes and env alike.
#[derive(Clone)]
pub struct ApiObjects {
    pub config_maps: ObjectGetter<ConfigMap>,
    pub secrets: ObjectGetter<Secret>,
}

/// What the volume side gives the kubelet.
pub struct VolumeDeps {
    pub tokens: Option<Arc<TokenManager>>,
    pub volume_manager: Arc<VolumeManager>,
    /// With an API server.
    pub objects: Option<ApiObjects>,
}

/// The token manager and object getters (cluster mode only) and the
/// volume manager.
pub fn volume_managers(
    flags: &KubeletFlags,
    client: Option<&Client>,
    allocatable: NodeAllocatable,
    recorder: &Arc<dyn EventRecorder>,
) -> VolumeDeps {
    let node = NodeFacts {
        allocatable,
        host_ips: host_ips(flags),
    };
    let Some(c) = client else {
        let host = Arc::new(StandaloneHost { node });
        return VolumeDeps {
            tokens: None,
            volume_manager: VolumeManager::new(host, flags.root_dir.clone(), Arc::clone(recorder)),
            objects: None,
        };
    };
    let tokens = Arc::new(TokenManager::new(Box::new(ApiTokenRequester::new(
        c.clone(),
    ))));
    let objects = ApiObjects {
        config_maps: direct_getter(c.clone(), paths::configmap),
        secrets: direct_getter(c.clone(), paths::secret),
    };
    let host = ApiHost {
        client: c.clone(),
        tokens: Arc::clone(&tokens),
        config_maps: Arc::clone(&objects.config_maps),
        secrets: Arc::clone(&objects.secrets),
        node,
    };
    VolumeDeps {
        tokens: Some(tokens),
        volume_manager: VolumeManager::new(
            Arc::new(host),
            flags.root_dir.clone(),
            Arc::clone(recorder),
        ),
        objects: Some(objects),
    }
}
