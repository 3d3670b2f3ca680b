//! Container configuration (upstream `kuberuntime_container.go`,
//! `kuberuntime_container_linux.go`, `kubelet_pods.go` for env and mounts).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, EnvVar, HostAlias, Pod};
use protobuf::EnumOrUnknown;

use super::{labels, sandbox, security_context, RuntimeManagerConfig};
use crate::cri::api;
use crate::fieldpath::{self, FieldError, PodFacts};
use crate::podutil::PodExt;
use crate::util::quantity;
use crate::volume::{HostError, MountedVolume, PluginKind};

const MIN_CPU_SHARES: i64 = 2;
const MIN_QUOTA_PERIOD_US: i64 = 1000;

/// Why a container's configuration cannot be made: the message of its
/// CreateContainerConfigError status and Failed event.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    SecurityContext(#[from] security_context::SecurityContextError),
    #[error("unsupported valueFrom (fileKeyRef is not implemented)")]
    FileKeyRef,
    #[error("configMapKeyRef/secretKeyRef need an API server")]
    KeyRefNeedsApiServer,
    #[error("envFrom needs an API server")]
    EnvFromNeedsApiServer,
    /// Reading a ConfigMap or Secret failed.
    #[error(transparent)]
    Lookup(HostError),
    #[error("couldn't find key {key} in {} {namespace}/{name}", .kind.as_str())]
    MissingKey {
        kind: ApiObject,
        namespace: String,
        name: String,
        key: String,
    },
    #[error("{} {name:?} not found", .kind.as_str().to_lowercase())]
    NotFound { kind: ApiObject, name: String },
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error("resourceFieldRef: no container named {0:?}")]
    NoSuchContainer(String),
    #[error("container {container:?}: volumeMount {volume:?}: no such volume is set up")]
    VolumeNotSetUp { container: String, volume: String },
    #[error("{0}")]
    SubPathExpr(String),
    #[error("failed to resolve recursive read-only mode: {0}")]
    RecursiveReadOnly(String),
    /// An image volume with the ImageVolume gate off: upstream's stub
    /// plugin has no path, and makeMounts' GetPath refuses it so.
    #[error("path is empty *image.imagePlugin")]
    ImageVolumeDisabled,
    #[error("volumeMount {volume:?}: {error}")]
    SubPath {
        volume: String,
        error: crate::volume::util::subpath::SubPathError,
    },
    /// A file the kubelet manages for the container (/etc/hosts, the
    /// termination log) could not be written.
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    /// An ephemeral container's target has no instance.
    #[error("unable to find target container {0}")]
    NoTarget(String),
}

/// `what` failed with `error`.
fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ConfigError {
    let what = what.into();
    move |error| ConfigError::Io { what, error }
}

/// What the container config depends on besides the spec.
pub struct ContainerContext<'a> {
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub image_ref: &'a str,
    pub restart_count: u32,
    pub pod_ips: &'a [String],
    pub cfg: &'a RuntimeManagerConfig,
    /// Services, ConfigMaps and Secrets, when there is an API server.
    pub env_source: Option<&'a dyn EnvSource>,
    /// The pod's set-up volumes by name (upstream GetMountedVolumesForPod).
    pub volumes: &'a HashMap<String, MountedVolume>,
    /// The image references pulled for the image volumes the container
    /// mounts, by volume name; empty while the ImageVolume gate is off.
    pub image_volumes: &'a HashMap<String, String>,
    /// The node's IPs for `status.hostIP(s)` (upstream: from the Node).
    pub host_ips: &'a [String],
    /// The image's user, looked up when `runAsNonRoot` must be verified.
    pub image_user: Option<&'a security_context::ImageUser>,
    /// The sandbox's namespaces (its user namespace included), which the
    /// container shares as upstream's NamespacesForPod gives both.
    pub namespaces: &'a api::NamespaceOption,
    /// The pod's runtime handler mounts read-only volumes recursively
    /// read-only (asked only of a container that wants it).
    pub supports_recursive_read_only: bool,
}

/// The API objects container environments can refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiObject {
    ConfigMap,
    Secret,
}

impl ApiObject {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiObject::ConfigMap => "ConfigMap",
            ApiObject::Secret => "Secret",
        }
    }
}

