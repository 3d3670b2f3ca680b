//! End-to-end tests of `load`: files, flags, precedence and error messages.

use super::duration::Duration;
use super::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

use tempfile::TempDir;

/// A config file in a private temp directory, removed on drop.
struct TempConfig {
    dir: TempDir,
    path: PathBuf,
}

impl TempConfig {
    fn new(name: &str, contents: &str) -> Self {
        let dir = TempDir::with_prefix("kubeletconfig-test-")
            .unwrap_or_else(|e| panic!("create a temp dir: {e}"));
        let path = dir.path().join(name);
        if let Err(e) = std::fs::write(&path, contents) {
            panic!("write {}: {e}", path.display());
        }
        TempConfig { dir, path }
    }

    fn arg(&self) -> String {
        format!("--config={}", self.path.display())
    }
}

const HEADER: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn run(args: &[&str]) -> Result<(KubeletFlags, KubeletConfiguration), LoadError> {
    load(std::iter::once("kubelet").chain(args.iter().copied()))
}

fn ok(args: &[&str]) -> (KubeletFlags, KubeletConfiguration) {
    match run(args) {
        Ok(v) => v,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

fn err(args: &[&str]) -> String {
    match run(args) {
        Ok(_) => panic!("{args:?} should fail"),
        Err(e) => e.to_string(),
    }
}

fn yaml(body: &str) -> TempConfig {
    TempConfig::new("kubelet.yaml", &format!("{HEADER}{body}"))
}

#[test]
fn v1beta1_defaults() {
    let c = KubeletConfiguration::default();
    assert!(c.enable_server);
    assert_eq!(c.sync_frequency, Duration::from_mins(1));
    assert_eq!(c.file_check_frequency.to_string(), "20s");
    assert_eq!(c.http_check_frequency.to_string(), "20s");
    assert_eq!(
        (c.address.as_str(), c.port, c.read_only_port),
        ("0.0.0.0", 10250, 0)
    );
    assert!(!c.authentication.anonymous.enabled);
    assert!(c.authentication.webhook.enabled);
    assert_eq!(c.authentication.webhook.cache_ttl.to_string(), "2m0s");
    assert_eq!(c.authorization.mode, "Webhook");
    assert_eq!(
        c.authorization.webhook.cache_authorized_ttl.to_string(),
        "5m0s"
    );
    assert_eq!(
        c.authorization.webhook.cache_unauthorized_ttl.to_string(),
        "30s"
    );
    assert_eq!((c.registry_pull_qps, c.registry_burst), (5, 10));
    assert_eq!((c.event_record_qps, c.event_burst), (50, 100));
    assert_eq!(
        (c.healthz_port, c.healthz_bind_address.as_str()),
        (10248, "127.0.0.1")
    );
    assert_eq!(c.oom_score_adj, -999);
    assert_eq!(c.streaming_connection_idle_timeout.to_string(), "4h0m0s");
    assert_eq!(c.node_status_update_frequency.to_string(), "10s");
    assert_eq!(c.node_status_report_frequency.to_string(), "5m0s");
    assert_eq!(c.node_lease_duration_seconds, 40);
    assert_eq!(
        (
            c.image_gc_high_threshold_percent,
            c.image_gc_low_threshold_percent
        ),
        (85, 80)
    );
    assert_eq!(c.cgroup_driver, "cgroupfs");
    assert_eq!(
        (
            c.cpu_manager_policy.as_str(),
            c.memory_manager_policy.as_str(),
            c.topology_manager_policy.as_str()
        ),
        ("none", "None", "none")
    );
    assert_eq!(c.hairpin_mode, "promiscuous-bridge");
    assert_eq!((c.max_pods, c.pod_pids_limit), (110, -1));
    assert_eq!(c.resolv_conf, "/etc/resolv.conf");
    assert_eq!(c.cpu_cfs_quota_period.to_string(), "100ms");
    assert_eq!(c.max_open_files, 1_000_000);
    assert_eq!(c.content_type, "application/vnd.kubernetes.protobuf");
    assert_eq!((c.kube_api_qps, c.kube_api_burst), (50, 100));
    assert!(c.serialize_image_pulls && c.fail_swap_on && c.register_node && c.cgroups_per_qos);
    assert_eq!(c.eviction_hard, default_eviction_hard());
    assert_eq!(
        c.eviction_hard
            .get("imagefs.inodesFree")
            .map(String::as_str),
        Some("5%")
    );
    assert_eq!(
        (c.container_log_max_size.as_str(), c.container_log_max_files),
        ("10Mi", 5)
    );
    assert_eq!(c.container_log_max_workers, 1);
    assert_eq!(c.container_log_monitor_interval.to_string(), "10s");
    assert_eq!(c.enforce_node_allocatable, vec!["pods"]);
    assert_eq!(
        (c.logging.format.as_str(), c.logging.verbosity),
        ("text", 0)
    );
    assert_eq!(c.node_status_max_images, 50);
    assert_eq!(
        c.container_runtime_endpoint,
        "unix:///run/containerd/containerd.sock"
    );
    assert_eq!(c.pod_logs_dir, "/var/log/pods");
    assert!(!c.seccomp_default && c.local_storage_capacity_isolation);
}

#[test]
fn no_config_file_uses_legacy_flag_defaults() {
    let (f, c) = ok(&[]);
    assert_eq!(f, KubeletFlags::default());
    assert_eq!(f.root_dir, PathBuf::from("/var/lib/kubelet"));
    assert!(f.is_standalone());
    assert!(c.authentication.anonymous.enabled);
    assert!(!c.authentication.webhook.enabled);
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    assert_eq!(c.read_only_port, 10255);
    // Everything else is the v1beta1 default.
    assert_eq!(c, KubeletConfiguration::legacy_flag_defaults());
    assert_eq!(c.port, 10250);
}

#[test]
fn yaml_file() {
    let cfg = yaml(
        "staticPodPath: /etc/kubernetes/manifests\n\
         syncFrequency: 30s\n\
         clusterDNS: [10.96.0.10]\n\
         clusterDomain: cluster.local\n\
         staticPodURLHeader:\n  Authorization: [\"Bearer x\"]\n\
         authentication:\n  webhook:\n    cacheTTL: 1m\n  x509:\n    clientCAFile: /etc/ca.crt\n\
         featureGates:\n  SomeGate: true\n\
         registerWithTaints:\n- key: dedicated\n  value: edge\n  effect: NoSchedule\n",
    );
    let (f, c) = ok(&[&cfg.arg()]);
    assert_eq!(f.config_file.as_deref(), Some(cfg.path.as_path()));
    assert_eq!(c.static_pod_path, "/etc/kubernetes/manifests");
    assert_eq!(c.sync_frequency, Duration::from_secs(30));
    assert_eq!(c.cluster_dns, vec!["10.96.0.10"]);
    assert_eq!(
        c.static_pod_url_header.get("Authorization"),
        Some(&vec!["Bearer x".to_string()])
    );
    assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_mins(1));
    assert!(
        c.authentication.webhook.enabled,
        "sibling field keeps its default"
    );
    assert_eq!(c.authentication.x509.client_ca_file, "/etc/ca.crt");
    assert_eq!(c.feature_gates.get("SomeGate"), Some(&true));
    assert_eq!(c.register_with_taints[0].effect, "NoSchedule");
    // With a config file the secure v1beta1 defaults apply, not the legacy ones.
    assert_eq!(c.read_only_port, 0);
    assert_eq!(c.authorization.mode, "Webhook");
}

#[test]
fn json_file() {
    let cfg = TempConfig::new(
        "kubelet.json",
        r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "port": 10260, "maxPods": 42, "evictionHard": {"memory.available": "200Mi"},
            "logging": {"verbosity": 3}}"#,
    );
    let (f, c) = ok(&[&cfg.arg()]);
    assert_eq!((c.port, c.max_pods), (10260, 42));
    assert_eq!(
        c.eviction_hard.len(),
        1,
        "an explicit map replaces the defaults"
    );
    assert_eq!(f.verbosity, 3);
}

