//! The volume manager's two worlds (upstream `volumemanager/cache`): what
//! should be mounted (desired state, from admitted pods) and what is
//! (actual state, from the reconciler's own set-ups), plus the back-off of
//! volumes whose set-up failed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::util::backoff::Exponential;
use crate::volume::{MountedVolume, VolumeError};

/// Upstream's exponential back-off for a failed operation.
const BACKOFF_INITIAL: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(122);

/// A pod whose volumes should be set up.
#[derive(Debug, Clone)]
pub struct DesiredPod {
    pub pod: Arc<Pod>,
    /// Content volumes are rewritten at the next reconcile (upstream
    /// MarkRemountRequired): set on every pod sync and object change.
    pub remount: bool,
    /// Since when its sync has waited on its volumes, and when that wait
    /// was last reported (upstream posts it once per attach-and-mount
    /// timeout).
    pub waiting: Option<MountWait>,
}

#[derive(Debug, Clone, Copy)]
pub struct MountWait {
    pub since: Instant,
    pub reported: Option<Instant>,
}

impl MountWait {
    /// Whether a wait going on at `now` is due to be reported: it has
    /// lasted `timeout`, and was not reported within the last `timeout`.
    pub fn due(&mut self, now: Instant, timeout: Duration) -> bool {
        let long = now.duration_since(self.since) >= timeout;
        let quiet = self
            .reported
            .is_none_or(|r| now.duration_since(r) >= timeout);
        if long && quiet {
            self.reported = Some(now);
        }
        long && quiet
    }
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub error: VolumeError,
    pub retry_at: Instant,
    pub backoff: Exponential,
}

#[derive(Debug, Default)]
pub struct State {
    /// By pod UID.
    pub desired: HashMap<String, DesiredPod>,
    /// By pod UID, then volume name.
    pub actual: HashMap<String, HashMap<String, MountedVolume>>,
    /// By (pod UID, volume name).
    pub failures: HashMap<(String, String), Failure>,
}

impl State {
    /// Volumes of desired pods not set up yet, or due for a rewrite, and not
    /// in back-off: (uid, pod, volume names).
    pub fn volumes_to_mount(&self, now: Instant) -> Vec<(String, Arc<Pod>, Vec<String>)> {
        let mut out = Vec::new();
        for (uid, d) in &self.desired {
            let mounted = self.actual.get(uid);
            let names: Vec<String> = d
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .into_iter()
                .flatten()
                .filter(|v| {
                    let have = mounted.and_then(|m| m.get(&v.name));
                    let due = match have {
                        None => true,
                        Some(mv) => d.remount && mv.kind.requires_remount(),
                    };
                    let backing_off = self
                        .failures
                        .get(&(uid.clone(), v.name.clone()))
                        .is_some_and(|f| f.retry_at > now);
                    due && !backing_off
                })
                .map(|v| v.name.clone())
                .collect();
            if !names.is_empty() {
                out.push((uid.clone(), Arc::clone(&d.pod), names));
            }
        }
        out
    }

    /// Pods that are set up but no longer desired.
    pub fn pods_to_unmount(&self) -> Vec<(String, Vec<MountedVolume>)> {
        self.actual
            .iter()
            .filter(|(uid, _)| !self.desired.contains_key(*uid))
            .map(|(uid, vols)| (uid.clone(), vols.values().cloned().collect()))
            .collect()
    }

    /// Volumes of the pod that are not set up yet.
    pub fn unmounted_volumes(&self, uid: &str, pod: &Pod) -> Vec<String> {
        let mounted = self.actual.get(uid);
        pod.spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter(|v| mounted.is_none_or(|m| !m.contains_key(&v.name)))
            .map(|v| v.name.clone())
            .collect()
    }

    pub fn record_failure(&mut self, uid: &str, volume: &str, error: VolumeError, now: Instant) {
        let key = (uid.to_string(), volume.to_string());
        let mut backoff = self.failures.remove(&key).map_or_else(
            || Exponential::new(BACKOFF_INITIAL, BACKOFF_MAX),
            |f| f.backoff,
        );
        let retry_at = now + backoff.next_delay();
        self.failures.insert(
            key,
            Failure {
                error,
                retry_at,
                backoff,
            },
        );
    }

    pub fn record_mounted(&mut self, uid: &str, volume: &str, mv: MountedVolume) {
        self.failures.remove(&(uid.to_string(), volume.to_string()));
        self.actual
            .entry(uid.to_string())
            .or_default()
            .insert(volume.to_string(), mv);
    }

    /// Clears back-off so a changed object is tried at once.
    pub fn clear_backoff(&mut self, uid: &str) {
        self.failures.retain(|(u, _), _| u != uid);
    }

    /// The last error of each unmounted volume of a pod.
    pub fn errors_of(&self, uid: &str) -> Vec<(String, VolumeError)> {
        let mut v: Vec<(String, VolumeError)> = self
            .failures
            .iter()
            .filter(|((u, _), _)| u == uid)
            .map(|((_, name), f)| (name.clone(), f.error.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::PluginKind;
    use k8s_openapi::api::core::v1::{PodSpec, Volume};

    fn pod(volumes: &[&str]) -> Arc<Pod> {
        Arc::new(Pod {
            spec: Some(PodSpec {
                volumes: Some(
                    volumes
                        .iter()
                        .map(|n| Volume {
                            name: n.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn mv(kind: PluginKind) -> MountedVolume {
        MountedVolume {
            kind,
            host_path: "/x".into(),
            read_only: false,
            block: false,
        }
    }

    /// A volume wait is reported once it has lasted the timeout, then at
    /// most once per timeout (upstream: one event per 2 min 3 s wait).
    #[test]
    fn a_long_wait_is_reported_once_per_timeout() {
        let t = Duration::from_secs(123);
        let start = Instant::now();
        let mut w = MountWait {
            since: start,
            reported: None,
        };
        assert!(!w.due(start + Duration::from_secs(5), t));
        assert!(!w.due(start + Duration::from_secs(122), t));
        assert!(w.due(start + t, t));
        assert!(!w.due(start + t + Duration::from_secs(5), t));
        assert!(w.due(start + t + t, t));
    }

    #[test]
    fn mount_remount_backoff_and_unmount() {
        let mut s = State::default();
        let now = Instant::now();
        s.desired.insert(
            "u".into(),
            DesiredPod {
                pod: pod(&["cm", "dir"]),
                remount: false,
                waiting: None,
            },
        );
        assert_eq!(s.volumes_to_mount(now)[0].2, ["cm", "dir"]);
        s.record_mounted("u", "cm", mv(PluginKind::ConfigMap));
        s.record_failure("u", "dir", VolumeError::Failed("disk".into()), now);
        assert!(s.volumes_to_mount(now).is_empty(), "dir backs off");
        assert_eq!(s.unmounted_volumes("u", &pod(&["cm", "dir"])), ["dir"]);
        let later = now + Duration::from_secs(1);
        assert_eq!(s.volumes_to_mount(later)[0].2, ["dir"]);
        s.record_failure("u", "dir", VolumeError::Failed("disk".into()), now);
        assert_eq!(
            s.failures[&("u".into(), "dir".into())].retry_at,
            now + BACKOFF_INITIAL * 2
        );
        s.record_mounted("u", "dir", mv(PluginKind::EmptyDir));
        s.desired.get_mut("u").unwrap().remount = true;
        // Only content volumes are rewritten.
        assert_eq!(s.volumes_to_mount(now)[0].2, ["cm"]);
        s.desired.clear();
        assert_eq!(s.pods_to_unmount()[0].1.len(), 2);
    }
}
