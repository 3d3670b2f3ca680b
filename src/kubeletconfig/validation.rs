//! Validation of the merged configuration, after
//! pkg/kubelet/apis/config/validation/validation.go and the flag checks in
//! cmd/kubelet/app/options. Every problem is collected (upstream
//! aggregates too) so one run reports all of them; callers attach the
//! source (file or flags) per field.

use super::duration::Duration;
use super::types::{KubeletConfiguration, Taint};
use crate::util::quantity::parse_quantity;
use std::collections::{BTreeMap, BTreeSet};
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

pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "allocatableMemory.available",
    "pid.available",
];

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
    let gate = c
        .feature_gates
        .get("CustomCPUCFSQuotaPeriod")
        .copied()
        .unwrap_or(false);
    if !gate {
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

/// An eviction threshold value: a percentage in [0%, 100%] or a
/// non-negative quantity.
fn check_threshold_value(field: &str, signal: &str, value: &str, e: &mut Errors) {
    let shown = format!("{signal}={value}");
    if let Some(pct) = value.strip_suffix('%') {
        let ok = pct.parse::<f64>().is_ok_and(|p| (0.0..=100.0).contains(&p));
        e.check(ok, field, shown, "percentage must be between 0% and 100%");
        return;
    }
    match parse_quantity(value) {
        Ok(q) => e.check(q >= 0, field, shown, "quantity must not be negative"),
        Err(err) => e.push(field, shown, err.to_string()),
    }
}

fn check_signal(field: &str, signal: &str, e: &mut Errors) -> bool {
    let known = EVICTION_SIGNALS.contains(&signal);
    e.check(
        known,
        field,
        signal,
        format!("unknown eviction signal; known signals: {EVICTION_SIGNALS:?}"),
    );
    known
}

fn validate_threshold_map(field: &str, map: &BTreeMap<String, String>, e: &mut Errors) {
    for (signal, value) in map {
        if check_signal(field, signal, e) {
            check_threshold_value(field, signal, value, e);
        }
    }
}

fn validate_eviction(c: &KubeletConfiguration, e: &mut Errors) {
    validate_threshold_map("evictionHard", &c.eviction_hard, e);
    validate_threshold_map("evictionSoft", &c.eviction_soft, e);
    validate_threshold_map("evictionMinimumReclaim", &c.eviction_minimum_reclaim, e);
    for (signal, period) in &c.eviction_soft_grace_period {
        if check_signal("evictionSoftGracePeriod", signal, e) {
            if let Err(err) = Duration::parse(period) {
                e.push(
                    "evictionSoftGracePeriod",
                    format!("{signal}={period}"),
                    err.to_string(),
                );
            }
        }
    }
    // A soft threshold without a grace period would never fire.
    for signal in c.eviction_soft.keys() {
        e.check(
            c.eviction_soft_grace_period.contains_key(signal),
            "evictionSoftGracePeriod",
            signal,
            "every evictionSoft signal needs a grace period",
        );
    }
}

fn validate_reserved(c: &KubeletConfiguration, e: &mut Errors) {
    const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];
    for (field, map) in [
        ("systemReserved", &c.system_reserved),
        ("kubeReserved", &c.kube_reserved),
    ] {
        for (res, qty) in map {
            let shown = format!("{res}={qty}");
            if !RESERVABLE.contains(&res.as_str()) {
                e.push(
                    field,
                    shown,
                    format!("cannot reserve this resource; allowed: {RESERVABLE:?}"),
                );
                continue;
            }
            match parse_quantity(qty) {
                Ok(q) => e.check(q >= 0, field, shown, "quantity must not be negative"),
                Err(err) => e.push(field, shown, err.to_string()),
            }
        }
    }
}

