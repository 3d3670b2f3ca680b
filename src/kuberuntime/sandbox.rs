//! Pod sandbox configuration (upstream `kuberuntime_sandbox.go` and
//! `kuberuntime_sandbox_linux.go`).

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use protobuf::EnumOrUnknown;

use super::labels;
use super::security_context;
use super::RuntimeManagerConfig;
use crate::container::SandboxStatus;
use crate::cri::api;
use crate::podutil::PodExt;
use crate::userns::{Mappings, UsernsManager};

/// The DNS search depth upstream gives cluster-DNS pods.
const CLUSTER_NDOTS: &str = "ndots:5";
const MAX_HOSTNAME_LEN: usize = 63;

pub fn generate_sandbox_config(
    pod: &Pod,
    attempt: u32,
    cfg: &RuntimeManagerConfig,
    userns: Option<&Mappings>,
) -> api::PodSandboxConfig {
    let spec = pod.spec_or_default();
    let host_network = pod.is_host_network();
    let mut config = api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.name().to_string(),
            namespace: pod.namespace().to_string(),
            uid: pod.uid().to_string(),
            attempt,
            ..Default::default()
        })
        .into(),
        // Host-network pods keep the node's hostname (upstream leaves it empty).
        hostname: if host_network {
            String::new()
        } else {
            pod_hostname(pod)
        },
        log_directory: pod_log_dir(&cfg.pod_logs_dir, pod)
            .to_string_lossy()
            .into_owned(),
        dns_config: Some(dns_config(pod, cfg)).into(),
        port_mappings: port_mappings(pod),
        labels: labels::sandbox_labels(pod),
        annotations: labels::sandbox_annotations(pod),
        linux: Some(api::LinuxPodSandboxConfig {
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod, userns)).into(),
                ..security_context::sandbox_security_context(pod)
            })
            .into(),
            // Names in the dotted form (upstream ConvertPodSysctlsVariableToDotsSeparator).
            sysctls: spec
                .security_context
                .as_ref()
                .and_then(|s| s.sysctls.as_ref())
                .into_iter()
                .flatten()
                .map(|s| (crate::sysctl::normalize_name(&s.name), s.value.clone()))
                .collect(),
            // Upstream GetPodCgroupParent: containerd places the sandbox
            // and every container of the pod below it.
            cgroup_parent: cfg
                .pod_cgroups
                .as_ref()
                .map(|n| n.cgroup_parent(pod))
                .unwrap_or_default(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    if let Some(linux) = config.linux.as_mut() {
        super::sandbox_resources::apply(pod, cfg, linux);
    }
    config
}

/// `/var/log/pods/<namespace>_<name>_<uid>`, as upstream.
pub fn pod_log_dir(base: &Path, pod: &Pod) -> std::path::PathBuf {
    base.join(format!("{}_{}_{}", pod.namespace(), pod.name(), pod.uid()))
}

/// The pod's namespaces. `userns` is its own ID block (`hostUsers:
/// false`); without one the pod is in the node's user namespace, said
/// explicitly as upstream does.
pub fn namespace_options(pod: &Pod, userns: Option<&Mappings>) -> api::NamespaceOption {
    let spec = pod.spec_or_default();
    let mode = |node: bool, otherwise: api::NamespaceMode| {
        EnumOrUnknown::new(if node {
            api::NamespaceMode::NODE
        } else {
            otherwise
        })
    };
    api::NamespaceOption {
        network: mode(pod.is_host_network(), api::NamespaceMode::POD),
        pid: if spec.host_pid.unwrap_or(false) {
            EnumOrUnknown::new(api::NamespaceMode::NODE)
        } else if spec.share_process_namespace.unwrap_or(false) {
            EnumOrUnknown::new(api::NamespaceMode::POD)
        } else {
            EnumOrUnknown::new(api::NamespaceMode::CONTAINER)
        },
        ipc: mode(spec.host_ipc.unwrap_or(false), api::NamespaceMode::POD),
        userns_options: Some(user_namespace(userns)).into(),
        ..Default::default()
    }
}

/// Every mount of a container in its pod's own user namespace carries the
/// namespace's ID mappings (upstream applyPlatformSpecificContainerConfig),
/// so files the kubelet wrote for the pod's users (a token for fsUser,
/// fsGroup's files) are theirs inside it too.
pub fn map_mount_ids(mut mounts: Vec<api::Mount>, ns: &api::NamespaceOption) -> Vec<api::Mount> {
    if let Some(userns) = ns.userns_options.as_ref() {
        for m in &mut mounts {
            m.uid_mappings = userns.uids.clone();
            m.gid_mappings = userns.gids.clone();
        }
    }
    mounts
}

