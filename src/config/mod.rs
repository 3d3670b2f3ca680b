//! Pod configuration: the static pod sources and the merger that turns their
//! snapshots into incremental updates (upstream pkg/kubelet/config, config.go
//! in PodConfigNotificationIncremental mode).

pub mod apiserver;
pub mod common;
mod error;
pub mod file;
pub mod http;

#[cfg(test)]
mod tests;

use crate::podutil::PodExt;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io;
use std::mem;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, unbounded, Receiver, Select, SendTimeoutError, Sender};
use k8s_openapi::api::core::v1::Pod;
use log::{debug, info, trace, warn};
use rkubelet_util::lock;

use crate::types::{
    now_rfc3339_nano, PodOperation, PodUpdate, CONFIG_FIRST_SEEN_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION, CONFIG_SOURCE_ANNOTATION,
};

pub use apiserver::start_api_source;
pub use error::ManifestError;
pub use file::start_file_source;
pub use http::start_http_source;

/// Capacity of the merged updates channel (upstream uses 50).
pub const UPDATES_CAPACITY: usize = 50;
/// Capacity of each source's channel into the merger.
const SOURCE_CAPACITY: usize = 50;
/// How long the merger or a source blocks on a full channel before it logs
/// and checks again.
const SEND_STALL_WARNING: Duration = Duration::from_secs(5);
/// Bound on each wait of the merger loop. Nothing is done when it ends:
/// a message or a closed channel ends the wait at once, so this bounds the
/// wait only (at one second, an idle wake-up a second).
const MERGER_TICK: Duration = Duration::from_secs(10);
/// Bound on each wait of a source blocked on a full channel.
const SOURCE_SEND_TICK: Duration = Duration::from_millis(100);

/// Merges the pod sources into one ordered stream of incremental updates.
pub struct PodConfig {
    updates: Receiver<PodUpdate>,
    register: Sender<(String, Receiver<PodUpdate>)>,
    /// Sources handed out by `channel`, with their sender.
    sources: Mutex<BTreeMap<String, Sender<PodUpdate>>>,
    /// Sources that have delivered at least one SET, written by the merger.
    seen: Arc<Mutex<HashSet<String>>>,
    _merger: JoinHandle<()>,
}

impl Default for PodConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl PodConfig {
    /// Creates the updates channel and starts the "pod-config" merger thread.
    /// Panics only if the OS refuses to create a thread; see `try_new`.
    pub fn new() -> Self {
        Self::try_new().expect("spawning the pod-config thread")
    }

    /// Like `new`, returning the thread-spawn error instead of panicking.
    pub fn try_new() -> io::Result<Self> {
        let (updates_tx, updates_rx) = bounded(UPDATES_CAPACITY);
        let (register_tx, register_rx) = unbounded();
        let seen = Arc::new(Mutex::new(HashSet::new()));
        let storage = PodStorage::new(Arc::clone(&seen));
        let merger = crate::util::worker::spawn_helper("pod-config", move || {
            run_merger(storage, register_rx, updates_tx)
        })?;
        Ok(PodConfig {
            updates: updates_rx,
            register: register_tx,
            sources: Mutex::new(BTreeMap::new()),
            seen,
            _merger: merger,
        })
    }

    /// The channel for `source`, created on first use. Updates sent on it are
    /// merged under this source name whatever their own `source` field says
    /// (as upstream's mux). Sources normally send `Set` snapshots; the API
    /// source may also send Add/Update/Delete/Remove.
    pub fn channel(&self, source: &str) -> Sender<PodUpdate> {
        let mut sources = lock(&self.sources);
        if let Some(tx) = sources.get(source) {
            return tx.clone();
        }
        let (tx, rx) = bounded(SOURCE_CAPACITY);
        // The merger lives as long as `self.register`, so this cannot fail;
        // if it somehow did, the source would simply never be merged.
        if self.register.send((source.to_string(), rx)).is_err() {
            warn!("pod-config merger is gone; source {source} will not be merged");
        }
        sources.insert(source.to_string(), tx.clone());
        tx
    }

    /// The merged, ordered stream the kubelet sync loop selects on.
    pub fn updates(&self) -> Receiver<PodUpdate> {
        self.updates.clone()
    }

