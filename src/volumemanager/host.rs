//! The plugins' view of the kubelet (upstream `pkg/kubelet/volume_host.go`):
//! with an API server, ConfigMaps and Secrets come from their managers
//! and tokens from the token manager; standalone, only emptyDir, hostPath
//! and downwardAPI volumes can work, and the others say why not.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};

use crate::client::{paths, Client};
use crate::fieldpath::NodeAllocatable;
use crate::podutil::PodExt;
use crate::token::{TokenKey, TokenManager};
use crate::volume::pvc::{ClaimBinding, PersistentVolumeSource};
use crate::volume::{HostError, VolumeHost};

/// Gets a namespaced object by name; `Ok(None)` when it does not exist.
pub type ObjectGetter<T> =
    Arc<dyn Fn(&str, &str) -> Result<Option<Arc<T>>, HostError> + Send + Sync>;

/// Node facts every host reports.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    pub allocatable: NodeAllocatable,
    pub host_ips: Vec<String>,
}

/// Without an API server.
pub struct StandaloneHost {
    pub node: NodeFacts,
}

impl VolumeHost for StandaloneHost {
    fn config_map(&self, _: &str, _: &str) -> Result<Option<Arc<ConfigMap>>, HostError> {
        Err(HostError::NeedsApiServer("a configMap volume"))
    }
    fn secret(&self, _: &str, _: &str) -> Result<Option<Arc<Secret>>, HostError> {
        Err(HostError::NeedsApiServer("a secret volume"))
    }
    fn service_account_token(&self, _: &Pod, _: &str, _: i64) -> Result<String, HostError> {
        Err(HostError::NeedsApiServer(
            "a serviceAccountToken projection",
        ))
    }
    fn persistent_volume_claim(&self, _: &str, _: &str) -> Result<Option<ClaimBinding>, HostError> {
        Err(HostError::NeedsApiServer("a persistentVolumeClaim volume"))
    }
    fn persistent_volume(&self, _: &str) -> Result<Option<PersistentVolumeSource>, HostError> {
        Err(HostError::NeedsApiServer("a persistentVolumeClaim volume"))
    }
    fn node_allocatable(&self) -> NodeAllocatable {
        self.node.allocatable
    }
    fn host_ips(&self) -> Vec<String> {
        self.node.host_ips.clone()
    }
}

/// With an API server.
pub struct ApiHost {
    pub client: Client,
    pub tokens: Arc<TokenManager>,
    pub config_maps: ObjectGetter<ConfigMap>,
    pub secrets: ObjectGetter<Secret>,
    pub node: NodeFacts,
    pub csi: Option<Arc<crate::volume::csi::CsiPlugin>>,
}

impl VolumeHost for ApiHost {
    fn config_map(&self, ns: &str, name: &str) -> Result<Option<Arc<ConfigMap>>, HostError> {
        (self.config_maps)(ns, name)
    }
    fn secret(&self, ns: &str, name: &str) -> Result<Option<Arc<Secret>>, HostError> {
        (self.secrets)(ns, name)
    }
    fn service_account_token(
        &self,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<String, HostError> {
        let spec = pod.spec_or_default();
        let key = TokenKey {
            namespace: pod.namespace().to_string(),
            service_account: spec
                .service_account_name
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "default".into()),
            audience: audience.to_string(),
            expiration_seconds,
            pod_name: pod.name().to_string(),
            pod_uid: pod.uid().to_string(),
        };
        Ok(self.tokens.get_service_account_token(&key)?)
    }
    fn persistent_volume_claim(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<ClaimBinding>, HostError> {
        let pvc: Option<serde_json::Value> =
            not_found_is_none(self.client.get(&paths::persistent_volume_claim(ns, name)))?;
        Ok(pvc.as_ref().map(ClaimBinding::from_object))
    }
    fn persistent_volume(&self, name: &str) -> Result<Option<PersistentVolumeSource>, HostError> {
        let pv: Option<serde_json::Value> =
            not_found_is_none(self.client.get(&paths::persistent_volume(name)))?;
        pv.map(|v| PersistentVolumeSource::from_object(&v).map_err(HostError::Invalid))
            .transpose()
    }
    fn node_allocatable(&self) -> NodeAllocatable {
        self.node.allocatable
    }
    fn host_ips(&self) -> Vec<String> {
        self.node.host_ips.clone()
    }
    fn csi(&self) -> Option<&Arc<crate::volume::csi::CsiPlugin>> {
        self.csi.as_ref()
    }
}

pub fn not_found_is_none<T>(r: Result<T, crate::client::ApiError>) -> Result<Option<T>, HostError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}