/// Where the environment's API-backed values come from.
pub trait EnvSource: Send + Sync {
    /// Service-link variables for the pod (upstream getServiceEnvVarMap).
    fn service_env(&self, pod: &Pod) -> Vec<(String, String)>;
    /// A ConfigMap's or Secret's data (Secrets decoded); `Ok(None)` when
    /// it does not exist.
    fn lookup(
        &self,
        kind: ApiObject,
        namespace: &str,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, HostError>;
    /// A Secret as the API holds it (pull secrets); `Ok(None)` when it
    /// does not exist.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<std::sync::Arc<k8s_openapi::api::core::v1::Secret>>, HostError>;
}

pub fn generate_container_config(
    ctx: &ContainerContext<'_>,
) -> Result<api::ContainerConfig, ConfigError> {
    let c = ctx.container;
    if let Some(user) = ctx.image_user {
        security_context::verify_run_as_non_root(ctx.pod, c, user)?;
    }
    let linux = linux_config(ctx)?;
    let env = resolve_env(ctx)?;
    let expand = |v: &Vec<String>| v.iter().map(|s| expand_vars(s, &env)).collect::<Vec<_>>();
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            attempt: ctx.restart_count,
            ..Default::default()
        })
        .into(),
        image: Some(api::ImageSpec {
            image: ctx.image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        })
        .into(),
        command: c.command.as_ref().map(expand).unwrap_or_default(),
        args: c.args.as_ref().map(expand).unwrap_or_default(),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env
            .iter()
            .map(|(k, v)| api::KeyValue {
                key: k.clone(),
                value: v.clone(),
                ..Default::default()
            })
            .collect(),
        mounts: sandbox::map_mount_ids(make_mounts(ctx, &env)?, ctx.namespaces),
        devices: make_block_devices(ctx)?,
        labels: labels::container_labels(ctx.pod, c),
        annotations: labels::container_annotations(ctx.pod, c, ctx.restart_count),
        log_path: format!("{}/{}.log", c.name, ctx.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(linux).into(),
        ..Default::default()
    })
}

/// Adds what the container's device plugins give it (upstream
/// GenerateRunContainerOptions): their environment before the
/// container's own, so the container's wins; their mounts and devices;
/// their annotations where the kubelet set none.
pub fn with_devices(
    mut config: api::ContainerConfig,
    devices: crate::cm::devicemanager::RunOptions,
) -> api::ContainerConfig {
    let mut envs: Vec<api::KeyValue> = devices
        .envs
        .into_iter()
        .map(|(key, value)| api::KeyValue {
            key,
            value,
            ..Default::default()
        })
        .collect();
    envs.append(&mut config.envs);
    config.envs = envs;
    for m in devices.mounts {
        if !config
            .mounts
            .iter()
            .any(|x| x.container_path == m.container_path)
        {
            config.mounts.push(m);
        }
    }
    config.devices.extend(devices.devices);
    for (k, v) in devices.annotations {
        config.annotations.entry(k).or_insert(v);
    }
    config
}

fn linux_config(ctx: &ContainerContext<'_>) -> Result<api::LinuxContainerConfig, ConfigError> {
    let seccomp_root = ctx.cfg.root_dir.join("seccomp");
    let opts = security_context::SecurityOptions {
        seccomp_root: &seccomp_root,
        seccomp_default: ctx.cfg.seccomp_default,
    };
    let mut sc = security_context::container_security_context(ctx.pod, ctx.container, opts)?;
    sc.namespace_options = Some(ctx.namespaces.clone()).into();
    Ok(api::LinuxContainerConfig {
        resources: Some(resources(ctx)).into(),
        security_context: Some(sc).into(),
        ..Default::default()
    })
}

/// Requests and limits as cgroup settings (upstream
/// `calculateLinuxResources`). A limit with no request means request = limit,
/// as the API server defaults it.
fn resources(ctx: &ContainerContext<'_>) -> api::LinuxContainerResources {
    linux_resources(ctx.pod, ctx.container, ctx.cfg)
}

