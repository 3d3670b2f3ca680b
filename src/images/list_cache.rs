//! The image list node status reports (upstream's `imageCache` in
//! image_gc_manager.go): listed from the runtime at most once a period,
//! 30 s as upstream, not at every status update (10 s).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use crate::nodestatus::ImageInfo;

/// How long a listing of the images is reported (upstream refreshes its
/// image cache every 30 s).
pub const IMAGE_LIST_PERIOD: Duration = Duration::from_secs(30);

/// The last listing of the node's images, and when it was made.
pub struct ImageListCache {
    period: Duration,
    last: Mutex<Option<(Instant, Vec<ImageInfo>)>>,
}

impl ImageListCache {
    pub fn new(period: Duration) -> Self {
        ImageListCache {
            period,
            last: Mutex::new(None),
        }
    }

    /// The images: the last listing while it is younger than the period,
    /// else a new one from `list`. A failed listing is logged; the last
    /// list (empty before the first) is reported and the listing is tried
    /// again at the next call.
    pub fn get<E: std::fmt::Display>(
        &self,
        list: impl FnOnce() -> Result<Vec<ImageInfo>, E>,
    ) -> Vec<ImageInfo> {
        let mut last = lock(&self.last);
        if let Some((at, images)) = last.as_ref() {
            if at.elapsed() < self.period {
                return images.clone();
            }
        }
        match list() {
            Ok(images) => {
                *last = Some((Instant::now(), images.clone()));
                images
            }
            Err(e) => {
                log::debug!("node status: list images: {e}");
                last.as_ref().map(|(_, i)| i.clone()).unwrap_or_default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn image(name: &str) -> ImageInfo {
        ImageInfo {
            names: vec![name.into()],
            size_bytes: 1,
        }
    }

    #[test]
    fn lists_once_a_period_and_keeps_the_last_list_through_a_failure() {
        let calls = Cell::new(0);
        let ok = |name: &'static str| {
            let calls = &calls;
            move || -> Result<Vec<ImageInfo>, String> {
                calls.set(calls.get() + 1);
                Ok(vec![image(name)])
            }
        };
        let cache = ImageListCache::new(Duration::from_secs(3600));
        assert_eq!(cache.get(ok("a")), [image("a")]);
        assert_eq!(cache.get(ok("b")), [image("a")], "within the period");
        assert_eq!(calls.get(), 1);

        let stale = ImageListCache::new(Duration::ZERO);
        assert_eq!(stale.get(ok("a")), [image("a")]);
        assert_eq!(stale.get(ok("b")), [image("b")], "listed again");
        let failed = stale.get(|| -> Result<Vec<ImageInfo>, String> { Err("down".into()) });
        assert_eq!(failed, [image("b")], "the last list stays");
        assert_eq!(stale.get(ok("c")), [image("c")], "tried again");
        let fresh = ImageListCache::new(Duration::from_secs(3600));
        let none = fresh.get(|| -> Result<Vec<ImageInfo>, String> { Err("down".into()) });
        assert!(none.is_empty());
        assert_eq!(fresh.get(ok("d")), [image("d")], "a failure is not kept");
    }
}
