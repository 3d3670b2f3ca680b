//! The status manager (upstream `pkg/kubelet/status`): the latest API
//! status of every pod, with the bookkeeping the API expects (startTime,
//! condition transition times that only move on a real transition), and,
//! with an API server, a thread that PATCHes each pod's `status`
//! subresource when its status changed and deletes pods whose graceful
//! deletion the kubelet has finished.

pub mod conditions;
pub mod generate;
mod probes;
mod resize;

#[cfg(test)]
mod api_tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
use rkubelet_util::lock;
use serde_json::{json, Value};

use crate::client::{paths, Client, PatchType};
use crate::podutil::PodExt;
use crate::types::{is_mirror_pod, is_static_pod, CONFIG_MIRROR_ANNOTATION};
use crate::util::strategicpatch;

/// Upstream's syncPeriod: every status is checked against the API this often.
const SYNC_PERIOD: Duration = Duration::from_secs(10);
/// Upstream's podStatusChannel capacity.
const CHANNEL_CAPACITY: usize = 1000;
/// The conditions the kubelet owns (upstream PodConditionsByKubelet); the
/// others (readiness gates, DisruptionTarget, ...) belong to other writers
/// and are kept from the API's copy.
const KUBELET_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodResizeInProgress",
    "PodResizePending",
    "PodReadyToStartContainers",
];

/// Whether the kubelet owns a condition type (upstream PodConditionByKubelet).
pub fn is_kubelet_condition(t: &str) -> bool {
    KUBELET_CONDITIONS.contains(&t)
}

struct Entry {
    status: PodStatus,
    /// Bumped on every change; the API copy is current when it has seen it.
    version: u64,
    name: String,
    namespace: String,
    /// A static pod's status goes to its mirror pod.
    is_static: bool,
    deletion: ApiDeletion,
}

/// Where the removal of a pod's API object stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApiDeletion {
    /// Not asked for.
    NotAsked,
    /// The pod is being deleted and the kubelet has stopped it: remove it
    /// from the API.
    Due,
    /// The object of this UID is gone from the API for good (our DELETE
    /// with its UID precondition, or someone else's): nothing more is
    /// written for it, however often the kubelet marks or updates it.
    Done,
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    /// The version of each pod's status the API server has.
    api_versions: HashMap<String, u64>,
}

pub struct StatusManager {
    inner: Mutex<Inner>,
    notify: Sender<String>,
    notified: Receiver<String>,
}

impl Default for StatusManager {
    fn default() -> Self {
        let (notify, notified) = crossbeam_channel::bounded(CHANNEL_CAPACITY);
        StatusManager {
            inner: Mutex::new(Inner::default()),
            notify,
            notified,
        }
    }
}