/// The cgroup settings of `container` of `pod`: at its creation, and for
/// an in-place resize (UpdateContainerResources).
pub(super) fn linux_resources(
    pod: &Pod,
    container: &Container,
    cfg: &super::RuntimeManagerConfig,
) -> api::LinuxContainerResources {
    let res = container.resources.as_ref();
    let get = |which: &str, name: &str| {
        let map = match which {
            "limits" => res.and_then(|r| r.limits.as_ref()),
            _ => res.and_then(|r| r.requests.as_ref()),
        };
        map.and_then(|m| m.get(name)).map(|q| q.0.clone())
    };
    let milli = |q: Option<String>| q.and_then(|q| quantity::parse_quantity(&q).ok());
    // A container without its own limit takes the pod-level one, where
    // the pod sets one (upstream getCPULimit / getMemoryLimit).
    let pod_level = crate::cm::helpers::pod_level(pod, true);
    let level = |name: &str| pod_level.get(name).copied().filter(|v| *v > 0);
    let cpu_own = milli(get("limits", "cpu"));
    let cpu_limit = cpu_own.filter(|v| *v > 0).or_else(|| level("cpu"));
    let cpu_request = milli(get("requests", "cpu")).or(cpu_limit);
    let mem_limit = get("limits", "memory")
        .and_then(|q| quantity::parse_quantity_value(&q).ok())
        .filter(|v| *v > 0)
        .or_else(|| level("memory").map(|m| (m + 999).div_euclid(1000)));

    let mut r = api::LinuxContainerResources {
        cpu_shares: cpu_request.map_or(MIN_CPU_SHARES, |m| {
            ((m * 1024) / 1000).max(MIN_CPU_SHARES as i128) as i64
        }),
        memory_limit_in_bytes: mem_limit.unwrap_or(0) as i64,
        oom_score_adj: i64::from(super::qos::oom_score_adj(
            pod,
            container,
            cfg.machine_memory,
        )),
        ..Default::default()
    };
    if let (Some(limit), true) = (cpu_limit, cfg.cpu_cfs_quota) {
        let period = cfg.cpu_cfs_quota_period_us;
        r.cpu_period = period;
        r.cpu_quota = ((limit as i64 * period) / 1000).max(MIN_QUOTA_PERIOD_US);
    }
    r.hugepage_limits = super::hugepages::limits(&cfg.hugepage_sizes, pod, container);
    cfg.swap.apply(pod, container, &mut r);
    super::oom_group::apply(cfg, &mut r);
    r
}

/// The container's environment, in spec order, with `$(VAR)` references
/// expanded against the variables defined before them (upstream semantics).
fn resolve_env(ctx: &ContainerContext<'_>) -> Result<Vec<(String, String)>, ConfigError> {
    // Service links first, then envFrom, then env: later ones win, as upstream.
    let mut out: Vec<(String, String)> = match ctx.env_source {
        Some(src) => src.service_env(ctx.pod),
        None => Vec::new(),
    };
    let set = |out: &mut Vec<(String, String)>, name: String, value: String| {
        out.retain(|(k, _)| k != &name);
        out.push((name, value));
    };
    for from in ctx.container.env_from.iter().flatten() {
        for (k, v) in env_from_values(ctx, from)? {
            set(&mut out, k, v);
        }
    }
    for var in ctx.container.env.iter().flatten() {
        // Upstream's status and event carry the cause alone (`configmap
        // "missing" not found`); the log names the container and variable.
        let value = env_value(ctx, var).inspect_err(|e| {
            log::warn!(
                "pod {}: container {:?}: env {:?}: {e}",
                ctx.pod.full_name(),
                ctx.container.name,
                var.name
            )
        })?;
        if let Some(value) = value {
            let value = expand_vars(&value, &out);
            set(&mut out, var.name.clone(), value);
        }
    }
    Ok(out)
}

