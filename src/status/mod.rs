//! The status manager (upstream `pkg/kubelet/status`): the latest API
//! status of every pod, with the bookkeeping the API expects (startTime,
//! condition transition times that only move on a real transition).
//! Standalone there is nothing to push it to; the cluster mode's API sync
//! reads from here.

pub mod generate;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Pod, PodStatus};

use crate::podutil::PodExt;

#[derive(Default)]
pub struct StatusManager {
    statuses: Mutex<HashMap<String, PodStatus>>,
}

impl StatusManager {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PodStatus>> {
        self.statuses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a freshly generated status; returns whether it changed.
    pub fn set_pod_status(&self, pod: &Pod, mut status: PodStatus) -> bool {
        let mut all = self.lock();
        let old = all.get(pod.uid());
        status.start_time = old
            .and_then(|o| o.start_time.clone())
            .or_else(|| generate::to_time(SystemTime::now()));
        keep_transition_times(old, &mut status);
        if old == Some(&status) {
            return false;
        }
        all.insert(pod.uid().to_string(), status);
        true
    }

    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        self.lock().get(uid).cloned()
    }

    pub fn remove(&self, uid: &str) {
        self.lock().remove(uid);
    }
}

/// A condition whose status did not change keeps its old transition time.
fn keep_transition_times(old: Option<&PodStatus>, new: &mut PodStatus) {
    let Some(old_conds) = old.and_then(|o| o.conditions.as_ref()) else {
        return;
    };
    for c in new.conditions.iter_mut().flatten() {
        if let Some(prev) = old_conds
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
        {
            c.last_transition_time = prev.last_transition_time.clone();
        }
    }
}
