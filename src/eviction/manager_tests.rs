//! The manager's rounds after upstream's eviction_manager_test.go, with a
//! fake summary, pod set and killer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::api::*;
use super::rank::*;
use super::tests::*;
use super::*;
use crate::server::stats::types::{FsStats, Summary, Time};

/// Stands in for the kubelet: a summary to return (another after node
/// reclaim), the active pods, and what was killed.
#[derive(Default)]
struct FakeDeps {
    summary: Mutex<Summary>,
    after_reclaim: Mutex<Option<Summary>>,
    pods: Mutex<Vec<Arc<Pod>>>,
    killed: Mutex<Vec<(String, i64, String)>>,
    events: AtomicUsize,
    images_deleted: AtomicUsize,
    containers_deleted: AtomicUsize,
    empty_dir_bytes: Mutex<Option<u64>>,
    /// Summaries asked for with the pods' stats.
    pod_summaries: AtomicUsize,
}

impl EvictionDeps for FakeDeps {
    /// The pods' stats only when asked for, as the kubelet's.
    fn summary(&self, with_pods: bool) -> Result<Summary, DepsError> {
        let mut s = self.summary.lock().unwrap().clone();
        if with_pods {
            self.pod_summaries.fetch_add(1, Ordering::SeqCst);
        } else {
            s.pods.clear();
        }
        Ok(s)
    }
    fn pods_cgroup_memory(&self) -> Option<PodsCgroupMemory> {
        None
    }
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.pods.lock().unwrap().clone()
    }
    fn kill_pod(&self, pod: &Arc<Pod>, grace: i64, message: &str) -> Result<(), DepsError> {
        let name = pod.metadata.name.clone().unwrap();
        self.killed
            .lock()
            .unwrap()
            .push((name, grace, message.into()));
        Ok(())
    }
    fn record_eviction(&self, _pod: &Pod, _message: &str) {
        self.events.fetch_add(1, Ordering::SeqCst);
    }
    fn pod_cleaned_up(&self, _pod: &Pod) -> bool {
        true
    }
    fn has_dedicated_image_fs(&self) -> Result<bool, DepsError> {
        Ok(false)
    }
    fn delete_unused_images(&self) -> Result<(), DepsError> {
        self.images_deleted.fetch_add(1, Ordering::SeqCst);
        if let Some(s) = self.after_reclaim.lock().unwrap().take() {
            *self.summary.lock().unwrap() = s;
        }
        Ok(())
    }
    fn delete_all_unused_containers(&self) -> Result<(), DepsError> {
        self.containers_deleted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn empty_dir_usage(&self, _pod: &Pod, _volume: &str) -> Option<u64> {
        *self.empty_dir_bytes.lock().unwrap()
    }
}

fn manager(thresholds: Vec<Threshold>, transition: Duration) -> Arc<Manager> {
    Manager::new(Config {
        thresholds,
        max_pod_grace_period_seconds: 5,
        pressure_transition_period: transition,
        local_storage_capacity_isolation: true,
    })
}

/// A node with 2 GiB where `available` is free, running a BestEffort hog
/// and a Guaranteed pod.
fn memory_node(deps: &FakeDeps, available: u64) {
    let hog = pod("hog").arc();
    let guaranteed = pod("guaranteed")
        .resources(&[], &[("memory", "200Mi"), ("cpu", "100m")])
        .arc();
    let mut s = summary(available, 2 * GI - available);
    // A new sample each time, as the stats provider gives.
    static SAMPLE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(100);
    s.node.memory.as_mut().unwrap().time = Time(SAMPLE.fetch_add(1, Ordering::SeqCst));
    s.pods = vec![pod_stats(&hog, 600 * MI), pod_stats(&guaranteed, 100 * MI)];
    *deps.summary.lock().unwrap() = s;
    *deps.pods.lock().unwrap() = vec![guaranteed, hog];
}

