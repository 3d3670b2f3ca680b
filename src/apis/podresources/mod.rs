//! The pod resources API v1 (upstream `pkg/kubelet/apis/podresources`):
//! served on `<root-dir>/pod-resources/kubelet.sock`, it tells monitoring
//! agents which devices (and, with a CPU or memory manager, which CPUs and
//! memory) each container of each pod holds, and which the node has; and
//! the ResourceClaims each container uses, with the devices DRA prepared.
//!
//! The handlers run on the shared gRPC completion-queue thread
//! (`grpc-cq-0`) and only read: the pod list and the device
//! manager's state, each under its own lock, briefly. No thread of its own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use grpcio::{Environment, RpcStatus, RpcStatusCode, Server, ServiceBuilder};
use k8s_openapi::api::core::v1::Pod;

use crate::cm::cpumanager::CpuManager;
use crate::cm::devicemanager::{DeviceManager, Devices};
use crate::cm::dra::{ContainerClaim, DraManager};
use crate::cm::memorymanager::{state::Block, MemoryManager};
use crate::cri::podresources::v1::api;
use crate::cri::podresources::v1::api_grpc::{
    METHOD_POD_RESOURCES_LISTER_GET, METHOD_POD_RESOURCES_LISTER_GET_ALLOCATABLE_RESOURCES,
    METHOD_POD_RESOURCES_LISTER_LIST,
};
use crate::podutil::PodExt;
use crate::util::grpc::{reply, serve_unix};

/// The directory under the root dir (upstream podResourcesDirName).
pub const POD_RESOURCES_DIR: &str = "pod-resources";
/// The socket in it.
pub const SOCKET: &str = "kubelet.sock";

#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    #[error("pod resources directory {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("serving pod resources on {path}: {message}")]
    Serve { path: PathBuf, message: String },
}

/// The pods the API reports: those admitted and not finished (upstream
/// GetActivePods).
pub type PodsProvider = Arc<dyn Fn() -> Vec<Arc<Pod>> + Send + Sync>;

/// What the handlers read.
#[derive(Clone)]
struct Providers {
    pods: PodsProvider,
    devices: DeviceManager,
    cpus: CpuManager,
    memory: MemoryManager,
    dra: DraManager,
}

/// Serves the API until the returned server is dropped. A stale socket of
/// an earlier run is replaced.
pub fn serve(
    env: &Arc<Environment>,
    root_dir: &Path,
    pods: PodsProvider,
    devices: DeviceManager,
    cpus: CpuManager,
    memory: MemoryManager,
    dra: DraManager,
) -> Result<Server, PodResourcesError> {
    let dir = root_dir.join(POD_RESOURCES_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| PodResourcesError::Dir {
        path: dir.clone(),
        source,
    })?;
    let socket = dir.join(SOCKET);
    let fail = |message: String| PodResourcesError::Serve {
        path: socket.clone(),
        message,
    };
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(e.to_string())),
        _ => {}
    }
    let p = Providers {
        pods,
        devices,
        cpus,
        memory,
        dra,
    };
    let (p1, p2, p3) = (p.clone(), p.clone(), p);
    let service = ServiceBuilder::new()
        .add_unary_handler(&METHOD_POD_RESOURCES_LISTER_LIST, move |ctx, _req, sink| {
            reply(ctx, sink, Ok(list(&p1)));
        })
        .add_unary_handler(
            &METHOD_POD_RESOURCES_LISTER_GET_ALLOCATABLE_RESOURCES,
            move |ctx, _req, sink| reply(ctx, sink, Ok(allocatable(&p2))),
        )
        .add_unary_handler(&METHOD_POD_RESOURCES_LISTER_GET, move |ctx, req, sink| {
            reply(ctx, sink, get(&p3, &req));
        })
        .build();
    let server = serve_unix(env, &socket, service).map_err(fail)?;
    log::info!("pod resources API served on {}", socket.display());
    Ok(server)
}

fn list(p: &Providers) -> api::ListPodResourcesResponse {
    api::ListPodResourcesResponse {
        pod_resources: (p.pods)().iter().map(|pod| pod_resources(p, pod)).collect(),
        ..Default::default()
    }
}