/// CRI's UserNamespace: mode POD with the pod's mappings, else NODE.
fn user_namespace(userns: Option<&Mappings>) -> api::UserNamespace {
    let ids = |list: &[crate::userns::IdMapping]| {
        list.iter()
            .map(|m| api::IDMapping {
                host_id: m.host_id,
                container_id: m.container_id,
                length: m.length,
                ..Default::default()
            })
            .collect()
    };
    match userns {
        Some(m) => api::UserNamespace {
            mode: EnumOrUnknown::new(api::NamespaceMode::POD),
            uids: ids(&m.uids),
            gids: ids(&m.gids),
            ..Default::default()
        },
        None => api::UserNamespace {
            mode: EnumOrUnknown::new(api::NamespaceMode::NODE),
            ..Default::default()
        },
    }
}

/// upstream's refusal when the runtime handler cannot give a pod the user
/// namespace it asks for (userns manager GetOrCreateUserNamespaceMappings).
pub const USERNS_UNSUPPORTED: &str =
    "can't set `spec.hostUsers: false`, runtime does not support user namespaces";

/// upstream HandlerSupportsUserNamespaces over CRI Status's runtime
/// handlers: a runtime that lists none (containerd before 2.0) supports
/// none; a handler it does not list is an error.
pub fn handler_supports_user_namespaces(
    handlers: &[api::RuntimeHandler],
    handler: &str,
) -> Result<bool, String> {
    if handlers.is_empty() {
        return Ok(false);
    }
    handlers
        .iter()
        .find(|h| h.name == handler)
        .map(|h| h.features.as_ref().is_some_and(|f| f.user_namespaces))
        .ok_or_else(|| format!("the handler {handler:?} is not known"))
}

/// Upstream GetOrCreateUserNamespaceMappings: a pod with `hostUsers:
/// false` gets its own ID block where the runtime handler supports user
/// namespaces, and is refused (never run in the host's) where it does not
/// or where there is no allocator. `None` for the other pods.
pub fn user_namespace_for(
    pod: &Pod,
    handlers: impl FnOnce() -> Result<Vec<api::RuntimeHandler>, String>,
    handler: &str,
    userns: Option<&UsernsManager>,
) -> Result<Option<Mappings>, String> {
    if pod.spec_or_default().host_users != Some(false) {
        return Ok(None);
    }
    if !handler_supports_user_namespaces(&handlers()?, handler)? {
        return Err(USERNS_UNSUPPORTED.to_string());
    }
    let manager = userns.ok_or_else(|| USERNS_NO_ALLOCATOR.to_string())?;
    manager
        .get_or_create(pod.uid(), true)
        .map_err(|e| e.to_string())
}

/// The user namespace manager could not start (its error was logged).
pub const USERNS_NO_ALLOCATOR: &str =
    "can't set `spec.hostUsers: false`, the user namespace manager is not running";

impl super::KubeRuntimeManager {
    /// The pod's user namespace when its sandbox is made. Asks the
    /// runtime's Status for its handlers' features only for a pod that
    /// wants its own.
    pub(super) fn sandbox_user_namespace(
        &self,
        pod: &Pod,
        handler: &str,
    ) -> Result<Option<Mappings>, String> {
        let handlers = || {
            self.runtime
                .status()
                .map(|s| s.runtime_handlers)
                .map_err(|e| e.to_string())
        };
        user_namespace_for(pod, handlers, handler, self.userns.as_deref())
    }

    /// The ID block the pod's sandbox was made with, for its containers
    /// (read back from the pod's checkpoint).
    pub(super) fn pod_user_namespace(&self, pod: &Pod) -> Result<Option<Mappings>, String> {
        if pod.spec_or_default().host_users != Some(false) {
            return Ok(None);
        }
        let manager = self
            .userns
            .as_deref()
            .ok_or_else(|| USERNS_NO_ALLOCATOR.to_string())?;
        manager
            .get_or_create(pod.uid(), true)
            .map_err(|e| e.to_string())
    }
}