    /// Upstream SeenAllSources (the kubelet's sourcesReady): `seen_by_caller`
    /// are the sources the sync loop has received updates from. True when that
    /// covers every source registered with `channel` and each of them has
    /// delivered at least one SET to the merger. Requiring the caller's view
    /// too means the pods of a source are in the kubelet before it acts as if
    /// it knew all pods (e.g. cleaning up orphans).
    pub fn seen_all_sources(&self, seen_by_caller: &[String]) -> bool {
        let registered: BTreeSet<String> = lock(&self.sources).keys().cloned().collect();
        let seen = lock(&self.seen);
        trace!("Looking for sources {registered:?}, have seen {seen_by_caller:?}");
        registered
            .iter()
            .all(|s| seen_by_caller.contains(s) && seen.contains(s))
    }

    /// Names of the sources registered so far.
    #[cfg(test)]
    pub fn sources(&self) -> Vec<String> {
        lock(&self.sources).keys().cloned().collect()
    }
}

/// Sends on a bounded channel without ever blocking past a shutdown signal.
/// Returns false when the receiver is gone or shutdown was requested.
pub(crate) fn send_update(
    tx: &Sender<PodUpdate>,
    update: PodUpdate,
    shutdown: &Receiver<()>,
) -> bool {
    let mut update = update;
    loop {
        match tx.send_timeout(update, SOURCE_SEND_TICK) {
            Ok(()) => return true,
            Err(SendTimeoutError::Disconnected(_)) => return false,
            Err(SendTimeoutError::Timeout(back)) => update = back,
        }
        if !matches!(
            shutdown.try_recv(),
            Err(crossbeam_channel::TryRecvError::Empty)
        ) {
            return false;
        }
    }
}

/// The "pod-config" thread: waits on the registration channel and every
/// source channel, merges each message and emits the result in order. Exits
/// when the PodConfig and all sources are gone, or nobody reads updates.
fn run_merger(
    mut storage: PodStorage,
    register: Receiver<(String, Receiver<PodUpdate>)>,
    updates: Sender<PodUpdate>,
) {
    let mut sources: Vec<(String, Receiver<PodUpdate>)> = Vec::new();
    let mut register_open = true;
    while register_open || !sources.is_empty() {
        let mut sel = Select::new();
        let register_index = register_open.then(|| sel.recv(&register));
        let first_source = sel_source_offset(register_index);
        for (_, rx) in &sources {
            sel.recv(rx);
        }
        let Ok(op) = sel.select_timeout(MERGER_TICK) else {
            continue;
        };
        let index = op.index();
        if Some(index) == register_index {
            match op.recv(&register) {
                Ok(source) => sources.push(source),
                Err(_) => register_open = false,
            }
            continue;
        }
        let slot = index - first_source;
        let received = op.recv(&sources[slot].1);
        match received {
            Ok(update) => {
                let name = sources[slot].0.clone();
                for out in storage.merge(&name, update) {
                    if !emit(&updates, out) {
                        return;
                    }
                }
            }
            Err(_) => {
                let (name, _) = sources.remove(slot);
                debug!("pod source {name} closed its channel");
            }
        }
    }
    debug!("pod-config merger stopped");
}

fn sel_source_offset(register_index: Option<usize>) -> usize {
    register_index.map_or(0, |i| i + 1)
}

/// Blocks until the sync loop takes the update, like upstream's unbuffered
/// send, warning while it stalls. False when no one can ever read it.
fn emit(updates: &Sender<PodUpdate>, update: PodUpdate) -> bool {
    let mut update = update;
    loop {
        match updates.send_timeout(update, SEND_STALL_WARNING) {
            Ok(()) => return true,
            Err(SendTimeoutError::Disconnected(_)) => return false,
            Err(SendTimeoutError::Timeout(back)) => {
                warn!("pod updates channel is full; is the sync loop running?");
                update = back;
            }
        }
    }
}

/// Per-source pod state and the merge logic (upstream podStorage), kept free
/// of threads so it can be tested directly.
pub struct PodStorage {
    /// source -> pod UID -> pod (ordered, so REMOVE lists are deterministic).
    pods: HashMap<String, BTreeMap<String, Arc<Pod>>>,
    seen: Arc<Mutex<HashSet<String>>>,
}

/// The five change lists of one merge.
#[derive(Default)]
struct Changes {
    adds: Vec<Arc<Pod>>,
    updates: Vec<Arc<Pod>>,
    deletes: Vec<Arc<Pod>>,
    removes: Vec<Arc<Pod>>,
    reconciles: Vec<Arc<Pod>>,
}

