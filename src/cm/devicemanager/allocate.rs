//! The calls made for pods (upstream allocateContainerResources and
//! callPreStartContainerRPC), run as futures on the plugins'
//! completion-queue thread: admission has reserved the devices, and the
//! pod's worker is woken when the answer is in, so no thread waits on a
//! plugin and a slow plugin holds only the pods that use it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use super::endpoint::Endpoint;
use super::pod_devices::Allocation;
use super::Inner;
use crate::cri::deviceplugin::v1beta1::api as pluginapi;
use crate::events::EventType;
use crate::podutil::PodExt;

/// Upstream's event reason when a pod's devices cannot be had.
const FAILED_ALLOCATE: &str = "FailedAllocateDevices";

/// One container's reserved devices of one resource, to ask its plugin for.
struct Job {
    container: String,
    resource: String,
    ids: BTreeSet<String>,
    endpoint: Option<Arc<Endpoint>>,
}

impl Inner {
    /// Asks the plugins for every reservation of `pod` that has no answer
    /// yet, one container after another in one future.
    pub(super) fn spawn_allocation(self: &Arc<Self>, pod: &Pod) {
        let uid = pod.uid().to_string();
        let jobs = {
            let mut s = lock(&self.state);
            if !s.allocating.insert(uid.clone()) {
                return;
            }
            let jobs: Vec<Job> = s
                .pods
                .iter()
                .filter(|(u, _, _, d)| *u == uid && d.allocation == Allocation::Reserved)
                .map(|(_, c, r, d)| Job {
                    container: c.to_string(),
                    resource: r.to_string(),
                    ids: d.ids.clone(),
                    endpoint: s.resources.get(r).and_then(|r| r.endpoint.clone()),
                })
                .collect();
            if jobs.is_empty() {
                s.allocating.remove(&uid);
            }
            jobs
        };
        let Some(runner) = jobs.iter().find_map(|j| j.endpoint.clone()) else {
            // No plugin to ask: fail them now, the pod sees why.
            for job in jobs {
                let why = format!("device plugin {} is not registered", job.resource);
                self.finish(pod, &job, Err(why));
            }
            lock(&self.state).allocating.remove(&uid);
            (self.on_allocated)(&uid);
            return;
        };
        let this = Arc::clone(self);
        let pod = pod.clone();
        runner.spawn(async move {
            for job in jobs {
                let result = match &job.endpoint {
                    Some(e) => this.allocate_one(pod.uid(), &job, e).await,
                    None => Err(format!("device plugin {} is not registered", job.resource)),
                };
                this.finish(&pod, &job, result);
            }
            lock(&this.state).allocating.remove(pod.uid());
            (this.on_allocated)(pod.uid());
        });
    }

    /// Sets the pod's failed reservations back to reserved and asks again.
    pub(super) fn retry_allocation(self: &Arc<Self>, pod: &Pod) {
        {
            let mut s = lock(&self.state);
            let failed: Vec<(String, String)> = s
                .pods
                .iter()
                .filter(|(u, _, _, d)| {
                    *u == pod.uid() && matches!(d.allocation, Allocation::Failed { .. })
                })
                .map(|(_, c, r, _)| (c.to_string(), r.to_string()))
                .collect();
            for (c, r) in failed {
                if let Some(d) = s.pods.get_mut(pod.uid(), &c, &r) {
                    d.allocation = Allocation::Reserved;
                }
            }
        }
        self.spawn_allocation(pod);
    }

