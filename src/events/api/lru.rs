//! A small LRU map, the bounded caches client-go's correlator keeps.

use std::sync::Arc;

use super::*;

/// A map bounded to `cap` entries, evicting the least recently used. Each
/// key (an event's identity, about 165 bytes) is held once, shared by the
/// map and the order.
pub(super) struct Lru<V> {
    pub(super) map: HashMap<Arc<str>, (V, u64)>,
    /// Last-use tick → key, oldest first.
    pub(super) order: BTreeMap<u64, Arc<str>>,
    pub(super) tick: u64,
    pub(super) cap: usize,
}

impl<V> Lru<V> {
    pub(super) fn new(cap: usize) -> Lru<V> {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    /// Keeps only the entries whose key `keep` accepts.
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.map.retain(|k, _| keep(k));
        self.order.retain(|_, k| keep(k));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Marks `key` used now; returns whether it is present.
    pub(super) fn touch(&mut self, key: &str) -> bool {
        let tick = self.next_tick();
        let Some((_, used)) = self.map.get_mut(key) else {
            return false;
        };
        // The order holds the key under its last use: it moves to now.
        let last = std::mem::replace(used, tick);
        if let Some(stored) = self.order.remove(&last) {
            self.order.insert(tick, stored);
        }
        true
    }

    pub(super) fn get(&mut self, key: &str) -> Option<&V> {
        if !self.touch(key) {
            return None;
        }
        self.map.get(key).map(|(v, _)| v)
    }

    pub(super) fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.touch(key) {
            return self.insert(key.to_string(), make());
        }
        // Present (just touched): the closure never runs.
        let tick = self.tick;
        &mut self
            .map
            .entry(Arc::from(key))
            .or_insert_with(|| (make(), tick))
            .0
    }

    pub(super) fn insert(&mut self, key: String, value: V) -> &mut V {
        let key: Arc<str> = Arc::from(key);
        let tick = self.next_tick();
        match self.map.get(&key) {
            Some((_, used)) => {
                self.order.remove(used);
            }
            None => {
                while self.map.len() >= self.cap {
                    let Some((_, oldest)) = self.order.pop_first() else {
                        break;
                    };
                    self.map.remove(&oldest);
                }
            }
        }
        self.order.insert(tick, key.clone());
        match self.map.entry(key) {
            Entry::Occupied(o) => {
                let slot = o.into_mut();
                *slot = (value, tick);
                &mut slot.0
            }
            Entry::Vacant(v) => &mut v.insert((value, tick)).0,
        }
    }
}