impl super::KubeRuntimeManager {
    /// A sandbox about to be recreated is looked at once more: a relist
    /// that overlapped the runtime going down (a restart) can read a
    /// healthy sandbox as not ready, and a pod worker can act on that
    /// status after a long volume wait, once the runtime is back.
    /// Recreating the sandbox would restart every container of the pod, so
    /// the runtime's answer now decides: the status it gives when the
    /// sandbox stands, `None` when it is recreated (or the inspection
    /// failed). Either way what was seen is logged.
    pub(super) fn sandbox_still_current(&self, pod: &Pod) -> Option<crate::container::PodStatus> {
        let now = self
            .get_pod_status(pod.uid(), pod.name(), pod.namespace())
            .ok()?;
        let changed = super::actions::sandbox_changed(pod, &now).0;
        let seen: Vec<String> = now
            .sandboxes
            .iter()
            .map(|s| format!("{} ready={} ip={:?}", s.id, s.ready, s.ip))
            .collect();
        if changed {
            log::info!(
                "pod {}: sandbox changed, recreated; the runtime has {seen:?}",
                pod.full_name()
            );
            return None;
        }
        log::info!(
            "pod {}: the status read said the sandbox changed; the runtime now has {seen:?}: kept",
            pod.full_name()
        );
        Some(now)
    }
}

/// spec.hostname, else the pod name, cut to a valid DNS label.
fn pod_hostname(pod: &Pod) -> String {
    let name = pod
        .spec_or_default()
        .hostname
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.name());
    let cut = &name[..name.len().min(MAX_HOSTNAME_LEN)];
    cut.trim_end_matches(['-', '.']).to_string()
}

fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    pod.containers()
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| api::PortMapping {
            protocol: EnumOrUnknown::new(match p.protocol.as_deref() {
                Some("UDP") => api::Protocol::UDP,
                Some("SCTP") => api::Protocol::SCTP,
                _ => api::Protocol::TCP,
            }),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
            ..Default::default()
        })
        .collect()
}

/// DNS per dnsPolicy (upstream `pkg/kubelet/network/dns`). ClusterFirst with
/// no clusterDNS configured falls back to the host's resolver, as upstream.
fn dns_config(pod: &Pod, cfg: &RuntimeManagerConfig) -> api::DNSConfig {
    let spec = pod.spec_or_default();
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let host = read_resolv_conf(&cfg.resolv_conf);
    let cluster_first = match policy {
        "ClusterFirst" => !pod.is_host_network(),
        "ClusterFirstWithHostNet" => true,
        _ => false,
    };
    let mut dns = if policy == "None" {
        api::DNSConfig::default()
    } else if cluster_first && !cfg.cluster_dns.is_empty() {
        let domain = &cfg.cluster_domain;
        let ns = pod.namespace();
        let mut searches = vec![
            format!("{ns}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ];
        searches.extend(host.searches.iter().cloned());
        api::DNSConfig {
            servers: cfg.cluster_dns.clone(),
            searches,
            options: vec![CLUSTER_NDOTS.to_string()],
            ..Default::default()
        }
    } else {
        host
    };
    if let Some(custom) = &spec.dns_config {
        dns.servers
            .extend(custom.nameservers.iter().flatten().cloned());
        dns.searches
            .extend(custom.searches.iter().flatten().cloned());
        dns.options
            .extend(custom.options.iter().flatten().map(|o| match &o.value {
                Some(v) => format!("{}:{v}", o.name.as_deref().unwrap_or("")),
                None => o.name.clone().unwrap_or_default(),
            }));
    }
    dns
}

/// The host's nameservers, search domains and options; empty when the file
/// is missing (upstream treats an absent resolv.conf the same way).
fn read_resolv_conf(path: &Path) -> api::DNSConfig {
    let mut dns = api::DNSConfig::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        return dns;
    };
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => dns.servers.extend(words.next().map(str::to_string)),
            Some("search") => dns.searches = words.map(str::to_string).collect(),
            Some("options") => dns.options.extend(words.map(str::to_string)),
            _ => {}
        }
    }
    dns
}

