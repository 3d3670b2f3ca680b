//! Pod-level cpu and memory from the pod cgroup (upstream's CRI stats
//! provider takes them from cadvisor's view of `pod<uid>`:
//! addPodCPUMemoryStats), which counts what the containers' own stats
//! miss: the sandbox, exited containers' page cache, pod overhead.

use std::collections::HashMap;
use std::sync::Arc;

use protobuf::MessageField;

use super::types::{CpuStats, MemoryStats, PodStats, Time};
use super::{api, CpuSample, SummaryProvider};
use crate::cm::{CgroupStats, ContainerManager, Driver};

/// The pod cgroups the summary reads; a seam for tests.
pub trait PodCgroups: Send + Sync {
    /// By pod UID: the pod cgroup's path (driver syntax, cadvisor's `id`)
    /// and its figures.
    fn pod_cgroup_stats(&self) -> HashMap<String, (String, CgroupStats)>;

    /// The cgroup path of container `id` in the pod cgroup `pod`, as
    /// containerd names it under this driver.
    fn container_cgroup(&self, pod: &str, id: &str) -> String;
}

impl PodCgroups for ContainerManager {
    fn pod_cgroup_stats(&self) -> HashMap<String, (String, CgroupStats)> {
        ContainerManager::pod_cgroup_stats(self)
    }

    fn container_cgroup(&self, pod: &str, id: &str) -> String {
        match self.driver() {
            Driver::Cgroupfs => format!("{pod}/{id}"),
            Driver::Systemd => format!("{pod}/cri-containerd-{id}.scope"),
        }
    }
}

pub type SharedPodCgroups = Option<Arc<dyn PodCgroups>>;

/// The summary's memory figures of a cgroup (upstream
/// cadvisorInfoToContainerStats).
pub fn memory_stats(c: &CgroupStats, now: Time) -> Option<MemoryStats> {
    let m = c.memory.as_ref()?;
    Some(MemoryStats {
        time: now,
        available_bytes: m.available(),
        usage_bytes: Some(m.usage),
        working_set_bytes: Some(m.working_set),
        rss_bytes: m.rss,
        page_faults: m.page_faults,
        major_page_faults: m.major_page_faults,
    })
}

/// CPU figures; `nano_cores` comes from the caller's sample cache.
pub fn cpu_stats(usage_ns: u64, nano_cores: Option<u64>, now: Time) -> CpuStats {
    CpuStats {
        time: now,
        usage_nano_cores: nano_cores,
        usage_core_nano_seconds: Some(usage_ns),
    }
}

impl SummaryProvider {
    /// Pod cgroups' figures by pod UID; empty without cgroupsPerQOS.
    pub(super) fn read_pod_cgroups(&self) -> HashMap<String, (String, CgroupStats)> {
        self.pod_cgroups
            .as_ref()
            .map(|p| p.pod_cgroup_stats())
            .unwrap_or_default()
    }

    /// Pod cpu and memory from its cgroup, over what the runtime gave.
    pub(super) fn set_from_cgroup(
        &self,
        cache: &mut HashMap<String, CpuSample>,
        key: &str,
        pod: &mut PodStats,
        cg: &CgroupStats,
    ) {
        let now = Time::now();
        if let Some(usage) = cg.cpu_usage_ns {
            let sample = api::CpuUsage {
                timestamp: now.0,
                usage_core_nano_seconds: MessageField::some(api::UInt64Value {
                    value: usage,
                    ..Default::default()
                }),
                ..Default::default()
            };
            let cores = self.usage_nano_cores(cache, key, &sample);
            pod.cpu = Some(cpu_stats(usage, cores, now));
        }
        if let Some(m) = memory_stats(cg, now) {
            pod.memory = Some(m);
        }
    }
}