impl StatusManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a freshly generated status; returns whether it changed.
    pub fn set_pod_status(&self, pod: &Pod, mut status: PodStatus) -> bool {
        let uid = pod.uid().to_string();
        let mut inner = lock(&self.inner);
        let cached = inner.pods.get(&uid).map(|e| &e.status);
        // Upstream updateStatusInternal: the old status is the cached one,
        // else the API's (a restarted kubelet keeps startTime and the
        // conditions' transition times).
        let old = cached.or(pod.status.as_ref());
        status.start_time = old
            .and_then(|o| o.start_time.clone())
            .or_else(|| generate::to_time(SystemTime::now()));
        keep_transition_times(old, &mut status);
        if cached == Some(&status) {
            return false;
        }
        // Kept until the next change: no spare room in its lists.
        crate::podutil::shrink_status_to_fit(&mut status);
        let version = inner.pods.get(&uid).map_or(1, |e| e.version + 1);
        let deletion = inner
            .pods
            .get(&uid)
            .map_or(ApiDeletion::NotAsked, |e| e.deletion);
        inner.pods.insert(
            uid.clone(),
            Entry {
                status,
                version,
                name: pod.name().to_string(),
                namespace: pod.namespace().to_string(),
                is_static: is_static_pod(pod),
                deletion,
            },
        );
        drop(inner);
        self.wake(uid);
        true
    }

    /// The kubelet has stopped everything of a pod being deleted: the API
    /// object can go (upstream canBeDeleted).
    pub fn mark_for_deletion(&self, uid: &str) {
        let mut inner = lock(&self.inner);
        let Some(e) = inner.pods.get_mut(uid) else {
            return;
        };
        if e.is_static || e.deletion != ApiDeletion::NotAsked {
            return;
        }
        e.deletion = ApiDeletion::Due;
        drop(inner);
        self.wake(uid.to_string());
    }

    /// Forgets what the API has seen of a pod's status, so it is sent
    /// again (a recreated mirror pod starts with none).
    pub fn resync(&self, uid: &str) {
        lock(&self.inner).api_versions.remove(uid);
        self.wake(uid.to_string());
    }

    fn wake(&self, uid: String) {
        if let Err(TrySendError::Full(_)) = self.notify.try_send(uid) {
            log::debug!("status manager: channel full; the periodic sync will catch up");
        }
    }

    pub fn get(&self, uid: &str) -> Option<PodStatus> {
        lock(&self.inner).pods.get(uid).map(|e| e.status.clone())
    }

    /// The phase of the cached status, without copying the status
    /// (housekeeping asks it of every pod every 2 s, and the active pods'
    /// filter whenever the eviction manager and others ask for them).
    pub fn phase(&self, uid: &str) -> crate::types::PodPhase {
        crate::types::PodPhase::of(lock(&self.inner).pods.get(uid).map(|e| &e.status))
    }

    pub fn remove(&self, uid: &str) {
        let mut inner = lock(&self.inner);
        inner.pods.remove(uid);
        inner.api_versions.remove(uid);
    }

    /// Syncs statuses to the API server from a thread named
    /// "status-manager" until `shutdown` closes.
    pub fn start(
        self: &Arc<Self>,
        client: Client,
        shutdown: Receiver<()>,
    ) -> std::io::Result<crate::util::worker::Worker> {
        let me = Arc::clone(self);
        crate::util::worker::spawn_supervised(
            "status-manager",
            crate::util::worker::ShutdownStage::Status,
            shutdown,
            move |shutdown| {
                let ticker = crossbeam_channel::tick(SYNC_PERIOD);
                loop {
                    crossbeam_channel::select! {
                        recv(me.notified) -> uid => if let Ok(uid) = uid { me.sync_pod(&client, &uid) },
                        recv(ticker) -> _ => me.sync_batch(&client),
                        recv(shutdown) -> _ => return,
                    }
                }
            },
        )
    }

    fn sync_batch(&self, client: &Client) {
        let due: Vec<String> = {
            let inner = lock(&self.inner);
            inner
                .pods
                .iter()
                .filter(|(uid, e)| inner.is_due(uid, e))
                .map(|(uid, _)| uid.clone())
                .collect()
        };
        for uid in due {
            self.sync_pod(client, &uid);
        }
    }

    /// Brings one pod's API status up to date (upstream syncPod).
    fn sync_pod(&self, client: &Client, uid: &str) {
        let (status, version, name, namespace, is_static, delete) = {
            let inner = lock(&self.inner);
            let Some(e) = inner.pods.get(uid).filter(|e| inner.is_due(uid, e)) else {
                return;
            };
            (
                e.status.clone(),
                e.version,
                e.name.clone(),
                e.namespace.clone(),
                e.is_static,
                e.deletion == ApiDeletion::Due,
            )
        };
        let api_pod: Pod = match client.get(&paths::pod(&namespace, &name)) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => {
                log::debug!("status manager: pod {namespace}/{name} not found in the API; nothing to update");
                if delete {
                    self.deleted(uid);
                }
                return;
            }
            Err(e) => {
                log::warn!("status manager: {e}");
                return;
            }
        };
        if !same_pod(&api_pod, uid, is_static) {
            log::debug!("status manager: pod {namespace}/{name} in the API is not {uid}; skipping");
            if delete {
                self.deleted(uid);
            }
            return;
        }
        let mut merged = merge_pod_status(api_pod.status.as_ref(), status);
        client.server_version().adapt_pod_status(&mut merged);
        let patch = status_patch(&api_pod, &merged);
        if patch != json!({"metadata": {"uid": api_pod.uid()}}) {
            let path = paths::pod_status(&namespace, &name);
            if let Err(e) = client.patch::<Pod>(&path, PatchType::StrategicMerge, &patch) {
                log::warn!("status manager: {e}");
                return;
            }
            log::debug!("status manager: patched status of {namespace}/{name}");
        }
        lock(&self.inner)
            .api_versions
            .insert(uid.to_string(), version);
        if delete && api_pod.is_being_deleted() && !is_mirror_pod(&api_pod) {
            self.delete_pod(client, &api_pod);
        }
    }

    /// The pod's API object is gone for good: stop writing to it.
    fn deleted(&self, uid: &str) {
        if let Some(e) = lock(&self.inner).pods.get_mut(uid) {
            e.deletion = ApiDeletion::Done;
        }
    }

    /// Removes a pod whose graceful deletion the kubelet has completed:
    /// grace period 0, guarded by its UID (upstream).
    fn delete_pod(&self, client: &Client, pod: &Pod) {
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid().to_string()),
                ..Default::default()
            }),
            ..Default::default()
        };
        match client.delete(&paths::pod(pod.namespace(), pod.name()), &opts) {
            Ok(()) => {
                log::info!(
                    "pod {} fully terminated and removed from the API",
                    pod.namespaced_name()
                );
                self.deleted(pod.uid());
            }
            // Gone already, or the name now holds a pod of another UID.
            Err(e) if e.is_not_found() || e.is_conflict() => self.deleted(pod.uid()),
            Err(e) => log::warn!("status manager: {e}"),
        }
    }
}

