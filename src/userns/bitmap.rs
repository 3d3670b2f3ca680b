//! The used-block bitmap (upstream pkg/registry/core/service/allocator
//! `AllocationBitmap` with its random-scan strategy): one bit per block of
//! 65536 IDs in the kubelet's range.

/// `max` bits, each set while its block belongs to a pod.
pub(super) struct Bitmap {
    words: Vec<u64>,
    max: usize,
    count: usize,
}

impl Bitmap {
    pub(super) fn new(max: usize) -> Self {
        Bitmap {
            words: vec![0; max.div_ceil(64)],
            max,
            count: 0,
        }
    }

    /// Whether block `i` is taken; a block outside the map never is.
    pub(super) fn has(&self, i: usize) -> bool {
        i < self.max && self.words[i / 64] & (1u64 << (i % 64)) != 0
    }

    /// Takes block `i`; false when it is outside the map or already taken.
    pub(super) fn allocate(&mut self, i: usize) -> bool {
        if i >= self.max || self.has(i) {
            return false;
        }
        self.words[i / 64] |= 1u64 << (i % 64);
        self.count += 1;
        true
    }

    /// Frees block `i`; nothing when it is outside the map or free.
    pub(super) fn release(&mut self, i: usize) {
        if !self.has(i) {
            return;
        }
        self.words[i / 64] &= !(1u64 << (i % 64));
        self.count -= 1;
    }

    /// Upstream `AllocateNext` with `randomScanStrategy`: the first free block
    /// at or after `start`, wrapping, among blocks below `limit`. Takes it.
    pub(super) fn allocate_next(&mut self, limit: usize, start: usize) -> Option<usize> {
        let limit = limit.min(self.max);
        if limit == 0 || self.count >= self.max {
            return None;
        }
        let start = start % limit;
        let free = (0..limit)
            .map(|k| (start + k) % limit)
            .find(|&i| !self.has(i))?;
        self.allocate(free).then_some(free)
    }

    /// How many blocks are taken.
    #[cfg(test)]
    pub(super) fn count(&self) -> usize {
        self.count
    }
}
