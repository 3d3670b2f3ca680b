//! Tests of flag parsing and of flags overriding the file.

use super::precedence::merged_pairs;
use super::*;
use crate::kubeletconfig::KubeletConfiguration;

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