impl Inner {
    /// Whether a pod's API object needs a request: its removal is due, or
    /// the API has not seen its latest status and the object still exists.
    fn is_due(&self, uid: &str, e: &Entry) -> bool {
        match e.deletion {
            ApiDeletion::Due => true,
            ApiDeletion::Done => false,
            ApiDeletion::NotAsked => self.api_versions.get(uid).is_none_or(|v| *v < e.version),
        }
    }
}

/// Whether the API object is the pod the status belongs to: the same UID,
/// or for a static pod its mirror pod.
fn same_pod(api_pod: &Pod, uid: &str, is_static: bool) -> bool {
    if is_static {
        api_pod.annotation(CONFIG_MIRROR_ANNOTATION) == Some(uid)
    } else {
        api_pod.uid() == uid
    }
}

/// Keeps what other writers own (upstream mergePodStatus): their
/// conditions as the API has them now, first, then the kubelet's; and the
/// fields the kubelet never writes (resize, nominatedNodeName, resource
/// claim statuses).
fn merge_pod_status(old: Option<&PodStatus>, mut new: PodStatus) -> PodStatus {
    let owned = |t: &str| is_kubelet_condition(t);
    let mut conditions: Vec<_> = old
        .and_then(|o| o.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| !owned(&c.type_))
        .collect();
    let mine = new.conditions.take().unwrap_or_default();
    // DisruptionTarget is shared: the kubelet's, when it set one, wins.
    for c in mine.iter().filter(|c| c.type_ == "DisruptionTarget") {
        match conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => *o = c.clone(),
            None => conditions.push(c.clone()),
        }
    }
    conditions.extend(mine.into_iter().filter(|c| owned(&c.type_)));
    new.conditions = Some(conditions);
    if let Some(old) = old {
        new.resize = old.resize.clone();
        new.nominated_node_name = old.nominated_node_name.clone();
        new.resource_claim_statuses = old.resource_claim_statuses.clone();
        new.extended_resource_claim_status = old.extended_resource_claim_status.clone();
    }
    new
}

