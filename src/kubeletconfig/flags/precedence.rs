//! Flags over the config file: every config-backed flag given on the
//! command line overrides its field, with the field recorded so errors
//! can name the flag (upstream re-parses the flags over the loaded file for
//! the same effect: kubeletConfigFlagPrecedence in cmd/kubelet/app); and
//! the flags-only settings resolved into [`KubeletFlags`].

use super::{Cli, KubeletFlags, List, Pairs};
use crate::kubeletconfig::KubeletConfiguration;
use std::collections::BTreeMap;

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
pub(super) fn merged_pairs(occurrences: &[Pairs]) -> Option<BTreeMap<String, String>> {
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
            reserved_system_cpus => reserved_system_cpus: "reservedSystemCPUs", "--reserved-cpus";
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
