//! The calls made for pods (upstream allocateContainerResources and
//! callPreStartContainerRPC), run as futures on the plugins'
//! completion-queue thread: admission has reserved the devices, and the
//! pod's worker is woken when the answer is in, so no thread waits on a
//! plugin and a slow plugin holds only the pods that use it.

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

/// The event reason when a pod's devices cannot be had.
const FAILED_ALLOCATE: &str = "FailedAllocateDevices";

/// One container's reserved devices of one resource, to ask its plugin for.
struct Job {
    container: String,
    resource: String,
    ids: Vec<String>,
    endpoint: Option<Arc<Endpoint>>,
}

fn not_registered(resource: &str) -> String {
    format!("device plugin {resource} is not registered")
}

impl Inner {
    /// Asks the plugins for every reservation of `pod` that has no answer
    /// yet, one container after another in one future.
    pub(super) fn spawn_allocation(self: &Arc<Self>, pod: &Pod) {
        let uid = pod.uid();
        let jobs: Vec<Job> = {
            let mut s = lock(&self.state);
            if s.allocating.iter().any(|u| u == uid) {
                return;
            }
            let jobs: Vec<Job> = s
                .pods
                .iter()
                .filter(|h| h.uid == uid && h.allocation == Allocation::Reserved)
                .map(|h| Job {
                    container: h.container.clone(),
                    resource: h.resource.clone(),
                    ids: h.ids.clone(),
                    endpoint: s.endpoint(&h.resource),
                })
                .collect();
            if jobs.is_empty() {
                return;
            }
            s.allocating.push(uid.to_string());
            jobs
        };
        let Some(runner) = jobs.iter().find_map(|j| j.endpoint.clone()) else {
            // No plugin to ask: fail them now, the pod sees why.
            for job in &jobs {
                self.finish(pod, job, Err(not_registered(&job.resource)));
            }
            self.allocation_done(uid);
            return;
        };
        let this = Arc::clone(self);
        let pod = pod.clone();
        runner.spawn(async move {
            for job in &jobs {
                let result = match &job.endpoint {
                    Some(e) => this.allocate_one(pod.uid(), job, e).await,
                    None => Err(not_registered(&job.resource)),
                };
                this.finish(&pod, job, result);
            }
            this.allocation_done(pod.uid());
        });
    }

    fn allocation_done(&self, uid: &str) {
        lock(&self.state).allocating.retain(|u| u != uid);
        (self.on_allocated)(uid);
    }

