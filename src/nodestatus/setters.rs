//! The node status setters (upstream pkg/kubelet/nodestatus/setters.go):
//! each fills in one part of a Node's status in place, in the order the
//! kubelet runs them, and reports the node events upstream records on the
//! way (condition transitions, reboots, schedulability).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints,
    NodeFeatures, NodeRuntimeHandler, NodeRuntimeHandlerFeatures, NodeStatus, NodeSwapStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::machine::{quantity, MachineInfo};
use super::ImageInfo;
use crate::cm::devicemanager::DeviceCapacity;
use crate::container::{RuntimeFeatures, RuntimeHandler};
use crate::stats::FsInfo;
use crate::util::quantity::parse_quantity;

/// Images report at most this many names each (MaxNamesPerImageInNodeStatus).
pub const MAX_NAMES_PER_IMAGE: usize = 5;

use crate::events::EventType;

/// An event about the node, for the kubelet's recorder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEvent {
    pub event_type: EventType,
    pub reason: String,
    pub message: String,
}

impl NodeEvent {
    /// recordNodeStatusEvent: `Node <name> status is now: <reason>`.
    pub fn status(node_name: &str, reason: &str) -> NodeEvent {
        NodeEvent {
            event_type: EventType::Normal,
            reason: reason.to_string(),
            message: format!("Node {node_name} status is now: {reason}"),
        }
    }
}

fn status_mut(node: &mut Node) -> &mut NodeStatus {
    node.status.get_or_insert_with(Default::default)
}

fn node_info_mut(node: &mut Node) -> &mut NodeSystemInfo {
    status_mut(node)
        .node_info
        .get_or_insert_with(Default::default)
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

/// NodeAddress: the addresses detected for this host.
pub fn set_node_address(
    node: &mut Node,
    addresses: Result<Vec<NodeAddress>, String>,
) -> Result<(), String> {
    status_mut(node).addresses = Some(addresses?);
    Ok(())
}

/// What is held back from allocatable: systemReserved, kubeReserved and the
/// hard eviction thresholds (upstream GetNodeAllocatableReservation).
#[derive(Clone, Debug, Default)]
pub struct Reservation {
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub eviction_hard: BTreeMap<String, String>,
}

/// An eviction threshold's value: one type for eviction and allocatable.
pub use crate::eviction::ThresholdValue as Threshold;

/// The eviction signal that reserves `resource` (hardEvictionReservation).
fn eviction_signal_for(resource: &str) -> Option<&'static str> {
    match resource {
        "memory" => Some("memory.available"),
        "ephemeral-storage" => Some("nodefs.available"),
        _ => None,
    }
}

impl Reservation {
    /// The reservation per resource in milli-units, over the container
    /// manager's capacity (cpu, memory, hugepages, ephemeral-storage);
    /// resources with nothing reserved are absent.
    pub fn amounts(&self, capacity: &BTreeMap<String, Quantity>) -> BTreeMap<String, i128> {
        let mut out = BTreeMap::new();
        for (name, cap) in capacity {
            let managed = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
                || name.starts_with("hugepages-");
            if !managed {
                continue;
            }
            let mut total: i128 = 0;
            for map in [&self.system_reserved, &self.kube_reserved] {
                if let Some(v) = map.get(name) {
                    match parse_quantity(v) {
                        Ok(m) => total += m,
                        Err(e) => log::warn!("Ignoring reservation of {name}: {e}"),
                    }
                }
            }
            if let Some(signal) = eviction_signal_for(name) {
                if let Some(v) = self.eviction_hard.get(signal) {
                    match (Threshold::parse(v), parse_quantity(&cap.0)) {
                        (Ok(t), Ok(cap_milli)) => total += t.milli(cap_milli),
                        (Err(e), _) => log::warn!("Ignoring eviction threshold {signal}: {e}"),
                        (_, Err(e)) => log::warn!("Ignoring capacity of {name}: {e}"),
                    }
                }
            }
            if total != 0 {
                out.insert(name.clone(), total);
            }
        }
        out
    }
}

