//! The reconciler (upstream `volumemanager/reconciler`): one pass brings
//! the actual state towards the desired one. Tear-downs first, so a pod
//! that is gone frees its tmpfs before new pods are set up.

use std::time::Instant;

use rkubelet_util::lock;

use super::{VolumeManager, FAILED_MOUNT};
use crate::events::EventType;
use crate::volume::{self, PluginKind, SetUpContext, VolumeError};

impl VolumeManager {
    pub(super) fn reconcile(&self) {
        self.unmount_removed_pods();
        self.mount_desired_volumes();
    }

    fn unmount_removed_pods(&self) {
        let to_unmount = lock(&self.state).pods_to_unmount();
        for (uid, volumes) in to_unmount {
            let mut clean = true;
            for mv in &volumes {
                // Host paths are the node's, never ours to remove; an
                // image volume has nothing on the node.
                if matches!(
                    mv.kind,
                    PluginKind::HostPath | PluginKind::PersistentVolumeClaim | PluginKind::Image
                ) {
                    continue;
                }
                let result = match (mv.kind, self.host.csi()) {
                    (PluginKind::Csi, Some(csi)) => csi.tear_down(&mv.host_path),
                    _ => volume::tear_down(&mv.host_path),
                };
                match result {
                    Ok(()) => {}
                    Err(VolumeError::Pending) => clean = false,
                    Err(e) => {
                        log::warn!("pod {uid}: tear down {}: {e}", mv.host_path.display());
                        clean = false;
                    }
                }
            }
            if clean {
                let mut st = lock(&self.state);
                // A pod that came back meanwhile keeps its entry.
                if !st.desired.contains_key(&uid) {
                    st.actual.remove(&uid);
                }
                drop(st);
                self.changed.notify_all();
                log::debug!("pod {uid}: volumes torn down");
            }
        }
    }

    fn mount_desired_volumes(&self) {
        let work = {
            let mut st = lock(&self.state);
            let work = st.volumes_to_mount(Instant::now());
            for d in st.desired.values_mut() {
                d.remount = false;
            }
            work
        };
        for (uid, pod, names) in work {
            let pod_dir = self.pod_dir(&uid);
            let ctx = SetUpContext {
                pod: &pod,
                pod_dir: &pod_dir,
                host: &*self.host,
            };
            let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
            let was_ready = lock(&self.state).unmounted_volumes(&uid, &pod).is_empty();
            for name in names {
                let Some(vol) = volumes.into_iter().flatten().find(|v| v.name == name) else {
                    continue;
                };
                let result = volume::set_up(&ctx, vol);
                let mut st = lock(&self.state);
                match result {
                    Ok(mv) => st.record_mounted(&uid, &name, mv),
                    // The driver is at it; its end wakes the reconciler.
                    Err(VolumeError::Pending) => {}
                    Err(e) => {
                        let first = !st.failures.contains_key(&(uid.clone(), name.clone()));
                        st.record_failure(&uid, &name, e.clone(), Instant::now());
                        drop(st);
                        if first {
                            log::warn!("pod {uid}: volume {name:?}: {e}");
                        }
                        self.recorder.pod_event(
                            &pod,
                            EventType::Warning,
                            FAILED_MOUNT,
                            &format!("MountVolume.SetUp failed for volume {name:?} : {e}"),
                        );
                    }
                }
            }
            let ready = lock(&self.state).unmounted_volumes(&uid, &pod).is_empty();
            self.changed.notify_all();
            if ready && !was_ready {
                self.pod_ready(&uid);
            }
        }
    }
}