#[test]
fn realistic_kubeadm_style_file() {
    let cfg = yaml(
        "authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    cacheTTL: 0s\n    enabled: true\n  x509:\n    clientCAFile: /etc/kubernetes/pki/ca.crt\n\
         authorization:\n  mode: Webhook\n  webhook:\n    cacheAuthorizedTTL: 0s\n    cacheUnauthorizedTTL: 0s\n\
         cgroupDriver: systemd\nclusterDNS:\n- 10.96.0.10\nclusterDomain: cluster.local\n\
         containerRuntimeEndpoint: \"\"\ncpuManagerReconcilePeriod: 0s\n\
         evictionPressureTransitionPeriod: 0s\nfileCheckFrequency: 0s\nhealthzBindAddress: 127.0.0.1\n\
         healthzPort: 10248\nhttpCheckFrequency: 0s\nimageMaximumGCAge: 0s\nimageMinimumGCAge: 0s\n\
         logging:\n  flushFrequency: 0\n  options:\n    json:\n      infoBufferSize: \"0\"\n    text:\n      infoBufferSize: \"0\"\n  verbosity: 0\n\
         memorySwap: {}\nnodeStatusReportFrequency: 0s\nnodeStatusUpdateFrequency: 0s\n\
         rotateCertificates: true\nruntimeRequestTimeout: 0s\nshutdownGracePeriod: 0s\n\
         shutdownGracePeriodCriticalPods: 0s\nstaticPodPath: /etc/kubernetes/manifests\n\
         streamingConnectionIdleTimeout: 0s\nsyncFrequency: 0s\nvolumeStatsAggPeriod: 0s\n",
    );
    let (_, c) = ok(&[&cfg.arg()]);
    // Zero values mean "use the default", exactly as upstream defaulting does.
    assert_eq!(c.sync_frequency, Duration::from_mins(1));
    assert_eq!(c.authentication.webhook.cache_ttl, Duration::from_mins(2));
    assert_eq!(c.node_status_report_frequency, Duration::from_mins(5));
    assert_eq!(
        c.container_runtime_endpoint,
        DEFAULT_CONTAINER_RUNTIME_ENDPOINT
    );
    assert_eq!(c.logging.flush_frequency, Duration::from_secs(5));
    assert_eq!(c.cgroup_driver, "systemd");
}

