//! `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1) with upstream
//! field names and defaults (pkg/kubelet/apis/config/v1beta1/defaults.go).
//!
//! Upstream decodes into a struct of pointers and zero values, then fills
//! in defaults. Here the Rust struct holds concrete values: a field absent
//! from the file takes its default via `#[serde(default)]`, and
//! [`KubeletConfiguration::set_defaults`] then reproduces upstream's
//! "zero means unset" rule for the non-pointer Go fields (so `port: 0` in a
//! file still means 10250, exactly as upstream).

use super::duration::{deserialize_time_or_duration, Duration};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";

pub const DEFAULT_CONTAINER_RUNTIME_ENDPOINT: &str = "unix:///run/containerd/containerd.sock";
pub const DEFAULT_POD_LOGS_DIR: &str = "/var/log/pods";
pub const DEFAULT_VOLUME_PLUGIN_DIR: &str = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/";
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";
/// pkg/cluster/ports: the read-only port used when flags alone configure the kubelet.
pub const KUBELET_READ_ONLY_PORT: i32 = 10255;

/// Linux default hard eviction thresholds (defaults_linux.go).
pub fn default_eviction_hard() -> BTreeMap<String, String> {
    [
        ("memory.available", "100Mi"),
        ("nodefs.available", "10%"),
        ("nodefs.inodesFree", "5%"),
        ("imagefs.available", "15%"),
        ("imagefs.inodesFree", "5%"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The kubelet's configuration, as read from `--config` and overridden by flags.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletConfiguration {
    pub api_version: String,
    pub kind: String,

    pub enable_server: bool,
    pub static_pod_path: String,
    pub pod_logs_dir: String,
    pub sync_frequency: Duration,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    #[serde(rename = "staticPodURL")]
    pub static_pod_url: String,
    #[serde(rename = "staticPodURLHeader")]
    pub static_pod_url_header: BTreeMap<String, Vec<String>>,
    pub address: String,
    pub port: i32,
    pub read_only_port: i32,
    pub tls_cert_file: String,
    pub tls_private_key_file: String,
    pub tls_cipher_suites: Vec<String>,
    pub tls_curve_preferences: Vec<i32>,
    pub tls_min_version: String,
    pub rotate_certificates: bool,
    #[serde(rename = "serverTLSBootstrap")]
    pub server_tls_bootstrap: bool,
    pub authentication: KubeletAuthentication,
    pub authorization: KubeletAuthorization,
    #[serde(rename = "registryPullQPS")]
    pub registry_pull_qps: i32,
    pub registry_burst: i32,
    pub image_pull_credentials_verification_policy: String,
    pub preloaded_images_verification_allowlist: Vec<String>,
    #[serde(rename = "eventRecordQPS")]
    pub event_record_qps: i32,
    pub event_burst: i32,
    pub enable_debugging_handlers: bool,
    pub enable_contention_profiling: bool,
    pub healthz_port: i32,
    pub healthz_bind_address: String,
    pub oom_score_adj: i32,
    pub cluster_domain: String,
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    pub streaming_connection_idle_timeout: Duration,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: i32,
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Duration,
    #[serde(rename = "imageMaximumGCAge")]
    pub image_maximum_gc_age: Duration,
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: i32,
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: i32,
    pub volume_stats_agg_period: Duration,
    pub kubelet_cgroups: String,
    pub system_cgroups: String,
    pub cgroup_root: String,
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: bool,
    pub cgroup_driver: String,
    pub cpu_manager_policy: String,
    #[serde(
        rename = "singleProcessOOMKill",
        skip_serializing_if = "Option::is_none"
    )]
    pub single_process_oom_kill: Option<bool>,
    pub cpu_manager_policy_options: BTreeMap<String, String>,
    pub cpu_manager_reconcile_period: Duration,
    #[serde(rename = "draManagerReconcilePeriod")]
    pub dra_manager_reconcile_period: Duration,
    pub memory_manager_policy: String,
    pub topology_manager_policy: String,
    pub topology_manager_scope: String,
    pub topology_manager_policy_options: BTreeMap<String, String>,
    pub qos_reserved: BTreeMap<String, String>,
    pub runtime_request_timeout: Duration,
    pub hairpin_mode: String,
    pub max_pods: i32,
    #[serde(rename = "podCIDR")]
    pub pod_cidr: String,
    pub pod_pids_limit: i64,
    /// `resolvConf`; an explicit empty string disables DNS lookups upstream.
    #[serde(rename = "resolvConf")]
    pub resolv_conf: String,
    pub run_once: bool,
    #[serde(rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: bool,
    #[serde(rename = "cpuCFSQuotaPeriod")]
    pub cpu_cfs_quota_period: Duration,
    pub node_status_max_images: i32,
    pub max_open_files: i64,
    pub content_type: String,
    #[serde(rename = "kubeAPIQPS")]
    pub kube_api_qps: i32,
    #[serde(rename = "kubeAPIBurst")]
    pub kube_api_burst: i32,
    pub serialize_image_pulls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_parallel_image_pulls: Option<i32>,
    pub eviction_hard: BTreeMap<String, String>,
    pub eviction_soft: BTreeMap<String, String>,
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    pub eviction_pressure_transition_period: Duration,
    pub eviction_max_pod_grace_period: i32,
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    pub merge_default_eviction_settings: bool,
    pub pods_per_core: i32,
    pub enable_controller_attach_detach: bool,
    pub protect_kernel_defaults: bool,
    #[serde(rename = "makeIPTablesUtilChains")]
    pub make_iptables_util_chains: bool,
    pub iptables_masquerade_bit: i32,
    pub iptables_drop_bit: i32,
    pub feature_gates: BTreeMap<String, bool>,
    pub fail_swap_on: bool,
    pub memory_swap: MemorySwapConfiguration,
    pub container_log_max_size: String,
    pub container_log_max_files: i32,
    pub container_log_max_workers: i32,
    pub container_log_monitor_interval: Duration,
    pub config_map_and_secret_change_detection_strategy: String,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(rename = "reservedSystemCPUs")]
    pub reserved_system_cpus: String,
    pub show_hidden_metrics_for_version: String,
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
    pub enforce_node_allocatable: Vec<String>,
    pub allowed_unsafe_sysctls: Vec<String>,
    pub volume_plugin_dir: String,
    #[serde(rename = "providerID")]
    pub provider_id: String,
    pub kernel_memcg_notification: bool,
    pub logging: LoggingConfiguration,
    pub enable_system_log_handler: bool,
    pub enable_system_log_query: bool,
    pub shutdown_grace_period: Duration,
    pub shutdown_grace_period_critical_pods: Duration,
    pub shutdown_grace_period_by_pod_priority: Vec<ShutdownGracePeriodByPodPriority>,
    pub crash_loop_back_off: CrashLoopBackOffConfig,
    pub reserved_memory: Vec<MemoryReservation>,
    pub enable_profiling_handler: bool,
    pub enable_debug_flags_handler: bool,
    pub seccomp_default: bool,
    pub memory_throttling_factor: f64,
    pub memory_reservation_policy: String,
    pub register_with_taints: Vec<Taint>,
    pub register_node: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingConfiguration>,
    pub local_storage_capacity_isolation: bool,
    pub container_runtime_endpoint: String,
    pub image_service_endpoint: String,
    pub fail_cgroup_v1: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_namespaces: Option<UserNamespaces>,
    pub pod_housekeeping_period: Duration,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthentication {
    pub x509: KubeletX509Authentication,
    pub webhook: KubeletWebhookAuthentication,
    pub anonymous: KubeletAnonymousAuthentication,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletX509Authentication {
    #[serde(rename = "clientCAFile")]
    pub client_ca_file: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthentication {
    pub enabled: bool,
    #[serde(rename = "cacheTTL")]
    pub cache_ttl: Duration,
}

impl Default for KubeletWebhookAuthentication {
    fn default() -> Self {
        KubeletWebhookAuthentication {
            enabled: true,
            cache_ttl: Duration::from_mins(2),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAnonymousAuthentication {
    pub enabled: bool,
}

pub const AUTHORIZATION_MODE_WEBHOOK: &str = "Webhook";
pub const AUTHORIZATION_MODE_ALWAYS_ALLOW: &str = "AlwaysAllow";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletAuthorization {
    pub mode: String,
    pub webhook: KubeletWebhookAuthorization,
}

impl Default for KubeletAuthorization {
    fn default() -> Self {
        KubeletAuthorization {
            mode: AUTHORIZATION_MODE_WEBHOOK.to_string(),
            webhook: KubeletWebhookAuthorization::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct KubeletWebhookAuthorization {
    #[serde(rename = "cacheAuthorizedTTL")]
    pub cache_authorized_ttl: Duration,
    #[serde(rename = "cacheUnauthorizedTTL")]
    pub cache_unauthorized_ttl: Duration,
}

impl Default for KubeletWebhookAuthorization {
    fn default() -> Self {
        KubeletWebhookAuthorization {
            cache_authorized_ttl: Duration::from_mins(5),
            cache_unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

/// A node taint (core/v1 Taint) for `registerWithTaints`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
    /// Must be unset for registration taints; kept so validation can say so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySwapConfiguration {
    pub swap_behavior: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CrashLoopBackOffConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_container_restart_period: Option<Duration>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShutdownGracePeriodByPodPriority {
    pub priority: i32,
    pub shutdown_grace_period_seconds: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryReservation {
    pub numa_node: i32,
    pub limits: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TracingConfiguration {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_rate_per_million: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct UserNamespaces {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids_per_pod: Option<i64>,
}

/// component-base LoggingConfiguration (logs/api/v1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfiguration {
    pub format: String,
    #[serde(deserialize_with = "deserialize_time_or_duration")]
    pub flush_frequency: Duration,
    pub verbosity: u32,
    pub vmodule: Vec<VModuleItem>,
    pub options: FormatOptions,
}

impl Default for LoggingConfiguration {
    fn default() -> Self {
        LoggingConfiguration {
            format: "text".to_string(),
            flush_frequency: Duration::from_secs(5),
            verbosity: 0,
            vmodule: Vec::new(),
            options: FormatOptions::default(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VModuleItem {
    pub file_pattern: String,
    pub verbosity: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FormatOptions {
    pub text: OutputRoutingOptions,
    pub json: OutputRoutingOptions,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct OutputRoutingOptions {
    pub split_stream: bool,
    /// A resource quantity; accepted as a YAML string or number like upstream.
    #[serde(deserialize_with = "deserialize_quantity_string")]
    pub info_buffer_size: String,
}

impl Default for OutputRoutingOptions {
    fn default() -> Self {
        OutputRoutingOptions {
            split_stream: false,
            info_buffer_size: "0".to_string(),
        }
    }
}

/// resource.Quantity unmarshals from a JSON string or a bare number.
fn deserialize_quantity_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(i64),
        Float(f64),
        Text(String),
    }
    Ok(match Raw::deserialize(d)? {
        Raw::Int(i) => i.to_string(),
        Raw::Float(f) => f.to_string(),
        Raw::Text(s) => s,
    })
}

impl Default for KubeletConfiguration {
    /// Upstream v1beta1 defaults (what a config file with only
    /// apiVersion/kind decodes to).
    fn default() -> Self {
        KubeletConfiguration {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            enable_server: true,
            static_pod_path: String::new(),
            pod_logs_dir: DEFAULT_POD_LOGS_DIR.to_string(),
            sync_frequency: Duration::from_mins(1),
            file_check_frequency: Duration::from_secs(20),
            http_check_frequency: Duration::from_secs(20),
            static_pod_url: String::new(),
            static_pod_url_header: BTreeMap::new(),
            address: "0.0.0.0".to_string(),
            port: 10250,
            read_only_port: 0,
            tls_cert_file: String::new(),
            tls_private_key_file: String::new(),
            tls_cipher_suites: Vec::new(),
            tls_curve_preferences: Vec::new(),
            tls_min_version: String::new(),
            rotate_certificates: false,
            server_tls_bootstrap: false,
            authentication: KubeletAuthentication::default(),
            authorization: KubeletAuthorization::default(),
            registry_pull_qps: 5,
            registry_burst: 10,
            image_pull_credentials_verification_policy: String::new(),
            preloaded_images_verification_allowlist: Vec::new(),
            event_record_qps: 50,
            event_burst: 100,
            enable_debugging_handlers: true,
            enable_contention_profiling: false,
            healthz_port: 10248,
            healthz_bind_address: "127.0.0.1".to_string(),
            oom_score_adj: -999,
            cluster_domain: String::new(),
            cluster_dns: Vec::new(),
            streaming_connection_idle_timeout: Duration::from_hours(4),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_mins(5),
            node_lease_duration_seconds: 40,
            image_minimum_gc_age: Duration::from_mins(2),
            image_maximum_gc_age: Duration::ZERO,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            volume_stats_agg_period: Duration::from_mins(1),
            kubelet_cgroups: String::new(),
            system_cgroups: String::new(),
            cgroup_root: String::new(),
            cgroups_per_qos: true,
            cgroup_driver: "cgroupfs".to_string(),
            cpu_manager_policy: "none".to_string(),
            single_process_oom_kill: None,
            cpu_manager_policy_options: BTreeMap::new(),
            cpu_manager_reconcile_period: Duration::from_secs(10),
            dra_manager_reconcile_period: Duration::from_mins(1),
            memory_manager_policy: "None".to_string(),
            topology_manager_policy: "none".to_string(),
            topology_manager_scope: "container".to_string(),
            topology_manager_policy_options: BTreeMap::new(),
            qos_reserved: BTreeMap::new(),
            runtime_request_timeout: Duration::from_mins(2),
            hairpin_mode: "promiscuous-bridge".to_string(),
            max_pods: 110,
            pod_cidr: String::new(),
            pod_pids_limit: -1,
            resolv_conf: DEFAULT_RESOLV_CONF.to_string(),
            run_once: false,
            cpu_cfs_quota: true,
            cpu_cfs_quota_period: Duration::from_millis(100),
            node_status_max_images: 50,
            max_open_files: 1_000_000,
            content_type: "application/vnd.kubernetes.protobuf".to_string(),
            kube_api_qps: 50,
            kube_api_burst: 100,
            serialize_image_pulls: true,
            max_parallel_image_pulls: None,
            eviction_hard: default_eviction_hard(),
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_pressure_transition_period: Duration::from_mins(5),
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            merge_default_eviction_settings: false,
            pods_per_core: 0,
            enable_controller_attach_detach: true,
            protect_kernel_defaults: false,
            make_iptables_util_chains: true,
            iptables_masquerade_bit: 14,
            iptables_drop_bit: 15,
            feature_gates: BTreeMap::new(),
            fail_swap_on: true,
            memory_swap: MemorySwapConfiguration::default(),
            container_log_max_size: "10Mi".to_string(),
            container_log_max_files: 5,
            container_log_max_workers: 1,
            container_log_monitor_interval: Duration::from_secs(10),
            config_map_and_secret_change_detection_strategy: "Watch".to_string(),
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            reserved_system_cpus: String::new(),
            show_hidden_metrics_for_version: String::new(),
            system_reserved_cgroup: String::new(),
            kube_reserved_cgroup: String::new(),
            enforce_node_allocatable: vec!["pods".to_string()],
            allowed_unsafe_sysctls: Vec::new(),
            volume_plugin_dir: DEFAULT_VOLUME_PLUGIN_DIR.to_string(),
            provider_id: String::new(),
            kernel_memcg_notification: false,
            logging: LoggingConfiguration::default(),
            enable_system_log_handler: true,
            enable_system_log_query: false,
            shutdown_grace_period: Duration::ZERO,
            shutdown_grace_period_critical_pods: Duration::ZERO,
            shutdown_grace_period_by_pod_priority: Vec::new(),
            crash_loop_back_off: CrashLoopBackOffConfig::default(),
            reserved_memory: Vec::new(),
            enable_profiling_handler: true,
            enable_debug_flags_handler: true,
            seccomp_default: false,
            memory_throttling_factor: 0.9,
            memory_reservation_policy: "None".to_string(),
            register_with_taints: Vec::new(),
            register_node: true,
            tracing: None,
            local_storage_capacity_isolation: true,
            container_runtime_endpoint: DEFAULT_CONTAINER_RUNTIME_ENDPOINT.to_string(),
            image_service_endpoint: String::new(),
            fail_cgroup_v1: false,
            user_namespaces: None,
            pod_housekeeping_period: Duration::from_secs(2),
        }
    }
}

/// Sets `field` to `default` when it holds the zero value, mirroring
/// upstream's `if obj.X == zero { obj.X = default }`.
fn zero_default<T: PartialEq + Default>(field: &mut T, default: T) {
    if *field == T::default() {
        *field = default;
    }
}

impl KubeletConfiguration {
    /// Whether `featureGates` turns `gate` on; every gate rkubelet reads
    /// is off unless set (as CustomCPUCFSQuotaPeriod and ImageVolume are
    /// in upstream v1.34).
    pub fn gate_on(&self, gate: &str) -> bool {
        self.feature_gates.get(gate).copied().unwrap_or(false)
    }

    /// Re-applies upstream defaulting after a file was decoded. `present`
    /// holds the top-level keys the file spelled out; it is needed where
    /// upstream distinguishes "unset" from an explicit value.
    pub(crate) fn set_defaults(&mut self, present: &BTreeSet<String>) {
        let d = KubeletConfiguration::default();
        self.default_durations(&d, present);
        self.default_scalars(&d);
        self.default_strings(&d);
        if self.pod_pids_limit < 0 {
            self.pod_pids_limit = -1;
        }
        if !present.contains("serializeImagePulls") {
            // Parallel pulls imply non-serialized pulls unless told otherwise.
            self.serialize_image_pulls = self.max_parallel_image_pulls.is_none_or(|n| n < 2);
        }
        if present.contains("evictionHard") && self.merge_default_eviction_settings {
            for (k, v) in default_eviction_hard() {
                self.eviction_hard.entry(k).or_insert(v);
            }
        }
        self.logging.set_defaults();
        let auth = &mut self.authentication.webhook;
        zero_default(&mut auth.cache_ttl, d.authentication.webhook.cache_ttl);
        let authz = &mut self.authorization;
        zero_default(&mut authz.mode, d.authorization.mode.clone());
        let w = &mut authz.webhook;
        zero_default(
            &mut w.cache_authorized_ttl,
            d.authorization.webhook.cache_authorized_ttl,
        );
        zero_default(
            &mut w.cache_unauthorized_ttl,
            d.authorization.webhook.cache_unauthorized_ttl,
        );
    }

    fn default_durations(&mut self, d: &KubeletConfiguration, present: &BTreeSet<String>) {
        // For backward compatibility an explicit nodeStatusUpdateFrequency
        // also becomes the report frequency when that one is unset.
        if self.node_status_report_frequency.is_zero()
            || (!present.contains("nodeStatusReportFrequency")
                && present.contains("nodeStatusUpdateFrequency"))
        {
            self.node_status_report_frequency = if self.node_status_update_frequency.is_zero() {
                d.node_status_report_frequency
            } else {
                self.node_status_update_frequency
            };
        }
        zero_default(&mut self.sync_frequency, d.sync_frequency);
        zero_default(&mut self.file_check_frequency, d.file_check_frequency);
        zero_default(&mut self.http_check_frequency, d.http_check_frequency);
        zero_default(
            &mut self.streaming_connection_idle_timeout,
            d.streaming_connection_idle_timeout,
        );
        zero_default(
            &mut self.node_status_update_frequency,
            d.node_status_update_frequency,
        );
        zero_default(&mut self.image_minimum_gc_age, d.image_minimum_gc_age);
        zero_default(&mut self.volume_stats_agg_period, d.volume_stats_agg_period);
        zero_default(
            &mut self.cpu_manager_reconcile_period,
            d.cpu_manager_reconcile_period,
        );
        zero_default(
            &mut self.dra_manager_reconcile_period,
            d.dra_manager_reconcile_period,
        );
        zero_default(&mut self.runtime_request_timeout, d.runtime_request_timeout);
        zero_default(
            &mut self.eviction_pressure_transition_period,
            d.eviction_pressure_transition_period,
        );
    }

    fn default_scalars(&mut self, d: &KubeletConfiguration) {
        zero_default(&mut self.port, d.port);
        zero_default(&mut self.registry_burst, d.registry_burst);
        zero_default(&mut self.event_burst, d.event_burst);
        zero_default(
            &mut self.node_lease_duration_seconds,
            d.node_lease_duration_seconds,
        );
        zero_default(&mut self.max_pods, d.max_pods);
        zero_default(&mut self.max_open_files, d.max_open_files);
        zero_default(&mut self.kube_api_burst, d.kube_api_burst);
    }

    fn default_strings(&mut self, d: &KubeletConfiguration) {
        zero_default(&mut self.address, d.address.clone());
        zero_default(
            &mut self.healthz_bind_address,
            d.healthz_bind_address.clone(),
        );
        zero_default(&mut self.cgroup_driver, d.cgroup_driver.clone());
        zero_default(&mut self.cpu_manager_policy, d.cpu_manager_policy.clone());
        zero_default(
            &mut self.memory_manager_policy,
            d.memory_manager_policy.clone(),
        );
        zero_default(
            &mut self.topology_manager_policy,
            d.topology_manager_policy.clone(),
        );
        zero_default(
            &mut self.topology_manager_scope,
            d.topology_manager_scope.clone(),
        );
        zero_default(&mut self.hairpin_mode, d.hairpin_mode.clone());
        zero_default(&mut self.content_type, d.content_type.clone());
        zero_default(
            &mut self.container_log_max_size,
            d.container_log_max_size.clone(),
        );
        zero_default(
            &mut self.config_map_and_secret_change_detection_strategy,
            d.config_map_and_secret_change_detection_strategy.clone(),
        );
        zero_default(&mut self.volume_plugin_dir, d.volume_plugin_dir.clone());
        zero_default(
            &mut self.container_runtime_endpoint,
            d.container_runtime_endpoint.clone(),
        );
        zero_default(&mut self.pod_logs_dir, d.pod_logs_dir.clone());
        zero_default(
            &mut self.memory_reservation_policy,
            d.memory_reservation_policy.clone(),
        );
    }

    /// Defaults used when no `--config` file is given: upstream keeps the
    /// historical command-line defaults there (anonymous auth on, no
    /// webhook, AlwaysAllow, read-only port 10255); see
    /// cmd/kubelet/app/options `applyLegacyDefaults`.
    pub fn legacy_flag_defaults() -> Self {
        let mut c = KubeletConfiguration::default();
        c.authentication.anonymous.enabled = true;
        c.authentication.webhook.enabled = false;
        c.authorization.mode = AUTHORIZATION_MODE_ALWAYS_ALLOW.to_string();
        c.read_only_port = KUBELET_READ_ONLY_PORT;
        c
    }

    /// The endpoint for image operations: `imageServiceEndpoint`, falling
    /// back to `containerRuntimeEndpoint` as upstream does.
    pub fn effective_image_service_endpoint(&self) -> &str {
        if self.image_service_endpoint.is_empty() {
            &self.container_runtime_endpoint
        } else {
            &self.image_service_endpoint
        }
    }
}

impl LoggingConfiguration {
    /// logsapi.SetRecommendedLoggingConfiguration.
    fn set_defaults(&mut self) {
        zero_default(&mut self.format, "text".to_string());
        zero_default(&mut self.flush_frequency, Duration::from_secs(5));
    }
}