/// `None` for an optional reference that does not resolve: the variable is
/// left out, as upstream does.
fn env_value(ctx: &ContainerContext<'_>, var: &EnvVar) -> Result<Option<String>, ConfigError> {
    let Some(from) = &var.value_from else {
        return Ok(Some(var.value.clone().unwrap_or_default()));
    };
    if let Some(field) = &from.field_ref {
        return field_value(ctx, &field.field_path).map(Some);
    }
    if let Some(sel) = &from.resource_field_ref {
        return resource_field_value(ctx, sel).map(Some);
    }
    let ns = ctx.pod.namespace();
    let (kind, name, key, optional) = if let Some(r) = &from.config_map_key_ref {
        (
            ApiObject::ConfigMap,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
        )
    } else if let Some(r) = &from.secret_key_ref {
        (
            ApiObject::Secret,
            &r.name,
            &r.key,
            r.optional.unwrap_or(false),
        )
    } else {
        return Err(ConfigError::FileKeyRef);
    };
    let src = ctx.env_source.ok_or(ConfigError::KeyRefNeedsApiServer)?;
    match src.lookup(kind, ns, name).map_err(ConfigError::Lookup)? {
        Some(data) => match data.get(key.as_str()) {
            Some(v) => Ok(Some(v.clone())),
            None if optional => Ok(None),
            None => Err(ConfigError::MissingKey {
                kind,
                namespace: ns.to_string(),
                name: name.clone(),
                key: key.clone(),
            }),
        },
        None if optional => Ok(None),
        None => Err(ConfigError::NotFound {
            kind,
            name: name.clone(),
        }),
    }
}

fn env_from_values(
    ctx: &ContainerContext<'_>,
    from: &k8s_openapi::api::core::v1::EnvFromSource,
) -> Result<Vec<(String, String)>, ConfigError> {
    let (kind, name, optional) = if let Some(r) = &from.config_map_ref {
        (ApiObject::ConfigMap, &r.name, r.optional.unwrap_or(false))
    } else if let Some(r) = &from.secret_ref {
        (ApiObject::Secret, &r.name, r.optional.unwrap_or(false))
    } else {
        return Ok(Vec::new());
    };
    let src = ctx.env_source.ok_or(ConfigError::EnvFromNeedsApiServer)?;
    let ns = ctx.pod.namespace();
    let prefix = from.prefix.clone().unwrap_or_default();
    match src.lookup(kind, ns, name).map_err(ConfigError::Lookup)? {
        Some(data) => Ok(data
            .into_iter()
            .map(|(k, v)| (format!("{prefix}{k}"), v))
            .collect()),
        None if optional => Ok(Vec::new()),
        None => Err(ConfigError::NotFound {
            kind,
            name: name.clone(),
        }),
    }
}

fn field_value(ctx: &ContainerContext<'_>, path: &str) -> Result<String, ConfigError> {
    let facts = PodFacts {
        pod_ips: ctx.pod_ips,
        host_ips: ctx.host_ips,
    };
    Ok(fieldpath::field_value(ctx.pod, path, &facts)?)
}

/// `resourceFieldRef`: this container's, or the named container's, limits
/// and requests (node allocatable when no limit is set).
fn resource_field_value(
    ctx: &ContainerContext<'_>,
    sel: &k8s_openapi::api::core::v1::ResourceFieldSelector,
) -> Result<String, ConfigError> {
    let container = match sel.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => ctx.container,
        Some(name) => crate::podutil::find_container(ctx.pod, name)
            .ok_or_else(|| ConfigError::NoSuchContainer(name.to_string()))?,
    };
    Ok(fieldpath::resource_value(
        sel,
        container,
        &ctx.cfg.node_allocatable,
    )?)
}