/// upstream TestMemoryPressure: a hard threshold evicts the BestEffort pod
/// at once with grace 1 and upstream's message, reports MemoryPressure,
/// and keeps reporting it for the transition period after it clears.
#[test]
fn hard_memory_threshold_evicts_the_best_effort_pod() {
    let deps = FakeDeps::default();
    let m = manager(
        vec![hard(Signal::MemoryAvailable, mi(1024))],
        Duration::from_secs(300),
    );
    let t0 = Instant::now();
    memory_node(&deps, 1536 * MI);
    assert!(m.synchronize(&deps, t0).is_none());
    assert!(!m.is_under_memory_pressure());
    // No threshold met and no local storage limit: the node's figures only.
    assert_eq!(deps.pod_summaries.load(Ordering::SeqCst), 0);

    memory_node(&deps, 512 * MI);
    let evicted = m.synchronize(&deps, t0 + Duration::from_secs(10)).unwrap();
    // Ranking needed the pods' stats (the node-only summary has none).
    assert_eq!(deps.pod_summaries.load(Ordering::SeqCst), 1);
    assert_eq!(evicted.metadata.name.as_deref(), Some("hog"));
    assert!(m.is_under_memory_pressure());
    let killed = deps.killed.lock().unwrap().clone();
    assert_eq!(killed.len(), 1);
    assert_eq!(killed[0].1, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS);
    assert_eq!(
        killed[0].2,
        "The node was low on resource: memory. Threshold quantity: 1Gi, available: 512Mi. \
         Container app was using 600Mi, request is 0, has larger consumption of memory. "
    );
    assert_eq!(deps.events.load(Ordering::SeqCst), 1);
    assert!(crate::metrics::render()
        .contains("kubelet_evictions{eviction_signal=\"memory.available\"}"));
    // Admission refuses BestEffort pods meanwhile.
    assert!(m.admit(&pod("new").0).is_err());

    // Pressure is gone, but the condition stays for the transition period.
    memory_node(&deps, 1536 * MI);
    assert!(m.synchronize(&deps, t0 + Duration::from_secs(20)).is_none());
    assert!(m.is_under_memory_pressure());
    assert!(m
        .synchronize(&deps, t0 + Duration::from_secs(311))
        .is_none());
    assert!(!m.is_under_memory_pressure());
    assert!(m.admit(&pod("new").0).is_ok());
    assert_eq!(deps.killed.lock().unwrap().len(), 1);
}

/// upstream's soft threshold: reported at once, acted on only after its
/// grace period, with evictionMaxPodGracePeriod capped by the pod's own.
#[test]
fn soft_threshold_waits_for_its_grace_period() {
    let deps = FakeDeps::default();
    let soft = Threshold {
        grace_period: Duration::from_secs(60),
        ..hard(Signal::MemoryAvailable, mi(1024))
    };
    let m = manager(vec![soft], Duration::from_secs(300));
    let t0 = Instant::now();
    memory_node(&deps, 512 * MI);
    assert!(m.synchronize(&deps, t0).is_none());
    assert!(m.is_under_memory_pressure(), "the condition does not wait");
    memory_node(&deps, 512 * MI);
    assert!(m.synchronize(&deps, t0 + Duration::from_secs(30)).is_none());
    memory_node(&deps, 512 * MI);
    let evicted = m.synchronize(&deps, t0 + Duration::from_secs(61)).unwrap();
    assert_eq!(evicted.metadata.name.as_deref(), Some("hog"));
    assert_eq!(
        deps.killed.lock().unwrap()[0].1,
        5,
        "evictionMaxPodGracePeriod"
    );
}

/// A sample seen twice is acted on once (upstream thresholdsUpdatedStats),
/// and critical pods are never evicted.
#[test]
fn stale_stats_and_critical_pods_are_not_acted_on() {
    let deps = FakeDeps::default();
    let m = manager(
        vec![hard(Signal::MemoryAvailable, mi(1024))],
        Duration::from_secs(300),
    );
    let t0 = Instant::now();
    memory_node(&deps, 512 * MI);
    assert!(m.synchronize(&deps, t0).is_some());
    // Same sample time: no second eviction.
    assert!(m.synchronize(&deps, t0 + Duration::from_secs(10)).is_none());
    assert_eq!(deps.killed.lock().unwrap().len(), 1);
    // Only a critical pod left.
    let crit = pod("crit").priority(SYSTEM_CRITICAL_PRIORITY).arc();
    let mut s = summary(512 * MI, 1536 * MI);
    s.node.memory.as_mut().unwrap().time = Time(99);
    s.pods = vec![pod_stats(&crit, GI)];
    *deps.summary.lock().unwrap() = s;
    *deps.pods.lock().unwrap() = vec![crit];
    assert!(m.synchronize(&deps, t0 + Duration::from_secs(20)).is_none());
    assert_eq!(deps.killed.lock().unwrap().len(), 1);
}

