//! Validation of the merged configuration, after
//! pkg/kubelet/apis/config/validation/validation.go and the flag checks in
//! cmd/kubelet/app/options. Every problem is collected (upstream
//! aggregates too) so one run reports all of them; callers attach the
//! source (file or flags) per field.
//!
//! The checks of the settings that size node allocatable (eviction
//! thresholds, reservations, `enforceNodeAllocatable`) are in
//! `allocatable.rs`; label syntax and the `--node-labels` rules in
//! `labels.rs`.

mod allocatable;
mod labels;
#[cfg(test)]
mod tests;

use super::duration::Duration;
use super::types::{KubeletConfiguration, Taint};
use crate::util::quantity::parse_quantity;
use allocatable::{validate_eviction, validate_node_allocatable, validate_reserved};
pub use labels::{check_label_value, check_qualified_name, validate_node_labels};
use std::fmt::Display;
use std::net::IpAddr;

/// One invalid setting: which field, what value, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// camelCase config path, e.g. `healthzPort` or `authentication.webhook.cacheTTL`.
    pub field: String,
    pub value: String,
    pub reason: String,
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, field: impl Into<String>, value: impl Display, reason: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        });
    }

    fn check(&mut self, ok: bool, field: &str, value: impl Display, reason: impl Into<String>) {
        if !ok {
            self.push(field, value, reason);
        }
    }

    fn one_of(&mut self, field: &str, value: &str, allowed: &[&str]) {
        if !allowed.contains(&value) {
            self.push(field, value, format!("must be one of {allowed:?}"));
        }
    }
}

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Validates a merged configuration, returning every problem found.
pub fn validate_configuration(c: &KubeletConfiguration) -> Vec<FieldError> {
    let mut e = Errors::default();
    validate_ports(c, &mut e);
    validate_addresses(c, &mut e);
    validate_rates(c, &mut e);
    validate_periods(c, &mut e);
    validate_image_gc(c, &mut e);
    validate_policies(c, &mut e);
    validate_cgroups(c, &mut e);
    validate_reserved_memory(c, &mut e);
    validate_limits(c, &mut e);
    validate_eviction(c, &mut e);
    validate_reserved(c, &mut e);
    validate_node_allocatable(c, &mut e);
    validate_logs(c, &mut e);
    validate_endpoints(c, &mut e);
    validate_taints(&c.register_with_taints, &mut e);
    validate_shutdown(c, &mut e);
    validate_tls(c, &mut e);
    e.0
}

fn port_ok(p: i32, allow_zero: bool) -> bool {
    (if allow_zero { 0 } else { 1 }..=65535).contains(&p)
}

fn validate_ports(c: &KubeletConfiguration, e: &mut Errors) {
    // The secure port only has to be real when the server will listen on it.
    let need_port = c.enable_server;
    e.check(
        port_ok(c.port, !need_port),
        "port",
        c.port,
        if need_port {
            "must be between 1 and 65535 when enableServer is true"
        } else {
            "must be between 0 and 65535"
        },
    );
    for (field, v) in [
        ("healthzPort", c.healthz_port),
        ("readOnlyPort", c.read_only_port),
    ] {
        e.check(
            port_ok(v, true),
            field,
            v,
            "must be between 0 and 65535 (0 disables)",
        );
    }
}

fn validate_addresses(c: &KubeletConfiguration, e: &mut Errors) {
    for (field, v) in [
        ("address", &c.address),
        ("healthzBindAddress", &c.healthz_bind_address),
    ] {
        e.check(
            v.parse::<IpAddr>().is_ok(),
            field,
            v,
            "must be an IP address",
        );
    }
    for ip in &c.cluster_dns {
        e.check(
            ip.parse::<IpAddr>().is_ok(),
            "clusterDNS",
            ip,
            "must be an IP address",
        );
    }
}

