//! The volume manager (upstream `pkg/kubelet/volumemanager`): keeps the
//! volumes of admitted pods set up and tears down those of pods that are
//! gone. Desired and actual state live in [`cache`]; the reconciler runs on
//! the manager's own thread (`volume-manager`), woken when a pod arrives or
//! a watched object changes, and every [`RECONCILE_PERIOD`] otherwise.
//!
//! Pod workers never set volumes up themselves: they ask
//! [`VolumeManager::wait_for_attach_and_mount`], which waits a short,
//! bounded time and otherwise reports which volumes are missing, so a
//! missing ConfigMap holds up only its own pod. When the last volume of a
//! waiting pod is set up, the pod is re-queued for sync.

pub mod cache;
pub mod host;
mod reconciler;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};
use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use crate::events::EventRecorder;
use crate::podutil::PodExt;
use crate::util::manager::ObjectRef;
use crate::volume::{MountedVolume, VolumeHost};
use cache::{DesiredPod, MountWait, State};

/// How often the reconciler runs when nothing wakes it.
pub const RECONCILE_PERIOD: Duration = Duration::from_secs(2);
/// Upstream FailedMount event reason.
pub const FAILED_MOUNT: &str = "FailedMount";

/// Called with a pod UID when all its volumes became set up.
pub type PodReadyFn = Box<dyn Fn(&str) + Send + Sync>;

pub struct VolumeManager {
    state: Mutex<State>,
    changed: Condvar,
    wake: Sender<()>,
    wake_rx: Receiver<()>,
    host: Arc<dyn VolumeHost>,
    root_dir: PathBuf,
    recorder: Arc<dyn EventRecorder>,
    on_pod_ready: PodReadyFn,
    /// The pods' directories left on disk have been looked at once
    /// (upstream ReconcilerStatesHasBeenSynced): until then the volumes in
    /// use are not known, and node status leaves `volumesInUse` alone.
    synced: std::sync::atomic::AtomicBool,
    /// The active set the last orphaned-directory scan found no orphan
    /// for, and when it ran (as the pod cgroups' `clean_for`). Housekeeping
    /// asks every 2 s, and a directory only becomes an orphan when its pod
    /// leaves the active set, so an unchanged set needs no new scan. Once a
    /// minute the scan runs anyway: a pod that came and went between two
    /// housekeepings leaves the set as it was.
    orphans_clean_for: Mutex<Option<(HashSet<String>, Instant)>>,
}

/// How long an unchanged active set skips the orphaned-directory scan.
const ORPHAN_RESCAN: Duration = Duration::from_secs(60);

/// Upstream's podAttachAndMountTimeout: how long a pod sync waits on its
/// volumes before it reports them.
pub const ATTACH_AND_MOUNT_TIMEOUT: Duration = Duration::from_secs(123);

/// Why a pod's volumes are not ready: what the FailedMount event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountWaitError {
    pub unmounted: Vec<String>,
    pub errors: Vec<(String, String)>,
    /// The pod has waited [`ATTACH_AND_MOUNT_TIMEOUT`] since it was last
    /// reported: upstream's sync would time out and post the event now.
    pub report: bool,
}

impl std::fmt::Display for MountWaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unmounted volumes=[{}], unattached volumes=[]",
            self.unmounted.join(" ")
        )?;
        for (vol, e) in &self.errors {
            write!(f, "; volume {vol:?}: {e}")?;
        }
        if self.errors.is_empty() {
            f.write_str(": timed out waiting for the condition")?;
        }
        Ok(())
    }
}

impl VolumeManager {
    pub fn new(
        host: Arc<dyn VolumeHost>,
        root_dir: PathBuf,
        recorder: Arc<dyn EventRecorder>,
        on_pod_ready: PodReadyFn,
    ) -> Arc<Self> {
        // One pending wake-up is enough: the reconciler looks at all pods.
        let (wake, wake_rx) = bounded(1);
        if let Some(csi) = host.csi() {
            let wake = wake.clone();
            csi.set_wake(Box::new(move || {
                let _ = wake.try_send(());
            }));
        }
        Arc::new(VolumeManager {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            wake,
            wake_rx,
            host,
            root_dir,
            recorder,
            on_pod_ready,
            synced: std::sync::atomic::AtomicBool::new(false),
            orphans_clean_for: Mutex::new(None),
        })
    }

    fn wake(&self) {
        let _ = self.wake.try_send(());
    }

    /// A status-only change of a desired pod: hold the newest copy (same
    /// spec, so same volumes) and free the older one. Wakes nothing.
    pub fn refresh_pod(&self, pod: &Arc<Pod>) {
        if let Some(d) = lock(&self.state).desired.get_mut(pod.uid()) {
            d.pod = Arc::clone(pod);
        }
    }