/// The fuzz targets' way in (fuzz/): the status PATCH from the API's copy
/// of a pod to a new status.
#[cfg(feature = "fuzzing")]
pub fn fuzz_status_patch(api_pod: &Pod, status: &PodStatus) -> Value {
    status_patch(api_pod, status)
}

/// The PATCH body for `pods/status`: a two-way strategic merge patch with
/// the pod's UID as a precondition (only the new side carries it, so it
/// always appears in the patch, as upstream does).
fn status_patch(api_pod: &Pod, merged: &PodStatus) -> Value {
    let old = json!({"status": api_pod.status});
    let new = json!({"metadata": {"uid": api_pod.uid()}, "status": merged});
    strategicpatch::two_way(&old, &new, strategicpatch::kubelet_merge_keys)
}

/// Upstream updateLastTransitionTime: a kubelet condition whose status did
/// not change keeps its old transition time; one that changed or is new
/// keeps the time it was generated with, or now. It is never left unset: a
/// strategic merge patch would send it as null, and null deletes it on the
/// server. Other writers' conditions keep their own.
fn keep_transition_times(old: Option<&PodStatus>, new: &mut PodStatus) {
    let old_conds = old
        .and_then(|o| o.conditions.as_deref())
        .unwrap_or_default();
    let mine = |t: &str| is_kubelet_condition(t) || t == "DisruptionTarget";
    for c in new
        .conditions
        .iter_mut()
        .flatten()
        .filter(|c| mine(&c.type_))
    {
        let unchanged_since = old_conds
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
            .and_then(|p| p.last_transition_time.clone());
        c.last_transition_time = unchanged_since
            .or_else(|| c.last_transition_time.take())
            .or_else(|| generate::to_time(SystemTime::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodCondition;

    fn cond(t: &str, s: &str) -> PodCondition {
        PodCondition {
            type_: t.into(),
            status: s.into(),
            ..Default::default()
        }
    }

    #[test]
    fn phase_is_the_cached_statuses() {
        let m = StatusManager::new();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "d", "uid": "u1"}
        }))
        .unwrap();
        assert_eq!(m.phase("u1"), crate::types::PodPhase::of(None));
        let failed = PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        };
        m.set_pod_status(&pod, failed);
        assert_eq!(m.phase("u1"), crate::types::PodPhase::Failed);
        assert!(m.phase("u1").is_terminal());
    }

    #[test]
    fn merge_keeps_foreign_conditions() {
        let old = PodStatus {
            conditions: Some(vec![
                cond("PodScheduled", "True"),
                cond("example.com/gate", "True"),
                cond("Ready", "False"),
            ]),
            resize: Some("InProgress".into()),
            nominated_node_name: Some("n2".into()),
            ..Default::default()
        };
        // The kubelet's copy of the gate is stale: the API's wins.
        let new = PodStatus {
            conditions: Some(vec![
                cond("example.com/gate", "False"),
                cond("Ready", "True"),
                cond("PodScheduled", "True"),
            ]),
            ..Default::default()
        };
        let merged = merge_pod_status(Some(&old), new);
        let got: Vec<(String, String)> = merged
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| (c.type_, c.status))
            .collect();
        assert_eq!(
            got,
            vec![
                ("example.com/gate".into(), "True".into()),
                ("Ready".into(), "True".into()),
                ("PodScheduled".into(), "True".into()),
            ]
        );
        assert_eq!(merged.resize.as_deref(), Some("InProgress"));
        assert_eq!(merged.nominated_node_name.as_deref(), Some("n2"));
    }

    /// The patch built on the API's status leaves the gate alone.
    #[test]
    fn patch_never_touches_foreign_conditions() {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.status = Some(PodStatus {
            conditions: Some(vec![
                cond("example.com/gate", "True"),
                cond("Ready", "False"),
            ]),
            ..Default::default()
        });
        let mine = PodStatus {
            conditions: Some(vec![cond("Ready", "True")]),
            ..Default::default()
        };
        let merged = merge_pod_status(pod.status.as_ref(), mine);
        let patch = status_patch(&pod, &merged);
        let text = patch.to_string();
        assert!(!text.contains("\"$patch\":\"delete\""), "{text}");
        assert!(
            text.contains("\"status\":\"True\",\"type\":\"Ready\""),
            "{text}"
        );
        assert!(
            !text.contains("\"type\":\"example.com/gate\",\"status\""),
            "{text}"
        );
    }

    /// Without a cached status the API's transition times count (a
    /// restarted kubelet), for the kubelet's conditions only.
    #[test]
    fn transition_times_fall_back_to_the_api() {
        let sm = StatusManager::new();
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        let then = generate::to_time(SystemTime::UNIX_EPOCH);
        let mut api_ready = cond("Ready", "True");
        api_ready.last_transition_time = then.clone();
        pod.status = Some(PodStatus {
            conditions: Some(vec![api_ready]),
            ..Default::default()
        });
        let mut mine = cond("Ready", "True");
        mine.last_transition_time = generate::to_time(SystemTime::now());
        let mut gate = cond("example.com/gate", "True");
        gate.last_transition_time = generate::to_time(SystemTime::now());
        let s = PodStatus {
            conditions: Some(vec![gate.clone(), mine]),
            ..Default::default()
        };
        assert!(sm.set_pod_status(&pod, s));
        let got = sm.get("u1").unwrap().conditions.unwrap();
        assert_eq!(got[0], gate);
        assert_eq!(got[1].last_transition_time, then);
    }

    /// Fields a newer server sends that this kubelet does not know are
    /// neither refused nor sent back as null (a null would delete them).
    #[test]
    fn unknown_fields_are_never_sent_back_null() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"uid": "u1", "futureMeta": {"x": 1}},
            "status": {
                "phase": "Pending",
                "futureStatus": "kept",
                "conditions": [{"type": "Ready", "status": "False", "futureCond": 1}],
                "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": false,
                                       "restartCount": 0, "futureContainer": true}]
            }
        }))
        .expect("an object with unknown fields decodes");
        let mut merged = pod.status.clone().unwrap_or_default();
        merged.phase = Some("Running".into());
        let patch = status_patch(&pod, &merged);
        let text = patch.to_string();
        assert!(!text.contains("null"), "{text}");
        assert!(!text.contains("future"), "{text}");
        assert_eq!(patch["status"]["phase"], "Running", "{text}");
    }

    #[test]
    fn patch_carries_uid_and_only_changes() {
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        pod.status = Some(PodStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        let merged = PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        assert_eq!(
            status_patch(&pod, &merged),
            json!({"metadata": {"uid": "u1"}, "status": {"phase": "Running"}})
        );
        let same = pod.status.clone().unwrap();
        assert_eq!(
            status_patch(&pod, &same),
            json!({"metadata": {"uid": "u1"}})
        );
    }

    #[test]
    fn versions_and_transition_times() {
        let sm = StatusManager::new();
        let mut pod = Pod::default();
        pod.metadata.uid = Some("u1".into());
        let mut s = PodStatus {
            conditions: Some(vec![cond("Ready", "False")]),
            ..Default::default()
        };
        s.conditions.as_mut().unwrap()[0].last_transition_time =
            generate::to_time(SystemTime::UNIX_EPOCH);
        assert!(sm.set_pod_status(&pod, s.clone()));
        // Same condition status, new transition time: the old time stays.
        let mut again = s.clone();
        again.conditions.as_mut().unwrap()[0].last_transition_time =
            generate::to_time(SystemTime::now());
        assert!(!sm.set_pod_status(&pod, again));
        assert_eq!(lock(&sm.inner).pods["u1"].version, 1);
        let mut flipped = s;
        flipped.conditions.as_mut().unwrap()[0].status = "True".into();
        assert!(sm.set_pod_status(&pod, flipped));
        assert_eq!(lock(&sm.inner).pods["u1"].version, 2);
    }
}
