//! Image garbage collection (upstream `pkg/kubelet/images/image_gc_manager.go`).
//!
//! Each round lists the runtime's images and containers, remembers when each
//! image was first seen and last used, then:
//! - with `imageMaximumGCAge` set, removes images unused for longer than it;
//! - when the image filesystem is at or above `imageGCHighThresholdPercent`,
//!   removes unused images, least recently used first, until usage is back
//!   to `imageGCLowThresholdPercent`, skipping images younger than
//!   `imageMinimumGCAge`.
//!
//! In use means: the image of any container, running or not, or the pod
//! sandbox image (`--pod-infra-container-image`, which CRI runtimes pull on
//! their own). Images the runtime reports as pinned are never removed.
//! A high threshold of 100 turns the disk-usage part off, as upstream.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use std::fmt;

use crate::cri::{api, CriError, ImageService, RuntimeService};
use crate::events::{self, EventRecorder, EventType};
use crate::stats::{statvfs, FsInfo, StatsError};

/// Why an image GC round did not reach its goal. The event it records
/// depends on the cause, as upstream's do.
#[derive(Debug)]
pub enum ImageGcError {
    /// Listing images or containers failed at the runtime.
    Runtime {
        what: &'static str,
        source: CriError,
    },
    /// The runtime named no image filesystem, or statfs on it failed.
    ImageFs(String),
    /// The image filesystem reports a capacity of 0 (InvalidDiskCapacity).
    InvalidCapacity,
    /// Fewer bytes were eligible than had to go (FreeDiskSpaceFailed).
    Insufficient { to_free: u64, freed: u64 },
}

impl fmt::Display for ImageGcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageGcError::Runtime { what, source } => write!(f, "{what}: {source}"),
            ImageGcError::ImageFs(e) => write!(f, "image filesystem: {e}"),
            ImageGcError::InvalidCapacity => f.write_str("invalid capacity 0 on image filesystem"),
            ImageGcError::Insufficient { to_free, freed } => write!(
                f,
                "Failed to garbage collect required amount of images. \
                 Attempted to free {to_free} bytes, but only found {freed} bytes eligible to free."
            ),
        }
    }
}

impl std::error::Error for ImageGcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ImageGcError::Runtime { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ImageGcError {
    /// The node event upstream records for this failure.
    fn event_reason(&self) -> &'static str {
        match self {
            ImageGcError::InvalidCapacity => events::INVALID_DISK_CAPACITY,
            ImageGcError::Insufficient { .. } => events::FREE_DISK_SPACE_FAILED,
            ImageGcError::Runtime { .. } | ImageGcError::ImageFs(_) => events::IMAGE_GC_FAILED,
        }
    }
}

/// Upstream ImageGCPeriod.
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(5 * 60);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageGcPolicy {
    pub high_threshold_percent: i32,
    pub low_threshold_percent: i32,
    pub min_age: Duration,
    /// Zero: no maximum age.
    pub max_age: Duration,
}