/// Resources named outside the kubernetes.io domain (v1helper.IsExtendedResourceName).
pub fn is_extended_resource_name(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native && !name.starts_with("requests.")
}

/// `hugepages-2Mi` for a 2 MiB page size.
pub fn hugepage_resource_name(page_size: u64) -> String {
    format!(
        "hugepages-{}",
        quantity::binary_si(i128::from(page_size) * 1000)
    )
}

/// MachineInfo: capacity (cpu, memory, huge pages, pods, ephemeral-storage),
/// allocatable (capacity less the reservation), machine and boot IDs.
pub fn set_machine_info(
    node: &mut Node,
    max_pods: i64,
    info: Result<&MachineInfo, String>,
    rootfs: Option<FsInfo>,
    reservation: &Reservation,
    events: &mut Vec<NodeEvent>,
) {
    let name = node_name(node).to_string();
    let pods = Quantity(quantity::decimal_si(i128::from(max_pods) * 1000));
    match info {
        Err(e) => {
            log::error!("Error getting machine info: {e}");
            let cap = status_mut(node)
                .capacity
                .get_or_insert_with(Default::default);
            cap.insert("cpu".into(), Quantity("0".into()));
            cap.insert("memory".into(), Quantity("0".into()));
            cap.insert("pods".into(), pods);
        }
        Ok(info) => {
            let old_boot_id = status_mut(node)
                .node_info
                .as_ref()
                .map(|i| i.boot_id.clone())
                .unwrap_or_default();
            let ni = node_info_mut(node);
            ni.machine_id = info.machine_id.clone();
            ni.system_uuid = info.system_uuid.clone();
            // Only a node with swap says how much (upstream, v1.33+).
            ni.swap = (info.swap_capacity > 0).then_some(NodeSwapStatus {
                capacity: Some(info.swap_capacity as i64),
            });
            let cap = status_mut(node)
                .capacity
                .get_or_insert_with(Default::default);
            let cores = i128::from(info.num_cores) * 1000;
            cap.insert("cpu".into(), Quantity(quantity::decimal_si(cores)));
            let memory = i128::from(info.memory_capacity) * 1000;
            cap.insert("memory".into(), Quantity(quantity::binary_si(memory)));
            for hp in &info.hugepages {
                let bytes = i128::from(hp.page_size) * i128::from(hp.num_pages) * 1000;
                cap.insert(
                    hugepage_resource_name(hp.page_size),
                    Quantity(quantity::binary_si(bytes)),
                );
            }
            cap.insert("pods".into(), pods);
            if let Some(fs) = rootfs {
                let bytes = i128::from(fs.capacity) * 1000;
                cap.insert(
                    "ephemeral-storage".into(),
                    Quantity(quantity::binary_si(bytes)),
                );
            }
            if !old_boot_id.is_empty() && old_boot_id != info.boot_id {
                events.push(NodeEvent {
                    event_type: EventType::Warning,
                    reason: "Rebooted".into(),
                    message: format!("Node {name} has been rebooted, boot id: {}", info.boot_id),
                });
            }
            node_info_mut(node).boot_id = info.boot_id.clone();
        }
    }
    set_allocatable(status_mut(node), reservation);
}

/// The device plugins' part of MachineInfo: each resource's devices in
/// capacity and its healthy ones in allocatable; a resource whose plugin
/// is gone for good stays at zero, so the scheduler stops placing pods
/// that ask for it.
pub fn set_device_plugin_resources(node: &mut Node, devices: &DeviceCapacity) {
    let status = status_mut(node);
    let count = |n: i64| Quantity(n.to_string());
    let cap = status.capacity.get_or_insert_with(Default::default);
    for (name, n, _) in &devices.resources {
        cap.insert(name.clone(), count(*n));
    }
    for name in &devices.removed {
        cap.insert(name.clone(), count(0));
    }
    let alloc = status.allocatable.get_or_insert_with(Default::default);
    for (name, _, healthy) in &devices.resources {
        alloc.insert(name.clone(), count(*healthy));
    }
    for name in &devices.removed {
        alloc.insert(name.clone(), count(0));
    }
}

