//! The eviction manager's dependencies on the running kubelet (upstream
//! NewMainKubelet's eviction wiring): the stats summary, the kubepods
//! cgroup, the pod workers, image and container GC.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use crossbeam_channel::Receiver;
use k8s_openapi::api::core::v1::Pod;

use crate::events::EventType;
use crate::eviction::{DepsError, EvictionDeps, Manager, PodsCgroupMemory};
use crate::images::gc::ImageGcManager;
use crate::kubelet::Kubelet;
use crate::podutil::PodExt;
use crate::server::stats::types::{Summary, Time};
use crate::util::worker::Worker;

/// At most this many entries are walked to size one emptyDir.
const EMPTY_DIR_WALK_LIMIT: usize = 100_000;

struct KubeletDeps {
    kubelet: Arc<Kubelet>,
    image_gc: Arc<ImageGcManager>,
}

impl EvictionDeps for KubeletDeps {
    fn summary(&self, with_pods: bool) -> Result<Summary, DepsError> {
        let stats = self.kubelet.stats_provider();
        Ok(if with_pods {
            stats.summary(false)?
        } else {
            stats.eviction_node_summary()
        })
    }

    fn pods_cgroup_memory(&self) -> Option<PodsCgroupMemory> {
        let cm = self.kubelet.container_manager()?;
        let Some(m) = cm.kubepods_memory() else {
            log::debug!("eviction manager: kubepods memory unknown");
            return None;
        };
        Some(PodsCgroupMemory {
            limit: m.limit?,
            working_set: m.working_set,
            time: Time::now().0,
        })
    }

    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.kubelet.active_pods()
    }

    fn kill_pod(&self, pod: &Arc<Pod>, grace_seconds: i64, message: &str) -> Result<(), DepsError> {
        self.kubelet.evict_pod(pod, grace_seconds, message);
        Ok(())
    }

    fn record_eviction(&self, pod: &Pod, message: &str) {
        self.kubelet.runtime().recorder().pod_event(
            pod,
            EventType::Warning,
            crate::eviction::REASON,
            message,
        );
    }

    fn pod_cleaned_up(&self, pod: &Pod) -> bool {
        self.kubelet.pod_stopped(pod)
    }

    fn has_dedicated_image_fs(&self) -> Result<bool, DepsError> {
        let info = self
            .kubelet
            .runtime()
            .runtime()
            .image_fs_info()
            .map_err(DepsError::ImageFsInfo)?;
        let mount = crate::cri::image_fs_mountpoint(&info).ok_or(DepsError::NoImageFs)?;
        let dev = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.dev())
                .map_err(|error| DepsError::Stat {
                    path: p.to_owned(),
                    error,
                })
        };
        Ok(dev(Path::new(mount))? != dev(&self.kubelet.settings().root_dir)?)
    }

    fn delete_unused_images(&self) -> Result<(), DepsError> {
        self.image_gc.delete_unused_images()?;
        Ok(())
    }

    fn delete_all_unused_containers(&self) -> Result<(), DepsError> {
        let k = &self.kubelet;
        k.runtime()
            .garbage_collect(&k.pod_manager().uids(), k.sources_ready())
            .map_err(DepsError::ContainerGc)
    }

    fn empty_dir_usage(&self, pod: &Pod, volume: &str) -> Option<u64> {
        let dir = self
            .kubelet
            .settings()
            .root_dir
            .join("pods")
            .join(pod.uid())
            .join("volumes/kubernetes.io~empty-dir")
            .join(volume);
        crate::stats::fs::dir_usage_bounded(&dir, EMPTY_DIR_WALK_LIMIT)
    }
}

/// Starts the `eviction-manager` thread.
pub(super) fn start_eviction_manager(
    kubelet: &Arc<Kubelet>,
    image_gc: Arc<ImageGcManager>,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Worker> {
    let deps = KubeletDeps {
        kubelet: Arc::clone(kubelet),
        image_gc,
    };
    Arc::clone(kubelet.eviction())
        .start(Arc::new(deps), shutdown.clone())
        .context("spawn eviction-manager thread")
}

/// The manager from the configuration; an invalid threshold stops the
/// kubelet at start, as upstream's ParseThresholdConfig does.
pub(super) fn eviction_manager(
    config: &crate::kubeletconfig::KubeletConfiguration,
) -> anyhow::Result<Arc<Manager>> {
    if config.kernel_memcg_notification {
        log::warn!(
            "kernelMemcgNotification is set but not honoured by rkubelet; memory signals are polled every 10 s"
        );
    }
    let cfg = crate::eviction::Config::from_kubelet_config(config)
        .map_err(|e| anyhow::anyhow!("eviction thresholds: {e}"))?;
    Ok(Manager::new(cfg))
}