#[test]
fn zero_port_in_file_means_default() {
    let cfg = yaml("port: 0\nmaxPods: 0\naddress: \"\"\n");
    let (_, c) = ok(&[&cfg.arg()]);
    assert_eq!(
        (c.port, c.max_pods, c.address.as_str()),
        (10250, 110, "0.0.0.0")
    );
}

#[test]
fn report_frequency_follows_explicit_update_frequency() {
    let cfg = yaml("nodeStatusUpdateFrequency: 20s\n");
    let (_, c) = ok(&[&cfg.arg()]);
    assert_eq!(c.node_status_report_frequency, Duration::from_secs(20));
    let cfg = yaml("nodeStatusUpdateFrequency: 20s\nnodeStatusReportFrequency: 1m\n");
    let (_, c) = ok(&[&cfg.arg()]);
    assert_eq!(c.node_status_report_frequency, Duration::from_mins(1));
}

#[test]
fn eviction_merge_and_parallel_pull_defaults() {
    let cfg = yaml("mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\nmaxParallelImagePulls: 4\n");
    let (_, c) = ok(&[&cfg.arg()]);
    assert_eq!(c.eviction_hard.len(), default_eviction_hard().len());
    assert_eq!(
        c.eviction_hard.get("memory.available").map(String::as_str),
        Some("1Gi")
    );
    assert!(
        !c.serialize_image_pulls,
        "parallel pulls imply non-serialized pulls"
    );
}

#[test]
fn unknown_field_names_file_and_field() {
    let cfg = yaml("port: 10250\nsyncFrequencyy: 1m\n");
    let e = err(&[&cfg.arg()]);
    assert!(e.contains(&cfg.path.display().to_string()), "{e}");
    assert!(e.contains("unknown field \"syncFrequencyy\""), "{e}");
    assert!(e.contains("line 4"), "{e}");
    assert!(
        !e.contains("expected one of"),
        "long field list should be dropped: {e}"
    );

    let cfg = yaml("authentication:\n  webhook:\n    cacheTtl: 1m\n");
    let e = err(&[&cfg.arg()]);
    assert!(
        e.contains("unknown field \"authentication.webhook.cacheTtl\""),
        "{e}"
    );
}