impl ImageGcPolicy {
    pub fn from_kubelet_config(c: &crate::kubeletconfig::KubeletConfiguration) -> Self {
        ImageGcPolicy {
            high_threshold_percent: c.image_gc_high_threshold_percent,
            low_threshold_percent: c.image_gc_low_threshold_percent,
            min_age: c.image_minimum_gc_age.0,
            max_age: c.image_maximum_gc_age.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct ImageRecord {
    /// When this kubelet first listed the image. Images present at the
    /// first round count as seen long ago (upstream's "unknown past").
    first_detected: Instant,
    seen_at_start: bool,
    last_used: Option<Instant>,
    size: u64,
    pinned: bool,
}

impl ImageRecord {
    fn old_enough(&self, now: Instant, min_age: Duration) -> bool {
        self.seen_at_start || now.saturating_duration_since(self.first_detected) >= min_age
    }

    /// Time since last use (or, never used, since first seen).
    fn idle(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_used.unwrap_or(self.first_detected))
    }
}

#[derive(Default)]
struct State {
    records: HashMap<String, ImageRecord>,
    initialized: bool,
    last_run: Option<Instant>,
}

/// How the image filesystem's size is read: statvfs, or a fixed answer in
/// tests (a real disk's usage would make the thresholds untestable).
pub type StatFs = Box<dyn Fn(&Path) -> Result<FsInfo, StatsError> + Send + Sync>;

pub struct ImageGcManager {
    images: Arc<dyn ImageService>,
    /// For the images of containers, which are in use.
    runtime: Arc<dyn RuntimeService>,
    statfs: StatFs,
    policy: ImageGcPolicy,
    sandbox_image: String,
    recorder: Arc<dyn EventRecorder>,
    state: Mutex<State>,
}

impl ImageGcManager {
    pub fn new(
        images: Arc<dyn ImageService>,
        runtime: Arc<dyn RuntimeService>,
        policy: ImageGcPolicy,
        sandbox_image: String,
        recorder: Arc<dyn EventRecorder>,
    ) -> Self {
        ImageGcManager {
            images,
            runtime,
            statfs: Box::new(statvfs),
            policy,
            sandbox_image,
            recorder,
            state: Mutex::default(),
        }
    }

    /// Runs a round when none ran in the last [`IMAGE_GC_PERIOD`]; called
    /// from the GC thread's (more frequent) tick.
    pub fn maybe_garbage_collect(&self) {
        let now = Instant::now();
        let due = {
            let st = lock(&self.state);
            st.last_run
                .is_none_or(|t| now.saturating_duration_since(t) >= IMAGE_GC_PERIOD)
        };
        if !due {
            return;
        }
        if let Err(e) = self.garbage_collect(now) {
            log::warn!("image garbage collection failed: {e}");
            self.recorder
                .node_event(EventType::Warning, e.event_reason(), &e.to_string());
        }
        lock(&self.state).last_run = Some(now);
    }

    /// Removes every unused image old enough to go (upstream
    /// DeleteUnusedImages, which the eviction manager calls under disk
    /// pressure); returns the bytes freed.
    pub fn delete_unused_images(&self) -> Result<u64, ImageGcError> {
        let now = Instant::now();
        let in_use = self.detect_images(now)?;
        let freed = self.free_space(u64::MAX, now, &in_use);
        log::info!("image garbage collection for eviction freed {freed} bytes");
        Ok(freed)
    }

    fn garbage_collect(&self, now: Instant) -> Result<(), ImageGcError> {
        let in_use = self.detect_images(now)?;
        if !self.policy.max_age.is_zero() {
            self.free_old_images(now, &in_use);
        }
        if self.policy.high_threshold_percent >= 100 {
            return Ok(());
        }
        let (capacity, available) = self.image_fs()?;
        if capacity == 0 {
            return Err(ImageGcError::InvalidCapacity);
        }
        let usage = usage_percent(capacity, available);
        if usage < i64::from(self.policy.high_threshold_percent) {
            return Ok(());
        }
        let to_free = bytes_to_free(capacity, available, self.policy.low_threshold_percent);
        log::info!(
            "disk usage on image filesystem is {usage}%, over the high threshold ({}%): \
             trying to free {to_free} bytes down to the low threshold ({}%)",
            self.policy.high_threshold_percent,
            self.policy.low_threshold_percent
        );
        let freed = self.free_space(to_free, now, &in_use);
        if freed < to_free {
            return Err(ImageGcError::Insufficient { to_free, freed });
        }
        Ok(())
    }

    /// Updates the records from the runtime; returns the IDs in use.
    fn detect_images(&self, now: Instant) -> Result<HashSet<String>, ImageGcError> {
        let images = self
            .images
            .list_images()
            .map_err(|source| ImageGcError::Runtime {
                what: "listing images",
                source,
            })?;
        let containers =
            self.runtime
                .list_containers(None)
                .map_err(|source| ImageGcError::Runtime {
                    what: "listing containers",
                    source,
                })?;
        let mut in_use: HashSet<String> = containers.into_iter().map(|c| c.image_ref).collect();
        match self.images.image_status(&self.sandbox_image) {
            Ok(Some(img)) => {
                in_use.insert(img.id);
            }
            Ok(None) => {}
            Err(e) => log::debug!("status of sandbox image {}: {e}", self.sandbox_image),
        }
        let mut st = lock(&self.state);
        let first_round = !st.initialized;
        st.initialized = true;
        update_records(&mut st.records, &images, &in_use, now, first_round);
        Ok(in_use)
    }

    /// Removes unused images idle for longer than imageMaximumGCAge.
    fn free_old_images(&self, now: Instant, in_use: &HashSet<String>) {
        let victims: Vec<String> = {
            let st = lock(&self.state);
            eviction_order(&st.records, in_use)
                .into_iter()
                .filter(|(_, r)| r.idle(now) > self.policy.max_age)
                .map(|(id, _)| id.clone())
                .collect()
        };
        for id in victims {
            log::info!("removing image {id}: unused for longer than imageMaximumGCAge");
            self.remove(&id);
        }
    }

    /// Removes unused, old-enough images, least recently used first, until
    /// `to_free` bytes are freed; returns the bytes freed.
    fn free_space(&self, to_free: u64, now: Instant, in_use: &HashSet<String>) -> u64 {
        let candidates: Vec<(String, u64)> = {
            let st = lock(&self.state);
            eviction_order(&st.records, in_use)
                .into_iter()
                .filter(|(_, r)| r.old_enough(now, self.policy.min_age))
                .map(|(id, r)| (id.clone(), r.size))
                .collect()
        };
        let mut freed = 0u64;
        for (id, size) in candidates {
            if freed >= to_free {
                break;
            }
            log::info!("removing image {id} ({size} bytes) to free disk space");
            if self.remove(&id) {
                freed = freed.saturating_add(size);
            }
        }
        freed
    }

    fn remove(&self, id: &str) -> bool {
        match self.images.remove_image(id) {
            Ok(()) => {
                lock(&self.state).records.remove(id);
                true
            }
            Err(e) if e.is_not_found() => {
                lock(&self.state).records.remove(id);
                false
            }
            Err(e) => {
                log::warn!("removing image {id}: {e}");
                false
            }
        }
    }

    /// (capacity, available) of the first image filesystem.
    fn image_fs(&self) -> Result<(u64, u64), ImageGcError> {
        let info = self
            .images
            .image_fs_info()
            .map_err(|source| ImageGcError::Runtime {
                what: "image filesystem info",
                source,
            })?;
        let mount = crate::cri::image_fs_mountpoint(&info).ok_or_else(|| {
            ImageGcError::ImageFs("the runtime reported no image filesystem".into())
        })?;
        let fs =
            (self.statfs)(Path::new(&mount)).map_err(|e| ImageGcError::ImageFs(e.to_string()))?;
        Ok((fs.capacity, fs.available))
    }
}

fn update_records(
    records: &mut HashMap<String, ImageRecord>,
    images: &[api::Image],
    in_use: &HashSet<String>,
    now: Instant,
    first_round: bool,
) {
    let current: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
    records.retain(|id, _| current.contains(id.as_str()));
    for img in images {
        let r = records.entry(img.id.clone()).or_insert(ImageRecord {
            first_detected: now,
            seen_at_start: first_round,
            last_used: None,
            size: 0,
            pinned: false,
        });
        if in_use.contains(&img.id) {
            r.last_used = Some(now);
        }
        r.size = img.size;
        r.pinned = img.pinned;
    }
}

/// Unused, unpinned images, least recently used first (never used before
/// used), ties broken by first detection (upstream byLastUsedAndDetected).
fn eviction_order<'a>(
    records: &'a HashMap<String, ImageRecord>,
    in_use: &HashSet<String>,
) -> Vec<(&'a String, &'a ImageRecord)> {
    let mut v: Vec<_> = records
        .iter()
        .filter(|(id, r)| !in_use.contains(*id) && !r.pinned)
        .collect();
    v.sort_by(|a, b| {
        (a.1.last_used, !a.1.seen_at_start, a.1.first_detected, a.0).cmp(&(
            b.1.last_used,
            !b.1.seen_at_start,
            b.1.first_detected,
            b.0,
        ))
    });
    v
}

/// Upstream: 100 - available*100/capacity, in whole percent.
fn usage_percent(capacity: u64, available: u64) -> i64 {
    let avail_pct = u128::from(available) * 100 / u128::from(capacity.max(1));
    100 - i64::try_from(avail_pct).unwrap_or(100)
}

/// Bytes to free so that usage drops to `low` percent.
fn bytes_to_free(capacity: u64, available: u64, low: i32) -> u64 {
    let low = u128::try_from(low.clamp(0, 100)).unwrap_or(0);
    let target_available = u128::from(capacity) * (100 - low) / 100;
    u64::try_from(target_available.saturating_sub(u128::from(available))).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, size: u64, pinned: bool) -> api::Image {
        api::Image {
            id: id.into(),
            size,
            pinned,
            ..Default::default()
        }
    }