/// Expands `$(NAME)` from `env`; `$$(NAME)` escapes to `$(NAME)`; unknown
/// references stay as written (upstream `expansion.Expand`).
pub fn expand_vars(input: &str, env: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Volume mounts plus the kubelet-managed files: /etc/hosts and the
/// termination message file.
fn make_mounts(
    ctx: &ContainerContext<'_>,
    env: &[(String, String)],
) -> Result<Vec<api::Mount>, ConfigError> {
    let mut mounts = Vec::new();
    for vm in ctx.container.volume_mounts.iter().flatten() {
        let recursive_read_only =
            super::recursive_read_only::resolve(vm, ctx.supports_recursive_read_only)
                .map_err(ConfigError::RecursiveReadOnly)?;
        let vol = ctx
            .volumes
            .get(vm.name.as_str())
            .ok_or_else(|| ConfigError::VolumeNotSetUp {
                container: ctx.container.name.clone(),
                volume: vm.name.clone(),
            })?;
        let mut host = vol.host_path.clone();
        let expanded = match vm.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
            Some(expr) => Some(expand_sub_path(expr, env).map_err(ConfigError::SubPathExpr)?),
            None => None,
        };
        let sub_path = expanded.as_deref().or(vm.sub_path.as_deref());
        if vol.kind == PluginKind::Image {
            let mut m = super::image_volumes::image_mount(ctx.image_volumes, &vm.name, sub_path)?;
            m.container_path = vm.mount_path.clone();
            m.propagation = propagation(vm.mount_propagation.as_deref());
            m.recursive_read_only = recursive_read_only;
            mounts.push(m);
            continue;
        }
        if let Some(sub) = sub_path.filter(|s| !s.is_empty()) {
            host = crate::volume::util::subpath::safe_sub_path(&host, sub).map_err(|error| {
                ConfigError::SubPath {
                    volume: vm.name.clone(),
                    error,
                }
            })?;
        }
        mounts.push(api::Mount {
            container_path: vm.mount_path.clone(),
            host_path: host.to_string_lossy().into_owned(),
            readonly: vm.read_only.unwrap_or(false) || vol.read_only,
            propagation: propagation(vm.mount_propagation.as_deref()),
            recursive_read_only,
            ..Default::default()
        });
    }
    let already = |mounts: &[api::Mount], p: &str| mounts.iter().any(|m| m.container_path == p);
    if !ctx.pod_ips.is_empty() && !already(&mounts, "/etc/hosts") {
        mounts.push(host_file_mount(&write_etc_hosts(ctx)?, "/etc/hosts"));
    }
    let term_path = ctx
        .container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    if !already(&mounts, &term_path) {
        mounts.push(host_file_mount(&termination_log_file(ctx)?, &term_path));
    }
    Ok(mounts)
}

fn propagation(mode: Option<&str>) -> EnumOrUnknown<api::MountPropagation> {
    EnumOrUnknown::new(match mode {
        Some("HostToContainer") => api::MountPropagation::PROPAGATION_HOST_TO_CONTAINER,
        Some("Bidirectional") => api::MountPropagation::PROPAGATION_BIDIRECTIONAL,
        _ => api::MountPropagation::PROPAGATION_PRIVATE,
    })
}

/// Upstream `ExpandContainerVolumeMounts`: `subPathExpr` with the
/// container's variables; one that is unset or empty is an error, never
/// the whole volume.
fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, String> {
    let mut missing = std::collections::BTreeSet::new();
    let mut rest = expr;
    while let Some(start) = rest.find("$(") {
        if start > 0 && rest[..start].ends_with('$') {
            rest = &rest[start + 2..];
            continue;
        }
        let inner = &rest[start + 2..];
        let Some(end) = inner.find(')') else { break };
        let name = &inner[..end];
        let set = env.iter().rev().find(|(k, _)| k == name);
        if set.is_none_or(|(_, v)| v.is_empty()) {
            missing.insert(name.to_string());
        }
        rest = &inner[end + 1..];
    }
    if !missing.is_empty() {
        let names: Vec<String> = missing.into_iter().collect();
        return Err(format!("missing value for {}", names.join(", ")));
    }
    Ok(expand_vars(expr, env))
}

/// The raw block volumes the container names in `volumeDevices`, through
/// the pod's link to each (upstream makeBlockVolumes): read-write unless
/// the claim is read-only.
fn make_block_devices(ctx: &ContainerContext<'_>) -> Result<Vec<api::Device>, ConfigError> {
    let mut devices = Vec::new();
    for vd in ctx.container.volume_devices.iter().flatten() {
        let vol = ctx
            .volumes
            .get(vd.name.as_str())
            .filter(|v| v.block)
            .ok_or_else(|| ConfigError::VolumeNotSetUp {
                container: ctx.container.name.clone(),
                volume: vd.name.clone(),
            })?;
        devices.push(api::Device {
            container_path: vd.device_path.clone(),
            host_path: vol.host_path.to_string_lossy().into_owned(),
            permissions: if vol.read_only { "r" } else { "mrw" }.into(),
            ..Default::default()
        });
    }
    Ok(devices)
}

fn host_file_mount(host: &Path, container_path: &str) -> api::Mount {
    api::Mount {
        container_path: container_path.to_string(),
        host_path: host.to_string_lossy().into_owned(),
        ..Default::default()
    }
}

/// `<root>/pods/<uid>`: the pod's directory on the node.
pub fn pod_dir(cfg: &RuntimeManagerConfig, pod: &Pod) -> PathBuf {
    cfg.root_dir.join("pods").join(pod.uid())
}

