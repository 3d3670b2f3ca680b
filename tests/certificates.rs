//! Certificates end to end: client certificate rotation across two
//! short-lived certificates, a denied rotation CSR, the serving certificate
//! (`serverTLSBootstrap`), `tlsMinVersion`/`tlsCipherSuites` on 10250 and
//! bad client certificates in the kubeconfig, against the API server double
//! (whose signer can be told, by a test-only control, to issue certificates
//! valid for a few seconds) and a real containerd. 10250 is probed with
//! `openssl s_client`.
//!
//! Env numbers 78, 93..=97 and 99: healthz 20000+N, API server 21000+N, 10250 on 22000+N.
//!
//!     cargo test --release --test certificates

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};

use common::cluster::*;
use common::threads::*;
use common::*;

fn append_config(cl: &Cluster, text: &str) {
    let mut c = fs::read_to_string(&cl.config).unwrap();
    c.push_str(text);
    fs::write(&cl.config, c).unwrap();
}

fn csrs_of(api: &Api, signer: &str) -> Vec<Value> {
    csrs(api)
        .into_iter()
        .filter(|c| c["spec"]["signerName"] == signer)
        .collect()
}

/// `kubelet-client-<stamp>.pem` files in the cert dir.
fn pair_files(dir: &Path, pair: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("{pair}-20")))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `openssl x509 -noout` fields of a PEM file.
fn x509_text(pem: &Path) -> String {
    let out = Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-subject",
            "-issuer",
            "-dates",
            "-ext",
            "subjectAltName",
            "-in",
        ])
        .arg(pem)
        .output()
        .expect("openssl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The handshake with 10250 (`openssl s_client`), with extra options: the
/// output (server certificate, protocol, cipher), or None when it failed.
fn s_client(port: u16, extra: &[&str]) -> Option<String> {
    let out = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args(extra)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_client");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && text.contains("-----BEGIN CERTIFICATE-----")).then_some(text)
}

/// Subject and issuer of the certificate 10250 presents.
fn served_cert(port: u16) -> Option<String> {
    let text = s_client(port, &[])?;
    let start = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text.find("-----END CERTIFICATE-----")? + "-----END CERTIFICATE-----".len();
    let dir = std::env::temp_dir().join(format!("rkubelet-served-{port}.pem"));
    fs::write(&dir, &text[start..end]).ok()?;
    Some(x509_text(&dir))
}

/// Test-only signer control of the double: the certificates it issues from
/// now on are valid `ttl_secs` seconds.
fn set_cert_ttl(cl: &Cluster, ttl_secs: u64) {
    let body = json!({ "certTTLSeconds": ttl_secs });
    cl.api.must("POST", "/__double/csr", Some(&body), &[200]);
}

#[test]
fn client_certificate_rotates_twice_without_a_restart() {
    let mut cl = Cluster::new("client_certificate_rotates_twice_without_a_restart", 93);
    // Test-only signer control: certificates valid 20 s from issue, so the
    // rotation is due after 14-18 s.
    set_cert_ttl(&cl, 20);
    let (args, _, cert_dir) = bootstrap_args(&cl);
    let started = Instant::now();
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    let to_ready = started.elapsed();
    eprintln!("FIGURE: start with a bootstrap kubeconfig to node Ready: {to_ready:?}");
    let pid = cl.env.kubelet_pid().expect("pid");
    // The node is Ready before every watch is open: let the threads settle.
    std::thread::sleep(secs(3));
    let before = own_threads(pid);
    let grpc_before = grpc_threads(pid);

    // Two rotations, each a new CSR from the node itself.
    cl.eventually(secs(60), "two client certificate rotations", |_| {
        (rotations(&cert_dir) >= 2).then_some(())
    });
    // The manager logs a rotation after it has written the new pair.
    let rotated = eventually(secs(5), "both rotations in the log", || {
        let lines = cl.env.log_lines_with("client certificate rotated");
        (lines.len() >= 2).then_some(lines)
    });
    for l in &rotated {
        eprintln!("{l}");
    }
    let client_csrs = csrs_of(&cl.api, "kubernetes.io/kube-apiserver-client-kubelet");
    let by_node: Vec<&Value> = client_csrs
        .iter()
        .filter(|c| c["spec"]["username"] == format!("system:node:{NODE}").as_str())
        .collect();
    assert!(
        by_node.len() >= 2,
        "rotation CSRs must come from the node's own certificate: {client_csrs:?}"
    );
    for c in &by_node {
        let name = c["metadata"]["name"].as_str().unwrap_or("");
        assert!(
            name.starts_with("csr-"),
            "generated name, as upstream's manager: {name}"
        );
        assert_eq!(
            c["spec"]["usages"],
            json!(["digital signature", "client auth"])
        );
    }
    // upstream's files: a pair per certificate, the symlink on the newest.
    let files = pair_files(&cert_dir, "kubelet-client");
    assert!(files.len() >= 3, "{files:?}");
    let current = fs::read_link(cert_dir.join("kubelet-client-current.pem")).unwrap();
    assert_eq!(
        current.file_name().unwrap().to_string_lossy(),
        *files.last().unwrap()
    );

    // The first certificate has long expired: the lease and node status are
    // still renewed, so the API connections present the new one.
    std::thread::sleep(secs(12));
    let renew_before = cl.api.lease().expect("lease")["spec"]["renewTime"].clone();
    let renewed = poll(secs(25), || {
        cl.env.assert_kubelet_alive();
        let t = cl.api.lease()?["spec"]["renewTime"].clone();
        (t != renew_before).then_some(t)
    });
    assert!(
        renewed.is_some(),
        "the lease is no longer renewed after rotation:\n{}",
        cl.env.log_tail(30)
    );
    assert!(condition_true(&cl.api.node().unwrap(), "Ready"));
    let errors = cl.env.log_lines_with("certificate rotation failed");
    assert!(errors.is_empty(), "{errors:?}");

    // No thread of ours added: the watches reconnected on their own
    // threads (a watch reader is missing while its reflector backs off after
    // the close). gRPC's pools size themselves: reported, not compared.
    let after = poll(secs(10), || {
        let now = own_threads(pid);
        added(&before, &now).is_empty().then_some(now)
    });
    let now = own_threads(pid);
    eprintln!(
        "FIGURE: threads of ours before rotations {}, after {}; gRPC's pools {grpc_before} -> {}",
        before.len(),
        now.len(),
        grpc_threads(pid)
    );
    assert!(
        after.is_some(),
        "threads added {:?}: before {before:?}, now {now:?}",
        added(&before, &now)
    );
}

/// The credential ID the double's audit log gives a request authenticated
/// by the certificate in `pem` (`X509SHA256=<hex>`, as the apiserver's
/// x509 authenticator's `authentication.kubernetes.io/credential-id`).
fn credential_id(pem: &Path) -> String {
    let out = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem)
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.trim().rsplit('=').next().unwrap_or("");
    format!("X509SHA256={}", hex.replace(':', "").to_lowercase())
}

