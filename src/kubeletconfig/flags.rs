//! Command-line flags with upstream kubelet names (cmd/kubelet/app/options).
//!
//! Every flag that backs a `KubeletConfiguration` field is an `Option` (or
//! an empty-when-unset `Vec`), so "not given" is distinguishable from "given
//! the default value": only flags actually present on the command line
//! override the config file. Boolean flags behave like Go pflag booleans:
//! `--flag`, `--flag=true`, `--flag=false` (but not `--flag false`).

use super::duration::Duration;
use super::types::{KubeletConfiguration, Taint};
use super::VERSION;
use clap::{ArgAction, Parser};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub const DEFAULT_ROOT_DIR: &str = "/var/lib/kubelet";
pub const DEFAULT_CERT_DIR: &str = "/var/lib/kubelet/pki";
/// Upstream's --pod-infra-container-image default.
pub const DEFAULT_POD_INFRA_CONTAINER_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// klog accepts any level, but nothing in the kubelet logs above 10.
pub const MAX_VERBOSITY: u8 = 10;

/// Settings that only come from the command line (upstream `KubeletFlags`),
/// plus the effective `--runonce` and `--v` after merging with the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletFlags {
    /// `--config`: the KubeletConfiguration file, if any.
    pub config_file: Option<PathBuf>,
    /// `--kubeconfig`; `None` means standalone mode (no API server).
    pub kubeconfig: Option<PathBuf>,
    /// `--bootstrap-kubeconfig`.
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// `--hostname-override`.
    pub hostname_override: Option<String>,
    /// `--node-ip`: one IP or a comma-separated dual-stack pair.
    pub node_ip: Option<String>,
    /// `--cert-dir` (default /var/lib/kubelet/pki).
    pub cert_dir: PathBuf,
    /// `--root-dir` (default /var/lib/kubelet).
    pub root_dir: PathBuf,
    /// `--node-labels` key=value pairs.
    pub node_labels: BTreeMap<String, String>,
    /// `--pod-infra-container-image`: kept by image GC (the runtime pulls
    /// and uses its own sandbox image; upstream uses the flag only for this).
    pub pod_infra_container_image: String,
    /// `--runonce` (or `runOnce` in the file; the flag wins).
    pub runonce: bool,
    /// `--v` / `-v` (or `logging.verbosity` in the file; the flag wins).
    pub verbosity: u8,
}

impl Default for KubeletFlags {
    fn default() -> Self {
        KubeletFlags {
            config_file: None,
            kubeconfig: None,
            bootstrap_kubeconfig: None,
            hostname_override: None,
            node_ip: None,
            cert_dir: PathBuf::from(DEFAULT_CERT_DIR),
            root_dir: PathBuf::from(DEFAULT_ROOT_DIR),
            node_labels: BTreeMap::new(),
            pod_infra_container_image: DEFAULT_POD_INFRA_CONTAINER_IMAGE.to_string(),
            runonce: false,
            verbosity: 0,
        }
    }
}

impl KubeletFlags {
    /// Upstream runs without an API server when `--kubeconfig` is omitted.
    #[cfg(test)]
    pub fn is_standalone(&self) -> bool {
        self.kubeconfig.is_none()
    }
}

/// One occurrence of a key/value-list flag, already split into pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pairs(pub Vec<(String, String)>);

/// One occurrence of a comma-separated list flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct List(pub Vec<String>);

/// One occurrence of `--feature-gates`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gates(pub Vec<(String, bool)>);

/// One occurrence of `--register-with-taints`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Taints(pub Vec<Taint>);

/// Go's strconv.ParseBool, which pflag uses for boolean flags.
pub(crate) fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// Like clap's PathBuf parser but accepting `--kubeconfig=""`, which
/// upstream treats as "unset".
fn path_value_parser() -> impl clap::builder::TypedValueParser<Value = PathBuf> {
    use clap::builder::TypedValueParser;
    clap::builder::OsStringValueParser::new().map(PathBuf::from)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    Duration::parse(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_verbosity(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(v) if v <= MAX_VERBOSITY => Ok(v),
        _ => Err(format!("must be an integer between 0 and {MAX_VERBOSITY}")),
    }
}

/// Splits a comma-separated flag value, skipping empty items as pflag does.
fn items(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').filter(|item| !item.is_empty())
}

/// `--node-labels`: `k=v,k2=v2`; a bare key means an empty value
/// (cliflag.ConfigurationMap).
pub(crate) fn parse_node_labels(s: &str) -> Result<Pairs, String> {
    Ok(Pairs(
        items(s)
            .map(|item| match item.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                None => (item.trim().to_string(), String::new()),
            })
            .collect(),
    ))
}

/// Splits `k<sep>v` pairs, rejecting items without the separator
/// (cliflag.MapStringString and friends).
fn parse_pairs(s: &str, sep: char) -> Result<Pairs, String> {
    let mut out = Vec::new();
    for item in items(s) {
        let (k, v) = item
            .split_once(sep)
            .ok_or_else(|| format!("malformed pair {item:?}, expected key{sep}value"))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("malformed pair {item:?}: empty key"));
        }
        out.push((k.to_string(), v.trim().to_string()));
    }
    Ok(Pairs(out))
}

/// `key=value,key2=value2` (cliflag.MapStringString).
pub(crate) fn parse_map_string_string(s: &str) -> Result<Pairs, String> {
    parse_pairs(s, '=')
}

/// `--manifest-url-header 'a:hello,b:again'` (cliflag.ColonSeparatedMultimapStringString).
pub(crate) fn parse_header_pairs(s: &str) -> Result<Pairs, String> {
    parse_pairs(s, ':')
}

/// `--eviction-hard memory.available<1Gi,nodefs.available<10%`.
pub(crate) fn parse_langle_pairs(s: &str) -> Result<Pairs, String> {
    parse_pairs(s, '<')
}

