//! Tear-down of a CSI volume (upstream `csiMountMgr.TearDownAt`,
//! `csiAttacher.UnmountDevice` and their block twins): unpublish, then
//! unstage when no other pod uses the volume, as one operation on the
//! completion-queue thread. Driver and handle come from `vol_data.json`,
//! so this works the same after a restart.

use std::path::Path;
use std::sync::Arc;

use rkubelet_util::lock;

use super::block::{self, Layout};
use super::setup::target_path;
use super::voldata::VolData;
use super::{
    not_registered, unique_volume_name, CsiPlugin, Driver, Op, OpKind, OpState, Work, CSI_DIR,
};
use crate::volume::VolumeError;

impl CsiPlugin {
    /// Tears down the CSI volume the volume manager knows by `key` (a
    /// filesystem volume's target, or a pod's link to a block device): its
    /// pod is gone. `Pending` while the driver is at it.
    pub fn tear_down(self: &Arc<Self>, key: &Path) -> Result<(), VolumeError> {
        if let Some(done) = self.tear_down_result(key) {
            return done;
        }
        let layout = self.layout_of_key(key);
        // A block volume's data outlives its pods; the pod's link is what
        // says this pod still has it.
        if layout.block && std::fs::symlink_metadata(key).is_err() {
            return Ok(());
        }
        let data = match VolData::load(&layout.pod_data) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Never published (or already torn down): only our files.
                lock(&self.ops).retain(|o| o.target != key);
                return match layout.block {
                    true => block::unlink_pod_device(&layout).map_err(VolumeError::Failed),
                    false => crate::volume::tear_down(&layout.pod_data),
                };
            }
            Err(e) => return Err(VolumeError::Failed(e.to_string())),
        };
        let Some(driver) = self.driver(&data.driver) else {
            return Err(VolumeError::NotFound(not_registered(&data.driver)));
        };
        let mut ops = lock(&self.ops);
        // One operation per volume: another pod's set-up of it finishes
        // first (its end wakes the reconciler), so an unstage cannot race it.
        let busy = ops.iter().any(|o| {
            o.target != key
                && o.driver == data.driver
                && o.handle == data.volume_handle
                && o.state == OpState::Running
        });
        if busy {
            return Err(VolumeError::Pending);
        }
        // A retry after a failure replaces the failed attempt's record.
        ops.retain(|o| !(o.target == key && o.kind() == OpKind::Unmount));
        ops.push(Op {
            target: key.to_path_buf(),
            handle: data.volume_handle.clone(),
            driver: data.driver.clone(),
            state: OpState::Running,
            in_use: data
                .mode
                .is_persistent()
                .then(|| unique_volume_name(&data.driver, &data.volume_handle)),
            work: Work::Unmount,
        });
        drop(ops);
        self.spawn_tear_down(driver, data, layout);
        Err(VolumeError::Pending)
    }

    /// The outcome of a tear-down started earlier, once it has one.
    fn tear_down_result(&self, key: &Path) -> Option<Result<(), VolumeError>> {
        let mut ops = lock(&self.ops);
        let i = ops
            .iter()
            .position(|o| o.target == key && o.kind() == OpKind::Unmount)?;
        Some(match ops[i].state.clone() {
            OpState::Running => Err(VolumeError::Pending),
            // Reported once; the record stays (the volume still in use)
            // until the retry replaces it.
            OpState::Failed(e) => {
                ops[i].state = OpState::Retry;
                Err(VolumeError::Failed(e))
            }
            OpState::Retry => return None,
            _ => {
                ops.remove(i);
                // its set-up's record goes too: no longer in use
                ops.retain(|o| o.target != key);
                Ok(())
            }
        })
    }

    fn spawn_tear_down(self: &Arc<Self>, driver: Driver, data: VolData, mut layout: Layout) {
        if !layout.block {
            let global = self.global_dir(&data.spec_vol_id);
            layout.staging = global.join("globalmount");
            layout.global_data = global;
        }
        let me = Arc::clone(self);
        let conn = driver.conn.clone();
        driver.conn.spawn(async move {
            let handle = data.volume_handle.clone();
            let mut result = conn
                .unpublish(handle.clone(), target_path(&layout.publish))
                .await;
            if result.is_ok() {
                result = match layout.block {
                    true => block::unlink_pod_device(&layout),
                    false => remove_unmounted(&layout.publish, &layout.pod_data),
                };
            }
            let others = match layout.block {
                true => me.other_block_users(&layout),
                false => me.other_users(&data, &layout.pod_data),
            };
            let last = result.is_ok() && !others;
            if last && data.mode.is_persistent() && driver.caps.stage_unstage {
                result = conn.unstage(handle, target_path(&layout.staging)).await;
                if result.is_ok() && !layout.block {
                    result = remove_unmounted(&layout.staging, &layout.global_data);
                }
            }
            if last && layout.block && result.is_ok() {
                result = block::remove_block_dirs(&layout);
            }
            match result {
                // Done: nothing is left to collect (the pod's directory
                // may be gone already), and the volume is no longer in use.
                Ok(()) => {
                    lock(&me.ops).retain(|o| o.target != layout.key);
                    me.wake();
                }
                Err(e) => me.set_state(&layout.key, OpKind::Unmount, OpState::Failed(e)),
            }
        });
    }

    /// Another pod's volume directory records the same volume.
    fn other_users(&self, data: &VolData, except: &Path) -> bool {
        let Ok(pods) = std::fs::read_dir(self.root_dir.join("pods")) else {
            return false;
        };
        pods.flatten().any(|pod| {
            let csi = pod.path().join("volumes").join(CSI_DIR);
            std::fs::read_dir(csi)
                .into_iter()
                .flatten()
                .flatten()
                .any(|v| {
                    v.path() != except
                        && VolData::load(&v.path()).is_ok_and(|d| {
                            d.driver == data.driver && d.volume_handle == data.volume_handle
                        })
                })
        })
    }
}

/// An error when the driver left `path` mounted although it answered.
pub(super) fn ensure_unmounted(path: &Path) -> Result<(), String> {
    match crate::volume::util::mount::is_mount_point(path).unwrap_or(false) {
        true => Err(format!(
            "{} is still mounted after the driver's answer",
            path.display()
        )),
        false => Ok(()),
    }
}

/// Removes `dir` once the driver has unmounted `mount_point` inside it.
pub(super) fn remove_unmounted(mount_point: &Path, dir: &Path) -> Result<(), String> {
    ensure_unmounted(mount_point)?;
    crate::volume::util::fs::remove_all_one_filesystem(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))
}