#[test]
fn wrong_type_meta_is_rejected() {
    let wrong_kind = TempConfig::new(
        "k.yaml",
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n",
    );
    let e = err(&[&wrong_kind.arg()]);
    assert!(
        e.contains("unsupported kind \"Pod\"") && e.contains("k.yaml"),
        "{e}"
    );

    let wrong_version = TempConfig::new(
        "v.yaml",
        "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n",
    );
    let e = err(&[&wrong_version.arg()]);
    assert!(
        e.contains("unsupported apiVersion \"kubelet.config.k8s.io/v1\""),
        "{e}"
    );

    let missing = TempConfig::new("m.yaml", "kind: KubeletConfiguration\nport: 1\n");
    assert!(err(&[&missing.arg()]).contains("missing required field \"apiVersion\""));

    let empty = TempConfig::new("e.yaml", "\n");
    assert!(err(&[&empty.arg()]).contains("empty"));

    let list = TempConfig::new("l.yaml", "- a\n- b\n");
    assert!(err(&[&list.arg()]).contains("mapping"));

    let e = err(&["--config=/nonexistent/kubelet.yaml"]);
    assert!(e.contains("/nonexistent/kubelet.yaml"), "{e}");
}

#[test]
fn bad_values_in_file_name_the_field() {
    let cfg = yaml("syncFrequency: soon\n");
    let e = err(&[&cfg.arg()]);
    assert!(e.contains("syncFrequency") && e.contains("\"soon\""), "{e}");
    let cfg = yaml("syncFrequency: 60\n");
    assert!(err(&[&cfg.arg()]).contains("syncFrequency"));
    let cfg = yaml("port: eighty\n");
    assert!(err(&[&cfg.arg()]).contains("port"));
}

#[test]
fn precedence_flag_beats_file_beats_default() {
    let cfg = yaml("maxPods: 50\nhealthzPort: 10300\nregisterNode: false\n");
    let (_, c) = ok(&[&cfg.arg(), "--max-pods=60", "--register-node"]);
    assert_eq!(c.max_pods, 60, "flag beats file");
    assert!(c.register_node, "flag beats file");
    assert_eq!(c.healthz_port, 10300, "file beats default");
    assert_eq!(c.port, 10250, "default when neither sets it");
    // Flag order relative to --config does not matter.
    let (_, c) = ok(&["--max-pods=61", &cfg.arg()]);
    assert_eq!(c.max_pods, 61);
}

#[test]
fn flags_without_config_file() {
    let (f, c) = ok(&[
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--hostname-override=node-a",
        "--node-ip=10.0.0.5",
        "--root-dir",
        "/srv/kubelet",
        "--container-runtime-endpoint=unix:///run/crio/crio.sock",
        "--pod-manifest-path=/etc/kubernetes/manifests",
        "--manifest-url=http://example.invalid/pods",
        "--manifest-url-header=X-A:1,X-A:2",
        "--file-check-frequency=5s",
        "--http-check-frequency=1m",
        "--sync-frequency=10s",
        "--healthz-port=0",
        "--healthz-bind-address=0.0.0.0",
        "--node-labels=role=edge,zone=a",
        "--address=::",
        "--port=11250",
        "--read-only-port=0",
        "--cluster-dns=10.96.0.10",
        "--cluster-domain=cluster.local",
        "--tls-cert-file=/pki/k.crt",
        "--tls-private-key-file=/pki/k.key",
        "--runtime-request-timeout=5m",
        "--cgroup-driver=systemd",
        "--fail-swap-on=false",
        "--node-status-update-frequency=4s",
        "--provider-id=kind://docker/kind/node-a",
        "--v=4",
    ]);
    assert_eq!(
        f.kubeconfig,
        Some(PathBuf::from("/etc/kubernetes/kubelet.conf"))
    );
    assert!(!f.is_standalone());
    assert_eq!(f.hostname_override.as_deref(), Some("node-a"));
    assert_eq!(f.node_ip.as_deref(), Some("10.0.0.5"));
    assert_eq!(f.root_dir, PathBuf::from("/srv/kubelet"));
    assert_eq!(f.node_labels.get("role").map(String::as_str), Some("edge"));
    assert_eq!(f.verbosity, 4);
    assert_eq!(c.logging.verbosity, 4);
    assert_eq!(c.container_runtime_endpoint, "unix:///run/crio/crio.sock");
    assert_eq!(c.static_pod_url_header.get("X-A").map(Vec::len), Some(2));
    assert_eq!(c.http_check_frequency, Duration::from_mins(1));
    assert_eq!((c.healthz_port, c.port, c.read_only_port), (0, 11250, 0));
    assert_eq!(c.runtime_request_timeout, Duration::from_mins(5));
    assert!(!c.fail_swap_on);
    assert_eq!(c.node_status_update_frequency, Duration::from_secs(4));
    assert_eq!(c.provider_id, "kind://docker/kind/node-a");
}