/// The resources watched with the certificate `id`, per the audit log.
fn watched_with(double: &Double, id: &str) -> Vec<String> {
    let mut v: Vec<String> = double
        .audit()
        .iter()
        .filter(|e| e["verb"] == "watch" && e["credentialId"] == id)
        .filter_map(|e| e["resource"].as_str().map(String::from))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn every_watch_reconnects_with_the_rotated_certificate() {
    let mut cl = Cluster::new("every_watch_reconnects_with_the_rotated_certificate", 99);
    // Test-only signer control: 40 s certificates, rotated after 28-36 s.
    set_cert_ttl(&cl, 40);
    let (args, _, cert_dir) = bootstrap_args(&cl);
    let current = cert_dir.join("kubelet-client-current.pem");
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    // Pods, the node and services (the reflectors) and RuntimeClasses (the
    // object-watches thread, whose watches live 5-10 min) are watched with
    // the first certificate.
    let want = ["nodes", "pods", "runtimeclasses.node.k8s.io", "services"];
    let all_watched = |double: &Double, id: &str| {
        let got = watched_with(double, id);
        want.iter().all(|r| got.iter().any(|g| g == r))
    };
    let first = credential_id(&current);
    let double = &cl.double;
    eventually(secs(30), "every watch with the first certificate", || {
        all_watched(double, &first).then_some(())
    });

    // A rotation: within seconds every one of them is watched again with
    // the new certificate, long before any watch would time out.
    eventually(secs(60), "a rotation", || {
        (rotations(&cert_dir) >= 1).then_some(())
    });
    let second = credential_id(&current);
    assert_ne!(first, second);
    let rotated = Instant::now();
    eventually(secs(15), "every watch with the rotated certificate", || {
        all_watched(double, &second).then_some(())
    });
    eprintln!(
        "FIGURE: rotation to every watch on the new certificate: {:?}",
        rotated.elapsed()
    );
    let line = cl
        .env
        .log_lines_with("object watches: the client certificate changed");
    assert!(!line.is_empty(), "{}", cl.env.log_tail(20));
    cl.env.assert_kubelet_alive();
}

/// Rotations so far: pair files beyond the bootstrap's first.
fn rotations(cert_dir: &Path) -> usize {
    pair_files(cert_dir, "kubelet-client")
        .len()
        .saturating_sub(1)
}

#[test]
fn denied_rotation_is_retried_and_the_node_stays() {
    let mut cl = Cluster::new("denied_rotation_is_retried_and_the_node_stays", 94);
    set_cert_ttl(&cl, 30);
    let (args, _, cert_dir) = bootstrap_args(&cl);
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    cl.api.must(
        "POST",
        "/__double/csr",
        Some(&json!({"autoApprove": false})),
        &[200],
    );
    cl.api.create_pod(&api_pod("stays", "sleep 3600"));
    cl.wait_pod_ready("stays", secs(60));

    // The rotation CSR (the node's own; the bootstrap's was the token's) is
    // denied, as `kubectl certificate deny` does.
    let node_user = format!("system:node:{NODE}");
    let csr = cl.eventually(secs(40), "the rotation CSR", |api| {
        csrs(api)
            .into_iter()
            .find(|c| c["spec"]["username"] == node_user.as_str())
    });
    let name = csr["metadata"]["name"].as_str().unwrap().to_string();
    let mut denied = csr.clone();
    denied["status"]["conditions"] = json!([{"type": "Denied", "status": "True",
        "reason": "NotAllowed", "message": "test denies it"}]);
    cl.api.must(
        "PUT",
        &format!("{CSRS}/{name}/approval"),
        Some(&denied),
        &[200],
    );
    let line = eventually(secs(20), "the denial logged", || {
        denial_line(&cl.env.log(), &name)
    });
    eprintln!("{line}");
    assert!(
        line.contains("NotAllowed") && line.contains("retrying in"),
        "{line}"
    );
    let ev = cl.eventually(secs(20), "the node event", |api| {
        api.events_for("default", NODE)
            .into_iter()
            .find(|e| e["reason"] == "CertificateRotationFailed")
    });
    assert_eq!(ev["type"], "Warning");
    assert!(ev["message"].as_str().unwrap_or("").contains(&name), "{ev}");

    // Approval comes back: the retry's CSR is issued and swapped in.
    cl.api.must(
        "POST",
        "/__double/csr",
        Some(&json!({"autoApprove": true})),
        &[200],
    );
    cl.eventually(secs(60), "a rotation after the denial", |_| {
        (pair_files(&cert_dir, "kubelet-client").len() >= 2).then_some(())
    });
    cl.env.assert_kubelet_alive();
    assert!(running_ready(&cl.api.pod("stays").unwrap()));
}

fn denial_line(log: &str, name: &str) -> Option<String> {
    log.lines()
        .find(|l| l.contains(name) && l.contains("is denied"))
        .map(String::from)
}

/// Starts rkubelet with `serverTLSBootstrap` and 10250 on `port`; returns
/// its arguments, its --cert-dir and the serving CSR it created.
fn start_serving_bootstrap(cl: &mut Cluster, port: u16) -> (Vec<String>, PathBuf, Value) {
    append_config(
        cl,
        &format!("address: 127.0.0.1\nport: {port}\nserverTLSBootstrap: true\n"),
    );
    let cert_dir = cl.env.dir.join("pki");
    let args = cluster_kubelet_args(
        &cl.double,
        &cl.env,
        &cl.config,
        &["--cert-dir", &cert_dir.display().to_string()],
    );
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    let csr = cl.eventually(secs(30), "the serving CSR", |api| {
        csrs_of(api, "kubernetes.io/kubelet-serving").pop()
    });
    (args, cert_dir, csr)
}

/// Approves `csr` as an admin would (`kubectl certificate approve`).
fn approve(cl: &Cluster, csr: &Value) {
    let name = csr["metadata"]["name"].as_str().unwrap_or_default();
    let mut approved = csr.clone();
    approved["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "TestApproved", "message": "approved by the test"}]);
    cl.api.must(
        "PUT",
        &format!("{CSRS}/{name}/approval"),
        Some(&approved),
        &[200],
    );
}

/// Through v1.24 the kubelet-serving signer signs only the usages with
/// key encipherment: rkubelet asks a v1.22 control plane for those, and
/// serves the issued certificate once an admin approves it.
#[test]
fn serving_certificate_from_a_v1_22_control_plane() {
    let mut cl =
        Cluster::with_version("serving_certificate_from_a_v1_22_control_plane", 78, "1.22");
    let port = 22000 + 78;
    let (_, _, csr) = start_serving_bootstrap(&mut cl, port);
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "key encipherment", "server auth"])
    );
    approve(&cl, &csr);
    let issued = cl.eventually(secs(30), "the issued certificate on 10250", |_| {
        served_cert(port).filter(|t| !t.contains("-ca@"))
    });
    assert!(
        issued.contains(&format!("CN = system:node:{NODE}")),
        "{issued}"
    );
}

