use super::*;

/// A self-signed client pair valid until `not_after` (y, m, d), as one PEM.
fn pair_pem(not_after: (i32, u8, u8)) -> String {
    let key = csr::generate_key().expect("key");
    let mut p = rcgen::CertificateParams::default();
    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
    p.not_after = rcgen::date_time_ymd(not_after.0, not_after.1, not_after.2);
    let cert = p.self_signed(&key).expect("cert");
    format!("{}{}", cert.pem(), key.serialize_pem())
}

fn boot_entries() -> CurrentEntries {
    CurrentEntries {
        server: "https://127.0.0.1:6443".into(),
        ca_data: Some(b"CA PEM".to_vec()),
        ..Default::default()
    }
}

#[test]
fn missing_kubeconfig_needs_bootstrap() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-bootstrap-missing-").unwrap();
    let dir = tmp.path();
    assert!(!client_config_still_valid(&dir.join("kubelet.conf"), unix_now()).expect("check"));
}

#[test]
fn written_kubeconfig_is_valid_until_the_certificate_expires() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-bootstrap-expiry-").unwrap();
    let dir = tmp.path();
    let pem = dir.join("kubelet-client-current.pem");
    let pair = pair_pem((2040, 1, 1));
    fs::write(&pem, &pair).expect("pem");
    let kc = dir.join("kubelet.conf");
    // The CA must parse for the kubeconfig to load: the certificate will do.
    let boot = CurrentEntries {
        ca_data: Some(pair.into_bytes()),
        ..boot_entries()
    };
    write_kubeconfig(&kc, &boot, &pem).expect("write");
    // 2030: valid; 2041: expired.
    assert!(client_config_still_valid(&kc, 1_893_456_000).expect("check"));
    assert!(!client_config_still_valid(&kc, 2_240_611_200).expect("check"));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&fs::metadata(&kc).expect("stat").permissions());
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn unreadable_client_certificate_needs_bootstrap() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-bootstrap-garbage-").unwrap();
    let dir = tmp.path();
    let pem = dir.join("kubelet-client-current.pem");
    fs::write(&pem, "not a certificate").expect("pem");
    let kc = dir.join("kubelet.conf");
    write_kubeconfig(&kc, &boot_entries(), &pem).expect("write");
    assert!(!client_config_still_valid(&kc, unix_now()).expect("check"));
    fs::write(&kc, "{{{ not yaml").expect("kc");
    assert!(!client_config_still_valid(&kc, unix_now()).expect("check"));
}

#[test]
fn kubeconfig_points_at_current_pem_with_bootstrap_cluster() {
    let pem = Path::new("/var/lib/kubelet/pki/kubelet-client-current.pem");
    let text = kubeconfig_text(&boot_entries(), pem);
    assert!(
        text.contains("    server: https://127.0.0.1:6443\n"),
        "{text}"
    );
    assert!(
        text.contains("certificate-authority-data: Q0EgUEVN\n"),
        "{text}"
    );
    assert!(text.contains("client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n"));
    assert!(text.contains("client-key: /var/lib/kubelet/pki/kubelet-client-current.pem\n"));
    assert!(text.contains("current-context: default-context\n"));
    // A CA file is referenced, not inlined, as upstream.
    let with_file = CurrentEntries {
        ca_file: Some("/etc/kubernetes/pki/ca.crt".into()),
        ..boot_entries()
    };
    let text = kubeconfig_text(&with_file, pem);
    assert!(
        text.contains("    certificate-authority: /etc/kubernetes/pki/ca.crt\n"),
        "{text}"
    );
    assert!(!text.contains("certificate-authority-data"));
}

#[test]
fn bad_bootstrap_kubeconfig_is_named() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-bootstrap-badboot-").unwrap();
    let dir = tmp.path();
    let path = dir.join("bootstrap-kubelet.conf");
    let err = load_bootstrap(&path).expect_err("missing");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("bootstrap kubeconfig") && msg.contains(&*path.to_string_lossy()),
        "{msg}"
    );
    fs::write(&path, "apiVersion: v1\nkind: Config\n").expect("write");
    let msg = format!("{:#}", load_bootstrap(&path).expect_err("empty"));
    assert!(msg.contains("current-context"), "{msg}");
}

#[test]
fn key_is_reused_until_a_certificate_is_issued() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-bootstrap-key-").unwrap();
    let dir = tmp.path();
    let store = FileStore::new(dir);
    let tmp_key = dir.join(TMP_PRIVATE_KEY_FILE);
    let first = load_or_generate_key(&store, &tmp_key).expect("key");
    let again = load_or_generate_key(&store, &tmp_key).expect("key");
    assert_eq!(first.public_key_der(), again.public_key_der());
    assert_eq!(
        csr::digested_name(&first, "n1", &["client auth"]),
        csr::digested_name(&again, "n1", &["client auth"])
    );
}

#[test]
fn bootstrap_ca_file_is_resolved_and_kept_as_a_file() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-bootstrap-cafile-").unwrap();
    let dir = tmp.path();
    let path = dir.join("bootstrap-kubelet.conf");
    fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: k\n  cluster:\n    server: https://10.0.0.1:6443/\n    certificate-authority: pki/ca.crt\ncontexts:\n- name: b\n  context: {cluster: k, user: t}\nusers:\n- name: t\n  user: {token: abcdef.0123456789abcdef}\n",
    )
    .expect("write");
    let boot = load_bootstrap(&path).expect("load");
    assert_eq!(boot.server, "https://10.0.0.1:6443");
    assert_eq!(boot.ca_file, Some(dir.join("pki/ca.crt")));
    assert_eq!((boot.ca_data, boot.client_cert), (None, None));
}