    /// Sets the pod's failed reservations back to reserved and asks again.
    pub(super) fn retry_allocation(self: &Arc<Self>, pod: &Pod) {
        {
            let mut s = lock(&self.state);
            for h in s.pods.iter_mut() {
                if h.uid == pod.uid() && matches!(h.allocation, Allocation::Failed { .. }) {
                    h.allocation = Allocation::Reserved;
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
        let ids = if e.options().get_preferred_allocation_available {
            self.preferred(uid, job, e).await
        } else {
            job.ids.clone()
        };
        let req = pluginapi::AllocateRequest {
            container_requests: vec![pluginapi::ContainerAllocateRequest {
                devices_ids: ids,
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
    /// they are still free; otherwise keeps the reservation (the answer is
    /// advice, as upstream treats it).
    async fn preferred(&self, uid: &str, job: &Job, e: &Endpoint) -> Vec<String> {
        let available = available_to(&lock(&self.state), job);
        let req = pluginapi::PreferredAllocationRequest {
            container_requests: vec![pluginapi::ContainerPreferredAllocationRequest {
                available_deviceIDs: available,
                allocation_size: job.ids.len() as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut picked: Vec<String> = match e.preferred(req).await {
            Ok(r) => r
                .container_responses
                .into_iter()
                .next()
                .map(|c| c.deviceIDs)
                .unwrap_or_default(),
            Err(why) => {
                log::warn!(
                    "device plugin {}: {why}; keeping the devices admission chose",
                    job.resource
                );
                return job.ids.clone();
            }
        };
        picked.sort();
        picked.dedup();
        // Checked again, under the lock that takes them: another pod may
        // have taken some while the plugin answered.
        let mut s = lock(&self.state);
        let available = available_to(&s, job);
        if picked.len() != job.ids.len() || !picked.iter().all(|id| available.contains(id)) {
            log::info!(
                "device plugin {}: preferred allocation {picked:?} is not {} free devices; keeping {:?}",
                job.resource,
                job.ids.len(),
                job.ids
            );
            return job.ids.clone();
        }
        if let Some(h) = s.pods.get_mut(uid, &job.container, &job.resource) {
            h.ids = picked.clone();
        }
        picked
    }

    fn finish(
        &self,
        pod: &Pod,
        job: &Job,
        result: Result<pluginapi::ContainerAllocateResponse, String>,
    ) {
        let failed = result
            .as_ref()
            .err()
            .map(|why| format!("device plugin {}: {why}", job.resource));
        {
            let mut s = lock(&self.state);
            let Some(h) = s.pods.get_mut(pod.uid(), &job.container, &job.resource) else {
                // The pod went while the plugin answered.
                return;
            };
            h.allocation = match (result, &failed) {
                (Ok(resp), _) => Allocation::Allocated(resp),
                (Err(_), why) => Allocation::Failed {
                    why: why.clone().unwrap_or_default(),
                    at: Instant::now(),
                },
            };
            self.checkpoint_changed();
        }
        if let Some(why) = failed {
            log::warn!(
                "pod {}: container {}: {why}",
                pod.full_name(),
                job.container
            );
            let msg = format!("container {}: {why}", job.container);
            self.recorder
                .pod_event(pod, EventType::Warning, FAILED_ALLOCATE, &msg);
        }
    }

    /// `PreStartContainer` for each resource that asks for it, before this
    /// start of the container.
    pub(super) fn spawn_pre_start(
        self: &Arc<Self>,
        pod: &Pod,
        container: &str,
        resources: Vec<(String, Vec<String>)>,
    ) {
        let calls: Vec<(Arc<Endpoint>, Vec<String>)> = {
            let s = lock(&self.state);
            resources
                .into_iter()
                .filter_map(|(r, ids)| Some((s.endpoint(&r)?, ids)))
                .collect()
        };
        let Some(runner) = calls.first().map(|(e, _)| Arc::clone(e)) else {
            self.pre_start_done(pod.uid(), container, Ok(()));
            return;
        };
        let this = Arc::clone(self);
        let (pod, container) = (pod.clone(), container.to_string());
        runner.spawn(async move {
            let mut result = Ok(());
            for (e, ids) in calls {
                if let Err(why) = e.pre_start(ids).await {
                    result = Err(format!("device plugin {}: {why}", e.resource()));
                    break;
                }
            }
            if let Err(why) = &result {
                let msg = format!("container {container}: {why}");
                this.recorder
                    .pod_event(&pod, EventType::Warning, FAILED_ALLOCATE, &msg);
            }
            this.pre_start_done(pod.uid(), &container, result);
        });
    }

    fn pre_start_done(&self, uid: &str, container: &str, result: Result<(), String>) {
        {
            let mut s = lock(&self.state);
            let p = s
                .pre_start
                .iter_mut()
                .find(|p| p.uid == uid && p.container == container);
            if let Some(p) = p {
                p.result = Some(result);
            }
        }
        (self.on_allocated)(uid);
    }
}

/// Healthy devices of the job's resource that no one else holds (its own
/// reservation counts as free to it).
fn available_to(s: &super::State, job: &Job) -> Vec<String> {
    let in_use = s.pods.in_use(&job.resource);
    let healthy = s
        .resource(&job.resource)
        .map(|r| r.healthy())
        .unwrap_or_default();
    healthy
        .into_iter()
        .filter(|id| !in_use.contains(id) || job.ids.iter().any(|j| j == id))
        .map(String::from)
        .collect()
}
