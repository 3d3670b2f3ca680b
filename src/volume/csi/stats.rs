//! Volume usage from the drivers (upstream `csiMetricsProvider`): once per
//! `volumeStatsAggPeriod` the volume manager's thread asks every driver
//! with `GET_VOLUME_STATS` about each volume it has published, as futures
//! on the completion queue; `/stats/summary` and the
//! `kubelet_volume_stats_*` metrics read the last answers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use rkubelet_util::lock;

use super::{CsiPlugin, OpKind, OpState};
use crate::cri::csi::v1::csi;

/// One published volume's usage, as its driver last reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeUsage {
    pub pod_uid: String,
    /// The pod's name for the volume.
    pub volume: String,
    /// `(namespace, name)` of the claim of a PV-backed volume.
    pub claim: Option<(String, String)>,
    pub time: SystemTime,
    pub capacity_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub used_bytes: Option<u64>,
    pub inodes: Option<u64>,
    pub inodes_free: Option<u64>,
    pub inodes_used: Option<u64>,
}

/// What one stats call needs of a published volume.
pub(super) struct Published {
    target: PathBuf,
    pod_uid: String,
    volume: String,
    claim: Option<(String, String)>,
    handle: String,
    driver: String,
}

impl CsiPlugin {
    /// The last usage of the volumes of pod `uid`.
    pub fn usage_of(&self, uid: &str) -> Vec<VolumeUsage> {
        lock(&self.usage)
            .iter()
            .filter(|(_, u)| u.pod_uid == uid)
            .map(|(_, u)| u.clone())
            .collect()
    }

    /// The last usage of every volume backed by a claim (the metrics).
    pub fn claim_usage(&self) -> Vec<VolumeUsage> {
        lock(&self.usage)
            .iter()
            .filter(|(_, u)| u.claim.is_some())
            .map(|(_, u)| u.clone())
            .collect()
    }

    /// Asks the drivers once the stats period has passed since the last
    /// round; answers for volumes torn down meanwhile are dropped.
    pub fn refresh_usage(self: &Arc<Self>) {
        // upstream: a zero period turns volume stats off
        if self.stats_period.is_zero() {
            return;
        }
        {
            let mut at = lock(&self.stats_at);
            if at.is_some_and(|t| t.elapsed() < self.stats_period) {
                return;
            }
            *at = Some(Instant::now());
        }
        let published: Vec<Published> = lock(&self.ops)
            .iter()
            .filter(|o| matches!(o.state, OpState::Published { .. }))
            // (a block volume's usage is the device's, not a filesystem's)
            .filter(|o| !self.layout_of_key(&o.target).block)
            .filter_map(|o| {
                let m = o.mount()?;
                Some(Published {
                    target: o.target.clone(),
                    pod_uid: m.pod_uid.clone(),
                    volume: m.volume.clone(),
                    claim: m.claim.clone(),
                    handle: o.handle.clone(),
                    driver: o.driver.clone(),
                })
            })
            .collect();
        lock(&self.usage).retain(|(t, _)| published.iter().any(|p| p.target == *t));
        self.export_metrics();
        for p in published {
            let Some(driver) = self.driver(&p.driver).filter(|d| d.caps.volume_stats) else {
                continue;
            };
            let me = Arc::clone(self);
            let conn = driver.conn.clone();
            driver.conn.spawn(async move {
                let path = super::setup::target_path(&p.target);
                match conn.volume_stats(p.handle.clone(), path).await {
                    Ok(resp) => me.record_usage(p, &resp),
                    Err(e) => log::warn!("volume {} of pod {}: {e}", p.volume, p.pod_uid),
                }
            });
        }
    }

    pub(super) fn record_usage(&self, p: Published, resp: &csi::NodeGetVolumeStatsResponse) {
        if self.with_op(&p.target, OpKind::Mount, |_| ()).is_none() {
            return;
        }
        let mut u = VolumeUsage {
            pod_uid: p.pod_uid,
            volume: p.volume,
            claim: p.claim,
            time: SystemTime::now(),
            capacity_bytes: None,
            available_bytes: None,
            used_bytes: None,
            inodes: None,
            inodes_free: None,
            inodes_used: None,
        };
        let n = |v: i64| u64::try_from(v).ok();
        for usage in &resp.usage {
            use csi::volume_usage::Unit;
            match usage.unit.enum_value() {
                Ok(Unit::BYTES) => {
                    (u.capacity_bytes, u.available_bytes, u.used_bytes) =
                        (n(usage.total), n(usage.available), n(usage.used));
                }
                Ok(Unit::INODES) => {
                    (u.inodes, u.inodes_free, u.inodes_used) =
                        (n(usage.total), n(usage.available), n(usage.used));
                }
                _ => {}
            }
        }
        let mut all = lock(&self.usage);
        all.retain(|(t, _)| *t != p.target);
        all.push((p.target, u));
        drop(all);
        self.export_metrics();
    }

    /// `kubelet_volume_stats_*` for the volumes backed by a claim.
    fn export_metrics(&self) {
        let usage = self.claim_usage();
        let samples: Vec<crate::metrics::VolumeStatsSample<'_>> = usage
            .iter()
            .filter_map(|u| {
                let (ns, claim) = u.claim.as_ref()?;
                Some(crate::metrics::VolumeStatsSample {
                    namespace: ns,
                    claim,
                    values: [
                        u.capacity_bytes,
                        u.available_bytes,
                        u.used_bytes,
                        u.inodes,
                        u.inodes_free,
                        u.inodes_used,
                    ],
                })
            })
            .collect();
        crate::metrics::set_volume_stats(&samples);
    }
}

#[cfg(test)]
pub(super) fn tests_published(
    target: &std::path::Path,
    pod_uid: &str,
    volume: &str,
    claim: Option<(&str, &str)>,
    handle: &str,
    driver: &str,
) -> Published {
    Published {
        target: target.to_path_buf(),
        pod_uid: pod_uid.into(),
        volume: volume.into(),
        claim: claim.map(|(n, c)| (n.into(), c.into())),
        handle: handle.into(),
        driver: driver.into(),
    }
}
