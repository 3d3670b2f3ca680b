use std::path::Path;

use base64::Engine;

use super::{CA_CRT, CLIENT_CRT, CLIENT_KEY};
use crate::kubeconfig::{from_yaml, load};
use crate::Auth;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A kubeconfig with one cluster, user and context; `cluster` and `user`
/// are the YAML bodies (indented by 4).
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\npreferences: {{}}\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443/\n{cluster}\nusers:\n- name: u\n  user:\n{user}\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: ctx\n"
    )
}

fn err_of(yaml: &str) -> String {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-client-kc-err-").unwrap();
    let dir = tmp.path();
    let path = dir.join("kubelet.conf");
    std::fs::write(&path, yaml).expect("write");
    let err = load(&path).expect_err("should fail").to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
    err
}

#[test]
fn inline_data_and_token() {
    let yaml = kubeconfig(
        &format!(
            "    certificate-authority-data: {}\n    extensions: []",
            b64(CA_CRT)
        ),
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n    token: abc",
            b64(CLIENT_CRT),
            b64(CLIENT_KEY)
        ),
    );
    let cfg = from_yaml(&yaml, Path::new("/nowhere")).expect("load");
    assert_eq!(cfg.server, "https://127.0.0.1:6443");
    assert_eq!(cfg.auth, Auth::Bearer("abc".into()));
    assert!(cfg.tls.client_auth_cert_resolver.has_certs());
}

#[test]
fn files_relative_to_kubeconfig_dir() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-client-kc-files-").unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("pki")).expect("mkdir");
    std::fs::write(dir.join("pki/ca.crt"), CA_CRT).expect("write");
    std::fs::write(dir.join("pki/client.crt"), CLIENT_CRT).expect("write");
    std::fs::write(dir.join("pki/client.key"), CLIENT_KEY).expect("write");
    let yaml = kubeconfig(
        "    certificate-authority: pki/ca.crt",
        "    client-certificate: pki/client.crt\n    client-key: pki/client.key\n    token: ignored\n    tokenFile: token",
    );
    let path = dir.join("kubelet.conf");
    std::fs::write(&path, yaml).expect("write");
    let cfg = load(&path).expect("load");
    // tokenFile wins over token, and is resolved against the kubeconfig's dir.
    assert_eq!(cfg.auth, Auth::TokenFile(dir.join("token")));
    assert!(cfg.tls.client_auth_cert_resolver.has_certs());
}

#[test]
fn insecure_skip_tls_verify() {
    let yaml = kubeconfig("    insecure-skip-tls-verify: true", "    token: t");
    let cfg = from_yaml(&yaml, Path::new("/")).expect("load");
    assert!(!cfg.tls.client_auth_cert_resolver.has_certs());
}

#[test]
fn insecure_with_ca_is_refused() {
    let yaml = kubeconfig(
        &format!(
            "    insecure-skip-tls-verify: true\n    certificate-authority-data: {}",
            b64(CA_CRT)
        ),
        "    token: t",
    );
    let err = err_of(&yaml);
    assert!(
        err.contains("clusters[0].cluster.insecure-skip-tls-verify"),
        "{err}"
    );
}

#[test]
fn missing_current_context() {
    let yaml = kubeconfig("    insecure-skip-tls-verify: true", "    token: t")
        .replace("current-context: ctx\n", "");
    let err = err_of(&yaml);
    assert!(err.contains("current-context: not set"), "{err}");

    let yaml = kubeconfig("    insecure-skip-tls-verify: true", "    token: t")
        .replace("current-context: ctx", "current-context: other");
    let err = err_of(&yaml);
    assert!(
        err.contains("current-context: context \"other\" not found"),
        "{err}"
    );
}

#[test]
fn unknown_cluster_in_context() {
    let yaml = kubeconfig("    insecure-skip-tls-verify: true", "    token: t")
        .replace("    cluster: c\n", "    cluster: nope\n");
    let err = err_of(&yaml);
    assert!(
        err.contains("contexts[0].context.cluster: cluster \"nope\" not found"),
        "{err}"
    );
}