fn validate_rates(c: &KubeletConfiguration, e: &mut Errors) {
    for (field, v) in [
        ("eventRecordQPS", c.event_record_qps),
        ("eventBurst", c.event_burst),
        ("registryPullQPS", c.registry_pull_qps),
        ("registryBurst", c.registry_burst),
        ("kubeAPIQPS", c.kube_api_qps),
        ("kubeAPIBurst", c.kube_api_burst),
    ] {
        e.check(v >= 0, field, v, "must not be negative");
    }
    if let Some(n) = c.max_parallel_image_pulls {
        e.check(
            n >= 1,
            "maxParallelImagePulls",
            n,
            "must be a positive number",
        );
        e.check(
            !(c.serialize_image_pulls && n > 1),
            "maxParallelImagePulls",
            n,
            "cannot be larger than 1 unless serializeImagePulls is false",
        );
    }
}

fn validate_periods(c: &KubeletConfiguration, e: &mut Errors) {
    // Zero in a file means "default"; a zero that survives came from a
    // flag and would make the corresponding loop spin.
    for (field, d) in [
        ("syncFrequency", c.sync_frequency),
        ("fileCheckFrequency", c.file_check_frequency),
        ("httpCheckFrequency", c.http_check_frequency),
        ("nodeStatusUpdateFrequency", c.node_status_update_frequency),
        ("nodeStatusReportFrequency", c.node_status_report_frequency),
        ("runtimeRequestTimeout", c.runtime_request_timeout),
        ("draManagerReconcilePeriod", c.dra_manager_reconcile_period),
    ] {
        e.check(!d.is_zero(), field, d, "must be greater than 0");
    }
    e.check(
        c.node_lease_duration_seconds > 0,
        "nodeLeaseDurationSeconds",
        c.node_lease_duration_seconds,
        "must be greater than 0",
    );
    let min_monitor = Duration::from_secs(3);
    e.check(
        c.container_log_monitor_interval >= min_monitor,
        "containerLogMonitorInterval",
        c.container_log_monitor_interval,
        "must be at least 3s",
    );
    validate_cfs_period(c, e);
}

fn validate_cfs_period(c: &KubeletConfiguration, e: &mut Errors) {
    let period = c.cpu_cfs_quota_period;
    if !c.gate_on("CustomCPUCFSQuotaPeriod") {
        e.check(
            period == Duration::from_millis(100),
            "cpuCFSQuotaPeriod",
            period,
            "requires feature gate CustomCPUCFSQuotaPeriod",
        );
        return;
    }
    let ok = (Duration::from_millis(1)..=Duration::from_secs(1)).contains(&period);
    e.check(
        ok,
        "cpuCFSQuotaPeriod",
        period,
        "must be between 1ms and 1s, inclusive",
    );
}

fn validate_image_gc(c: &KubeletConfiguration, e: &mut Errors) {
    let (high, low) = (
        c.image_gc_high_threshold_percent,
        c.image_gc_low_threshold_percent,
    );
    for (field, v) in [
        ("imageGCHighThresholdPercent", high),
        ("imageGCLowThresholdPercent", low),
    ] {
        e.check(
            (0..=100).contains(&v),
            field,
            v,
            "must be between 0 and 100, inclusive",
        );
    }
    e.check(
        low < high,
        "imageGCLowThresholdPercent",
        low,
        format!("must be less than imageGCHighThresholdPercent ({high})"),
    );
    let (max, min) = (c.image_maximum_gc_age, c.image_minimum_gc_age);
    e.check(
        max.is_zero() || max > min,
        "imageMaximumGCAge",
        max,
        format!("must be greater than imageMinimumGCAge ({min})"),
    );
}

