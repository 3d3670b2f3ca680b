//! Dynamic resource allocation on the node (upstream pkg/kubelet/cm/dra):
//! before a pod's sandbox is made, its ResourceClaims are read from the
//! API server, checked (allocated, reserved for the pod, made for it when
//! from a template) and prepared by their drivers' `NodePrepareResources`;
//! each container gets the CDI devices the drivers named for the claims'
//! requests it uses; once no active pod uses a claim, its drivers'
//! `NodeUnprepareResources` undoes it.
//!
//! The driver calls are futures on the plugins' completion-queue thread,
//! as the device plugins' are: the pod's worker starts them and goes on,
//! the pod waits as `ContainerCreating` and is woken by the answer, so a
//! slow driver holds only the pods that use it. The claim reads are one
//! bounded API request each, on the pod's worker, as upstream's SyncPod
//! makes them.

mod claims;
mod plugin;
mod slices;
mod state;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use grpcio::Environment;
use k8s_openapi::api::core::v1::{Container, Pod};
use rkubelet_util::lock;

use crate::checkpointmanager::CheckpointError;
use crate::client::Client;
use crate::cri::dra::v1::api;
use crate::podutil::PodExt;
use claims::ResourceClaim;
pub use plugin::RegistrationHandler;
use plugin::{Plugin, Store};
pub use slices::SliceWiper;
pub(crate) use state::{ClaimInfo, Device};

/// upstream events.FailedPrepareDynamicResources.
pub const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";

/// A claim a container uses: its devices, each with its driver.
#[derive(Debug, PartialEq)]
pub struct ContainerClaim {
    pub name: String,
    pub namespace: String,
    pub devices: Vec<(String, Device)>,
}

/// Why a pod's claims are not ready for its sandbox yet.
#[derive(Debug, PartialEq)]
pub enum PrepareWait {
    /// The drivers are preparing them; the pod is woken when they answer.
    Pending,
    /// Upstream's error, for the pod's event; the next sync tries again.
    Failed(String),
}

pub struct DraManagerDeps {
    /// The plugins' gRPC environment (its completion-queue thread runs
    /// the driver calls).
    pub grpc_env: Arc<Environment>,
    /// Where claims are read; None in standalone mode.
    pub client: Option<Client>,
    /// Wakes a pod (by UID) whose drivers answered.
    pub on_prepared: Arc<dyn Fn(&str) + Send + Sync>,
}

/// The DRA manager; clones share it.
#[derive(Clone)]
pub struct DraManager {
    inner: Arc<Inner>,
}

struct Inner {
    checkpoint: PathBuf,
    client: Option<Client>,
    env: Arc<Environment>,
    plugins: Arc<Store>,
    wiper: Arc<SliceWiper>,
    state: Mutex<State>,
    on_prepared: Arc<dyn Fn(&str) + Send + Sync>,
}

#[derive(Default)]
struct State {
    claims: Vec<ClaimInfo>,
    /// Pods whose NodePrepareResources calls are under way.
    preparing: HashSet<String>,
    /// Claims (by UID) being prepared, each with the other pods that wait
    /// for it: a claim two pods share is prepared once, not twice at once.
    claims_in_flight: HashMap<String, Vec<String>>,
    /// The error of a pod's last prepare, taken by its next sync.
    failed: HashMap<String, String>,
    /// Claims (by UID) whose NodeUnprepareResources calls are under way.
    unpreparing: HashSet<String>,
}

/// The calls one pod's prepare makes.
struct Plan {
    /// Per driver, the claims it is asked to prepare.
    batches: Vec<(Arc<Plugin>, Vec<api::Claim>)>,
    /// Their UIDs, in flight until the answer.
    batched: Vec<String>,
    /// Some claim is being prepared for another pod.
    waits: bool,
}