/// upstream VolumesInUse: the attach-detach controller detaches no volume
/// listed here. Empty is left out, as upstream's omitempty.
pub fn set_volumes_in_use(node: &mut Node, in_use: &[String]) {
    status_mut(node).volumes_in_use = (!in_use.is_empty()).then(|| in_use.to_vec());
}

/// Allocatable = capacity − reservation, never negative, less huge pages
/// from memory.
fn set_allocatable(status: &mut NodeStatus, reservation: &Reservation) {
    let capacity = status.capacity.clone().unwrap_or_default();
    let alloc = status.allocatable.get_or_insert_with(Default::default);
    alloc.retain(|k, _| capacity.contains_key(k) || !is_extended_resource_name(k));
    let reserved = reservation.amounts(&capacity);
    for (name, cap) in &capacity {
        let value = match (reserved.get(name), parse_quantity(&cap.0)) {
            (None, _) => cap.clone(),
            (Some(r), Ok(c)) => Quantity(quantity::for_resource(name, (c - r).max(0))),
            (Some(_), Err(e)) => {
                log::warn!("Capacity of {name}: {e}");
                cap.clone()
            }
        };
        alloc.insert(name.clone(), value);
    }
    for (name, cap) in &capacity {
        if !name.starts_with("hugepages-") {
            continue;
        }
        let mem = alloc.get("memory").and_then(|q| parse_quantity(&q.0).ok());
        if let (Some(mem), Ok(hp)) = (mem, parse_quantity(&cap.0)) {
            let left = quantity::binary_si((mem - hp).max(0));
            alloc.insert("memory".into(), Quantity(left));
        }
    }
}

/// VersionInfo: kernel, OS image, container runtime and kubelet versions.
/// `runtime` is `(name, version)`; without a version the runtime reports
/// as `<name>://Unknown` when its name is known from earlier.
pub fn set_version_info(
    node: &mut Node,
    kernel_version: &str,
    os_image: &str,
    runtime_name: Option<&str>,
    runtime_version: Option<&str>,
    kubelet_version: &str,
) {
    let ni = node_info_mut(node);
    ni.kernel_version = kernel_version.to_string();
    ni.os_image = os_image.to_string();
    if let Some(name) = runtime_name {
        ni.container_runtime_version = format!("{name}://{}", runtime_version.unwrap_or("Unknown"));
    }
    ni.kubelet_version = kubelet_version.to_string();
    // DisableNodeKubeProxyVersion (on by default since v1.31).
    ni.kube_proxy_version = String::new();
}

/// DaemonEndpoints: the kubelet's port.
pub fn set_daemon_endpoints(node: &mut Node, kubelet_port: i32) {
    status_mut(node).daemon_endpoints = Some(NodeDaemonEndpoints {
        kubelet_endpoint: Some(DaemonEndpoint { port: kubelet_port }),
    });
}

/// Images: the largest first, at most `max_images` (-1: all), each with at
/// most five names.
pub fn set_images(node: &mut Node, max_images: i32, images: &[ImageInfo]) {
    let mut sorted: Vec<&ImageInfo> = images.iter().collect();
    // Ties by name: the runtime lists images in no fixed order, and a list
    // that reorders itself would make every node status a change to send.
    sorted.sort_by(|a, b| {
        b.size_bytes
            .cmp(&a.size_bytes)
            .then_with(|| a.names.cmp(&b.names))
    });
    if max_images > -1 {
        sorted.truncate(usize::try_from(max_images).unwrap_or(0));
    }
    let list: Vec<ContainerImage> = sorted
        .into_iter()
        .map(|img| ContainerImage {
            names: Some(
                img.names
                    .iter()
                    .take(MAX_NAMES_PER_IMAGE)
                    .cloned()
                    .collect(),
            ),
            size_bytes: Some(i64::try_from(img.size_bytes).unwrap_or(i64::MAX)),
        })
        .collect();
    // Go's nil slice is omitted from the JSON.
    status_mut(node).images = if list.is_empty() { None } else { Some(list) };
}