/// upstream Get: the named pod among the active ones, or its error text.
fn get(
    p: &Providers,
    req: &api::GetPodResourcesRequest,
) -> Result<api::GetPodResourcesResponse, RpcStatus> {
    let pods = (p.pods)();
    let pod = pods
        .iter()
        .find(|pod| pod.name() == req.pod_name && pod.namespace() == req.pod_namespace)
        .ok_or_else(|| {
            RpcStatus::with_message(
                RpcStatusCode::UNKNOWN,
                format!(
                    "pod {} in namespace {} not found",
                    req.pod_name, req.pod_namespace
                ),
            )
        })?;
    Ok(api::GetPodResourcesResponse {
        pod_resources: Some(pod_resources(p, pod)).into(),
        ..Default::default()
    })
}

/// Every device the device manager knows, one entry per device with its
/// NUMA nodes (upstream containerDevicesFromResourceDeviceInstances), the
/// CPUs the static CPU policy can give, and each NUMA node's allocatable
/// memory under the Static memory policy (none with the default policies).
fn allocatable(p: &Providers) -> api::AllocatableResourcesResponse {
    let devices = p
        .devices
        .allocatable_devices()
        .into_iter()
        .map(|d| container_devices(d.resource, vec![d.id], &d.numa))
        .collect();
    api::AllocatableResourcesResponse {
        devices,
        cpu_ids: p.cpus.allocatable_cpus(),
        memory: container_memory(p.memory.allocatable_memory()),
        ..Default::default()
    }
}

/// A pod's containers: the app containers, and the init containers that
/// keep running beside them (sidecars), as upstream lists them.
fn pod_resources(p: &Providers, pod: &Pod) -> api::PodResources {
    let sidecars = pod
        .init_containers()
        .iter()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let containers = sidecars
        .chain(pod.containers())
        .map(|c| api::ContainerResources {
            name: c.name.clone(),
            devices: p
                .devices
                .container_devices(pod.uid(), &c.name)
                .into_iter()
                .map(|d: Devices| container_devices(d.resource, d.ids, &d.numa))
                .collect(),
            cpu_ids: p.cpus.exclusive_cpus(pod.uid(), &c.name),
            memory: container_memory(p.memory.container_memory(pod.uid(), &c.name)),
            dynamic_resources: dynamic_resources(p.dra.container_claims(pod, c)),
            ..Default::default()
        })
        .collect();
    api::PodResources {
        name: pod.name().to_string(),
        namespace: pod.namespace().to_string(),
        containers,
        ..Default::default()
    }
}

/// The claims a container uses, as upstream's DynamicResources.
fn dynamic_resources(claims: Vec<ContainerClaim>) -> Vec<api::DynamicResource> {
    claims
        .into_iter()
        .map(|c| api::DynamicResource {
            claim_name: c.name,
            claim_namespace: c.namespace,
            claim_resources: c
                .devices
                .into_iter()
                .map(|(driver, d)| api::ClaimResource {
                    cdi_devices: d
                        .cdi_device_ids
                        .unwrap_or_default()
                        .into_iter()
                        .map(|name| api::CDIDevice {
                            name,
                            ..Default::default()
                        })
                        .collect(),
                    driver_name: driver,
                    pool_name: d.pool_name,
                    device_name: d.device_name,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect()
}

/// Memory blocks as the API lists them (upstream containerMemoryFromBlock).
fn container_memory(blocks: Vec<Block>) -> Vec<api::ContainerMemory> {
    blocks
        .into_iter()
        .map(|b| {
            let numa: Vec<i64> = b.numa_affinity.iter().map(|n| i64::from(*n)).collect();
            api::ContainerMemory {
                memory_type: b.kind,
                size: b.size,
                topology: topology(&numa).into(),
                ..Default::default()
            }
        })
        .collect()
}

fn topology(numa: &[i64]) -> Option<api::TopologyInfo> {
    (!numa.is_empty()).then(|| api::TopologyInfo {
        nodes: numa
            .iter()
            .map(|n| api::NUMANode {
                ID: *n,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

fn container_devices(resource: String, ids: Vec<String>, numa: &[i64]) -> api::ContainerDevices {
    api::ContainerDevices {
        resource_name: resource,
        device_ids: ids,
        topology: topology(numa).into(),
        ..Default::default()
    }
}