#[test]
fn serving_certificate_is_requested_and_served_once_approved() {
    let mut cl = Cluster::new(
        "serving_certificate_is_requested_and_served_once_approved",
        95,
    );
    let port = 22000 + 95;
    // A kubelet-serving CSR with the node's addresses; not approved by anyone.
    let (args, cert_dir, csr) = start_serving_bootstrap(&mut cl, port);
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "server auth"])
    );
    assert_eq!(
        csr["spec"]["username"],
        format!("system:node:{NODE}").as_str()
    );
    std::thread::sleep(secs(3));
    let name = csr["metadata"]["name"].as_str().unwrap().to_string();
    let now = cl.api.get(&format!("{CSRS}/{name}")).unwrap();
    assert!(
        now["status"]["certificate"].is_null(),
        "nobody approved it: {now}"
    );

    // Meanwhile 10250 serves the self-signed certificate.
    let before = cl.eventually(secs(20), "10250 answering", |_| served_cert(port));
    eprintln!("before approval:\n{before}");
    assert!(before.contains(&format!("{NODE}-ca@")), "{before}");

    approve(&cl, &now);

    let after = cl.eventually(secs(30), "the issued certificate on 10250", |_| {
        served_cert(port).filter(|t| !t.contains("-ca@"))
    });
    eprintln!("after approval:\n{after}");
    assert!(
        after.contains(&format!("CN = system:node:{NODE}")),
        "{after}"
    );
    assert!(after.contains("O = system:nodes"), "{after}");
    assert!(
        after.contains(&format!("DNS:{NODE}")),
        "hostname SAN: {after}"
    );
    assert!(after.contains("IP Address:"), "address SAN: {after}");
    let ca = x509_text(&cl.double.dir.join("ca.crt"));
    let ca_subject = ca.lines().find(|l| l.starts_with("subject=")).unwrap();
    assert!(
        after.contains(&ca_subject.replacen("subject=", "issuer=", 1)),
        "issued by the cluster CA ({ca_subject}): {after}"
    );
    assert!(cert_dir.join("kubelet-server-current.pem").exists());
    assert!(
        cert_dir.join("kubelet.crt").exists(),
        "the self-signed pair stays where upstream writes it"
    );

    // A restart serves the stored pair at once, with no new CSR.
    cl.env.kill_kubelet();
    cl.env.start_kubelet_with_args(&args);
    let again = cl.eventually(secs(30), "10250 after restart", |_| served_cert(port));
    assert!(
        again.contains(&format!("CN = system:node:{NODE}")),
        "{again}"
    );
    assert_eq!(csrs_of(&cl.api, "kubernetes.io/kubelet-serving").len(), 1);
    // Its SANs are the node's addresses: the 10 s template check leaves it.
    std::thread::sleep(secs(15));
    cl.env.assert_kubelet_alive();
    assert_eq!(csrs_of(&cl.api, "kubernetes.io/kubelet-serving").len(), 1);
    assert!(cl.env.log_lines_with("serving certificate SANs").is_empty());
}

