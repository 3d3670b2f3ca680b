//! The pod manager and the mirror pod client (upstream `pkg/kubelet/pod`).

pub mod mirror_client;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::Pod;

use crate::podutil::PodExt;
use crate::types::{CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION};

/// The desired pods by UID, and the mirror pods of static pods by full name
/// (upstream pod manager). Mirror pods are the API's copies of static
/// pods: the kubelet tracks them but never runs them.
#[derive(Default)]
pub struct PodManager {
    pods: RwLock<HashMap<String, Arc<Pod>>>,
    mirrors: RwLock<HashMap<String, Arc<Pod>>>,
    /// The secret and configMap managers: told which objects the pods
    /// reference, as upstream's pod manager tells them.
    registrars: Vec<Arc<dyn PodRegistrar>>,
}

/// What learns about every pod the kubelet runs (upstream's
/// secretManager/configMapManager RegisterPod/UnregisterPod).
pub trait PodRegistrar: Send + Sync {
    /// A new pod, or a new version of one (references may have changed).
    fn register_pod(&self, pod: &Pod);
    fn unregister_pod(&self, pod: &Pod);
}

impl PodManager {
    /// A pod manager that tells `registrars` of every pod.
    pub fn new(registrars: Vec<Arc<dyn PodRegistrar>>) -> Self {
        PodManager {
            registrars,
            ..Default::default()
        }
    }

    pub fn add_or_update(&self, pod: Arc<Pod>) {
        for r in &self.registrars {
            r.register_pod(&pod);
        }
        let mut pods = self.pods.write().unwrap_or_else(|e| e.into_inner());
        pods.insert(pod.uid().to_string(), pod);
    }

    pub fn remove(&self, uid: &str) {
        let removed = self
            .pods
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        if let Some(pod) = removed {
            for r in &self.registrars {
                r.unregister_pod(&pod);
            }
        }
    }

    pub fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        self.pods
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .cloned()
    }

    pub fn uids(&self) -> HashSet<String> {
        self.pods
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The pod with this full name (`name_namespace`), if desired.
    pub fn get_by_full_name(&self, full_name: &str) -> Option<Arc<Pod>> {
        let pods = self.pods.read().unwrap_or_else(|e| e.into_inner());
        pods.values().find(|p| p.full_name() == full_name).cloned()
    }

    pub fn add_or_update_mirror(&self, pod: Arc<Pod>) {
        let mut m = self.mirrors.write().unwrap_or_else(|e| e.into_inner());
        m.insert(pod.full_name(), pod);
    }

    pub fn remove_mirror(&self, pod: &Pod) {
        let mut m = self.mirrors.write().unwrap_or_else(|e| e.into_inner());
        if m.get(&pod.full_name())
            .is_some_and(|p| p.uid() == pod.uid())
        {
            m.remove(&pod.full_name());
        }
    }

    /// The mirror pod of a static pod, if the API has one.
    pub fn mirror_of(&self, static_pod: &Pod) -> Option<Arc<Pod>> {
        let m = self.mirrors.read().unwrap_or_else(|e| e.into_inner());
        m.get(&static_pod.full_name()).cloned()
    }

    /// Mirror pods whose static pod is gone (upstream GetOrphanedMirrorPodNames).
    pub fn orphaned_mirrors(&self) -> Vec<Arc<Pod>> {
        let m = self.mirrors.read().unwrap_or_else(|e| e.into_inner());
        m.values()
            .filter(|mp| self.get_by_full_name(&mp.full_name()).is_none())
            .cloned()
            .collect()
    }
}

/// Whether `mirror` is the current mirror of `static_pod`: it carries the
/// static pod's config hash (upstream IsMirrorPodOf).
pub fn is_mirror_pod_of(mirror: &Pod, static_pod: &Pod) -> bool {
    mirror.full_name() == static_pod.full_name()
        && mirror.annotation(CONFIG_MIRROR_ANNOTATION).is_some()
        && mirror.annotation(CONFIG_MIRROR_ANNOTATION)
            == static_pod.annotation(CONFIG_HASH_ANNOTATION)
}
