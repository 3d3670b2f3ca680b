//! Command-line flags with upstream kubelet names (cmd/kubelet/app/options).
//!
//! Every flag that backs a `KubeletConfiguration` field is an `Option` (or
//! an empty-when-unset `Vec`), so "not given" is distinguishable from "given
//! the default value": only flags actually present on the command line
//! override the config file. Boolean flags behave like Go pflag booleans:
//! `--flag`, `--flag=true`, `--flag=false` (but not `--flag false`).
//!
//! The value syntaxes (pflag booleans, cliflag maps and lists, taints) are
//! in `values.rs`; how the parsed flags override the file and resolve into
//! [`KubeletFlags`] in `precedence.rs`.

mod precedence;
#[cfg(test)]
mod tests;
mod values;

use super::duration::Duration;
use super::VERSION;
use clap::{ArgAction, Parser};
pub(crate) use precedence::FlagFields;
use std::collections::BTreeMap;
use std::path::PathBuf;
pub(crate) use values::parse_go_bool;
use values::{
    parse_duration, parse_feature_gates, parse_header_pairs, parse_langle_pairs, parse_list,
    parse_map_string_string, parse_node_labels, parse_taints, parse_verbosity, path_value_parser,
    Gates, List, Pairs, Taints,
};

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
    /// CPUs reserved for the system and the kubelet (a list such as
    /// "0-1,4"); overrides the cpu of --system-reserved and --kube-reserved.
    #[arg(long = "reserved-cpus", value_name = "CPUS")]
    pub reserved_system_cpus: Option<String>,
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