    fn ids(v: &[(&String, &ImageRecord)]) -> Vec<String> {
        v.iter().map(|(id, _)| (*id).clone()).collect()
    }

    #[test]
    fn usage_and_amount_follow_upstream_arithmetic() {
        // 100 GB disk, 10 GB free: 90% used; to reach 80% free 10 GB more.
        let gb = 1_000_000_000u64;
        assert_eq!(usage_percent(100 * gb, 10 * gb), 90);
        assert_eq!(bytes_to_free(100 * gb, 10 * gb, 80), 10 * gb);
        // Already under the low threshold: nothing to free.
        assert_eq!(bytes_to_free(100 * gb, 30 * gb, 80), 0);
        assert_eq!(usage_percent(100, 100), 0);
    }

    #[test]
    fn records_track_first_seen_last_used_and_drop_vanished_images() {
        let t0 = Instant::now();
        let mut rec = HashMap::new();
        let in_use: HashSet<String> = ["a".to_string()].into();
        update_records(
            &mut rec,
            &[image("a", 10, false), image("b", 20, false)],
            &in_use,
            t0,
            true,
        );
        assert!(rec["a"].seen_at_start && rec["a"].last_used == Some(t0));
        assert_eq!(rec["b"].last_used, None);

        let t1 = t0 + Duration::from_secs(60);
        update_records(
            &mut rec,
            &[image("a", 10, false), image("c", 30, true)],
            &HashSet::new(),
            t1,
            false,
        );
        assert!(!rec.contains_key("b"), "a removed image is forgotten");
        assert_eq!(rec["a"].last_used, Some(t0), "last use is kept");
        assert!(!rec["c"].seen_at_start && rec["c"].first_detected == t1);
        assert!(rec["c"].pinned);
    }