/// GoRuntime: operating system and architecture, in Go's names.
pub fn set_go_runtime(node: &mut Node) {
    let ni = node_info_mut(node);
    ni.operating_system = "linux".into();
    ni.architecture = super::machine::go_arch().into();
}

/// RuntimeHandlers: every handler the runtime listed, in its order, both
/// features always stated (this kubelet's RecursiveReadOnlyMounts and
/// UserNamespacesSupport are on, as in v1.33+). A runtime that lists none
/// (containerd before 2.0) leaves the field out.
pub fn set_runtime_handlers(node: &mut Node, handlers: &[RuntimeHandler]) {
    let list: Vec<NodeRuntimeHandler> = handlers
        .iter()
        .map(|h| NodeRuntimeHandler {
            // The default handler's empty name is omitted, as Go's omitempty.
            name: (!h.name.is_empty()).then(|| h.name.clone()),
            features: Some(NodeRuntimeHandlerFeatures {
                recursive_read_only_mounts: Some(h.supports_recursive_read_only_mounts),
                user_namespaces: Some(h.supports_user_namespaces),
            }),
        })
        .collect();
    status_mut(node).runtime_handlers = (!list.is_empty()).then_some(list);
}

/// NodeFeatures: what the runtime said of supplementalGroupsPolicy; a
/// runtime that says nothing of its features leaves the field as it is.
pub fn set_node_features(node: &mut Node, features: Option<RuntimeFeatures>) {
    if let Some(f) = features {
        status_mut(node).features = Some(NodeFeatures {
            supplemental_groups_policy: Some(f.supplemental_groups_policy),
        });
    }
}

/// The three pressure conditions, with upstream's reasons and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pressure {
    Memory,
    Disk,
    Pid,
}

struct PressureText {
    condition: &'static str,
    true_reason: &'static str,
    true_message: &'static str,
    true_event: &'static str,
    false_reason: &'static str,
    false_message: &'static str,
    false_event: &'static str,
}

impl Pressure {
    fn text(self) -> PressureText {
        match self {
            Pressure::Memory => PressureText {
                condition: "MemoryPressure",
                true_reason: "KubeletHasInsufficientMemory",
                true_message: "kubelet has insufficient memory available",
                true_event: "NodeHasInsufficientMemory",
                false_reason: "KubeletHasSufficientMemory",
                false_message: "kubelet has sufficient memory available",
                false_event: "NodeHasSufficientMemory",
            },
            Pressure::Disk => PressureText {
                condition: "DiskPressure",
                true_reason: "KubeletHasDiskPressure",
                true_message: "kubelet has disk pressure",
                true_event: "NodeHasDiskPressure",
                false_reason: "KubeletHasNoDiskPressure",
                false_message: "kubelet has no disk pressure",
                false_event: "NodeHasNoDiskPressure",
            },
            Pressure::Pid => PressureText {
                condition: "PIDPressure",
                true_reason: "KubeletHasInsufficientPID",
                true_message: "kubelet has insufficient PID available",
                true_event: "NodeHasInsufficientPID",
                false_reason: "KubeletHasSufficientPID",
                false_message: "kubelet has sufficient PID available",
                false_event: "NodeHasSufficientPID",
            },
        }
    }
}

