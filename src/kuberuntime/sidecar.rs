//! The order a pod's containers stop in when it has sidecars (upstream
//! `terminationOrdering` in `kuberuntime_termination_order.go`): the
//! regular containers first, all at once; then the sidecars, one at a time,
//! in reverse order of declaration — a sidecar declared later may depend on
//! an earlier one, and the app containers may use any of them until they
//! are gone.
//!
//! Kept apart from the kill path itself, which only has to stop each wave
//! before the next and hand later waves what is left of the grace period.

use k8s_openapi::api::core::v1::Pod;

use crate::podutil::{is_restartable_init, PodExt};

/// Upstream gives every container at least this long after its turn came.
const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;

/// Splits the containers to stop into waves, stopped one after another.
/// Without the pod's spec, or without sidecars, everything is one wave.
/// Containers the spec does not know (ephemeral ones, an older spec's)
/// stop with the regular ones.
pub(super) fn termination_waves<T>(
    pod: Option<&Pod>,
    victims: Vec<T>,
    name: impl Fn(&T) -> &str,
) -> Vec<Vec<T>> {
    let sidecars: Vec<&str> = pod
        .map(|p| p.init_containers())
        .unwrap_or_default()
        .iter()
        .filter(|c| is_restartable_init(c))
        .map(|c| c.name.as_str())
        .collect();
    // Wave 0: everything but sidecars; wave k: the k-th sidecar from the end.
    let mut waves: Vec<Vec<T>> = (0..=sidecars.len()).map(|_| Vec::new()).collect();
    for v in victims {
        let wave = sidecars
            .iter()
            .position(|s| *s == name(&v))
            .map_or(0, |i| sidecars.len() - i);
        waves[wave].push(v);
    }
    waves.retain(|w| !w.is_empty());
    waves
}

/// The grace period a later wave gets: what is left after `waited_secs`
/// spent on earlier waves, but never below upstream's minimum, so a sidecar
/// still gets its SIGTERM window when the app containers took all the time.
/// `None` (no grace known) stays `None`: the kill's own default applies.
pub(super) fn remaining_grace(grace: Option<i64>, waited_secs: u64) -> Option<i64> {
    let waited = i64::try_from(waited_secs).unwrap_or(i64::MAX);
    grace.map(|g| {
        if waited == 0 {
            g
        } else {
            g.saturating_sub(waited).max(MINIMUM_GRACE_PERIOD_SECONDS)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};

    fn container(name: &str, sidecar: bool) -> Container {
        Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            ..Default::default()
        }
    }

    fn pod() -> Pod {
        Pod {
            spec: Some(PodSpec {
                init_containers: Some(vec![
                    container("s1", true),
                    container("init", false),
                    container("s2", true),
                    container("s3", true),
                ]),
                containers: vec![container("a", false), container("b", false)],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn waves(pod: Option<&Pod>, names: &[&'static str]) -> Vec<Vec<&'static str>> {
        termination_waves(pod, names.to_vec(), |n| n)
    }

    #[test]
    fn regular_containers_first_then_sidecars_in_reverse() {
        let p = pod();
        assert_eq!(
            waves(Some(&p), &["s1", "a", "s3", "b", "s2"]),
            vec![vec!["a", "b"], vec!["s3"], vec!["s2"], vec!["s1"]]
        );
    }

    #[test]
    fn stopped_sidecars_leave_no_empty_wave() {
        let p = pod();
        assert_eq!(waves(Some(&p), &["s1", "a"]), vec![vec!["a"], vec!["s1"]]);
        // Only sidecars left (the app containers already exited).
        assert_eq!(waves(Some(&p), &["s1", "s3"]), vec![vec!["s3"], vec!["s1"]]);
        assert!(waves(Some(&p), &[]).is_empty());
    }

    #[test]
    fn unknown_names_and_no_spec_stop_at_once() {
        let p = pod();
        assert_eq!(
            waves(Some(&p), &["debugger", "s2", "gone"]),
            vec![vec!["debugger", "gone"], vec!["s2"]]
        );
        assert_eq!(waves(None, &["s1", "a", "s2"]), vec![vec!["s1", "a", "s2"]]);
    }

    #[test]
    fn later_waves_get_what_is_left_of_the_grace_period() {
        assert_eq!(remaining_grace(Some(30), 0), Some(30));
        assert_eq!(remaining_grace(Some(30), 12), Some(18));
        assert_eq!(remaining_grace(Some(30), 29), Some(2));
        assert_eq!(remaining_grace(Some(30), 300), Some(2));
        assert_eq!(remaining_grace(None, 5), None);
        // A zero grace period (force deletion) stays as asked in wave 0.
        assert_eq!(remaining_grace(Some(0), 0), Some(0));
    }
}