    #[test]
    fn eviction_skips_in_use_and_pinned_and_orders_by_last_use() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(10);
        let mut rec = HashMap::new();
        update_records(
            &mut rec,
            &[
                image("used-long-ago", 1, false),
                image("never-used", 1, false),
                image("in-use", 1, false),
                image("pinned", 1, true),
            ],
            &["used-long-ago".to_string(), "in-use".to_string()].into(),
            t0,
            true,
        );
        update_records(
            &mut rec,
            &[
                image("used-long-ago", 1, false),
                image("never-used", 1, false),
                image("in-use", 1, false),
                image("pinned", 1, true),
                image("new", 1, false),
            ],
            &["in-use".to_string()].into(),
            t1,
            false,
        );
        let order = eviction_order(&rec, &["in-use".to_string()].into());
        assert_eq!(ids(&order), vec!["never-used", "new", "used-long-ago"]);
    }

    #[test]
    fn min_age_protects_new_images_but_not_those_present_at_start() {
        let t0 = Instant::now();
        let mut rec = HashMap::new();
        update_records(
            &mut rec,
            &[image("old", 1, false)],
            &HashSet::new(),
            t0,
            true,
        );
        update_records(
            &mut rec,
            &[image("old", 1, false), image("new", 1, false)],
            &HashSet::new(),
            t0,
            false,
        );
        let min = Duration::from_secs(120);
        assert!(rec["old"].old_enough(t0, min));
        assert!(!rec["new"].old_enough(t0 + Duration::from_secs(119), min));
        assert!(rec["new"].old_enough(t0 + Duration::from_secs(120), min));
        assert_eq!(
            rec["new"].idle(t0 + Duration::from_secs(5)),
            Duration::from_secs(5)
        );
    }
}

#[cfg(test)]
#[path = "gc_tests.rs"]
mod manager_tests;
