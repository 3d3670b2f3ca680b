//! What the other modules read of the kubelet (the servers, node status,
//! the eviction manager's deps, run-once mode), and its own Node
//! (upstream kubelet_getters.go).

use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Node;

use super::*;

/// Makes the Node this kubelet would register: its name and labels, and
/// the machine's capacity and allocatable (node status's initialNode).
pub type InitialNode = Box<dyn Fn() -> Node + Send + Sync>;

impl Kubelet {
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn runtime(&self) -> &Arc<KubeRuntimeManager> {
        &self.runtime
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn pleg(&self) -> &Arc<GenericPleg> {
        &self.pleg
    }

    pub fn pod_workers(&self) -> &Arc<PodWorkers> {
        &self.pod_workers
    }

    pub fn pod_manager(&self) -> &Arc<PodManager> {
        &self.pod_manager
    }

    pub fn status_manager(&self) -> &Arc<StatusManager> {
        &self.status_manager
    }

    pub fn runtime_state(&self) -> &RuntimeState {
        &self.runtime_state
    }

    pub fn syncer(&self) -> &Syncer {
        &self.syncer
    }

    /// This node's Node object, as the Node reflector fills it.
    pub fn node(&self) -> &Arc<RwLock<Option<Node>>> {
        &self.node
    }

    pub fn volume_manager(&self) -> &Arc<VolumeManager> {
        &self.volume_manager
    }

    pub fn container_deletor(&self) -> &pod_container_deletor::PodContainerDeletor {
        &self.container_deletor
    }

    pub fn device_manager(&self) -> &crate::cm::devicemanager::DeviceManager {
        &self.device_manager
    }

    pub fn dra_manager(&self) -> &crate::cm::dra::DraManager {
        &self.dra_manager
    }

    pub fn eviction(&self) -> &Arc<crate::eviction::Manager> {
        &self.eviction
    }

    /// The one stats provider (upstream kl.StatsProvider).
    pub fn stats_provider(&self) -> &Arc<SummaryProvider> {
        &self.stats_provider
    }

    /// Graceful node shutdown: its admission rule and Ready error.
    pub fn node_shutdown(&self) -> &Arc<crate::nodeshutdown::Manager> {
        &self.node_shutdown
    }

    /// The pod cgroups, when cgroupsPerQOS is on.
    pub fn container_manager(&self) -> Option<&Arc<ContainerManager>> {
        self.container_manager.as_ref()
    }

    /// With an API server, the node status manager's initialNode backs
    /// admission until the Node reflector has delivered; set once, before
    /// the sync loop starts.
    pub fn set_initial_node(&self, make: InitialNode) {
        if self.initial_node.set(make).is_err() {
            log::warn!("the initial node maker was set twice; keeping the first");
        }
    }

    /// upstream getNodeAnyWay: the Node as the API server has it, or,
    /// before the reflector has one, the node this kubelet would register.
    /// Pods bound before the kubelet started (DaemonSets, static pods, any
    /// pod after a node restart) are admitted against the machine either
    /// way, never without a resource fit. None only without an API server.
    pub(super) fn node_any_way(&self) -> Option<Node> {
        let known = self.node.read().unwrap_or_else(|e| e.into_inner()).clone();
        known.or_else(|| self.initial_node.get().map(|make| make()))
    }

    /// The node admission reads, with `status.features` as this kubelet
    /// publishes them from its runtime (upstream reads the published node;
    /// until the first status update that could still be another
    /// kubelet's claim, on another runtime).
    pub(super) fn node_for_admission(&self) -> Option<Node> {
        let mut node = self.node_any_way()?;
        let features = self.runtime_state.runtime_features().map(|f| {
            k8s_openapi::api::core::v1::NodeFeatures {
                supplemental_groups_policy: Some(f.supplemental_groups_policy),
            }
        });
        if let Some(status) = node.status.as_mut() {
            status.features = features;
        } else if features.is_some() {
            node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
                features,
                ..Default::default()
            });
        }
        Some(node)
    }
}
