//! Giving the heap's free pages back to the kernel.
//!
//! glibc's malloc keeps what a thread frees inside that thread's arena and
//! returns memory to the kernel only from the top of a heap. A burst of pod
//! starts on the pod workers, the watch threads and gRPC's pollers leaves
//! free holes in every arena that count in the RSS long after. Go's runtime
//! has a background scavenger for this, so upstream's kubelet gets it for
//! free; housekeeping asks glibc instead: `malloc_trim(0)` walks every arena
//! and `madvise(MADV_DONTNEED)`s the whole pages inside its free chunks.
//! (make bench, cluster mode: about 1 MB less RSS at 90 pods.)
//!
//! musl's malloc (the static build) unmaps free groups by itself and has no
//! `malloc_trim`; there this is a no-op.
//!
//! The other half of the RSS is the executable's own code and read-only
//! data, mapped from its file: see [`code`].

mod code;
pub use code::IdleCodeTrimmer;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rkubelet_util::lock;

/// The trimmers' cadence: due once a period has passed since the last
/// time it was due, the first time one period after it was made.
struct Period {
    period: Duration,
    last: Mutex<Instant>,
}

impl Period {
    fn new(period: Duration) -> Self {
        Self {
            period,
            last: Mutex::new(Instant::now()),
        }
    }

    /// Whether it is due now, or `anyway`; when it is, the next period
    /// starts now.
    fn due(&self, anyway: bool) -> bool {
        let mut last = lock(&self.last);
        if !anyway && last.elapsed() < self.period {
            return false;
        }
        *last = Instant::now();
        true
    }
}

/// Releases the heap's free pages (`release_free_heap`) when pods went,
/// and otherwise at most once a period. A trim walks every arena's bins
/// and gives back the top of each heap, which the next second's work
/// faults in again: every 2 s it cost about a fifth of an idle sync
/// loop's CPU, while what an idle node frees meanwhile is a few pages.
pub struct HeapTrimmer(Period);

impl HeapTrimmer {
    /// The first trim without pods going comes one period after this.
    pub fn new(period: Duration) -> Self {
        Self(Period::new(period))
    }

    /// Trims when `pods_went` or a period has passed since the last trim;
    /// true when it trimmed.
    pub fn maybe_release(&self, pods_went: bool) -> bool {
        if !self.0.due(pods_went) {
            return false;
        }
        release_free_heap();
        true
    }
}

/// Sets glibc's malloc up for a mostly idle process with a fixed set of
/// threads, before any thread starts. An operator's own setting of either
/// (MALLOC_ARENA_MAX, GLIBC_TUNABLES) wins.
///
/// - At most two arenas. glibc gives each thread that meets a busy arena a
///   new one, up to 8 per core, and every arena keeps its own free memory;
///   each thread's cache (tcache) keeps the common small allocations off
///   the arenas' locks anyway.
/// - No fastbins (`M_MXFAST` 0). A small chunk freed past the tcache then
///   merges with its neighbours at once, instead of waiting in a fastbin
///   until the next large request consolidates them all. Every CRI call
///   makes such a request (gRPC's call arena), and the relist frees a few
///   hundred small strings each second, so that consolidation was about a
///   fifth of PLEG's idle CPU (docs/performance.md).
#[cfg(target_env = "gnu")]
pub fn tune_malloc() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; called from main
        // before any other thread exists.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if !tunables.contains("glibc.malloc.mxfast") {
        // SAFETY: as above.
        unsafe { libc::mallopt(libc::M_MXFAST, 0) };
    }
}

/// musl: one allocator state for all threads already, and no fastbins.
#[cfg(not(target_env = "gnu"))]
pub fn tune_malloc() {}

/// Returns the free pages of every malloc arena to the kernel. True when
/// glibc released any memory.
#[cfg(target_env = "gnu")]
pub fn release_free_heap() -> bool {
    // SAFETY: malloc_trim takes each arena's own lock, and is safe to call
    // from any thread at any time.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// musl: nothing to do (see the module's comment).
#[cfg(not(target_env = "gnu"))]
pub fn release_free_heap() -> bool {
    false
}

#[cfg(test)]
mod trimmer_tests {
    use super::*;

    #[test]
    fn the_heap_is_trimmed_when_pods_went_or_a_period_passed() {
        let t = HeapTrimmer::new(Duration::from_secs(3600));
        assert!(!t.maybe_release(false), "within the period, nothing went");
        assert!(t.maybe_release(true), "a pod went");
        assert!(!t.maybe_release(false));
        let t = HeapTrimmer::new(Duration::ZERO);
        assert!(t.maybe_release(false), "the period passed");
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    use super::*;

    /// Resident pages of this process, from /proc/self/statm.
    fn rss_bytes() -> u64 {
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .expect("rss");
        pages * 4096
    }

    #[test]
    fn free_pages_in_the_middle_of_an_arena_go_back_to_the_kernel() {
        // In a thread of its own, so the blocks come from that thread's
        // arena (other tests' threads may share it, hence the margin below).
        let dropped = std::thread::spawn(|| {
            const MB: usize = 1 << 20;
            // 32 MB of 16 KB blocks (under glibc's mmap threshold, so from
            // the arena), each written so it is resident, then one block
            // after them that stays: the 32 MB freed below are a hole in
            // the middle of the heap, which glibc does not trim by itself.
            let blocks: Vec<Vec<u8>> = (0..(32 * MB / 16384)).map(|_| vec![1u8; 16384]).collect();
            let pin = vec![2u8; 16384];
            // (so that the optimiser keeps the blocks it could elide)
            std::hint::black_box((&blocks, &pin));
            drop(blocks);
            let before = rss_bytes();
            assert!(release_free_heap(), "malloc_trim released nothing");
            let after = rss_bytes();
            drop(pin);
            before.saturating_sub(after)
        })
        .join()
        .expect("test thread");
        // Other tests run beside this one and allocate too: half the hole
        // is the margin.
        assert!(dropped >= 16 << 20, "RSS fell by only {dropped} bytes");
    }
}