fn validate_policies(c: &KubeletConfiguration, e: &mut Errors) {
    e.one_of("cgroupDriver", &c.cgroup_driver, &["cgroupfs", "systemd"]);
    e.one_of(
        "cpuManagerPolicy",
        &c.cpu_manager_policy,
        &["none", "static"],
    );
    e.one_of(
        "memoryManagerPolicy",
        &c.memory_manager_policy,
        &["None", "Static"],
    );
    e.one_of(
        "topologyManagerPolicy",
        &c.topology_manager_policy,
        &["none", "best-effort", "restricted", "single-numa-node"],
    );
    e.one_of(
        "topologyManagerScope",
        &c.topology_manager_scope,
        &["container", "pod"],
    );
    e.one_of(
        "hairpinMode",
        &c.hairpin_mode,
        &["promiscuous-bridge", "hairpin-veth", "none"],
    );
    e.one_of(
        "authorization.mode",
        &c.authorization.mode,
        &["AlwaysAllow", "Webhook"],
    );
    e.one_of(
        "configMapAndSecretChangeDetectionStrategy",
        &c.config_map_and_secret_change_detection_strategy,
        &["Get", "Cache", "Watch"],
    );
    e.one_of(
        "memorySwap.swapBehavior",
        &c.memory_swap.swap_behavior,
        &["", "NoSwap", "LimitedSwap"],
    );
    e.one_of(
        "memoryReservationPolicy",
        &c.memory_reservation_policy,
        &["None", "TieredReservation"],
    );
    e.one_of("logging.format", &c.logging.format, &["text", "json"]);
}

fn validate_cgroups(c: &KubeletConfiguration, e: &mut Errors) {
    e.check(
        c.system_cgroups.is_empty() || !c.cgroup_root.is_empty(),
        "systemCgroups",
        &c.system_cgroups,
        "requires cgroupRoot to be set",
    );
    for (field, v) in [
        ("cgroupRoot", &c.cgroup_root),
        ("kubeletCgroups", &c.kubelet_cgroups),
        ("systemCgroups", &c.system_cgroups),
        ("systemReservedCgroup", &c.system_reserved_cgroup),
        ("kubeReservedCgroup", &c.kube_reserved_cgroup),
    ] {
        e.check(
            v.is_empty() || v.starts_with('/'),
            field,
            v,
            "must be an absolute cgroup name",
        );
    }
    if !c.reserved_system_cpus.is_empty() {
        let list = &c.reserved_system_cpus;
        e.check(
            c.system_reserved_cgroup.is_empty() && c.kube_reserved_cgroup.is_empty(),
            "reservedSystemCPUs",
            list,
            "can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup \
             (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)",
        );
        if let Err(err) = crate::cm::cpuset::CpuSet::parse(list) {
            e.push(
                "reservedSystemCPUs",
                list,
                format!("unable to parse reservedSystemCPUs (--reserved-cpus): {err}"),
            );
        }
    }
}

/// upstream validateReservedMemoryConfiguration: memory and huge pages
/// only, never zero, each node and type once. Whether the sums match node
/// allocatable's reservation is the memory manager's check at start.
fn validate_reserved_memory(c: &KubeletConfiguration, e: &mut Errors) {
    let mut seen = std::collections::HashSet::new();
    for r in &c.reserved_memory {
        let node = r.numa_node;
        for (kind, q) in &r.limits {
            let field = format!("reservedMemory[numaNode={node}].limits.{kind}");
            if kind != "memory" && !kind.starts_with("hugepages-") {
                e.push(
                    &field,
                    q,
                    format!(
                        "the limit type {kind:?} for NUMA node {node} is not supported, \
                         only [memory hugepages-<HugePageSize>] is accepted"
                    ),
                );
                continue;
            }
            match crate::util::quantity::parse_quantity(q) {
                Ok(0) => e.push(
                    &field,
                    q,
                    format!("reserved memory may not be zero for NUMA node {node} and resource {kind:?}"),
                ),
                Ok(_) => {}
                Err(err) => e.push(&field, q, err.to_string()),
            }
            if !seen.insert((node, kind.clone())) {
                e.push(
                    &field,
                    q,
                    format!(
                        "the reserved memory has a duplicate value for NUMA node {node} and resource {kind:?}"
                    ),
                );
            }
        }
    }
}