#[test]
fn verbosity_flag_overrides_file() {
    let cfg = yaml("logging:\n  verbosity: 2\n");
    assert_eq!(ok(&[&cfg.arg()]).0.verbosity, 2);
    assert_eq!(ok(&[&cfg.arg(), "-v", "5"]).0.verbosity, 5);
}

#[test]
fn runonce_from_flag_or_file() {
    // Upstream does not reject --runonce together with --kubeconfig.
    let (f, c) = ok(&["--runonce", "--kubeconfig=/k"]);
    assert!(f.runonce && c.run_once);
    let cfg = yaml("runOnce: true\n");
    assert!(ok(&[&cfg.arg()]).0.runonce);
    assert!(!ok(&[&cfg.arg(), "--runonce=false"]).0.runonce);
}

#[test]
fn validation_errors_name_source_and_field() {
    let cfg = yaml("healthzPort: -1\nimageGCLowThresholdPercent: 90\n");
    let e = err(&[&cfg.arg()]);
    let file = cfg.path.display().to_string();
    assert!(
        e.contains(&format!(
            "{file}: invalid value \"-1\" for field \"healthzPort\": must be between 0 and 65535"
        )),
        "{e}"
    );
    assert!(e.contains("\"imageGCLowThresholdPercent\""), "{e}");

    let e = err(&["--healthz-port=70000"]);
    assert!(
        e.contains("flags: invalid value \"70000\" for field \"healthzPort\" (--healthz-port)"),
        "{e}"
    );
    let e = err(&["--cgroup-driver=cgroupv2"]);
    assert!(e.contains("flags:") && e.contains("cgroupDriver"), "{e}");
    let e = err(&["--container-runtime-endpoint=tcp://localhost:3735"]);
    assert!(e.contains("containerRuntimeEndpoint"), "{e}");
    let e = err(&["--node-status-update-frequency=0s"]);
    assert!(e.contains("nodeStatusUpdateFrequency"), "{e}");
    let e = err(&["--register-with-taints=a=b:Sometimes"]);
    assert!(e.contains("registerWithTaints"), "{e}");
    let e = err(&["--eviction-hard=disk.available<1Gi"]);
    assert!(
        e.contains("evictionHard") && e.contains("(--eviction-hard)"),
        "{e}"
    );
    let e = err(&["--container-log-max-files=1"]);
    assert!(e.contains("containerLogMaxFiles"), "{e}");
    let e = err(&["--max-pods=-5"]);
    assert!(e.contains("maxPods"), "{e}");
}

#[test]
fn nested_flag_overrides_are_attributed_to_flags() {
    let e = err(&["--authorization-mode=RBAC"]);
    assert!(
        e.contains("flags:")
            && e.contains("authorization.mode")
            && e.contains("--authorization-mode"),
        "{e}"
    );
}

#[test]
fn flag_only_validation() {
    let e = err(&["--node-labels=kubernetes.io/role=master"]);
    assert!(
        e.contains("--node-labels") && e.contains("kubernetes.io/role"),
        "{e}"
    );
    let e = err(&["--node-labels=bad key=v"]);
    assert!(e.contains("invalid label key"), "{e}");
    let e = err(&["--node-ip=not-an-ip"]);
    assert!(e.contains("--node-ip"), "{e}");
    let e = err(&["--root-dir="]);
    assert!(e.contains("--root-dir"), "{e}");
}

#[test]
fn all_errors_reported_together() {
    let e = err(&["--port=0", "--max-pods=-1", "--oom-score-adj=5000"]);
    for field in ["\"port\"", "\"maxPods\"", "\"oomScoreAdj\""] {
        assert!(e.contains(field), "{field} missing: {e}");
    }
}