#[test]
fn tls_min_version_and_cipher_suites_on_10250() {
    let mut env = Env::new("tls_min_version_and_cipher_suites_on_10250", 96);
    let port = env.open_read_only_port() - 1000;
    env.set_config("tlsMinVersion", "VersionTLS13");
    env.start_kubelet_healthy();
    let tls13 = eventually(secs(20), "a TLS 1.3 handshake", || {
        s_client(port, &["-tls1_3"])
    });
    assert!(tls13.contains("TLSv1.3"), "{tls13}");
    assert!(
        s_client(port, &["-tls1_2"]).is_none(),
        "TLS 1.2 is refused with VersionTLS13"
    );
    env.kill_kubelet();

    env.set_config("tlsMinVersion", "VersionTLS12");
    env.set_config(
        "tlsCipherSuites",
        "[TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_RSA_WITH_AES_128_CBC_SHA]",
    );
    env.start_kubelet_healthy();
    let ok = eventually(secs(20), "the listed suite", || {
        s_client(
            port,
            &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"],
        )
    });
    assert!(ok.contains("ECDHE-ECDSA-AES128-GCM-SHA256"), "{ok}");
    assert!(
        s_client(
            port,
            &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"]
        )
        .is_none(),
        "an unlisted TLS 1.2 suite is refused"
    );
    let warn = env.log_lines_with("TLS_RSA_WITH_AES_128_CBC_SHA");
    assert!(
        warn.iter().any(|l| l.contains("not implemented by rustls")),
        "the unavailable suite is warned about: {warn:?}"
    );
    env.kill_kubelet();

    // An unknown name stops the start, naming it.
    env.set_config("tlsCipherSuites", "[TLS_NO_SUCH_SUITE]");
    env.start_kubelet();
    let status = poll(secs(20), || env.kubelet_exit()).expect("rkubelet exits");
    assert_eq!(status.code(), Some(1));
    let line = env
        .log_lines_with("TLS_NO_SUCH_SUITE")
        .pop()
        .unwrap_or_default();
    eprintln!("{line}");
    assert!(
        line.contains("tlsCipherSuites") && line.contains("unknown cipher suite"),
        "{line}"
    );
}

