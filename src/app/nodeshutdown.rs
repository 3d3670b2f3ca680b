//! The node shutdown manager's dependencies on the running kubelet
//! (upstream NewMainKubelet's shutdown manager wiring).

use std::sync::Arc;

use anyhow::Context;
use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;

use crate::events::{EventRecorder, EventType, NODE_SHUTDOWN};
use crate::kubelet::{KilledStatus, Kubelet};
use crate::nodeshutdown::{self as ns, ShutdownDeps};
use crate::util::worker::Worker;

struct KubeletDeps {
    kubelet: Arc<Kubelet>,
    recorder: Arc<dyn EventRecorder>,
}

impl ShutdownDeps for KubeletDeps {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.kubelet.active_pods()
    }

    fn kill_pod(&self, pod: &Arc<Pod>, grace_seconds: i64) {
        self.kubelet.kill_pod_with_status(
            pod,
            grace_seconds,
            KilledStatus {
                reason: ns::NODE_SHUTDOWN_REASON,
                message: ns::NODE_SHUTDOWN_MESSAGE.into(),
                keep_succeeded: true,
            },
        );
    }

    /// The worker finished terminating it (upstream's killPodNow returns
    /// then). The cache is not enough: a container started a moment ago
    /// may not be in it yet.
    fn pod_stopped(&self, pod: &Pod) -> bool {
        use crate::podutil::PodExt;
        self.kubelet.pod_workers().is_terminated(pod.uid())
    }

    fn node_event(&self, message: &str) {
        self.recorder
            .node_event(EventType::Normal, NODE_SHUTDOWN, message);
    }

    fn sync_node_status(&self) {
        self.kubelet.runtime_state().node_status_changed();
    }
}

/// Starts the `node-shutdown` thread when a shutdown period is set.
pub(super) fn start_node_shutdown_manager(
    kubelet: &Arc<Kubelet>,
    recorder: &Arc<dyn EventRecorder>,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Option<Worker>> {
    let deps = KubeletDeps {
        kubelet: Arc::clone(kubelet),
        recorder: Arc::clone(recorder),
    };
    kubelet
        .node_shutdown()
        .start(Arc::new(deps), shutdown.clone())
        .context("spawn node-shutdown thread")
}