/// The node's own hosts file, what a host-network pod's is made from.
const NODE_ETC_HOSTS: &str = "/etc/hosts";

/// upstream ensureHostsFile: the pod's /etc/hosts, managed by the kubelet.
/// A host-network pod gets the node's file, then its hostAliases (since
/// v1.30 upstream's e2e holds the kubelet to it); any other pod the
/// managed localhost entries, its IPs with its hostname (and domain, when
/// it has a subdomain) and its hostAliases.
fn write_etc_hosts(ctx: &ContainerContext<'_>) -> Result<PathBuf, ConfigError> {
    let pod = ctx.pod;
    let path = pod_dir(ctx.cfg, pod).join("etc-hosts");
    let aliases = pod.spec_or_default().host_aliases.as_deref().unwrap_or(&[]);
    let text = if pod.is_host_network() {
        let node = std::fs::read_to_string(NODE_ETC_HOSTS)
            .map_err(io_error(format!("read {NODE_ETC_HOSTS}")))?;
        format!(
            "# Kubernetes-managed hosts file (host network).\n{node}{}",
            host_alias_entries(aliases)
        )
    } else {
        managed_hosts(ctx, aliases)
    };
    std::fs::create_dir_all(pod_dir(ctx.cfg, pod)).map_err(io_error("create pod directory"))?;
    std::fs::write(&path, text).map_err(io_error(format!("write {}", path.display())))?;
    Ok(path)
}

/// upstream managedHostsFileContent.
fn managed_hosts(ctx: &ContainerContext<'_>, aliases: &[HostAlias]) -> String {
    let pod = ctx.pod;
    let hostname = pod
        .spec_or_default()
        .hostname
        .clone()
        .unwrap_or_else(|| pod.name().to_string());
    let domain = pod
        .spec_or_default()
        .subdomain
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|sub| format!("{sub}.{}.svc.{}", pod.namespace(), ctx.cfg.cluster_domain));
    let mut text = String::from(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    for ip in ctx.pod_ips {
        match &domain {
            Some(d) => text.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
            None => text.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    text.push_str(&host_alias_entries(aliases));
    text
}

/// upstream hostsEntriesFromHostAliases: one line per alias IP.
fn host_alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut text = String::from("\n# Entries added by HostAliases.\n");
    for alias in aliases {
        let names = alias.hostnames.as_deref().unwrap_or(&[]).join("\t");
        text.push_str(&format!("{}\t{names}\n", alias.ip));
    }
    text
}

fn termination_log_file(ctx: &ContainerContext<'_>) -> Result<PathBuf, ConfigError> {
    let dir = pod_dir(ctx.cfg, ctx.pod)
        .join("containers")
        .join(&ctx.container.name);
    std::fs::create_dir_all(&dir).map_err(io_error(format!("create {}", dir.display())))?;
    let path = dir.join(format!("termination-log-{}", ctx.restart_count));
    std::fs::File::create(&path).map_err(io_error(format!("create {}", path.display())))?;
    // Any user the container runs as must be able to write its message,
    // whatever the kubelet's umask (upstream chmods it 0666 too).
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .map_err(io_error(format!("chmod 0666 {}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn var_expansion_matches_upstream() {
        let e = env(&[("A", "x"), ("B", "y")]);
        assert_eq!(expand_vars("$(A)-$(B)", &e), "x-y");
        assert_eq!(expand_vars("$$(A)", &e), "$(A)");
        assert_eq!(expand_vars("$(C)", &e), "$(C)");
        assert_eq!(expand_vars("$(A", &e), "$(A");
        assert_eq!(expand_vars("cost $5", &e), "cost $5");
    }

    #[test]
    fn sub_path_expr_expands_or_names_what_is_missing() {
        let e = env(&[("POD", "web-0"), ("EMPTY", "")]);
        assert_eq!(expand_sub_path("logs/$(POD)", &e), Ok("logs/web-0".into()));
        assert_eq!(
            expand_sub_path("$(NODE)/$(POD)/$(EMPTY)", &e),
            Err("missing value for EMPTY, NODE".into())
        );
        assert_eq!(expand_sub_path("plain", &e), Ok("plain".into()));
    }
}