/// upstream TestDiskPressureNodeFs with reclaim: images and dead
/// containers go first; if that is enough no pod is evicted.
#[test]
fn disk_pressure_reclaims_node_resources_first() {
    let deps = FakeDeps::default();
    let m = manager(
        vec![hard(
            Signal::NodeFsAvailable,
            ThresholdValue::Quantity(i128::from(20 * GI) * 1000),
        )],
        Duration::from_secs(300),
    );
    let p = pod("writer").arc();
    let mut s = summary(GI, GI);
    s.pods = vec![pod_stats(&p, 0)];
    *deps.summary.lock().unwrap() = s.clone();
    *deps.pods.lock().unwrap() = vec![p];
    let mut freed = s.clone();
    freed.node.fs.as_mut().unwrap().available_bytes = Some(30 * GI);
    *deps.after_reclaim.lock().unwrap() = Some(freed);
    let t0 = Instant::now();
    assert!(m.synchronize(&deps, t0).is_none());
    assert!(m.is_under_disk_pressure());
    assert_eq!(deps.images_deleted.load(Ordering::SeqCst), 1);
    assert_eq!(deps.containers_deleted.load(Ordering::SeqCst), 1);
    assert!(deps.killed.lock().unwrap().is_empty());
    // Not enough freed: the pod goes.
    let mut s2 = s;
    s2.node.fs.as_mut().unwrap().time = Time(50);
    *deps.summary.lock().unwrap() = s2;
    assert!(m.synchronize(&deps, t0 + Duration::from_secs(10)).is_some());
    let killed = deps.killed.lock().unwrap();
    assert!(killed[0]
        .2
        .starts_with("The node was low on resource: ephemeral-storage. "));
    assert!(m
        .admit(&pod("critical").priority(SYSTEM_CRITICAL_PRIORITY).0)
        .is_ok());
    assert!(m
        .admit(&pod("any").resources(&[("memory", "1Mi")], &[]).0)
        .is_err());
}

/// upstream TestLocalStorageEviction style: emptyDir sizeLimit and the
/// container ephemeral-storage limit evict with grace 0.
#[test]
fn local_storage_limits_evict() {
    let deps = FakeDeps::default();
    let m = manager(Vec::new(), Duration::from_secs(300));
    let mut b = pod("scratch").resources(&[], &[("ephemeral-storage", "100Mi")]);
    b.spec().volumes = Some(vec![Volume {
        name: "cache".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity("10Mi".into())),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    let p = b.arc();
    let mut s = summary(GI, GI);
    let mut ps = pod_stats(&p, 0);
    ps.containers[0].rootfs = Some(FsStats {
        used_bytes: Some(50 * MI),
        ..Default::default()
    });
    ps.containers[0].logs = Some(FsStats {
        used_bytes: Some(MI),
        ..Default::default()
    });
    s.pods = vec![ps.clone()];
    *deps.summary.lock().unwrap() = s.clone();
    *deps.pods.lock().unwrap() = vec![Arc::clone(&p)];
    *deps.empty_dir_bytes.lock().unwrap() = Some(5 * MI);
    assert!(m.synchronize(&deps, Instant::now()).is_none());
    // A pod with a limit: the pods' stats are read every round.
    assert_eq!(deps.pod_summaries.load(Ordering::SeqCst), 1);
    // The emptyDir outgrows its limit.
    *deps.empty_dir_bytes.lock().unwrap() = Some(11 * MI);
    assert!(m.synchronize(&deps, Instant::now()).is_some());
    {
        let killed = deps.killed.lock().unwrap();
        assert_eq!(killed[0].1, 0);
        assert_eq!(
            killed[0].2,
            "Usage of EmptyDir volume \"cache\" exceeds the limit \"10Mi\". "
        );
    }
    // The container outgrows its own limit (the pod's, which sums the
    // containers', comes first when it is over too).
    *deps.empty_dir_bytes.lock().unwrap() = Some(0);
    ps.containers[0].rootfs.as_mut().unwrap().used_bytes = Some(200 * MI);
    assert_eq!(
        local_storage::violation(&deps, &p, &ps).unwrap().1,
        "ephemeralpodfs.limit"
    );
    let mut two = p.as_ref().clone();
    let mut second = two.spec.as_ref().unwrap().containers[0].clone();
    second.name = "side".into();
    second.resources = None;
    two.spec.as_mut().unwrap().containers.push(second);
    assert_eq!(
        local_storage::violation(&deps, &two, &ps).unwrap(),
        (
            "Container app exceeded its local ephemeral storage limit \"100Mi\". ".to_string(),
            "ephemeralcontainerfs.limit"
        )
    );
}