#[test]
fn relative_paths_resolve_against_config_dir() {
    let cfg = yaml("staticPodPath: manifests\ntlsCertFile: pki/k.crt\ntlsPrivateKeyFile: /abs/k.key\nresolvConf: \"\"\n");
    let (_, c) = ok(&[&cfg.arg()]);
    assert_eq!(
        PathBuf::from(&c.static_pod_path),
        cfg.dir.path().join("manifests")
    );
    assert_eq!(
        PathBuf::from(&c.tls_cert_file),
        cfg.dir.path().join("pki/k.crt")
    );
    assert_eq!(c.tls_private_key_file, "/abs/k.key");
    assert_eq!(
        c.resolv_conf, "",
        "explicit empty resolvConf stays disabled"
    );
    // Flag values are not rebased.
    let (_, c) = ok(&[&cfg.arg(), "--pod-manifest-path=rel"]);
    assert_eq!(c.static_pod_path, "rel");
}

#[test]
fn usage_errors_are_clap_errors() {
    assert!(matches!(run(&["--bogus"]), Err(LoadError::Clap(_))));
    assert!(
        matches!(run(&["--help"]), Err(LoadError::Clap(e)) if e.kind() == clap::error::ErrorKind::DisplayHelp)
    );
    assert!(
        matches!(run(&["--version"]), Err(LoadError::Clap(e)) if e.to_string() == format!("Kubernetes {VERSION}\n"))
    );
    assert!(matches!(
        run(&["--sync-frequency=1"]),
        Err(LoadError::Clap(_))
    ));
}

#[test]
fn serialization_round_trips() {
    let c = KubeletConfiguration {
        cluster_dns: vec!["10.96.0.10".into()],
        static_pod_url_header: BTreeMap::from([("A".to_string(), vec!["1".to_string()])]),
        ..Default::default()
    };
    let text = match serde_norway::to_string(&c) {
        Ok(t) => t,
        Err(e) => panic!("serialize: {e}"),
    };
    assert!(text.contains("syncFrequency: 1m0s"), "{text}");
    assert!(text.contains("clusterDNS:"), "{text}");
    assert!(
        text.contains("apiVersion: kubelet.config.k8s.io/v1beta1"),
        "{text}"
    );
    let cfg = TempConfig::new("rt.yaml", &text);
    let (_, back) = ok(&[&cfg.arg()]);
    assert_eq!(back, c);
}

#[test]
fn standalone_validate_helper() {
    assert!(validate(&KubeletConfiguration::default()).is_ok());
    let c = KubeletConfiguration {
        max_pods: -1,
        ..Default::default()
    };
    let e = match validate(&c) {
        Err(e) => e.to_string(),
        Ok(()) => panic!("should fail"),
    };
    assert!(e.contains("\"maxPods\""), "{e}");
}

#[test]
fn kubeconfig_without_config_file_gets_secure_defaults() {
    let (_, c) = ok(&["--kubeconfig", "/etc/kubernetes/kubelet.conf"]);
    assert!(!c.authentication.anonymous.enabled);
    assert!(c.authentication.webhook.enabled);
    assert_eq!(c.authorization.mode, "Webhook");
    assert_eq!(c.read_only_port, 0);
    assert!(insecure_settings(&c).is_empty());
    assert!(
        !c.rotate_certificates,
        "upstream's default without a bootstrap kubeconfig"
    );

    // An explicit insecure choice stands (and is warned about at start).
    let (_, c) = ok(&[
        "--kubeconfig",
        "/k",
        "--anonymous-auth=true",
        "--authorization-mode",
        "AlwaysAllow",
        "--read-only-port",
        "10255",
    ]);
    assert!(c.authentication.anonymous.enabled);
    assert_eq!(c.authorization.mode, "AlwaysAllow");
    assert_eq!(c.read_only_port, 10255);
    assert_eq!(insecure_settings(&c).len(), 3);
}

#[test]
fn bootstrap_kubeconfig_turns_rotation_on_unless_set() {
    let (_, c) = ok(&["--kubeconfig", "/k", "--bootstrap-kubeconfig", "/b"]);
    assert!(c.rotate_certificates);
    let (_, c) = ok(&[
        "--kubeconfig",
        "/k",
        "--bootstrap-kubeconfig",
        "/b",
        "--rotate-certificates=false",
    ]);
    assert!(!c.rotate_certificates);
    let f = yaml("rotateCertificates: false\n");
    let (_, c) = ok(&[
        &f.arg(),
        "--kubeconfig",
        "/k",
        "--bootstrap-kubeconfig",
        "/b",
    ]);
    assert!(!c.rotate_certificates);
}