    /// The preference (when the plugin offers one), then `Allocate`.
    async fn allocate_one(
        &self,
        uid: &str,
        job: &Job,
        e: &Endpoint,
    ) -> Result<pluginapi::ContainerAllocateResponse, String> {
        let mut ids = job.ids.clone();
        if e.options().get_preferred_allocation_available {
            ids = self.preferred(uid, job, e).await;
        }
        let req = pluginapi::AllocateRequest {
            container_requests: vec![pluginapi::ContainerAllocateRequest {
                devices_ids: ids.into_iter().collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let resp = e.allocate(req).await?;
        // upstream: "no containers return in allocation response".
        resp.container_responses
            .into_iter()
            .next()
            .ok_or_else(|| "Allocate: no containers return in allocation response".to_string())
    }

    /// Asks the plugin which devices it would pick and takes them when
    /// they are still free; otherwise keeps the reservation (the answer
    /// is only advice, as upstream treats it).
    async fn preferred(&self, uid: &str, job: &Job, e: &Endpoint) -> BTreeSet<String> {
        let available: Vec<String> = {
            let s = lock(&self.state);
            let in_use = s.pods.in_use(&job.resource);
            let healthy = s
                .resources
                .get(&job.resource)
                .map(|r| r.healthy())
                .unwrap_or_default();
            healthy
                .into_iter()
                .filter(|id| !in_use.contains(id) || job.ids.contains(id))
                .collect()
        };
        let req = pluginapi::PreferredAllocationRequest {
            container_requests: vec![pluginapi::ContainerPreferredAllocationRequest {
                available_deviceIDs: available.clone(),
                allocation_size: job.ids.len() as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let picked: BTreeSet<String> = match e.preferred(req).await {
            Ok(r) => r
                .container_responses
                .into_iter()
                .next()
                .map(|c| c.deviceIDs.into_iter().collect())
                .unwrap_or_default(),
            Err(why) => {
                log::warn!(
                    "device plugin {}: {why}; keeping the devices admission chose",
                    job.resource
                );
                return job.ids.clone();
            }
        };
        let mut s = lock(&self.state);
        let in_use = s.pods.in_use(&job.resource);
        let free =
            |id: &String| available.contains(id) && (!in_use.contains(id) || job.ids.contains(id));
        if picked.len() != job.ids.len() || !picked.iter().all(free) {
            log::info!(
                "device plugin {}: preferred allocation {picked:?} does not fit {} free devices; keeping {:?}",
                job.resource,
                job.ids.len(),
                job.ids
            );
            return job.ids.clone();
        }
        if let Some(d) = s.pods.get_mut(uid, &job.container, &job.resource) {
            d.ids = picked.clone();
        }
        picked
    }

    fn finish(
        &self,
        pod: &Pod,
        job: &Job,
        result: Result<pluginapi::ContainerAllocateResponse, String>,
    ) {
        let mut s = lock(&self.state);
        let Some(d) = s.pods.get_mut(pod.uid(), &job.container, &job.resource) else {
            // The pod went while the plugin answered.
            return;
        };
        let failed = result.as_ref().err().cloned();
        d.allocation = match result {
            Ok(resp) => Allocation::Allocated(resp),
            Err(why) => Allocation::Failed {
                why: format!("device plugin {}: {why}", job.resource),
                at: Instant::now(),
            },
        };
        self.write_checkpoint(&s);
        drop(s);
        if let Some(why) = failed {
            log::warn!(
                "pod {}: container {}: device plugin {}: {why}",
                pod.full_name(),
                job.container,
                job.resource
            );
            self.recorder.pod_event(
                pod,
                EventType::Warning,
                FAILED_ALLOCATE,
                &format!(
                    "container {}: device plugin {}: {why}",
                    job.container, job.resource
                ),
            );
        }
    }

    /// `PreStartContainer` for each resource that asks for it, before this
    /// start of the container.
    pub(super) fn spawn_pre_start(
        self: &Arc<Self>,
        pod: &Pod,
        key: (String, String),
        resources: Vec<(String, BTreeSet<String>)>,
    ) {
        let calls: Vec<(Arc<Endpoint>, Vec<String>)> = {
            let s = lock(&self.state);
            resources
                .into_iter()
                .filter_map(|(r, ids)| {
                    let e = s.resources.get(&r)?.endpoint.clone()?;
                    Some((e, ids.into_iter().collect()))
                })
                .collect()
        };
        let Some(runner) = calls.first().map(|(e, _)| Arc::clone(e)) else {
            self.pre_start_done(&key, Ok(()));
            return;
        };
        let this = Arc::clone(self);
        let pod = pod.clone();
        runner.spawn(async move {
            let mut result = Ok(());
            for (e, ids) in calls {
                if let Err(why) = e.pre_start(ids).await {
                    result = Err(format!("device plugin {}: {why}", e.resource()));
                    break;
                }
            }
            if let Err(why) = &result {
                this.recorder.pod_event(
                    &pod,
                    EventType::Warning,
                    FAILED_ALLOCATE,
                    &format!("container {}: {why}", key.1),
                );
            }
            this.pre_start_done(&key, result);
        });
    }

    fn pre_start_done(&self, key: &(String, String), result: Result<(), String>) {
        {
            let mut s = lock(&self.state);
            s.pre_start_pending.remove(key);
            s.pre_start.insert(key.clone(), result);
        }
        (self.on_allocated)(&key.0);
    }
}