fn validate_limits(c: &KubeletConfiguration, e: &mut Errors) {
    e.check(
        c.max_pods >= 0,
        "maxPods",
        c.max_pods,
        "must not be negative",
    );
    e.check(
        c.pods_per_core >= 0,
        "podsPerCore",
        c.pods_per_core,
        "must not be negative",
    );
    e.check(
        c.max_open_files >= 0,
        "maxOpenFiles",
        c.max_open_files,
        "must not be negative",
    );
    e.check(
        (-1000..=1000).contains(&c.oom_score_adj),
        "oomScoreAdj",
        c.oom_score_adj,
        "must be between -1000 and 1000, inclusive",
    );
    e.check(
        c.node_status_max_images >= -1,
        "nodeStatusMaxImages",
        c.node_status_max_images,
        "must be -1 or greater",
    );
    for (field, v) in [
        ("iptablesMasqueradeBit", c.iptables_masquerade_bit),
        ("iptablesDropBit", c.iptables_drop_bit),
    ] {
        e.check(
            (0..=31).contains(&v),
            field,
            v,
            "must be between 0 and 31, inclusive",
        );
    }
    let f = c.memory_throttling_factor;
    e.check(
        f > 0.0 && f <= 1.0,
        "memoryThrottlingFactor",
        f,
        "must be greater than 0 and less than or equal to 1.0",
    );
}