impl PodStorage {
    pub fn new(seen: Arc<Mutex<HashSet<String>>>) -> Self {
        PodStorage {
            pods: HashMap::new(),
            seen,
        }
    }

    /// Applies one source message and returns the updates to emit, in
    /// upstream's order: REMOVE, ADD, UPDATE, DELETE, RECONCILE. The first SET
    /// of a source that yields no ADD/UPDATE/DELETE still produces an empty
    /// ADD, which tells the kubelet the source is ready.
    pub fn merge(&mut self, source: &str, update: PodUpdate) -> Vec<PodUpdate> {
        let seen_before = lock(&self.seen).contains(source);
        let changes = self.apply(source, update);
        let first_set = !seen_before && lock(&self.seen).contains(source);
        let signal_ready = first_set
            && changes.adds.is_empty()
            && changes.updates.is_empty()
            && changes.deletes.is_empty();
        let make = |op, pods| PodUpdate {
            pods,
            op,
            source: source.to_string(),
        };
        let mut out = Vec::new();
        for (op, pods) in [
            (PodOperation::Remove, changes.removes),
            (PodOperation::Add, changes.adds),
            (PodOperation::Update, changes.updates),
            (PodOperation::Delete, changes.deletes),
        ] {
            if !pods.is_empty() {
                out.push(make(op, pods));
            }
        }
        if signal_ready {
            out.push(make(PodOperation::Add, Vec::new()));
        }
        if !changes.reconciles.is_empty() {
            out.push(make(PodOperation::Reconcile, changes.reconciles));
        }
        out
    }

    /// All pods of all sources.
    #[cfg(test)]
    pub fn merged_state(&self) -> Vec<Pod> {
        self.pods
            .values()
            .flat_map(|m| m.values().map(|p| Pod::clone(p)))
            .collect()
    }

    fn apply(&mut self, source: &str, update: PodUpdate) -> Changes {
        let mut changes = Changes::default();
        let mut old = self.pods.remove(source).unwrap_or_default();
        let mut current = BTreeMap::new();
        match update.op {
            PodOperation::Add | PodOperation::Update | PodOperation::Delete => {
                debug!("{} pods from source {source}", update.op);
                update_pods(source, update.pods, &mut old, &mut current, &mut changes);
                // Pods not mentioned are untouched.
                current.append(&mut old);
            }
            PodOperation::Remove => {
                for pod in &update.pods {
                    if let Some(existing) = old.remove(pod.uid()) {
                        changes.removes.push(existing);
                    }
                }
                current = old;
            }
            PodOperation::Set => {
                trace!("Setting pods for source {source}");
                lock(&self.seen).insert(source.to_string());
                update_pods(source, update.pods, &mut old, &mut current, &mut changes);
                changes.removes.extend(mem::take(&mut old).into_values());
            }
            PodOperation::Reconcile => {
                info!(
                    "Received invalid update type {} from source {source}",
                    update.op
                );
                current = old;
            }
        }
        self.pods.insert(source.to_string(), current);
        changes
    }
}

/// Moves each incoming pod into `current`, comparing it with its previous
/// version in `old` (or an earlier copy in `current` with the same UID).
fn update_pods(
    source: &str,
    pods: Vec<Arc<Pod>>,
    old: &mut BTreeMap<String, Arc<Pod>>,
    current: &mut BTreeMap<String, Arc<Pod>>,
    changes: &mut Changes,
) {
    for pod in filter_invalid_pods(source, pods) {
        // Sources hand over fresh pods: this unwraps without copying.
        let mut pod = Arc::unwrap_or_clone(pod);
        // Annotate with the source before any comparison.
        set_annotation(&mut pod, CONFIG_SOURCE_ANNOTATION, source);
        let uid = pod.uid().to_string();
        let previous = current.remove(&uid).or_else(|| old.remove(&uid));
        let Some(mut existing) = previous else {
            debug!("Receiving a new pod {}", pod.namespaced_name());
            set_annotation(&mut pod, CONFIG_FIRST_SEEN_ANNOTATION, &now_rfc3339_nano());
            let pod = Arc::new(pod);
            changes.adds.push(Arc::clone(&pod));
            current.insert(uid, pod);
            continue;
        };
        match check_and_update_pod(&mut existing, pod) {
            Check::Update => changes.updates.push(existing.clone()),
            Check::Reconcile => changes.reconciles.push(existing.clone()),
            Check::GracefulDelete => changes.deletes.push(existing.clone()),
            Check::Unchanged => {}
        }
        current.insert(uid, existing);
    }
}