/// The kubelet's view of a runtime sandbox status.
pub fn to_sandbox_status(s: &api::PodSandboxStatus) -> SandboxStatus {
    let network = s.network.as_ref();
    let host_network = s
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network.enum_value_or_default() == api::NamespaceMode::NODE);
    SandboxStatus {
        id: s.id.clone(),
        ready: s.state.enum_value_or_default() == api::PodSandboxState::SANDBOX_READY,
        attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
        created_at: super::from_unix_nanos(s.created_at),
        ip: network.map(|n| n.ip.clone()).filter(|ip| !ip.is_empty()),
        additional_ips: network
            .map(|n| n.additional_ips.iter().map(|p| p.ip.clone()).collect())
            .unwrap_or_default(),
        host_network,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};

    fn cfg(resolv: &Path) -> RuntimeManagerConfig {
        RuntimeManagerConfig {
            resolv_conf: resolv.to_path_buf(),
            cluster_dns: vec![],
            cluster_domain: "cluster.local".into(),
            ..RuntimeManagerConfig::for_tests()
        }
    }

    fn pod() -> Pod {
        let mut p = Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "web".into(),
                    ports: Some(vec![ContainerPort {
                        container_port: 80,
                        host_port: Some(8080),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        p.metadata.name = Some("web-node1".into());
        p.metadata.namespace = Some("default".into());
        p.metadata.uid = Some("u1".into());
        p
    }

    #[test]
    fn cgroup_parent_in_the_drivers_syntax() {
        use crate::cm::{CgroupName, Driver, PodCgroupNamer};
        let resolv = Path::new("/nonexistent");
        let kubepods = CgroupName::parse_cgroupfs("/").child("kubepods");
        let parent = |driver: Option<Driver>| {
            let mut c = cfg(resolv);
            c.pod_cgroups = driver.map(|d| PodCgroupNamer::new(d, &kubepods));
            generate_sandbox_config(&pod(), 0, &c, None)
                .linux
                .cgroup_parent
                .clone()
        };
        // The pod has no resources: BestEffort.
        assert_eq!(parent(Some(Driver::Cgroupfs)), "/kubepods/besteffort/podu1");
        assert_eq!(
            parent(Some(Driver::Systemd)),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podu1.slice"
        );
        // cgroupsPerQOS off: the runtime decides, as before.
        assert_eq!(parent(None), "");
    }

    #[test]
    fn sandbox_config_carries_identity_logs_and_ports() {
        let dir = std::env::temp_dir().join(format!("rk-resolv-{}", std::process::id()));
        std::fs::write(
            &dir,
            "nameserver 192.0.2.53\nsearch example.org\noptions ndots:2\n",
        )
        .unwrap();
        let c = generate_sandbox_config(&pod(), 3, &cfg(&dir), None);
        let _ = std::fs::remove_file(&dir);
        let md = c.metadata.as_ref().unwrap();
        assert_eq!(
            (md.name.as_str(), md.uid.as_str(), md.attempt),
            ("web-node1", "u1", 3)
        );
        assert_eq!(c.hostname, "web-node1");
        assert!(c.log_directory.ends_with("default_web-node1_u1"));
        assert_eq!(c.labels[labels::POD_UID_LABEL], "u1");
        assert_eq!(c.port_mappings[0].host_port, 8080);
        let dns = c.dns_config.as_ref().unwrap();
        assert_eq!(dns.servers, vec!["192.0.2.53"]);
        assert_eq!(dns.searches, vec!["example.org"]);
        let ns = c.linux.security_context.namespace_options.as_ref().unwrap();
        assert_eq!(ns.network.enum_value_or_default(), api::NamespaceMode::POD);
    }

    #[test]
    fn cluster_dns_and_host_network() {
        let mut cfg = cfg(Path::new("/nonexistent"));
        cfg.cluster_dns = vec!["10.96.0.10".into()];
        let c = generate_sandbox_config(&pod(), 0, &cfg, None);
        let dns = c.dns_config.as_ref().unwrap();
        assert_eq!(dns.servers, vec!["10.96.0.10"]);
        assert_eq!(dns.searches[0], "default.svc.cluster.local");
        let mut hp = pod();
        hp.spec.as_mut().unwrap().host_network = Some(true);
        let c = generate_sandbox_config(&hp, 0, &cfg, None);
        assert_eq!(c.hostname, "");
        let ns = c.linux.security_context.namespace_options.as_ref().unwrap();
        assert_eq!(ns.network.enum_value_or_default(), api::NamespaceMode::NODE);
    }

    #[test]
    fn user_namespaces_need_a_handler_that_says_so() {
        let h = |name: &str, userns: bool| api::RuntimeHandler {
            name: name.into(),
            features: Some(api::RuntimeHandlerFeatures {
                user_namespaces: userns,
                ..Default::default()
            })
            .into(),
            ..Default::default()
        };
        assert_eq!(handler_supports_user_namespaces(&[], ""), Ok(false));
        let handlers = [h("", false), h("kata", true)];
        assert_eq!(handler_supports_user_namespaces(&handlers, ""), Ok(false));
        assert_eq!(
            handler_supports_user_namespaces(&handlers, "kata"),
            Ok(true)
        );
        assert!(handler_supports_user_namespaces(&handlers, "gvisor").is_err());
    }
}

#[cfg(test)]
#[path = "sandbox_userns_tests.rs"]
mod userns_tests;