fn validate_node_allocatable(c: &KubeletConfiguration, e: &mut Errors) {
    const F: &str = "enforceNodeAllocatable";
    let list = &c.enforce_node_allocatable;
    let has = |k: &str| list.iter().any(|v| v == k);
    for (a, b) in [
        ("system-reserved", "system-reserved-compressible"),
        ("kube-reserved", "kube-reserved-compressible"),
    ] {
        e.check(
            !(has(a) && has(b)),
            F,
            format!("{a},{b}"),
            "cannot be specified together",
        );
    }
    let mut seen = BTreeSet::new();
    for v in list {
        if !seen.insert(v.as_str()) {
            e.push(F, v, "duplicated enforcement");
            continue;
        }
        let needs_qos = match v.as_str() {
            "pods" => true,
            "system-reserved" | "system-reserved-compressible" => {
                let ok = !c.system_reserved_cgroup.is_empty();
                e.check(ok, F, v, "requires systemReservedCgroup to be set");
                true
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                let ok = !c.kube_reserved_cgroup.is_empty();
                e.check(ok, F, v, "requires kubeReservedCgroup to be set");
                true
            }
            "none" => {
                e.check(
                    list.len() == 1,
                    F,
                    v,
                    "may not be combined with other enforcements",
                );
                false
            }
            _ => {
                e.push(
                    F,
                    v,
                    "valid options are pods, system-reserved, system-reserved-compressible, \
                     kube-reserved, kube-reserved-compressible or none",
                );
                false
            }
        };
        if needs_qos {
            e.check(c.cgroups_per_qos, F, v, "requires cgroupsPerQOS to be true");
        }
    }
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
        if let Err(msg) =
            crate::server::kubelet::tls_options::cipher_suites(&c.tls_cipher_suites, tls12)
        {
            let reason = msg.trim_start_matches("tlsCipherSuites: ").to_string();
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

// ---- label syntax (apimachinery util/validation) ----

fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters.
fn check_name_part(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if s.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    let alnum_ends = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !alnum_ends || !s.chars().all(is_label_char) {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', \
                    and must start and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}

/// RFC 1123 subdomain: dot-separated lowercase alphanumeric/'-' labels, <= 253 chars.
fn check_dns_subdomain(s: &str) -> Result<(), String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if s.is_empty() || s.len() > 253 || !s.split('.').all(label_ok) {
        return Err("prefix part must be a lowercase RFC 1123 subdomain".into());
    }
    Ok(())
}

/// A label/annotation key: `[prefix/]name`.
pub fn check_qualified_name(key: &str) -> Result<(), String> {
    match key.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix)?;
            check_name_part(name)
        }
        None => check_name_part(key),
    }
}

/// A label value: empty, or a name part.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    check_name_part(v).map_err(|e| e.replace("name part", "value"))
}

/// Labels in the kubernetes.io / k8s.io namespaces the kubelet may set on itself.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

fn in_namespace(ns: &str, root: &str) -> bool {
    ns == root
        || ns
            .strip_suffix(root)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Whether the NodeRestriction admission plugin would let the kubelet set this label.
fn is_allowed_kubernetes_label(key: &str) -> bool {
    let Some((ns, _)) = key.split_once('/') else {
        return true;
    };
    let reserved = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
    !reserved
        || KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|root| in_namespace(ns, root))
}

