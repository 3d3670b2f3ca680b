//! `spec.activeDeadlineSeconds` (upstream `pkg/kubelet/active_deadline.go`):
//! a pod active on the node longer than its deadline is failed with reason
//! DeadlineExceeded and its containers are stopped. The deadline is read
//! from the current spec on every check, so raising or lowering it on a
//! running pod (the API allows both) takes effect at the next sync; the sync
//! loop's periodic tick syncs every pod past its deadline (upstream
//! ShouldSync).

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, PodStatus};

/// Whether the spec sets `activeDeadlineSeconds` (upstream ShouldSync's
/// first check): only such a pod can be past its deadline.
pub fn has_active_deadline(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.active_deadline_seconds.is_some())
}

/// Upstream pastActiveDeadline: `status` is the kubelet's latest status of
/// the pod (or the API's); the clock starts at its startTime.
pub fn past_active_deadline(pod: &Pod, status: Option<&PodStatus>, now: SystemTime) -> bool {
    let Some(secs) = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds) else {
        return false;
    };
    let Some(start) = status
        .or(pod.status.as_ref())
        .and_then(|s| s.start_time.as_ref())
    else {
        return false;
    };
    let start = SystemTime::from(start.0);
    let allowed = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    now.duration_since(start).unwrap_or_default() >= allowed
}

/// Whether a status is final (Succeeded or Failed): nothing is left to
/// enforce on such a pod.
pub fn is_terminal(status: Option<&PodStatus>) -> bool {
    crate::types::PodPhase::of(status).is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(deadline: Option<i64>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                active_deadline_seconds: deadline,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn started(at: SystemTime) -> PodStatus {
        PodStatus {
            start_time: k8s_openapi::jiff::Timestamp::try_from(at).ok().map(Time),
            ..Default::default()
        }
    }

    /// Upstream TestActiveDeadlineHandler: past, not yet, no deadline, no
    /// start time.
    #[test]
    fn deadline_cases() {
        let now = SystemTime::now();
        let began = started(now - Duration::from_secs(60));
        assert!(past_active_deadline(&pod(Some(30)), Some(&began), now));
        assert!(past_active_deadline(&pod(Some(60)), Some(&began), now));
        assert!(!past_active_deadline(&pod(Some(120)), Some(&began), now));
        assert!(!past_active_deadline(&pod(None), Some(&began), now));
        assert!(!has_active_deadline(&pod(None)) && has_active_deadline(&pod(Some(30))));
        assert!(!past_active_deadline(
            &pod(Some(30)),
            Some(&PodStatus::default()),
            now
        ));
        // Falls back to the API's start time.
        let mut p = pod(Some(30));
        p.status = Some(began.clone());
        assert!(past_active_deadline(&p, None, now));
        // The deadline is read from the spec each time: raising it revives
        // a pod not yet failed, lowering it fails it.
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(600);
        assert!(!past_active_deadline(&p, None, now));
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(1);
        assert!(past_active_deadline(&p, None, now));
    }

    #[test]
    fn terminal_phases() {
        let ph = |p: &str| PodStatus {
            phase: Some(p.into()),
            ..Default::default()
        };
        assert!(is_terminal(Some(&ph("Failed"))));
        assert!(is_terminal(Some(&ph("Succeeded"))));
        assert!(!is_terminal(Some(&ph("Running"))));
        assert!(!is_terminal(None));
    }
}