/// A kubeconfig whose client certificate is `cert` (with `key`).
fn kubeconfig_with_cert(cl: &Cluster, cert: &Path, key: &Path) -> PathBuf {
    let path = cl.env.dir.join("bad-kubelet.conf");
    fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: {}\n    certificate-authority: {}\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nusers:\n- name: u\n  user:\n    client-certificate: {}\n    client-key: {}\n",
            cl.double.url(),
            cl.double.dir.join("ca.crt").display(),
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    path
}

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts rkubelet with `kubeconfig` (and `extra`), expects exit 1 and
/// returns the error line naming `needle`.
fn fails_naming(cl: &mut Cluster, kubeconfig: &Path, extra: &[&str], needle: &str) -> String {
    let mut args = cluster_kubelet_args(&cl.double, &cl.env, &cl.config, extra);
    let at = args.iter().position(|a| a == "--kubeconfig").unwrap();
    args[at + 1] = kubeconfig.display().to_string();
    cl.env.start_kubelet_with_args(&args);
    let status = poll(secs(20), || cl.env.kubelet_exit()).expect("rkubelet exits");
    assert_eq!(status.code(), Some(1));
    let lines: Vec<String> = cl
        .env
        .log_lines_with(needle)
        .into_iter()
        .filter(|l| l.contains("ERROR"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one error line naming {needle}:\n{}",
        cl.env.log_tail(10)
    );
    cl.env.kill_kubelet();
    lines[0].clone()
}

#[test]
fn bad_client_certificates_are_named_with_their_fix() {
    let mut cl = Cluster::new("bad_client_certificates_are_named_with_their_fix", 97);
    let d = cl.env.dir.clone();
    let (key, csr) = (d.join("k.pem"), d.join("r.csr"));
    let (key_s, csr_s) = (key.display().to_string(), csr.display().to_string());
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        &key_s,
        "-subj",
        &format!("/O=system:nodes/CN=system:node:{NODE}"),
        "-out",
        &csr_s,
    ]);
    let ca = cl.double.dir.join("ca.crt").display().to_string();
    let ca_key = cl.double.dir.join("ca.key").display().to_string();

    // X.509 v1 (openssl x509 -req without extensions).
    let v1 = d.join("v1.pem");
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr_s,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "30",
        "-out",
        &v1.display().to_string(),
    ]);
    let kc = kubeconfig_with_cert(&cl, &v1, &key);
    let line = fails_naming(&mut cl, &kc, &[], &v1.display().to_string());
    eprintln!("{line}");
    assert!(
        line.contains("users[0].user.client-certificate") && line.contains("X.509 v1"),
        "{line}"
    );
    assert!(line.contains("reissue it as v3"), "{line}");

    // Expired.
    let ext = d.join("ext.cnf");
    fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let expired = d.join("expired.pem");
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr_s,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "-1",
        "-extfile",
        &ext.display().to_string(),
        "-out",
        &expired.display().to_string(),
    ]);
    let kc = kubeconfig_with_cert(&cl, &expired, &key);
    let line = fails_naming(&mut cl, &kc, &[], &expired.display().to_string());
    eprintln!("{line}");
    assert!(
        line.contains("expired at") && line.contains("--bootstrap-kubeconfig"),
        "{line}"
    );

    // Malformed and unreadable.
    let garbage = d.join("garbage.pem");
    fs::write(&garbage, "not a certificate\n").unwrap();
    let kc = kubeconfig_with_cert(&cl, &garbage, &key);
    let line = fails_naming(&mut cl, &kc, &[], &garbage.display().to_string());
    assert!(line.contains("PEM CERTIFICATE"), "{line}");
    let missing = d.join("missing.pem");
    let kc = kubeconfig_with_cert(&cl, &missing, &key);
    let line = fails_naming(&mut cl, &kc, &[], &missing.display().to_string());
    assert!(line.contains("client-certificate"), "{line}");

    // With a bootstrap kubeconfig, the expired certificate is bootstrapped
    // anew, as upstream does.
    let kc = kubeconfig_with_cert(&cl, &expired, &key);
    let boot = cl
        .double
        .dir
        .join("bootstrap-kubelet.kubeconfig")
        .display()
        .to_string();
    let cert_dir = d.join("pki").display().to_string();
    let mut args = cluster_kubelet_args(
        &cl.double,
        &cl.env,
        &cl.config,
        &["--bootstrap-kubeconfig", &boot, "--cert-dir", &cert_dir],
    );
    let at = args.iter().position(|a| a == "--kubeconfig").unwrap();
    args[at + 1] = kc.display().to_string();
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    assert!(fs::read_to_string(&kc)
        .unwrap()
        .contains("kubelet-client-current.pem"));
}