/// `--node-labels` checks from options.ValidateKubeletFlags.
pub fn validate_node_labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    let mut errs = Vec::new();
    for (k, v) in labels {
        if let Err(reason) = check_qualified_name(k) {
            errs.push(format!("invalid label key {k:?}: {reason}"));
        }
        if let Err(reason) = check_label_value(v) {
            errs.push(format!("invalid value {v:?} for label {k:?}: {reason}"));
        }
        if !is_allowed_kubernetes_label(k) {
            errs.push(format!(
                "label {k:?} is in the 'kubernetes.io' or 'k8s.io' namespace and must begin with an \
                 allowed prefix ({}) or be one of {KUBELET_LABELS:?}",
                KUBELET_LABEL_NAMESPACES.join(", ")
            ));
        }
    }
    errs
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A default configuration with `edit` applied.
    fn with(edit: impl FnOnce(&mut KubeletConfiguration)) -> KubeletConfiguration {
        let mut c = KubeletConfiguration::default();
        edit(&mut c);
        c
    }

    fn fields(c: &KubeletConfiguration) -> Vec<String> {
        validate_configuration(c)
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn defaults_are_valid() {
        assert_eq!(
            validate_configuration(&KubeletConfiguration::default()),
            vec![]
        );
        assert_eq!(
            validate_configuration(&KubeletConfiguration::legacy_flag_defaults()),
            vec![]
        );
    }

    #[test]
    fn ports() {
        let c = with(|c| {
            c.healthz_port = -1;
            c.read_only_port = 70000;
            c.port = 0;
        });
        assert_eq!(fields(&c), vec!["port", "healthzPort", "readOnlyPort"]);
        let c = with(|c| {
            c.enable_server = false;
            c.port = 0;
        });
        assert!(fields(&c).is_empty());
    }

    #[test]
    fn image_gc_and_limits() {
        let c = with(|c| {
            c.image_gc_low_threshold_percent = 90;
            c.image_gc_high_threshold_percent = 101;
            c.max_pods = -1;
            c.oom_score_adj = -1001;
            c.node_lease_duration_seconds = 0;
            c.node_status_update_frequency = Duration::ZERO;
        });
        let got = fields(&c);
        for want in [
            "imageGCHighThresholdPercent",
            "maxPods",
            "oomScoreAdj",
            "nodeLeaseDurationSeconds",
            "nodeStatusUpdateFrequency",
        ] {
            assert!(got.iter().any(|f| f == want), "{want} missing from {got:?}");
        }
        let c = with(|c| c.image_gc_low_threshold_percent = 85);
        assert_eq!(fields(&c), vec!["imageGCLowThresholdPercent"]);
    }

    #[test]
    fn policies_and_logs() {
        let c = with(|c| {
            c.cgroup_driver = "cgroupv2".into();
            c.container_log_max_files = 1;
            c.container_log_max_size = "ten megs".into();
            c.pod_logs_dir = "/var/log/../pods/".into();
            c.hairpin_mode = "bogus".into();
        });
        assert_eq!(
            fields(&c),
            vec![
                "cgroupDriver",
                "hairpinMode",
                "containerLogMaxFiles",
                "containerLogMaxSize",
                "podLogsDir"
            ]
        );
    }

    #[test]
    fn eviction_thresholds() {
        let mut c = KubeletConfiguration::default();
        c.eviction_hard
            .insert("disk.available".into(), "1Gi".into());
        c.eviction_hard
            .insert("memory.available".into(), "150%".into());
        c.eviction_soft
            .insert("nodefs.available".into(), "20%".into());
        let errs = validate_configuration(&c);
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert!(errs.iter().any(|e| e.value == "disk.available"));
        assert!(errs.iter().any(|e| e.field == "evictionSoftGracePeriod"));
        c.eviction_soft_grace_period
            .insert("nodefs.available".into(), "1m30s".into());
        c.eviction_hard.remove("disk.available");
        c.eviction_hard
            .insert("memory.available".into(), "0%".into());
        assert!(fields(&c).is_empty());
    }

    #[test]
    fn reserved_and_allocatable() {
        let mut c = KubeletConfiguration::default();
        c.system_reserved.insert("cpu".into(), "200m".into());
        c.system_reserved.insert("gpu".into(), "1".into());
        c.kube_reserved.insert("memory".into(), "-1Gi".into());
        c.enforce_node_allocatable = vec!["pods".into(), "kube-reserved".into(), "pods".into()];
        let got = fields(&c);
        assert_eq!(
            got,
            vec![
                "systemReserved",
                "kubeReserved",
                "enforceNodeAllocatable",
                "enforceNodeAllocatable"
            ]
        );
        c = KubeletConfiguration::default();
        c.enforce_node_allocatable = vec!["none".into(), "pods".into()];
        assert_eq!(fields(&c), vec!["enforceNodeAllocatable"]);
    }

    #[test]
    fn endpoints() {
        assert!(check_endpoint("unix:///run/containerd/containerd.sock").is_ok());
        assert!(check_endpoint("/run/crio/crio.sock").is_ok());
        assert!(check_endpoint("tcp://127.0.0.1:1234").is_err());
        assert!(check_endpoint("unix://relative.sock").is_err());
        assert!(check_endpoint("").is_err());
        let c = with(|c| c.image_service_endpoint = "npipe:////./pipe/x".into());
        assert_eq!(fields(&c), vec!["imageServiceEndpoint"]);
    }

    #[test]
    fn taints() {
        let mut c = KubeletConfiguration::default();
        let taint = |k: &str, v: &str, eff: &str| Taint {
            key: k.into(),
            value: v.into(),
            effect: eff.into(),
            time_added: None,
        };
        c.register_with_taints = vec![
            taint("dedicated", "edge", "NoSchedule"),
            taint("bad key!", "", "NoExecute"),
            taint("ok", "", "Sometimes"),
            taint("example.com/x", "v", "PreferNoSchedule"),
        ];
        let errs = validate_configuration(&c);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().all(|e| e.field == "registerWithTaints"));
    }

    #[test]
    fn label_syntax() {
        for good in ["a", "app.kubernetes.io/name", "example.com/a-b_c.d", "A1"] {
            assert!(check_qualified_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a/b/c",
            "Example.com/a",
            "/a",
            "a/",
            &"x".repeat(64),
        ] {
            assert!(check_qualified_name(bad).is_err(), "{bad}");
        }
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("v1.2").is_ok());
        assert!(check_label_value("has space").is_err());
    }

    #[test]
    fn node_label_namespaces() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let ok = labels(&[
            ("node-role", "edge"),
            ("node.kubernetes.io/pool", "a"),
            ("topology.kubernetes.io/zone", "z1"),
            ("foo.kubelet.kubernetes.io/x", ""),
        ]);
        assert_eq!(validate_node_labels(&ok), Vec::<String>::new());
        let bad = labels(&[
            ("node-role.kubernetes.io/master", ""),
            ("k8s.io/x", "y"),
            ("x", "a b"),
        ]);
        assert_eq!(validate_node_labels(&bad).len(), 3);
    }

    #[test]
    fn node_ip() {
        assert!(validate_node_ip("10.0.0.5").is_ok());
        assert!(validate_node_ip("10.0.0.5,fd00::5").is_ok());
        assert!(validate_node_ip("::").is_ok());
        assert!(validate_node_ip("10.0.0.5,10.0.0.6").is_err());
        assert!(validate_node_ip("node1").is_err());
    }
}