/// filepath.IsAbs && filepath.Clean(p) == p, for '/'-separated paths.
fn is_clean_absolute(p: &str) -> bool {
    if p == "/" {
        return true;
    }
    p.starts_with('/')
        && !p.ends_with('/')
        && p[1..]
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

fn validate_logs(c: &KubeletConfiguration, e: &mut Errors) {
    e.check(
        c.container_log_max_files > 1,
        "containerLogMaxFiles",
        c.container_log_max_files,
        "must be greater than 1",
    );
    e.check(
        c.container_log_max_workers >= 1,
        "containerLogMaxWorkers",
        c.container_log_max_workers,
        "must be at least 1",
    );
    match parse_quantity(&c.container_log_max_size) {
        Ok(q) => e.check(
            q > 0,
            "containerLogMaxSize",
            &c.container_log_max_size,
            "must be positive",
        ),
        Err(err) => e.push(
            "containerLogMaxSize",
            &c.container_log_max_size,
            err.to_string(),
        ),
    }
    let dir = &c.pod_logs_dir;
    e.check(
        is_clean_absolute(dir),
        "podLogsDir",
        dir,
        "must be a normalized absolute path",
    );
    // Upstream uses the path in metric labels, so it must be plain ASCII.
    e.check(
        dir.is_ascii(),
        "podLogsDir",
        dir,
        "must contain ASCII characters only",
    );
}

/// Checks a CRI endpoint. Linux supports only unix sockets; a bare
/// absolute path is accepted (upstream warns that it is deprecated).
pub(crate) fn check_endpoint(value: &str) -> Result<(), String> {
    if let Some(path) = value.strip_prefix("unix://") {
        if path.starts_with('/') && path.len() > 1 {
            return Ok(());
        }
        return Err("unix endpoint must name an absolute socket path, e.g. unix:///run/containerd/containerd.sock".into());
    }
    if value.starts_with('/') {
        log::warn!("using {value:?} as endpoint is deprecated, please consider using full url format \"unix://{value}\"");
        return Ok(());
    }
    if value.is_empty() {
        return Err("must be specified".into());
    }
    Err("only unix:// endpoints (or absolute socket paths) are supported on Linux".into())
}

fn validate_endpoints(c: &KubeletConfiguration, e: &mut Errors) {
    if let Err(reason) = check_endpoint(&c.container_runtime_endpoint) {
        e.push(
            "containerRuntimeEndpoint",
            &c.container_runtime_endpoint,
            reason,
        );
    }
    if !c.image_service_endpoint.is_empty() {
        if let Err(reason) = check_endpoint(&c.image_service_endpoint) {
            e.push("imageServiceEndpoint", &c.image_service_endpoint, reason);
        }
    }
}

fn validate_taints(taints: &[Taint], e: &mut Errors) {
    const F: &str = "registerWithTaints";
    for t in taints {
        let shown = format!("{}={}:{}", t.key, t.value, t.effect);
        if let Err(reason) = check_qualified_name(&t.key) {
            e.push(F, &shown, format!("invalid key: {reason}"));
        }
        if let Err(reason) = check_label_value(&t.value) {
            e.push(F, &shown, format!("invalid value: {reason}"));
        }
        // The API server rejects node taints without an effect, so require it here.
        e.check(
            TAINT_EFFECTS.contains(&t.effect.as_str()),
            F,
            &shown,
            format!("effect must be one of {TAINT_EFFECTS:?}"),
        );
        e.check(
            t.time_added.is_none(),
            F,
            &shown,
            "timeAdded must not be set",
        );
    }
}

fn validate_shutdown(c: &KubeletConfiguration, e: &mut Errors) {
    let (total, critical) = (
        c.shutdown_grace_period,
        c.shutdown_grace_period_critical_pods,
    );
    e.check(
        critical <= total,
        "shutdownGracePeriodCriticalPods",
        critical,
        format!("must be <= shutdownGracePeriod ({total})"),
    );
    let one_sec = Duration::from_secs(1);
    for (field, d) in [
        ("shutdownGracePeriod", total),
        ("shutdownGracePeriodCriticalPods", critical),
    ] {
        e.check(
            d.is_zero() || d >= one_sec,
            field,
            d,
            "must be either zero or otherwise >= 1s",
        );
    }
    e.check(
        c.shutdown_grace_period_by_pod_priority.is_empty()
            || (total.is_zero() && critical.is_zero()),
        "shutdownGracePeriodByPodPriority",
        c.shutdown_grace_period_by_pod_priority.len(),
        "cannot be combined with shutdownGracePeriod or shutdownGracePeriodCriticalPods",
    );
}

fn validate_tls(c: &KubeletConfiguration, e: &mut Errors) {
    e.one_of(
        "tlsMinVersion",
        &c.tls_min_version,
        &[
            "",
            "VersionTLS10",
            "VersionTLS11",
            "VersionTLS12",
            "VersionTLS13",
        ],
    );
    // Go's names, mapped onto rustls' suites: an unknown name, or a list
    // leaving TLS 1.2 without a suite, stops the start naming it.
    if let Ok((versions, _)) = crate::server::kubelet::tls_options::versions(&c.tls_min_version) {
        let tls12 = versions.contains(&&rustls::version::TLS12);
        use crate::server::kubelet::tls_options::{cipher_suites, TlsOptionsError};
        if let Err(err) = cipher_suites(&c.tls_cipher_suites, tls12) {
            let reason = match err {
                TlsOptionsError::CipherSuites(reason) => reason.to_string(),
                other => other.to_string(),
            };
            e.push("tlsCipherSuites", c.tls_cipher_suites.join(","), reason);
        }
    }
    // One without the other cannot be loaded; upstream would fail later with a vaguer error.
    let (cert, key) = (&c.tls_cert_file, &c.tls_private_key_file);
    e.check(
        cert.is_empty() == key.is_empty(),
        if cert.is_empty() {
            "tlsCertFile"
        } else {
            "tlsPrivateKeyFile"
        },
        "",
        "tlsCertFile and tlsPrivateKeyFile must be set together",
    );
}

/// The addresses of a `--node-ip` value (one, or a dual-stack pair), in
/// order, blanks dropped.
pub fn node_ips(node_ip: &str) -> Vec<String> {
    node_ip
        .split(',')
        .map(str::trim)
        .filter(|ip| !ip.is_empty())
        .map(str::to_string)
        .collect()
}

/// `--node-ip`: one address or a comma-separated dual-stack pair.
pub fn validate_node_ip(node_ip: &str) -> Result<(), String> {
    let ips: Vec<&str> = node_ip.split(',').map(str::trim).collect();
    if ips.len() > 2 {
        return Err("at most two IPs (one per family) may be given".into());
    }
    let mut parsed = Vec::new();
    for ip in &ips {
        parsed.push(
            ip.parse::<IpAddr>()
                .map_err(|_| format!("{ip:?} is not an IP address"))?,
        );
    }
    if let [a, b] = parsed[..] {
        if a.is_ipv4() == b.is_ipv4() {
            return Err("dual-stack --node-ip needs one IPv4 and one IPv6 address".into());
        }
    }
    Ok(())
}