impl State {
    /// Adds the pod to each claim's users (new claims get an entry) and
    /// picks what to ask: the claims neither prepared nor in flight.
    /// Checked first, so an error changes nothing.
    fn plan(&mut self, uid: &str, fetched: &[Fetched]) -> Result<Plan, String> {
        for f in fetched {
            check_same_claim(&self.claims, &f.claim)?;
        }
        let mut plan = Plan {
            batches: Vec::new(),
            batched: Vec::new(),
            waits: false,
        };
        for f in fetched {
            let info = claim_entry(&mut self.claims, f);
            info.pod_uids.insert(uid.to_string());
            // A claim with no device to prepare (no driver) needs no call.
            info.prepared |= f.plugins.is_empty();
            if info.prepared {
                continue;
            }
            if let Some(waiters) = self.claims_in_flight.get_mut(&info.claim_uid) {
                waiters.push(uid.to_string());
                plan.waits = true;
                continue;
            }
            self.claims_in_flight
                .insert(info.claim_uid.clone(), Vec::new());
            plan.batched.push(info.claim_uid.clone());
            let claim = info.as_claim();
            for p in &f.plugins {
                match plan.batches.iter_mut().find(|(b, _)| b.driver == p.driver) {
                    Some((_, claims)) => claims.push(claim.clone()),
                    None => plan.batches.push((Arc::clone(p), vec![claim.clone()])),
                }
            }
        }
        Ok(plan)
    }
}

/// A claim read for a pod, with the drivers that prepare it.
struct Fetched {
    claim: ResourceClaim,
    plugins: Vec<Arc<Plugin>>,
}

impl DraManager {
    /// The manager with the claims of `root_dir`'s checkpoint restored; a
    /// checkpoint that cannot be read stops the start, as upstream's does.
    pub fn new(root_dir: &Path, deps: DraManagerDeps) -> Result<DraManager, CheckpointError> {
        let checkpoint = state::path(root_dir);
        let claims = state::load(&checkpoint)?;
        if !claims.is_empty() {
            log::info!(
                "DRA manager: {} prepared claims restored from {}",
                claims.len(),
                checkpoint.display()
            );
        }
        Ok(DraManager {
            inner: Arc::new(Inner {
                checkpoint,
                client: deps.client,
                env: deps.grpc_env,
                plugins: Arc::default(),
                wiper: Arc::new(SliceWiper::new()),
                state: Mutex::new(State {
                    claims,
                    ..State::default()
                }),
                on_prepared: deps.on_prepared,
            }),
        })
    }

    /// The plugin manager's handler of "DRAPlugin" registrations.
    pub fn registration_handler(&self) -> RegistrationHandler {
        RegistrationHandler {
            env: Arc::clone(&self.inner.env),
            store: Arc::clone(&self.inner.plugins),
            wiper: Arc::clone(&self.inner.wiper),
        }
    }

    /// The ResourceSlice wipes, run by the node-status thread.
    pub fn slice_wiper(&self) -> Arc<SliceWiper> {
        Arc::clone(&self.inner.wiper)
    }

    /// Upstream PrepareResources, before the pod's sandbox is made: `Ok`
    /// once every claim of the pod is prepared.
    pub fn prepare_resources(&self, pod: &Pod) -> Result<(), PrepareWait> {
        let has_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .is_some_and(|c| !c.is_empty());
        if !has_claims {
            return Ok(());
        }
        {
            let mut s = lock(&self.inner.state);
            if s.preparing.contains(pod.uid()) {
                return Err(PrepareWait::Pending);
            }
            if let Some(why) = s.failed.remove(pod.uid()) {
                return Err(PrepareWait::Failed(why));
            }
        }
        let fetched = self.inner.fetch_claims(pod).map_err(PrepareWait::Failed)?;
        Arc::clone(&self.inner).start_prepare(pod, fetched)
    }

    /// The CDI device IDs `container` of `pod` gets from the claims'
    /// requests it names (upstream GetResources).
    pub fn cdi_devices(&self, pod: &Pod, container: &Container) -> Result<Vec<String>, String> {
        let used = self.used_claims(pod, container)?;
        Ok(used
            .iter()
            .flat_map(|(info, request)| info.cdi_devices(request))
            .collect())
    }

    /// The claims `container` of `pod` uses, each with the devices that
    /// serve the requests it names (the pod resources API's
    /// DynamicResources); none while one of them is not held here.
    pub fn container_claims(&self, pod: &Pod, container: &Container) -> Vec<ContainerClaim> {
        let used = self.used_claims(pod, container).unwrap_or_default();
        used.into_iter()
            .map(|(info, request)| ContainerClaim {
                devices: info
                    .driver_state
                    .iter()
                    .flat_map(|(driver, d)| {
                        d.devices
                            .iter()
                            .flatten()
                            .map(move |dev| (driver.clone(), dev.clone()))
                    })
                    .filter(|(_, dev)| dev.serves(&request))
                    .collect(),
                name: info.claim_name,
                namespace: info.namespace,
            })
            .collect()
    }