    /// Upstream WaitForAttachAndMount: adds the pod to the desired state,
    /// marks its content volumes for a rewrite, and waits at most `timeout`
    /// for every volume to be set up.
    pub fn wait_for_attach_and_mount(
        &self,
        pod: &Arc<Pod>,
        timeout: Duration,
    ) -> Result<(), MountWaitError> {
        let uid = pod.uid().to_string();
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        // A wait goes on across syncs until the volumes are ready.
        let waiting = st
            .desired
            .get(&uid)
            .and_then(|d| d.waiting)
            .or(Some(MountWait {
                since: Instant::now(),
                reported: None,
            }));
        st.desired.insert(
            uid.clone(),
            DesiredPod {
                pod: Arc::clone(pod),
                remount: true,
                waiting,
            },
        );
        self.wake();
        loop {
            let unmounted = st.unmounted_volumes(&uid, pod);
            let now = Instant::now();
            let Some(desired) = st.desired.get_mut(&uid) else {
                return Ok(());
            };
            if unmounted.is_empty() {
                desired.waiting = None;
                return Ok(());
            }
            if now >= deadline {
                let report = desired
                    .waiting
                    .as_mut()
                    .is_some_and(|w| w.due(now, ATTACH_AND_MOUNT_TIMEOUT));
                let errors = st
                    .errors_of(&uid)
                    .into_iter()
                    .map(|(v, e)| (v, e.to_string()))
                    .collect();
                return Err(MountWaitError {
                    unmounted,
                    errors,
                    report,
                });
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The set-up volumes of a pod, by volume name (upstream
    /// GetMountedVolumesForPod), for the container mounts.
    pub fn get_mounted_volumes_for_pod(&self, uid: &str) -> HashMap<String, MountedVolume> {
        lock(&self.state)
            .actual
            .get(uid)
            .cloned()
            .unwrap_or_default()
    }

    /// The pod is gone or terminated: its volumes are torn down by the
    /// reconciler. Waits at most `timeout` for that; returns whether the
    /// pod has no volumes left.
    pub fn remove_pod(&self, uid: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.state);
        st.desired.remove(uid);
        st.failures.retain(|(u, _), _| u != uid);
        self.wake();
        loop {
            if !st.actual.contains_key(uid) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Whether the manager still has volumes of this pod set up.
    pub fn pod_volumes_exist(&self, uid: &str) -> bool {
        let st = lock(&self.state);
        st.actual.contains_key(uid) || st.desired.contains_key(uid)
    }

    /// A watched object changed: every pod that uses it gets its content
    /// volumes rewritten at once (rather than at its next periodic sync).
    /// Whether there were any.
    fn mark_remount(&self, uses: &dyn Fn(&Pod) -> bool) -> bool {
        let mut st = lock(&self.state);
        let mut any = false;
        let uids: Vec<String> = st
            .desired
            .iter()
            .filter(|(_, d)| uses(&d.pod))
            .map(|(u, _)| u.clone())
            .collect();
        for uid in uids {
            if let Some(d) = st.desired.get_mut(&uid) {
                d.remount = true;
                any = true;
            }
            st.clear_backoff(&uid);
        }
        any
    }

    /// Housekeeping (upstream cleanupOrphanedPodDirs): directories under
    /// `<root>/pods` of pods that are neither active nor known here are torn
    /// down (volumes unmounted, even those left by a killed kubelet) and
    /// removed without crossing into another filesystem.
    pub fn cleanup_orphaned_pod_dirs(&self, active: &HashSet<String>) {
        let unchanged = lock(&self.orphans_clean_for)
            .as_ref()
            .is_some_and(|(pods, at)| pods == active && at.elapsed() < ORPHAN_RESCAN);
        if unchanged {
            return;
        }
        let pods_dir = self.root_dir.join("pods");
        let Ok(entries) = std::fs::read_dir(&pods_dir) else {
            return;
        };
        let mut clean = true;
        for entry in entries.flatten() {
            let uid = entry.file_name().to_string_lossy().into_owned();
            if active.contains(&uid) {
                continue;
            }
            clean = false;
            if self.pod_volumes_exist(&uid) {
                continue;
            }
            let dir = entry.path();
            match remove_pod_dir(&dir, self.host.csi()) {
                Ok(()) => log::info!("removed orphaned pod directory {}", dir.display()),
                Err(e) => log::warn!("orphaned pod directory {}: {e}", dir.display()),
            }
        }
        // (a directory found, even one removed now, is looked for again)
        *lock(&self.orphans_clean_for) = clean.then(|| (active.clone(), Instant::now()));
        // (their CSI volumes are now being torn down, and so in use)
        let first = !self.synced.swap(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(csi) = self.host.csi().filter(|_| first) {
            csi.kick_status();
        }
    }

    /// The persistent volumes in use (node status `volumesInUse`); None
    /// until the pods' directories left on disk have been looked at, as
    /// upstream reports nothing before its states are synced: a volume of
    /// a pod deleted while the kubelet was down must not look unused.
    pub fn volumes_in_use(&self) -> Option<Vec<String>> {
        if !self.synced.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let Some(csi) = self.host.csi() else {
            return Some(Vec::new());
        };
        {
            // (a set-up may have raced with its pod's removal)
            let st = lock(&self.state);
            csi.retain_wanted(|uid| st.desired.contains_key(uid));
        }
        Some(csi.volumes_in_use())
    }

    /// [`remove_pod_dir`] with this manager's CSI plugin.
    pub fn remove_pod_dir(&self, dir: &Path) -> Result<(), RemovePodDirError> {
        remove_pod_dir(dir, self.host.csi())
    }

    /// Runs the reconciler until `shutdown` closes. `object_changes` are
    /// the watched Secrets and ConfigMaps that changed: the pods that use
    /// one get their volumes rewritten now rather than at their next sync.
    /// A channel, since the managers that send them are made before this
    /// manager (its volume host reads through them).
    pub fn run(self: &Arc<Self>, shutdown: &Receiver<()>, object_changes: &Receiver<ObjectRef>) {
        let ticker = crossbeam_channel::tick(RECONCILE_PERIOD);
        let mut changes = object_changes.clone();
        loop {
            self.reconcile();
            if let Some(csi) = self.host.csi() {
                csi.refresh_usage();
            }
            loop {
                crossbeam_channel::select! {
                    recv(self.wake_rx) -> _ => break,
                    recv(ticker) -> _ => break,
                    recv(changes) -> obj => match obj {
                        Ok(obj) => if self.mark_remount(&|pod| uses_object(pod, &obj)) {
                            break;
                        },
                        // The watches are gone: nothing more comes.
                        Err(_) => changes = crossbeam_channel::never(),
                    },
                    recv(shutdown) -> _ => return,
                }
            }
        }
    }

    fn pod_ready(&self, uid: &str) {
        (self.on_pod_ready)(uid);
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }
}

/// Whether `pod` uses the Secret or ConfigMap `obj` names.
fn uses_object(pod: &Pod, obj: &ObjectRef) -> bool {
    pod.namespace() == obj.namespace
        && match obj.kind {
            "Secret" => crate::secret::referenced_secret_names(pod).contains(&obj.name),
            _ => crate::configmap::referenced_config_map_names(pod).contains(&obj.name),
        }
}

impl crate::kuberuntime::PodVolumes for VolumeManager {
    fn mounted_volumes(&self, pod_uid: &str) -> HashMap<String, MountedVolume> {
        self.get_mounted_volumes_for_pod(pod_uid)
    }
}

/// Why a pod's directory could not be removed.
#[derive(Debug, thiserror::Error)]
pub enum RemovePodDirError {
    #[error(transparent)]
    TearDown(#[from] crate::volume::VolumeError),
    #[error(transparent)]
    Remove(#[from] std::io::Error),
}

/// Unmounts every volume directory of a pod, then removes the pod's
/// directory on its own filesystem only. CSI volumes are unpublished by
/// their driver (reconstructed from `vol_data.json`); until that is done
/// the directory stays and this fails with `Pending`.
pub fn remove_pod_dir(
    dir: &Path,
    csi: Option<&Arc<crate::volume::csi::CsiPlugin>>,
) -> Result<(), RemovePodDirError> {
    // the pod's links to CSI block devices: each unpublished by its driver
    let links = dir
        .join(crate::volume::csi::block::POD_DEVICES_DIR)
        .join(crate::volume::csi::CSI_DIR);
    if let (Ok(links), Some(csi)) = (std::fs::read_dir(&links), csi) {
        for link in links.flatten() {
            csi.tear_down(&link.path())?;
        }
    }
    let volumes = dir.join("volumes");
    if let Ok(plugins) = std::fs::read_dir(&volumes) {
        for plugin in plugins.flatten() {
            let Ok(vols) = std::fs::read_dir(plugin.path()) else {
                continue;
            };
            let is_csi = plugin.file_name() == crate::volume::csi::CSI_DIR;
            for vol in vols.flatten() {
                match csi.filter(|_| is_csi) {
                    Some(csi) => csi.tear_down(&vol.path().join("mount"))?,
                    None => crate::volume::tear_down(&vol.path())?,
                }
            }
        }
    }
    Ok(crate::volume::util::fs::remove_all_one_filesystem(dir)?)
}

#[cfg(test)]
mod tests;