#[test]
fn bad_base64_names_field() {
    let yaml = kubeconfig(
        "    insecure-skip-tls-verify: true",
        &format!(
            "    client-certificate-data: {}\n    client-key-data: '!!notbase64'",
            b64(CLIENT_CRT)
        ),
    );
    let err = err_of(&yaml);
    assert!(
        err.contains(": users[0].user.client-key-data: invalid base64"),
        "{err}"
    );
}

#[test]
fn bad_pem_and_missing_files_name_field() {
    let yaml = kubeconfig(
        &format!("    certificate-authority-data: {}", b64("not a pem")),
        "    token: t",
    );
    let err = err_of(&yaml);
    assert!(
        err.contains("clusters[0].cluster.certificate-authority-data: no PEM"),
        "{err}"
    );

    let yaml = kubeconfig("    certificate-authority: missing/ca.crt", "    token: t");
    let err = err_of(&yaml);
    assert!(
        err.contains("clusters[0].cluster.certificate-authority: reading "),
        "{err}"
    );
    assert!(err.contains("missing/ca.crt"), "{err}");
}

#[test]
fn cert_without_key_and_exec_are_errors() {
    let yaml = kubeconfig(
        "    insecure-skip-tls-verify: true",
        &format!("    client-certificate-data: {}", b64(CLIENT_CRT)),
    );
    let err = err_of(&yaml);
    assert!(
        err.contains("users[0].user.client-certificate-data: set without client-key"),
        "{err}"
    );

    let yaml = kubeconfig(
        "    insecure-skip-tls-verify: true",
        "    exec:\n      command: aws\n      apiVersion: client.authentication.k8s.io/v1",
    );
    let err = err_of(&yaml);
    assert!(err.contains("users[0].user.exec"), "{err}");
}

#[test]
fn missing_server_and_bad_yaml() {
    let yaml = kubeconfig("    insecure-skip-tls-verify: true", "    token: t")
        .replace("    server: https://127.0.0.1:6443/\n", "");
    let err = err_of(&yaml);
    assert!(err.contains("clusters[0].cluster.server: not set"), "{err}");

    let yaml = kubeconfig("    insecure-skip-tls-verify: true", "    token: t").replace(
        "https://127.0.0.1:6443/",
        "https://b\u{fc}cher.example:6443/api",
    );
    let err = err_of(&yaml);
    assert!(
        err.contains(
            "clusters[0].cluster.server: host name \"b\u{fc}cher.example:6443\" is not ASCII"
        ) && err.contains("xn--"),
        "{err}"
    );

    let err = err_of("clusters: {not: [a list");
    assert!(err.contains("parsing YAML"), "{err}");
}

#[test]
fn expired_and_v1_client_certificates_say_how_to_fix_them() {
    use crate::kubeconfig::check_client_cert;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::default();
    p.not_before = rcgen::date_time_ymd(2019, 1, 1);
    p.not_after = rcgen::date_time_ymd(2020, 1, 1);
    let cert = p.self_signed(&key).expect("cert");
    let der = vec![cert.der().clone()];
    let err = check_client_cert(&der, 1_700_000_000).expect_err("expired");
    assert!(err.contains("expired at 2020-01-01T00:00:00Z"), "{err}");
    assert!(err.contains("--bootstrap-kubeconfig"), "{err}");
    assert!(check_client_cert(&der, 1_500_000_000).is_ok());
    let v1 = crate::tls::parse_certs(include_bytes!("../../testdata/v1-client.crt")).expect("pem");
    let err = check_client_cert(&v1, 0).expect_err("v1");
    assert!(
        err.contains("X.509 v1") && err.contains("reissue it as v3"),
        "{err}"
    );
    let junk = vec![rustls::pki_types::CertificateDer::from(b"junk".to_vec())];
    let err = check_client_cert(&junk, 0).expect_err("junk");
    assert!(err.contains("not a readable X.509 certificate"), "{err}");
}