    /// Each claim entry `container` names, with the request it names ("":
    /// all); an entry whose claim is not held here is upstream's internal
    /// error.
    fn used_claims(
        &self,
        pod: &Pod,
        container: &Container,
    ) -> Result<Vec<(ClaimInfo, String)>, String> {
        let uses = container
            .resources
            .as_ref()
            .and_then(|r| r.claims.as_deref())
            .unwrap_or(&[]);
        let pod_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_deref())
            .unwrap_or(&[]);
        let mut used = Vec::new();
        for entry in uses {
            let Some(pod_claim) = pod_claims.iter().find(|c| c.name == entry.name) else {
                continue;
            };
            let Some(named) = claims::claim_name(pod, pod_claim)? else {
                continue;
            };
            let s = lock(&self.inner.state);
            let info = s
                .claims
                .iter()
                .find(|c| c.claim_name == named.name && c.namespace == pod.namespace())
                .ok_or_else(|| {
                    format!(
                        "internal error: unable to get claim info for ResourceClaim {} in namespace {}",
                        named.name,
                        pod.namespace()
                    )
                })?;
            used.push((info.clone(), entry.request.clone().unwrap_or_default()));
        }
        Ok(used)
    }

    /// Housekeeping (upstream's reconcile loop and UnprepareResources):
    /// pods not in `active` stop using their claims; a claim no pod uses
    /// any more is unprepared by its drivers and forgotten. `active` is
    /// asked only while some claim is held; `None` (the sources have not
    /// all delivered) changes nothing.
    pub fn unprepare_inactive(&self, active: impl FnOnce() -> Option<HashSet<String>>) {
        if lock(&self.inner.state).claims.is_empty() {
            return;
        }
        if let Some(active) = active() {
            Arc::clone(&self.inner).unprepare_inactive(&active);
        }
    }
}