/// MemoryPressureCondition / DiskPressureCondition / PIDPressureCondition:
/// the heartbeat is always refreshed; status, reason, message and
/// lastTransitionTime change (with an event) only when the status flips.
pub fn set_pressure_condition(
    node: &mut Node,
    now: &Time,
    kind: Pressure,
    under_pressure: bool,
    events: &mut Vec<NodeEvent>,
) {
    let t = kind.text();
    let name = node_name(node).to_string();
    let conditions = status_mut(node).conditions.get_or_insert_with(Vec::new);
    let idx = match conditions.iter().rposition(|c| c.type_ == t.condition) {
        Some(i) => i,
        None => {
            conditions.push(NodeCondition {
                type_: t.condition.into(),
                status: "Unknown".into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[idx];
    c.last_heartbeat_time = Some(now.clone());
    let (status, reason, message, event) = if under_pressure {
        ("True", t.true_reason, t.true_message, t.true_event)
    } else {
        ("False", t.false_reason, t.false_message, t.false_event)
    };
    if c.status != status {
        c.status = status.into();
        c.reason = Some(reason.into());
        c.message = Some(message.into());
        c.last_transition_time = Some(now.clone());
        events.push(NodeEvent::status(&name, event));
    }
}

/// apimachinery's `errors.NewAggregate(...).Error()`: one message alone,
/// several as `[a, b]`, duplicates dropped.
pub fn aggregate_errors(errors: &[String]) -> Option<String> {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.len() {
        0 => None,
        1 => Some(seen[0].to_string()),
        _ => Some(format!("[{}]", seen.join(", "))),
    }
}

/// ReadyCondition: True "KubeletReady" unless the runtime, network or
/// capacity report errors, then False "KubeletNotReady" with the aggregated
/// errors. lastTransitionTime is kept unless the status flips; a flip of an
/// existing condition records NodeReady or NodeNotReady.
pub fn set_ready_condition(
    node: &mut Node,
    now: &Time,
    errors: &[String],
    events: &mut Vec<NodeEvent>,
) {
    let name = node_name(node).to_string();
    let mut errs: Vec<String> = errors.to_vec();
    let capacity = status_mut(node).capacity.clone().unwrap_or_default();
    let missing: Vec<&str> = ["cpu", "memory", "pods", "ephemeral-storage"]
        .into_iter()
        .filter(|r| !capacity.contains_key(*r))
        .collect();
    if !missing.is_empty() {
        errs.push(format!(
            "missing node capacity for resources: {}",
            missing.join(", ")
        ));
    }
    let mut ready = match aggregate_errors(&errs) {
        None => NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: Some("KubeletReady".into()),
            message: Some("kubelet is posting ready status".into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: None,
        },
        Some(message) => NodeCondition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: Some("KubeletNotReady".into()),
            message: Some(message),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: None,
        },
    };
    let conditions = status_mut(node).conditions.get_or_insert_with(Vec::new);
    match conditions.iter_mut().find(|c| c.type_ == "Ready") {
        Some(existing) => {
            let flipped = existing.status != ready.status;
            ready.last_transition_time = if flipped {
                Some(now.clone())
            } else {
                existing.last_transition_time.clone()
            };
            let became_ready = ready.status == "True";
            *existing = ready;
            if flipped {
                if became_ready {
                    events.push(NodeEvent::status(&name, "NodeReady"));
                } else {
                    log::info!("Node became not ready: {:?}", existing);
                    events.push(NodeEvent::status(&name, "NodeNotReady"));
                }
            }
        }
        None => {
            // Ready goes last (kubernetes#16961); no event for a new condition.
            ready.last_transition_time = Some(now.clone());
            conditions.push(ready);
        }
    }
}

/// recordNodeSchedulableEvent: NodeSchedulable / NodeNotSchedulable when
/// spec.unschedulable differs from what was last seen (initially false).
pub fn record_schedulable_event(
    node: &Node,
    last_unschedulable: &mut bool,
    events: &mut Vec<NodeEvent>,
) {
    let unschedulable = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if unschedulable != *last_unschedulable {
        let reason = if unschedulable {
            "NodeNotSchedulable"
        } else {
            "NodeSchedulable"
        };
        events.push(NodeEvent::status(node_name(node), reason));
        *last_unschedulable = unschedulable;
    }
}
