//! Mirror pods (upstream `pkg/kubelet/pod/mirror_client.go`): the API
//! objects that make a static pod visible to the cluster, owned by the
//! Node so they go with it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    DeleteOptions, OwnerReference, Preconditions,
};

use crate::client::{paths, ApiError, Client};
use crate::podutil::PodExt;
use crate::types::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION};

/// The node's UID once it is registered.
pub type NodeUid = Arc<dyn Fn() -> Option<String> + Send + Sync>;

pub struct MirrorClient {
    client: Client,
    node_name: String,
    node_uid: NodeUid,
}

impl MirrorClient {
    pub fn new(client: Client, node_name: String, node_uid: NodeUid) -> Self {
        MirrorClient {
            client,
            node_name,
            node_uid,
        }
    }

    /// Creates the mirror of a static pod: the same spec, annotated with the
    /// static pod's hash, owned by the Node.
    pub fn create_mirror_pod(&self, static_pod: &Pod) -> Result<(), String> {
        let node_uid = (self.node_uid)().ok_or("the node is not registered yet")?;
        let mirror = self.mirror_object(static_pod, node_uid)?;
        match self
            .client
            .create(&paths::pods(static_pod.namespace()), &mirror)
        {
            Ok(_) => {
                log::info!(
                    "created mirror pod for static pod {}",
                    static_pod.namespaced_name()
                );
                Ok(())
            }
            Err(e) if e.is_already_exists() => self.check_existing(static_pod),
            Err(e) => Err(e.to_string()),
        }
    }

    fn mirror_object(&self, static_pod: &Pod, node_uid: String) -> Result<Pod, String> {
        let hash = static_pod
            .annotation(CONFIG_HASH_ANNOTATION)
            .ok_or("static pod has no config hash")?
            .to_string();
        let mut mirror = static_pod.clone();
        let meta = &mut mirror.metadata;
        meta.uid = None;
        meta.resource_version = None;
        meta.creation_timestamp = None;
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
        meta.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: self.node_name.clone(),
            uid: node_uid,
            controller: Some(true),
            ..Default::default()
        }]);
        mirror.status = None;
        Ok(mirror)
    }

    /// A mirror pod already exists: fine if it is this static pod's.
    fn check_existing(&self, static_pod: &Pod) -> Result<(), String> {
        let existing: Pod = self
            .client
            .get(&paths::pod(static_pod.namespace(), static_pod.name()))
            .map_err(|e| e.to_string())?;
        if super::is_mirror_pod_of(&existing, static_pod) {
            Ok(())
        } else {
            Err(format!(
                "a different pod named {} already exists in the API",
                static_pod.namespaced_name()
            ))
        }
    }

    /// Deletes a mirror pod, guarded by its UID when known. Returns whether
    /// it was deleted (or already gone).
    pub fn delete_mirror_pod(&self, mirror: &Pod) -> Result<bool, ApiError> {
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(mirror.uid().to_string()).filter(|u| !u.is_empty()),
                ..Default::default()
            }),
            ..Default::default()
        };
        match self
            .client
            .delete(&paths::pod(mirror.namespace(), mirror.name()), &opts)
        {
            Ok(()) => {
                log::info!("deleted mirror pod {}", mirror.namespaced_name());
                Ok(true)
            }
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(e),
        }
    }
}
