//! In-memory storage with etcd-like semantics: one global, strictly increasing
//! resourceVersion (one per write), a bounded event history for watch resume,
//! a condvar that wakes watchers on every write, and an optional append-only
//! log so that a restarted double keeps its objects and revision counter.

use crate::resources;
use crate::util::{name_of, namespace_of};
use rkubelet_util::lock;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(&self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub key: &'static str,
    pub etype: EventType,
    /// The new state (for DELETED: the last state, carrying the deletion revision).
    pub obj: Arc<Value>,
    /// The previous state, for MODIFIED (selector transitions).
    pub prev: Option<Arc<Value>>,
    json: OnceLock<String>,
}

impl Event {
    /// The object serialised once and shared by all watchers.
    pub fn obj_json(&self) -> &str {
        self.json
            .get_or_init(|| serde_json::to_string(&*self.obj).unwrap_or_else(|_| "{}".into()))
    }
}

type Objects = BTreeMap<(String, String), Arc<Value>>;

pub struct Inner {
    pub rv: u64,
    data: HashMap<&'static str, Objects>,
    pub history: VecDeque<Arc<Event>>,
    /// Every event with rv > history_start is in `history`.
    pub history_start: u64,
    cap: usize,
    /// Bumped to end every open watch (fault injection).
    pub epoch: u64,
    wal: Option<BufWriter<File>>,
    cond: Arc<Condvar>,
}

pub struct Store {
    inner: Mutex<Inner>,
    pub cond: Arc<Condvar>,
}