impl Inner {
    /// Reads and checks the pod's claims (upstream prepareResources'
    /// validation pass, which changes nothing).
    fn fetch_claims(&self, pod: &Pod) -> Result<Vec<Fetched>, String> {
        let client = self.client.as_ref().ok_or_else(|| {
            "ResourceClaims are read from the API server, and this kubelet runs without one"
                .to_string()
        })?;
        let server = client.server_version();
        let version = claims::api_version(server).ok_or_else(|| {
            format!(
                "the v1.{} control plane serves no ResourceClaim version this kubelet reads \
                 (resource.k8s.io/v1beta1 from v1.32, v1 from v1.34)",
                server.minor
            )
        })?;
        let pod_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_deref())
            .unwrap_or(&[]);
        let mut fetched = Vec::new();
        for pod_claim in pod_claims {
            let Some(named) = claims::claim_name(pod, pod_claim)? else {
                continue;
            };
            let path = claims::claim_path(version, pod.namespace(), &named.name);
            let claim: ResourceClaim = client
                .get(&path)
                .map_err(|e| format!("fetch ResourceClaim {}: {}", named.name, status_text(&e)))?;
            if named.must_check_owner {
                claim.check_owner(pod)?;
            }
            claim.check_reserved(pod)?;
            let plugins = claim
                .drivers()?
                .iter()
                .map(|d| self.plugins.get(d))
                .collect::<Result<Vec<_>, _>>()?;
            fetched.push(Fetched { claim, plugins });
        }
        Ok(fetched)
    }

    /// Records the pod's use of each claim (checkpointed before any call)
    /// and starts the calls for the claims not prepared yet; a claim
    /// another pod's calls are preparing is waited for, not asked again.
    fn start_prepare(self: Arc<Self>, pod: &Pod, fetched: Vec<Fetched>) -> Result<(), PrepareWait> {
        let uid = pod.uid().to_string();
        let plan = {
            let mut s = lock(&self.state);
            let plan = s.plan(&uid, &fetched).map_err(PrepareWait::Failed)?;
            if let Err(e) = state::store(&self.checkpoint, &s.claims) {
                for claim in &plan.batched {
                    s.claims_in_flight.remove(claim);
                }
                return Err(PrepareWait::Failed(format!(
                    "checkpoint ResourceClaim cache: {e}"
                )));
            }
            match (plan.batches.is_empty(), plan.waits) {
                (true, false) => return Ok(()),
                (true, true) => return Err(PrepareWait::Pending),
                _ => s.preparing.insert(uid.clone()),
            };
            plan
        };
        let runner = Arc::clone(&plan.batches[0].0);
        runner.spawn(async move {
            let mut result = Ok(());
            for (plugin, claims) in &plan.batches {
                let answer = plugin.prepare(claims.clone()).await;
                result = answer.and_then(|resp| self.record_prepared(plugin, claims, resp));
                if result.is_err() {
                    break;
                }
            }
            self.prepare_done(&uid, &plan.batched, result);
        });
        Err(PrepareWait::Pending)
    }

    /// One driver's answer (upstream's checks, word for word): each claim's
    /// devices go to its entry.
    fn record_prepared(
        &self,
        plugin: &Plugin,
        asked: &[api::Claim],
        resp: api::NodePrepareResourcesResponse,
    ) -> Result<(), String> {
        let mut s = lock(&self.state);
        for (claim_uid, result) in &resp.claims {
            let Some(claim) = asked.iter().find(|c| &c.uid == claim_uid) else {
                return Err(format!(
                    "NodePrepareResources returned result for unknown claim UID {claim_uid}"
                ));
            };
            if !result.error.is_empty() {
                return Err(format!(
                    "NodePrepareResources failed for ResourceClaim {}: {}",
                    claim.name, result.error
                ));
            }
            let Some(info) = s.claims.iter_mut().find(|c| &c.claim_uid == claim_uid) else {
                return Err(format!(
                    "internal error: unable to get claim info for ResourceClaim {} in namespace {}",
                    claim.name, claim.namespace
                ));
            };
            let devices = result.devices.iter().map(device_from).collect();
            info.driver_state
                .entry(plugin.driver.clone())
                .or_default()
                .devices = Some(devices);
        }
        let unfinished = asked.len().saturating_sub(resp.claims.len());
        if unfinished != 0 {
            return Err(format!(
                "NodePrepareResources skipped {unfinished} ResourceClaims"
            ));
        }
        Ok(())
    }

    /// Every driver answered (or one failed): the claims whose drivers all
    /// prepared them are marked so and checkpointed with their devices;
    /// the pod is woken either way.
    fn prepare_done(&self, uid: &str, batched: &[String], result: Result<(), String>) {
        let mut woken = vec![uid.to_string()];
        {
            let mut s = lock(&self.state);
            s.preparing.remove(uid);
            for claim in batched {
                woken.extend(s.claims_in_flight.remove(claim).unwrap_or_default());
            }
            if result.is_ok() {
                for info in s.claims.iter_mut().filter(|c| c.pod_uids.contains(uid)) {
                    let all = info.driver_state.values().all(|d| d.devices.is_some());
                    info.prepared |= all;
                }
            }
            let stored = state::store(&self.checkpoint, &s.claims)
                .map_err(|e| format!("checkpoint ResourceClaim state: {e}"));
            if let Err(why) = result.and(stored) {
                log::warn!("pod {uid}: prepare dynamic resources: {why}");
                s.failed.insert(uid.to_string(), why);
            }
        }
        // The pods that waited for these claims look again too (and try
        // themselves if the claims failed).
        for pod in &woken {
            (self.on_prepared)(pod);
        }
    }

    fn unprepare_inactive(self: Arc<Self>, active: &HashSet<String>) {
        let unused: Vec<ClaimInfo> = {
            let mut s = lock(&self.state);
            let mut changed = false;
            for info in s.claims.iter_mut() {
                let before = info.pod_uids.len();
                info.pod_uids.retain(|u| active.contains(u));
                changed |= info.pod_uids.len() != before;
            }
            s.failed.retain(|uid, _| active.contains(uid));
            if changed {
                if let Err(e) = state::store(&self.checkpoint, &s.claims) {
                    log::warn!("DRA manager: {e}");
                }
            }
            // Not while a call for it is under way (a pod that went while
            // its claim was being prepared): the next pass takes it.
            let busy = |c: &ClaimInfo| {
                s.unpreparing.contains(&c.claim_uid)
                    || s.claims_in_flight.contains_key(&c.claim_uid)
            };
            let unused: Vec<ClaimInfo> = s
                .claims
                .iter()
                .filter(|c| c.pod_uids.is_empty() && !busy(c))
                .cloned()
                .collect();
            s.unpreparing
                .extend(unused.iter().map(|c| c.claim_uid.clone()));
            unused
        };
        for info in unused {
            Arc::clone(&self).unprepare(info);
        }
    }

    /// Asks each driver of the claim to undo it, one after another in one
    /// future; the claim is forgotten once all have. A driver that is not
    /// registered leaves it for a later housekeeping pass.
    fn unprepare(self: Arc<Self>, info: ClaimInfo) {
        let plugins: Result<Vec<Arc<Plugin>>, String> = info
            .driver_state
            .keys()
            .map(|d| self.plugins.get(d))
            .collect();
        let plugins = match plugins {
            Ok(p) => p,
            Err(why) => {
                log::debug!(
                    "ResourceClaim {}/{}: unprepare waits: {why}",
                    info.namespace,
                    info.claim_name
                );
                lock(&self.state).unpreparing.remove(&info.claim_uid);
                return;
            }
        };
        let Some(runner) = plugins.first().cloned() else {
            self.unprepared(&info, Ok(()));
            return;
        };
        runner.spawn(async move {
            let claim = info.as_claim();
            let mut result = Ok(());
            for plugin in &plugins {
                result = plugin
                    .unprepare(vec![claim.clone()])
                    .await
                    .and_then(|resp| unprepare_result(&claim, &resp));
                if result.is_err() {
                    break;
                }
            }
            self.unprepared(&info, result);
        });
    }

    fn unprepared(&self, info: &ClaimInfo, result: Result<(), String>) {
        let mut s = lock(&self.state);
        s.unpreparing.remove(&info.claim_uid);
        if let Err(why) = result {
            log::warn!(
                "ResourceClaim {}/{}: unprepare dynamic resources: {why}; tried again at the next housekeeping",
                info.namespace,
                info.claim_name
            );
            return;
        }
        // A pod may have started using it again meanwhile.
        s.claims
            .retain(|c| c.claim_uid != info.claim_uid || !c.pod_uids.is_empty());
        if let Err(e) = state::store(&self.checkpoint, &s.claims) {
            log::warn!("DRA manager: {e}");
        }
        log::info!(
            "ResourceClaim {}/{} ({}) unprepared",
            info.namespace,
            info.claim_name,
            info.claim_uid
        );
    }
}