/// Drops pods whose name+namespace repeats within one message.
fn filter_invalid_pods(source: &str, pods: Vec<Arc<Pod>>) -> Vec<Arc<Pod>> {
    let mut names = HashSet::new();
    let mut filtered = Vec::with_capacity(pods.len());
    for (i, pod) in pods.into_iter().enumerate() {
        if names.insert(pod.full_name()) {
            filtered.push(pod);
        } else {
            warn!(
                "Pod {} (index {i}) from source {source} failed validation due to duplicate pod name, ignoring",
                pod.namespaced_name()
            );
        }
    }
    filtered
}

fn set_annotation(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value.to_string());
}

/// Annotations the kubelet itself sets; they never make a pod "changed".
const LOCAL_ANNOTATIONS: [&str; 3] = [
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_MIRROR_ANNOTATION,
    CONFIG_FIRST_SEEN_ANNOTATION,
];

fn is_local_annotation(key: &str) -> bool {
    LOCAL_ANNOTATIONS.contains(&key)
}

/// Equal annotations, ignoring the kubelet's local ones.
fn annotations_equal(
    a: Option<&BTreeMap<String, String>>,
    b: Option<&BTreeMap<String, String>>,
) -> bool {
    let filtered = |m: Option<&BTreeMap<String, String>>| -> Vec<(String, String)> {
        m.into_iter()
            .flatten()
            .filter(|(k, _)| !is_local_annotation(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    filtered(a) == filtered(b)
}

/// What upstream considers a meaningful change: spec, labels, deletion
/// timestamp/grace period, or non-local annotations. Status is not one.
fn pods_differ_semantically(existing: &Pod, new: &Pod) -> bool {
    let (e, n) = (&existing.metadata, &new.metadata);
    existing.spec != new.spec
        || e.labels != n.labels
        || e.deletion_timestamp != n.deletion_timestamp
        || e.deletion_grace_period_seconds != n.deletion_grace_period_seconds
        || !annotations_equal(e.annotations.as_ref(), n.annotations.as_ref())
}

#[derive(Debug, PartialEq, Eq)]
enum Check {
    Unchanged,
    Update,
    Reconcile,
    GracefulDelete,
}

/// Upstream checkAndUpdatePod: folds `new` into `existing` and says what kind
/// of change it was. Only spec, labels, deletion fields, generation, status
/// and annotations are taken over; the kubelet's local annotations (first
/// seen time included) are kept from `existing`.
///
/// Copy on write: the kubelet may still hold the previous version, so a
/// changed pod becomes a new copy and an unchanged one stays shared.
fn check_and_update_pod(existing: &mut Arc<Pod>, new: Pod) -> Check {
    let differs = pods_differ_semantically(existing, &new);
    if !differs && existing.status == new.status {
        return Check::Unchanged;
    }
    // The merged pod takes spec and status from `new` and only the metadata
    // from `existing`: no copy of the (large) spec is made, even when the
    // existing pod is shared with the pod manager and the workers.
    let mut meta = existing.metadata.clone();
    let Pod {
        metadata: new_meta,
        spec,
        status,
    } = new;
    let check = if !differs {
        // The kubelet is the source of truth for status: reconcile it.
        // (Spec, labels and the rest are equal.)
        Check::Reconcile
    } else {
        let deleting = new_meta.deletion_timestamp.is_some();
        meta.labels = new_meta.labels;
        meta.deletion_timestamp = new_meta.deletion_timestamp;
        meta.deletion_grace_period_seconds = new_meta.deletion_grace_period_seconds;
        meta.generation = new_meta.generation;
        meta.annotations = Some(merge_annotations(
            meta.annotations.as_ref(),
            new_meta.annotations.unwrap_or_default(),
        ));
        if deleting {
            Check::GracefulDelete
        } else {
            Check::Update
        }
    };
    *existing = Arc::new(Pod {
        metadata: meta,
        spec,
        status,
    });
    check
}

/// The new annotations plus the local ones already on the existing pod.
fn merge_annotations(
    existing: Option<&BTreeMap<String, String>>,
    mut new: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    for key in LOCAL_ANNOTATIONS {
        if let Some(value) = existing.and_then(|m| m.get(key)) {
            new.insert(key.to_string(), value.clone());
        }
    }
    new
}