impl Store {
    pub fn new(history_cap: usize, wal: Option<PathBuf>) -> Store {
        let cond = Arc::new(Condvar::new());
        let mut inner = Inner {
            rv: 0,
            data: HashMap::new(),
            history: VecDeque::new(),
            history_start: 0,
            cap: history_cap.max(1),
            epoch: 0,
            wal: None,
            cond: cond.clone(),
        };
        if let Some(path) = wal {
            inner.load_wal(&path);
            inner.wal = compact_and_open(&path, &inner);
        }
        // The watch window starts at the current revision, as a freshly started
        // watch cache does: older revisions are "too old" (410).
        inner.history_start = inner.rv;
        Store {
            inner: Mutex::new(inner),
            cond,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }
}

impl Inner {
    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.data
            .get(key)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of `key`, optionally in one namespace, in (namespace, name) order.
    pub fn list(&self, key: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        match self.data.get(key) {
            None => vec![],
            Some(m) => match ns {
                None => m.values().cloned().collect(),
                Some(ns) => m
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        }
    }

    fn push_event(
        &mut self,
        key: &'static str,
        etype: EventType,
        obj: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        self.history.push_back(Arc::new(Event {
            rv: self.rv,
            key,
            etype,
            obj,
            prev,
            json: OnceLock::new(),
        }));
        while self.history.len() > self.cap {
            if let Some(e) = self.history.pop_front() {
                self.history_start = e.rv;
            }
        }
        self.cond.notify_all();
    }

    /// Stores `obj` (created or updated) at a new revision and records the event.
    pub fn put(&mut self, key: &'static str, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        crate::util::meta_mut(&mut obj)
            .insert("resourceVersion".into(), json!(self.rv.to_string()));
        let k = (namespace_of(&obj).to_string(), name_of(&obj).to_string());
        let obj = Arc::new(obj);
        let prev = self
            .data
            .entry(key)
            .or_default()
            .insert(k.clone(), obj.clone());
        self.log(key, &k, Some(&obj));
        let etype = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.push_event(key, etype, obj.clone(), prev);
        obj
    }

    /// Removes an object; returns its last stored state. The DELETED event
    /// carries the deletion revision, as etcd3-backed watches do.
    pub fn remove(&mut self, key: &'static str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let k = (ns.to_string(), name.to_string());
        let old = self.data.get_mut(key)?.remove(&k)?;
        self.rv += 1;
        let mut tomb = (*old).clone();
        crate::util::meta_mut(&mut tomb)
            .insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.log(key, &k, None);
        self.push_event(key, EventType::Deleted, Arc::new(tomb), None);
        Some(old)
    }

    /// Events after `rv`, or Err(oldest available) when `rv` is too old.
    pub fn events_after(&self, rv: u64) -> Result<impl Iterator<Item = &Arc<Event>>, u64> {
        if rv < self.history_start {
            return Err(self.history_start);
        }
        let idx = self.history.partition_point(|e| e.rv <= rv);
        Ok(self.history.iter().skip(idx))
    }

    pub fn end_all_watches(&mut self) {
        self.epoch += 1;
        self.cond.notify_all();
    }

    fn log(&mut self, key: &str, k: &(String, String), obj: Option<&Arc<Value>>) {
        if let Some(w) = self.wal.as_mut() {
            let line = json!({"rv": self.rv, "key": key, "ns": k.0, "name": k.1, "obj": obj.map(|o| &**o)});
            if writeln!(w, "{}", line).and_then(|_| w.flush()).is_err() {
                log::warn!("state log write failed; persistence disabled");
                self.wal = None;
            }
        }
    }

    fn load_wal(&mut self, path: &Path) {
        let f = match File::open(path) {
            Ok(f) => f,
            Err(_) => return,
        };
        for line in BufReader::new(f).lines().map_while(Result::ok) {
            let v: Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(_) => continue, // a torn last line after a kill
            };
            if let Some(rv) = v.get("rv").and_then(|x| x.as_u64()) {
                self.rv = self.rv.max(rv);
            }
            let key = match v
                .get("key")
                .and_then(|x| x.as_str())
                .and_then(resources::by_key)
            {
                Some(d) => d.key,
                None => continue,
            };
            let k = (
                v.get("ns")
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_string(),
                v.get("name")
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_string(),
            );
            match v.get("obj") {
                Some(o) if o.is_object() => {
                    self.data
                        .entry(key)
                        .or_default()
                        .insert(k, Arc::new(o.clone()));
                }
                _ => {
                    if let Some(m) = self.data.get_mut(key) {
                        m.remove(&k);
                    }
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.data.values().all(|m| m.is_empty())
    }
}

/// Rewrites the log as one line per live object plus the revision counter.
fn compact_and_open(path: &Path, inner: &Inner) -> Option<BufWriter<File>> {
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut w = BufWriter::new(File::create(&tmp)?);
        for (key, objs) in &inner.data {
            for ((ns, name), o) in objs {
                let rv: u64 = crate::util::rv_of(o).parse().unwrap_or(0);
                writeln!(
                    w,
                    "{}",
                    json!({"rv": rv, "key": key, "ns": ns, "name": name, "obj": &**o})
                )?;
            }
        }
        writeln!(w, "{}", json!({"rv": inner.rv}))?;
        w.flush()?;
        fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        log::warn!("cannot write state log {}: {}", path.display(), e);
        return None;
    }
    OpenOptions::new()
        .append(true)
        .open(path)
        .ok()
        .map(BufWriter::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_history_and_persistence() {
        let path =
            std::env::temp_dir().join(format!("apid-wal-{}.jsonl", crate::util::random_token()));
        {
            let s = Store::new(2, Some(path.clone()));
            let mut g = s.lock();
            let a = g.put("pods", json!({"metadata": {"name": "a", "namespace": "d"}}));
            assert_eq!(crate::util::rv_of(&a), "1");
            g.put("pods", json!({"metadata": {"name": "b", "namespace": "d"}}));
            g.put(
                "pods",
                json!({"metadata": {"name": "a", "namespace": "d", "labels": {"x": "y"}}}),
            );
            let old = g.remove("pods", "d", "b").unwrap();
            assert_eq!(crate::util::rv_of(&old), "2");
            assert_eq!(g.rv, 4);
            assert!(g.events_after(1).is_err(), "history of 2 starts after rv 2");
            let evs: Vec<_> = g
                .events_after(2)
                .unwrap()
                .map(|e| (e.rv, e.etype))
                .collect();
            assert_eq!(evs, vec![(3, EventType::Modified), (4, EventType::Deleted)]);
            assert_eq!(g.list("pods", Some("d")).len(), 1);
        }
        let s = Store::new(10, Some(path.clone()));
        let g = s.lock();
        assert_eq!(g.rv, 4);
        assert_eq!(g.history_start, 4);
        assert!(g.get("pods", "d", "a").is_some());
        assert!(g.get("pods", "d", "b").is_none());
        let _ = fs::remove_file(&path);
    }
}