/// Upstream's error for a claim of the same name with another UID still
/// held here.
fn check_same_claim(claims: &[ClaimInfo], claim: &ResourceClaim) -> Result<(), String> {
    let m = &claim.metadata;
    match claims
        .iter()
        .find(|c| c.claim_name == m.name && c.namespace == m.namespace)
    {
        Some(c) if c.claim_uid != m.uid => Err(format!(
            "old ResourceClaim with same name {} and different UID {} still exists \
             (previous pod force-deleted?!)",
            m.name, c.claim_uid
        )),
        _ => Ok(()),
    }
}

/// The cache entry of the fetched claim, made when new.
fn claim_entry<'a>(claims: &'a mut Vec<ClaimInfo>, f: &Fetched) -> &'a mut ClaimInfo {
    let m = &f.claim.metadata;
    let at = claims
        .iter()
        .position(|c| c.claim_name == m.name && c.namespace == m.namespace);
    let i = at.unwrap_or_else(|| {
        claims.push(ClaimInfo {
            claim_uid: m.uid.clone(),
            claim_name: m.name.clone(),
            namespace: m.namespace.clone(),
            driver_state: f
                .plugins
                .iter()
                .map(|p| (p.driver.clone(), state::DriverState::default()))
                .collect(),
            ..ClaimInfo::default()
        });
        claims.len() - 1
    });
    &mut claims[i]
}

/// What client-go's error says: the server's Status message alone (e.g.
/// `resourceclaims.resource.k8s.io "gpu" not found`), else the request and
/// its failure.
fn status_text(e: &crate::client::ApiError) -> String {
    match e {
        crate::client::ApiError::Status { message, .. } if !message.is_empty() => message.clone(),
        other => other.to_string(),
    }
}

fn device_from(d: &api::Device) -> Device {
    Device {
        pool_name: d.pool_name.clone(),
        device_name: d.device_name.clone(),
        request_names: (!d.request_names.is_empty()).then(|| d.request_names.clone()),
        cdi_device_ids: (!d.cdi_device_ids.is_empty()).then(|| d.cdi_device_ids.clone()),
    }
}

fn unprepare_result(
    claim: &api::Claim,
    resp: &api::NodeUnprepareResourcesResponse,
) -> Result<(), String> {
    match resp.claims.get(&claim.uid) {
        None => Err("NodeUnprepareResources skipped 1 ResourceClaims".into()),
        Some(r) if !r.error.is_empty() => Err(format!(
            "NodeUnprepareResources failed for ResourceClaim {}: {}",
            claim.name, r.error
        )),
        Some(_) => Ok(()),
    }
}