/// `--feature-gates A=true,B=false` (cliflag.MapStringBool).
pub(crate) fn parse_feature_gates(s: &str) -> Result<Gates, String> {
    let Pairs(pairs) = parse_pairs(s, '=')?;
    pairs
        .into_iter()
        .map(|(k, v)| {
            parse_go_bool(&v)
                .map(|b| (k.clone(), b))
                .map_err(|e| format!("invalid value of {k}: {v}, err: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Gates)
}

pub(crate) fn parse_list(s: &str) -> Result<List, String> {
    Ok(List(items(s).map(|i| i.trim().to_string()).collect()))
}

/// `--register-with-taints key=value:Effect,key2:Effect` (utiltaints.parseTaint).
/// Syntax only; key/value/effect validity is checked with the config file's taints.
pub(crate) fn parse_taints(s: &str) -> Result<Taints, String> {
    let mut out = Vec::new();
    for spec in items(s) {
        let (kv, effect) = spec
            .rsplit_once(':')
            .ok_or_else(|| format!("invalid taint spec {spec:?}: expected key[=value]:effect"))?;
        if kv.contains(':') || kv.matches('=').count() > 1 {
            return Err(format!("invalid taint spec {spec:?}"));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        out.push(Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(Taints(out))
}

const ABOUT: &str = "The kubelet is the primary \"node agent\" that runs on each node. \
It takes a set of PodSpecs (from static pod files, an HTTP URL, or the API server) \
and ensures that the containers described in them are running and healthy.";

/// Raw parsed command line.
#[derive(Parser, Debug, Default)]
#[command(
    name = "kubelet",
    display_name = "Kubernetes",
    version = VERSION,
    about = ABOUT,
    disable_version_flag = true,
    allow_negative_numbers = true
)]
pub(crate) struct Cli {
    /// Print version information and quit.
    #[arg(long, action = ArgAction::Version)]
    pub version: Option<bool>,
    /// Number for the log level verbosity (0-10).
    #[arg(short = 'v', long = "v", value_name = "LEVEL", value_parser = parse_verbosity)]
    pub v: Option<u8>,

    // ---- KubeletFlags (not part of KubeletConfiguration) ----
    /// The Kubelet will load its initial configuration from this file. Command-line flags override configuration from this file.
    #[arg(long, value_name = "FILE", value_parser = path_value_parser())]
    pub config: Option<PathBuf>,
    /// Path to a kubeconfig file; providing it enables API server mode, omitting it enables standalone mode.
    #[arg(long, value_name = "FILE", value_parser = path_value_parser())]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig used to obtain a client certificate when --kubeconfig does not exist yet.
    #[arg(long, value_name = "FILE", value_parser = path_value_parser())]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// If non-empty, use this string as identification instead of the actual hostname.
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,
    /// IP address (or comma-separated dual-stack IP addresses) of the node.
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<String>,
    /// The directory where the TLS certs are located [default: /var/lib/kubelet/pki].
    #[arg(long, value_name = "DIR", value_parser = path_value_parser())]
    pub cert_dir: Option<PathBuf>,
    /// Directory path for managing kubelet files (volume mounts, etc) [default: /var/lib/kubelet].
    #[arg(long, value_name = "DIR", value_parser = path_value_parser())]
    pub root_dir: Option<PathBuf>,
    /// Labels to add when registering the node in the cluster (key=value pairs separated by ',').
    #[arg(long, value_name = "K=V,...", value_parser = parse_node_labels, action = ArgAction::Append)]
    pub node_labels: Vec<Pairs>,
    /// The image whose network/ipc namespaces containers in each pod use; image garbage collection never removes it [default: registry.k8s.io/pause:3.10].
    #[arg(long, value_name = "IMAGE")]
    pub pod_infra_container_image: Option<String>,

    // ---- KubeletConfiguration overrides ----
    /// If true, exit after spawning pods from static pod files or remote urls.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub runonce: Option<bool>,
    /// Enable the Kubelet's server.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_server: Option<bool>,
    /// Makes the Kubelet fail to start if swap is enabled on the node.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub fail_swap_on: Option<bool>,
    /// Path to the directory containing static pod files to run, or the path to a single static pod file.
    #[arg(long, value_name = "PATH")]
    pub pod_manifest_path: Option<String>,
    /// Max period between synchronizing running containers and config.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub sync_frequency: Option<Duration>,
    /// Duration between checking config files for new data.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub file_check_frequency: Option<Duration>,
    /// Duration between checking http for new data.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub http_check_frequency: Option<Duration>,
    /// URL for accessing additional Pod specifications to run.
    #[arg(long, value_name = "URL")]
    pub manifest_url: Option<String>,
    /// HTTP headers for --manifest-url, e.g. 'a:hello,b:again'; repeatable.
    #[arg(long, value_name = "KEY:VALUE,...", value_parser = parse_header_pairs, action = ArgAction::Append)]
    pub manifest_url_header: Vec<Pairs>,
    /// The IP address for the Kubelet to serve on.
    #[arg(long, value_name = "IP")]
    pub address: Option<String>,
    /// The port for the Kubelet to serve on.
    #[arg(long, value_name = "PORT")]
    pub port: Option<i32>,
    /// The read-only port for the Kubelet to serve on with no authentication/authorization (0 disables).
    #[arg(long, value_name = "PORT")]
    pub read_only_port: Option<i32>,
    /// The endpoint of the container runtime service, e.g. unix:///run/containerd/containerd.sock.
    #[arg(long, value_name = "ENDPOINT")]
    pub container_runtime_endpoint: Option<String>,
    /// The endpoint of the container image service (defaults to --container-runtime-endpoint).
    #[arg(long, value_name = "ENDPOINT")]
    pub image_service_endpoint: Option<String>,
    /// Enables anonymous requests to the Kubelet server.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub anonymous_auth: Option<bool>,
    /// Use the TokenReview API to determine authentication for bearer tokens.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub authentication_token_webhook: Option<bool>,
    /// The duration to cache responses from the webhook token authenticator.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_ttl: Option<Duration>,
    /// Client CA bundle for x509 client certificate authentication.
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<String>,
    /// Authorization mode for Kubelet server: AlwaysAllow or Webhook.
    #[arg(long, value_name = "MODE")]
    pub authorization_mode: Option<String>,
    /// The duration to cache 'authorized' responses from the webhook authorizer.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,
    /// The duration to cache 'unauthorized' responses from the webhook authorizer.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,
    /// File containing the x509 certificate used for serving HTTPS.
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<String>,
    /// File containing the x509 private key matching --tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub tls_private_key_file: Option<String>,
    /// Comma-separated list of cipher suites for the server.
    #[arg(long, value_name = "SUITE,...", value_parser = parse_list, action = ArgAction::Append)]
    pub tls_cipher_suites: Vec<List>,
    /// Minimum TLS version supported (VersionTLS12, VersionTLS13, ...).
    #[arg(long, value_name = "VERSION")]
    pub tls_min_version: Option<String>,
    /// Auto rotate the kubelet client certificates.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub rotate_certificates: Option<bool>,
    /// Auto-request and rotate the kubelet serving certificates.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub rotate_server_certificates: Option<bool>,
    /// If > 0, limit registry pull QPS to this value. If 0, unlimited.
    #[arg(long, value_name = "QPS")]
    pub registry_qps: Option<i32>,
    /// Maximum size of bursty pulls.
    #[arg(long, value_name = "N")]
    pub registry_burst: Option<i32>,
    /// QPS to limit event creations.
    #[arg(long, value_name = "QPS")]
    pub event_qps: Option<i32>,
    /// Maximum size of bursty event records.
    #[arg(long, value_name = "N")]
    pub event_burst: Option<i32>,
    /// Enables server endpoints for log collection and local running of containers and commands.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_debugging_handlers: Option<bool>,
    /// The port of the localhost healthz endpoint (0 disables).
    #[arg(long, value_name = "PORT")]
    pub healthz_port: Option<i32>,
    /// The IP address for the healthz server to serve on.
    #[arg(long, value_name = "IP")]
    pub healthz_bind_address: Option<String>,
    /// The oom-score-adj value for the kubelet process, in [-1000, 1000].
    #[arg(long, value_name = "N")]
    pub oom_score_adj: Option<i32>,
    /// Domain for this cluster, added to containers' DNS search list.
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Comma-separated list of DNS server IP addresses for pods with dnsPolicy=ClusterFirst.
    #[arg(long, value_name = "IP,...", value_parser = parse_list, action = ArgAction::Append)]
    pub cluster_dns: Vec<List>,
    /// The full path of the directory in which to search for additional third party volume plugins.
    #[arg(long, value_name = "DIR")]
    pub volume_plugin_dir: Option<String>,
    /// Maximum time a streaming connection can be idle before it is closed.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub streaming_connection_idle_timeout: Option<Duration>,
    /// How often the kubelet computes node status.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub node_status_update_frequency: Option<Duration>,
    /// Minimum age for an unused image before it is garbage collected.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub minimum_image_ttl_duration: Option<Duration>,
    /// Disk usage percent after which image garbage collection always runs.
    #[arg(long, value_name = "PERCENT")]
    pub image_gc_high_threshold: Option<i32>,
    /// Disk usage percent before which image garbage collection never runs.
    #[arg(long, value_name = "PERCENT")]
    pub image_gc_low_threshold: Option<i32>,
    /// Interval for calculating and caching volume disk usage.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub volume_stats_agg_period: Option<Duration>,
    /// A set of key=value pairs that describe feature gates for alpha/experimental features.
    #[arg(long, value_name = "NAME=BOOL,...", value_parser = parse_feature_gates, action = ArgAction::Append)]
    pub feature_gates: Vec<Gates>,
    /// Optional absolute name of cgroups to create and run the Kubelet in.
    #[arg(long, value_name = "CGROUP")]
    pub kubelet_cgroups: Option<String>,
    /// Optional absolute name of cgroups for all non-kernel processes not already in a cgroup.
    #[arg(long, value_name = "CGROUP")]
    pub system_cgroups: Option<String>,
    /// Unique identifier for identifying the node in a machine database, i.e. cloudprovider.
    #[arg(long, value_name = "ID")]
    pub provider_id: Option<String>,
    /// Enable creation of QoS cgroup hierarchy.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub cgroups_per_qos: Option<bool>,
    /// Driver that the kubelet uses to manipulate cgroups on the host: cgroupfs or systemd.
    #[arg(long, value_name = "DRIVER")]
    pub cgroup_driver: Option<String>,
    /// Optional root cgroup to use for pods.
    #[arg(long, value_name = "CGROUP")]
    pub cgroup_root: Option<String>,
    /// CPU Manager policy to use: none or static.
    #[arg(long, value_name = "POLICY")]
    pub cpu_manager_policy: Option<String>,
    /// Memory Manager policy to use: None or Static.
    #[arg(long, value_name = "POLICY")]
    pub memory_manager_policy: Option<String>,
    /// Topology Manager policy: none, best-effort, restricted, single-numa-node.
    #[arg(long, value_name = "POLICY")]
    pub topology_manager_policy: Option<String>,
    /// Timeout of all runtime requests except long running ones (pull, logs, exec, attach).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub runtime_request_timeout: Option<Duration>,
    /// How the kubelet sets up hairpin NAT: promiscuous-bridge, hairpin-veth or none.
    #[arg(long, value_name = "MODE")]
    pub hairpin_mode: Option<String>,
    /// Number of Pods that can run on this Kubelet.
    #[arg(long, value_name = "N")]
    pub max_pods: Option<i32>,
    /// The CIDR to use for pod IP addresses, only used in standalone mode.
    #[arg(long, value_name = "CIDR")]
    pub pod_cidr: Option<String>,
    /// Maximum number of processes per pod (-1: node allocatable pid capacity).
    #[arg(long, value_name = "N")]
    pub pod_max_pids: Option<i64>,
    /// Resolver configuration file used as the basis for container DNS resolution.
    #[arg(long, value_name = "FILE")]
    pub resolv_conf: Option<String>,
    /// Enable CPU CFS quota enforcement for containers that specify CPU limits.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub cpu_cfs_quota: Option<bool>,
    /// CPU CFS quota period value, cpu.cfs_period_us.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub cpu_cfs_quota_period: Option<Duration>,
    /// Enables the Attach/Detach controller to manage volume attachment for this node.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub enable_controller_attach_detach: Option<bool>,
    /// If true, kubelet ensures iptables utility rules are present on the host.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub make_iptables_util_chains: Option<bool>,
    /// Maximum size (e.g. 10Mi) of a container log file before it is rotated.
    #[arg(long, value_name = "QUANTITY")]
    pub container_log_max_size: Option<String>,
    /// Maximum number of container log files per container (>= 2).
    #[arg(long, value_name = "N")]
    pub container_log_max_files: Option<i32>,
    /// Maximum number of images to report in Node.Status.Images (-1: no cap).
    #[arg(long, value_name = "N")]
    pub node_status_max_images: Option<i32>,
    /// Use kernel memcg notifications for memory eviction thresholds instead of polling.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub kernel_memcg_notification: Option<bool>,
    /// Enable local ephemeral storage isolation.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub local_storage_capacity_isolation: Option<bool>,
    /// Number of files that can be opened by the Kubelet process.
    #[arg(long, value_name = "N")]
    pub max_open_files: Option<i64>,
    /// Content type of requests sent to apiserver.
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,
    /// QPS to use while talking with the kubernetes apiserver.
    #[arg(long, value_name = "QPS")]
    pub kube_api_qps: Option<i32>,
    /// Burst to use while talking with the kubernetes apiserver.
    #[arg(long, value_name = "N")]
    pub kube_api_burst: Option<i32>,
    /// Pull images one at a time.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub serialize_image_pulls: Option<bool>,
    /// Hard eviction thresholds, e.g. memory.available<1Gi,nodefs.available<10%.
    #[arg(long, value_name = "SIGNAL<QTY,...", value_parser = parse_langle_pairs, action = ArgAction::Append)]
    pub eviction_hard: Vec<Pairs>,
    /// Soft eviction thresholds, e.g. memory.available<1.5Gi.
    #[arg(long, value_name = "SIGNAL<QTY,...", value_parser = parse_langle_pairs, action = ArgAction::Append)]
    pub eviction_soft: Vec<Pairs>,
    /// Grace periods for soft eviction thresholds, e.g. memory.available=1m30s.
    #[arg(long, value_name = "SIGNAL=DURATION,...", value_parser = parse_map_string_string, action = ArgAction::Append)]
    pub eviction_soft_grace_period: Vec<Pairs>,
    /// Minimum reclaims when evicting, e.g. imagefs.available=2Gi.
    #[arg(long, value_name = "SIGNAL=QTY,...", value_parser = parse_map_string_string, action = ArgAction::Append)]
    pub eviction_minimum_reclaim: Vec<Pairs>,
    /// How long to wait before transitioning out of an eviction pressure condition.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub eviction_pressure_transition_period: Option<Duration>,
    /// Maximum grace period (seconds) when evicting pods for a soft threshold.
    #[arg(long, value_name = "SECONDS")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Number of Pods per core that can run on this Kubelet (0 disables the limit).
    #[arg(long, value_name = "N")]
    pub pods_per_core: Option<i32>,
    /// Error out if kernel tunables differ from kubelet defaults instead of changing them.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub protect_kernel_defaults: Option<bool>,
    /// Resources reserved for non-kubernetes components, e.g. cpu=200m,memory=500Mi.
    #[arg(long, value_name = "RES=QTY,...", value_parser = parse_map_string_string, action = ArgAction::Append)]
    pub system_reserved: Vec<Pairs>,
    /// Resources reserved for kubernetes system components, e.g. cpu=200m,memory=500Mi.
    #[arg(long, value_name = "RES=QTY,...", value_parser = parse_map_string_string, action = ArgAction::Append)]
    pub kube_reserved: Vec<Pairs>,
    /// Node allocatable enforcement levels: none, pods, system-reserved, kube-reserved.
    #[arg(long, value_name = "LEVEL,...", value_parser = parse_list, action = ArgAction::Append)]
    pub enforce_node_allocatable: Vec<List>,
    /// Absolute name of the cgroup for resources reserved via --system-reserved.
    #[arg(long, value_name = "CGROUP")]
    pub system_reserved_cgroup: Option<String>,
    /// Absolute name of the cgroup for resources reserved via --kube-reserved.
    #[arg(long, value_name = "CGROUP")]
    pub kube_reserved_cgroup: Option<String>,
    /// Register the node with the apiserver.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub register_node: Option<bool>,
    /// Register the node with the given taints ("<key>=<value>:<effect>", comma separated).
    #[arg(long, value_name = "TAINT,...", value_parser = parse_taints, action = ArgAction::Append)]
    pub register_with_taints: Vec<Taints>,
    /// Comma-separated unsafe sysctls or sysctl patterns (ending in *) pods may set.
    #[arg(long, value_name = "SYSCTL,...", value_parser = parse_list, action = ArgAction::Append)]
    pub allowed_unsafe_sysctls: Vec<List>,
    /// Use RuntimeDefault as the default seccomp profile for all workloads.
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub seccomp_default: Option<bool>,
}

/// Config fields a flag overrode: camelCase field path → flag name.
pub(crate) type FlagFields = BTreeMap<&'static str, &'static str>;

/// A map flag's occurrences, its config field, and (field name, flag name).
type MapFlag<'a> = (
    &'a [Pairs],
    &'a mut BTreeMap<String, String>,
    &'static str,
    &'static str,
);
/// A list flag's occurrences, its config field, and (field name, flag name).
type ListFlag<'a> = (&'a [List], &'a mut Vec<String>, &'static str, &'static str);

/// Assigns `Some` flag values onto config fields and records which ones.
macro_rules! override_fields {
    ($cli:ident, $cfg:ident, $set:ident; $($flag:ident => $($field:ident).+ : $name:literal, $long:literal;)*) => {
        $(
            if let Some(v) = $cli.$flag.clone() {
                $cfg.$($field).+ = v;
                $set.insert($name, $long);
            }
        )*
    };
}

/// Merges every occurrence of a pair flag into one map; `None` when absent.
fn merged_pairs(occurrences: &[Pairs]) -> Option<BTreeMap<String, String>> {
    if occurrences.is_empty() {
        return None;
    }
    Some(
        occurrences
            .iter()
            .flat_map(|p| p.0.iter().cloned())
            .collect(),
    )
}

fn joined_lists(occurrences: &[List]) -> Option<Vec<String>> {
    if occurrences.is_empty() {
        return None;
    }
    Some(
        occurrences
            .iter()
            .flat_map(|l| l.0.iter().cloned())
            .collect(),
    )
}

/// Upstream treats an empty string flag (`--kubeconfig=`) as unset.
fn empty_as_none<T: AsRef<std::ffi::OsStr> + Clone>(v: &Option<T>) -> Option<T> {
    v.as_ref().filter(|s| !s.as_ref().is_empty()).cloned()
}

impl Cli {
    /// Overrides `cfg` with every config-backed flag present on the command
    /// line (upstream re-parses flags over the loaded file for the same
    /// effect) and returns which fields were overridden.
    pub(crate) fn apply_to(&self, cfg: &mut KubeletConfiguration) -> FlagFields {
        let mut set = FlagFields::new();
        let cli = self;
        self.apply_server_flags(cfg, &mut set);
        self.apply_runtime_flags(cfg, &mut set);
        self.apply_resource_flags(cfg, &mut set);
        self.apply_collection_flags(cfg, &mut set);
        if let Some(v) = cli.v {
            cfg.logging.verbosity = u32::from(v);
            set.insert("logging.verbosity", "--v");
        }
        set
    }

    fn apply_server_flags(&self, cfg: &mut KubeletConfiguration, set: &mut FlagFields) {
        let cli = self;
        override_fields!(cli, cfg, set;
            runonce => run_once: "runOnce", "--runonce";
            enable_server => enable_server: "enableServer", "--enable-server";
            address => address: "address", "--address";
            port => port: "port", "--port";
            read_only_port => read_only_port: "readOnlyPort", "--read-only-port";
            anonymous_auth => authentication.anonymous.enabled: "authentication.anonymous.enabled", "--anonymous-auth";
            authentication_token_webhook => authentication.webhook.enabled: "authentication.webhook.enabled", "--authentication-token-webhook";
            authentication_token_webhook_cache_ttl => authentication.webhook.cache_ttl: "authentication.webhook.cacheTTL", "--authentication-token-webhook-cache-ttl";
            client_ca_file => authentication.x509.client_ca_file: "authentication.x509.clientCAFile", "--client-ca-file";
            authorization_mode => authorization.mode: "authorization.mode", "--authorization-mode";
            authorization_webhook_cache_authorized_ttl => authorization.webhook.cache_authorized_ttl: "authorization.webhook.cacheAuthorizedTTL", "--authorization-webhook-cache-authorized-ttl";
            authorization_webhook_cache_unauthorized_ttl => authorization.webhook.cache_unauthorized_ttl: "authorization.webhook.cacheUnauthorizedTTL", "--authorization-webhook-cache-unauthorized-ttl";
            tls_cert_file => tls_cert_file: "tlsCertFile", "--tls-cert-file";
            tls_private_key_file => tls_private_key_file: "tlsPrivateKeyFile", "--tls-private-key-file";
            tls_min_version => tls_min_version: "tlsMinVersion", "--tls-min-version";
            rotate_certificates => rotate_certificates: "rotateCertificates", "--rotate-certificates";
            rotate_server_certificates => server_tls_bootstrap: "serverTLSBootstrap", "--rotate-server-certificates";
            enable_debugging_handlers => enable_debugging_handlers: "enableDebuggingHandlers", "--enable-debugging-handlers";
            healthz_port => healthz_port: "healthzPort", "--healthz-port";
            healthz_bind_address => healthz_bind_address: "healthzBindAddress", "--healthz-bind-address";
            cluster_domain => cluster_domain: "clusterDomain", "--cluster-domain";
            provider_id => provider_id: "providerID", "--provider-id";
            register_node => register_node: "registerNode", "--register-node";
            kube_api_content_type => content_type: "contentType", "--kube-api-content-type";
            kube_api_qps => kube_api_qps: "kubeAPIQPS", "--kube-api-qps";
            kube_api_burst => kube_api_burst: "kubeAPIBurst", "--kube-api-burst";
            event_qps => event_record_qps: "eventRecordQPS", "--event-qps";
            event_burst => event_burst: "eventBurst", "--event-burst";
            node_status_update_frequency => node_status_update_frequency: "nodeStatusUpdateFrequency", "--node-status-update-frequency";
            node_status_max_images => node_status_max_images: "nodeStatusMaxImages", "--node-status-max-images";
            streaming_connection_idle_timeout => streaming_connection_idle_timeout: "streamingConnectionIdleTimeout", "--streaming-connection-idle-timeout";
        );
    }

    fn apply_runtime_flags(&self, cfg: &mut KubeletConfiguration, set: &mut FlagFields) {
        let cli = self;
        override_fields!(cli, cfg, set;
            pod_manifest_path => static_pod_path: "staticPodPath", "--pod-manifest-path";
            manifest_url => static_pod_url: "staticPodURL", "--manifest-url";
            sync_frequency => sync_frequency: "syncFrequency", "--sync-frequency";
            file_check_frequency => file_check_frequency: "fileCheckFrequency", "--file-check-frequency";
            http_check_frequency => http_check_frequency: "httpCheckFrequency", "--http-check-frequency";
            container_runtime_endpoint => container_runtime_endpoint: "containerRuntimeEndpoint", "--container-runtime-endpoint";
            image_service_endpoint => image_service_endpoint: "imageServiceEndpoint", "--image-service-endpoint";
            runtime_request_timeout => runtime_request_timeout: "runtimeRequestTimeout", "--runtime-request-timeout";
            registry_qps => registry_pull_qps: "registryPullQPS", "--registry-qps";
            registry_burst => registry_burst: "registryBurst", "--registry-burst";
            serialize_image_pulls => serialize_image_pulls: "serializeImagePulls", "--serialize-image-pulls";
            minimum_image_ttl_duration => image_minimum_gc_age: "imageMinimumGCAge", "--minimum-image-ttl-duration";
            image_gc_high_threshold => image_gc_high_threshold_percent: "imageGCHighThresholdPercent", "--image-gc-high-threshold";
            image_gc_low_threshold => image_gc_low_threshold_percent: "imageGCLowThresholdPercent", "--image-gc-low-threshold";
            volume_stats_agg_period => volume_stats_agg_period: "volumeStatsAggPeriod", "--volume-stats-agg-period";
            volume_plugin_dir => volume_plugin_dir: "volumePluginDir", "--volume-plugin-dir";
            hairpin_mode => hairpin_mode: "hairpinMode", "--hairpin-mode";
            pod_cidr => pod_cidr: "podCIDR", "--pod-cidr";
            resolv_conf => resolv_conf: "resolvConf", "--resolv-conf";
            container_log_max_size => container_log_max_size: "containerLogMaxSize", "--container-log-max-size";
            container_log_max_files => container_log_max_files: "containerLogMaxFiles", "--container-log-max-files";
            enable_controller_attach_detach => enable_controller_attach_detach: "enableControllerAttachDetach", "--enable-controller-attach-detach";
            make_iptables_util_chains => make_iptables_util_chains: "makeIPTablesUtilChains", "--make-iptables-util-chains";
            seccomp_default => seccomp_default: "seccompDefault", "--seccomp-default";
            fail_swap_on => fail_swap_on: "failSwapOn", "--fail-swap-on";
            protect_kernel_defaults => protect_kernel_defaults: "protectKernelDefaults", "--protect-kernel-defaults";
        );
    }

    fn apply_resource_flags(&self, cfg: &mut KubeletConfiguration, set: &mut FlagFields) {
        let cli = self;
        override_fields!(cli, cfg, set;
            max_pods => max_pods: "maxPods", "--max-pods";
            pods_per_core => pods_per_core: "podsPerCore", "--pods-per-core";
            pod_max_pids => pod_pids_limit: "podPidsLimit", "--pod-max-pids";
            max_open_files => max_open_files: "maxOpenFiles", "--max-open-files";
            oom_score_adj => oom_score_adj: "oomScoreAdj", "--oom-score-adj";
            kubelet_cgroups => kubelet_cgroups: "kubeletCgroups", "--kubelet-cgroups";
            system_cgroups => system_cgroups: "systemCgroups", "--system-cgroups";
            cgroups_per_qos => cgroups_per_qos: "cgroupsPerQOS", "--cgroups-per-qos";
            cgroup_driver => cgroup_driver: "cgroupDriver", "--cgroup-driver";
            cgroup_root => cgroup_root: "cgroupRoot", "--cgroup-root";
            cpu_manager_policy => cpu_manager_policy: "cpuManagerPolicy", "--cpu-manager-policy";
            memory_manager_policy => memory_manager_policy: "memoryManagerPolicy", "--memory-manager-policy";
            topology_manager_policy => topology_manager_policy: "topologyManagerPolicy", "--topology-manager-policy";
            cpu_cfs_quota => cpu_cfs_quota: "cpuCFSQuota", "--cpu-cfs-quota";
            cpu_cfs_quota_period => cpu_cfs_quota_period: "cpuCFSQuotaPeriod", "--cpu-cfs-quota-period";
            kernel_memcg_notification => kernel_memcg_notification: "kernelMemcgNotification", "--kernel-memcg-notification";
            local_storage_capacity_isolation => local_storage_capacity_isolation: "localStorageCapacityIsolation", "--local-storage-capacity-isolation";
            eviction_pressure_transition_period => eviction_pressure_transition_period: "evictionPressureTransitionPeriod", "--eviction-pressure-transition-period";
            eviction_max_pod_grace_period => eviction_max_pod_grace_period: "evictionMaxPodGracePeriod", "--eviction-max-pod-grace-period";
            system_reserved_cgroup => system_reserved_cgroup: "systemReservedCgroup", "--system-reserved-cgroup";
            kube_reserved_cgroup => kube_reserved_cgroup: "kubeReservedCgroup", "--kube-reserved-cgroup";
        );
    }

    /// Map and list flags: the first occurrence replaces the file's value and
    /// later ones add to it, as pflag's map/slice values do.
    fn apply_collection_flags(&self, cfg: &mut KubeletConfiguration, set: &mut FlagFields) {
        let maps: [MapFlag; 6] = [
            (
                &self.eviction_hard,
                &mut cfg.eviction_hard,
                "evictionHard",
                "--eviction-hard",
            ),
            (
                &self.eviction_soft,
                &mut cfg.eviction_soft,
                "evictionSoft",
                "--eviction-soft",
            ),
            (
                &self.eviction_soft_grace_period,
                &mut cfg.eviction_soft_grace_period,
                "evictionSoftGracePeriod",
                "--eviction-soft-grace-period",
            ),
            (
                &self.eviction_minimum_reclaim,
                &mut cfg.eviction_minimum_reclaim,
                "evictionMinimumReclaim",
                "--eviction-minimum-reclaim",
            ),
            (
                &self.system_reserved,
                &mut cfg.system_reserved,
                "systemReserved",
                "--system-reserved",
            ),
            (
                &self.kube_reserved,
                &mut cfg.kube_reserved,
                "kubeReserved",
                "--kube-reserved",
            ),
        ];
        for (occurrences, target, field, flag) in maps {
            if let Some(map) = merged_pairs(occurrences) {
                *target = map;
                set.insert(field, flag);
            }
        }
        let lists: [ListFlag; 4] = [
            (
                &self.allowed_unsafe_sysctls,
                &mut cfg.allowed_unsafe_sysctls,
                "allowedUnsafeSysctls",
                "--allowed-unsafe-sysctls",
            ),
            (
                &self.cluster_dns,
                &mut cfg.cluster_dns,
                "clusterDNS",
                "--cluster-dns",
            ),
            (
                &self.enforce_node_allocatable,
                &mut cfg.enforce_node_allocatable,
                "enforceNodeAllocatable",
                "--enforce-node-allocatable",
            ),
            (
                &self.tls_cipher_suites,
                &mut cfg.tls_cipher_suites,
                "tlsCipherSuites",
                "--tls-cipher-suites",
            ),
        ];
        for (occurrences, target, field, flag) in lists {
            if let Some(list) = joined_lists(occurrences) {
                *target = list;
                set.insert(field, flag);
            }
        }
        self.apply_special_collections(cfg, set);
    }

    fn apply_special_collections(&self, cfg: &mut KubeletConfiguration, set: &mut FlagFields) {
        if !self.manifest_url_header.is_empty() {
            let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (k, v) in self.manifest_url_header.iter().flat_map(|p| p.0.iter()) {
                headers.entry(k.clone()).or_default().push(v.clone());
            }
            cfg.static_pod_url_header = headers;
            set.insert("staticPodURLHeader", "--manifest-url-header");
        }
        if !self.feature_gates.is_empty() {
            // Upstream merges flag gates over the file's gates instead of replacing them.
            for (k, v) in self.feature_gates.iter().flat_map(|g| g.0.iter()) {
                cfg.feature_gates.insert(k.clone(), *v);
            }
            set.insert("featureGates", "--feature-gates");
        }
        if !self.register_with_taints.is_empty() {
            cfg.register_with_taints = self
                .register_with_taints
                .iter()
                .flat_map(|t| t.0.iter().cloned())
                .collect();
            set.insert("registerWithTaints", "--register-with-taints");
        }
    }

    /// The flags-only settings, with `--runonce`/`--v` resolved against the
    /// merged configuration.
    pub(crate) fn to_flags(&self, cfg: &KubeletConfiguration) -> KubeletFlags {
        let d = KubeletFlags::default();
        KubeletFlags {
            config_file: empty_as_none(&self.config),
            kubeconfig: empty_as_none(&self.kubeconfig),
            bootstrap_kubeconfig: empty_as_none(&self.bootstrap_kubeconfig),
            hostname_override: empty_as_none(&self.hostname_override),
            node_ip: empty_as_none(&self.node_ip),
            cert_dir: self.cert_dir.clone().unwrap_or(d.cert_dir),
            root_dir: self.root_dir.clone().unwrap_or(d.root_dir),
            node_labels: merged_pairs(&self.node_labels).unwrap_or_default(),
            pod_infra_container_image: empty_as_none(&self.pod_infra_container_image)
                .unwrap_or(d.pod_infra_container_image),
            runonce: cfg.run_once,
            verbosity: u8::try_from(cfg.logging.verbosity).unwrap_or(u8::MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kubelet").chain(args.iter().copied()))
    }

    fn ok(args: &[&str]) -> Cli {
        match parse(args) {
            Ok(c) => c,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn go_bool_syntax() {
        assert_eq!(ok(&["--runonce"]).runonce, Some(true));
        assert_eq!(ok(&["--runonce=true"]).runonce, Some(true));
        assert_eq!(ok(&["--runonce=false"]).runonce, Some(false));
        assert_eq!(ok(&["--runonce=0"]).runonce, Some(false));
        assert_eq!(ok(&["--runonce=T"]).runonce, Some(true));
        assert_eq!(ok(&[]).runonce, None);
        assert!(parse(&["--runonce=yes"]).is_err());
        // pflag does not take a separate value for booleans; "false" is a stray argument.
        assert!(parse(&["--runonce", "false"]).is_err());
    }

    #[test]
    fn values_with_equals_or_space() {
        let c = ok(&[
            "--max-pods=20",
            "--root-dir",
            "/srv/kubelet",
            "--healthz-port",
            "-1",
        ]);
        assert_eq!(c.max_pods, Some(20));
        assert_eq!(c.root_dir, Some(PathBuf::from("/srv/kubelet")));
        assert_eq!(c.healthz_port, Some(-1));
        assert_eq!(
            ok(&["--sync-frequency=1m30s"]).sync_frequency,
            Some(Duration::from_secs(90))
        );
        assert!(parse(&["--sync-frequency=90"]).is_err());
        assert!(parse(&["--max-pods=lots"]).is_err());
    }

    #[test]
    fn verbosity_forms() {
        assert_eq!(ok(&["--v=2"]).v, Some(2));
        assert_eq!(ok(&["--v", "3"]).v, Some(3));
        assert_eq!(ok(&["-v", "4"]).v, Some(4));
        assert_eq!(ok(&["-v=5"]).v, Some(5));
        assert_eq!(ok(&["-v6"]).v, Some(6));
        assert_eq!(ok(&["--v=10"]).v, Some(10));
        assert!(parse(&["--v=11"]).is_err());
        assert!(parse(&["--v=-1"]).is_err());
        assert!(parse(&["--v=high"]).is_err());
    }

    #[test]
    fn node_labels() {
        let c = ok(&[
            "--node-labels=a=1, b = 2 ,c",
            "--node-labels",
            "example.com/role=edge",
        ]);
        let got = merged_pairs(&c.node_labels).unwrap_or_default();
        let want: BTreeMap<String, String> = [
            ("a", "1"),
            ("b", "2"),
            ("c", ""),
            ("example.com/role", "edge"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);
        assert_eq!(parse_node_labels("").map(|p| p.0.len()), Ok(0));
    }

    #[test]
    fn manifest_url_headers() {
        let c = ok(&[
            "--manifest-url-header",
            "a:hello,b:again,c:world",
            "--manifest-url-header=b:beautiful",
            "--manifest-url-header=Authorization: Bearer x:y",
        ]);
        let mut cfg = KubeletConfiguration::default();
        c.apply_to(&mut cfg);
        let h = &cfg.static_pod_url_header;
        assert_eq!(h.get("a"), Some(&vec!["hello".to_string()]));
        assert_eq!(
            h.get("b"),
            Some(&vec!["again".to_string(), "beautiful".to_string()])
        );
        assert_eq!(
            h.get("Authorization"),
            Some(&vec!["Bearer x:y".to_string()])
        );
        assert!(parse(&["--manifest-url-header=novalue"]).is_err());
        assert!(parse(&["--manifest-url-header=:v"]).is_err());
    }

    #[test]
    fn eviction_feature_gates_and_taints() {
        let c = ok(&[
            "--eviction-hard=memory.available<1Gi,nodefs.available<10%",
            "--feature-gates=A=true,B=false",
            "--feature-gates=C=1",
            "--register-with-taints=dedicated=edge:NoSchedule,gpu:NoExecute",
        ]);
        let mut cfg = KubeletConfiguration::default();
        cfg.feature_gates.insert("Z".to_string(), true);
        let set = c.apply_to(&mut cfg);
        assert_eq!(cfg.eviction_hard.len(), 2);
        assert_eq!(
            cfg.eviction_hard
                .get("memory.available")
                .map(String::as_str),
            Some("1Gi")
        );
        assert_eq!(cfg.feature_gates.get("A"), Some(&true));
        assert_eq!(cfg.feature_gates.get("B"), Some(&false));
        assert_eq!(cfg.feature_gates.get("C"), Some(&true));
        assert_eq!(
            cfg.feature_gates.get("Z"),
            Some(&true),
            "file gates survive"
        );
        assert_eq!(cfg.register_with_taints.len(), 2);
        assert_eq!(cfg.register_with_taints[0].key, "dedicated");
        assert_eq!(cfg.register_with_taints[0].value, "edge");
        assert_eq!(cfg.register_with_taints[1].effect, "NoExecute");
        assert_eq!(set.get("evictionHard"), Some(&"--eviction-hard"));
        assert!(parse(&["--feature-gates=A=maybe"]).is_err());
        assert!(parse(&["--eviction-hard=memory.available=1Gi"]).is_err());
        assert!(parse(&["--register-with-taints=novalue"]).is_err());
        assert!(parse(&["--register-with-taints=a=b=c:NoSchedule"]).is_err());
    }

    #[test]
    fn cluster_dns_list_appends() {
        let c = ok(&[
            "--cluster-dns=10.0.0.10,10.0.0.11",
            "--cluster-dns",
            "fd00::a",
        ]);
        let mut cfg = KubeletConfiguration::default();
        c.apply_to(&mut cfg);
        assert_eq!(cfg.cluster_dns, vec!["10.0.0.10", "10.0.0.11", "fd00::a"]);
    }

    #[test]
    fn allowed_unsafe_sysctls_flag_sets_the_list() {
        let c = ok(&["--allowed-unsafe-sysctls=kernel.msg*,net.core.somaxconn"]);
        let mut cfg = KubeletConfiguration::default();
        c.apply_to(&mut cfg);
        assert_eq!(
            cfg.allowed_unsafe_sysctls,
            vec!["kernel.msg*", "net.core.somaxconn"]
        );
    }

    #[test]
    fn help_and_version_are_clap_errors() {
        let e = parse(&["--help"]).err().map(|e| e.kind());
        assert_eq!(e, Some(clap::error::ErrorKind::DisplayHelp));
        let e = match parse(&["--version"]) {
            Err(e) => e,
            Ok(_) => panic!("--version should stop parsing"),
        };
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
        assert_eq!(e.to_string(), format!("Kubernetes {VERSION}\n"));
        assert!(parse(&["--no-such-flag"]).is_err());
        assert!(parse(&["stray-positional"]).is_err());
    }

    #[test]
    fn empty_string_paths_mean_unset() {
        let c = ok(&["--kubeconfig=", "--hostname-override="]);
        let f = c.to_flags(&KubeletConfiguration::default());
        assert_eq!(f.kubeconfig, None);
        assert_eq!(f.hostname_override, None);
        assert!(f.is_standalone());
        assert_eq!(f.root_dir, PathBuf::from(DEFAULT_ROOT_DIR));
    }
}
