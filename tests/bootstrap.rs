//! The client TLS bootstrap end to end: rkubelet started with only the
//! double's bootstrap kubeconfig (a bootstrap token, as `kubeadm join`
//! writes `bootstrap-kubelet.conf`) and no `--kubeconfig` file, against the
//! API server double (whose csrapproving/csrsigning stand-ins approve and
//! sign node client CSRs, or leave them to the test) and a real containerd.
//!
//! With `rotateCertificates` (on by default with a bootstrap kubeconfig) the
//! bootstrap runs in the background, as upstream's: static pods run while
//! the CSR waits, and a denied CSR is asked again. Without it the bootstrap
//! blocks the start and a denial stops the kubelet, as upstream's
//! LoadClientCert.
//!
//! Env numbers 79, 89, 90..=92 and 98: healthz 20000+N, API server 21000+N.
//!
//!     cargo test --release --test bootstrap

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use common::cluster::*;
use common::*;

#[test]
fn joins_with_only_a_bootstrap_kubeconfig() {
    let mut cl = Cluster::new("joins_with_only_a_bootstrap_kubeconfig", 90);
    let (args, kubeconfig, cert_dir) = bootstrap_args(&cl);
    assert!(!kubeconfig.exists());
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    for l in cl.env.log_lines_with("certificate::") {
        eprintln!("{l}");
    }

    // One CSR, asked for with the bootstrap token, approved and issued;
    // named by generateName, as upstream's certificate manager does.
    let all = csrs(&cl.api);
    assert_eq!(all.len(), 1, "CSRs: {all:?}");
    let csr = &all[0];
    let name = csr["metadata"]["name"].as_str().unwrap_or("");
    assert!(name.starts_with("csr-"), "name {name}");
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client-kubelet"
    );
    assert_eq!(
        csr["spec"]["usages"],
        json!(["digital signature", "client auth"])
    );
    let user = csr["spec"]["username"].as_str().unwrap_or("");
    assert!(user.starts_with("system:bootstrap:"), "username {user}");
    assert!(condition_true(csr, "Approved"), "status {}", csr["status"]);
    assert!(csr["status"]["certificate"].is_string());

    // upstream's file layout.
    let current = cert_dir.join("kubelet-client-current.pem");
    let target = fs::read_link(&current).expect("kubelet-client-current.pem is a symlink");
    let file = target.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        file.starts_with("kubelet-client-20") && file.ends_with(".pem") && file.len() == 38,
        "pair file {file}"
    );
    let mode = fs::metadata(&target).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", target.display());
    let pem = fs::read_to_string(&current).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----") && pem.contains("PRIVATE KEY"));
    assert!(!cert_dir.join("kubelet-client.key.tmp").exists());
    let kc = fs::read_to_string(&kubeconfig).unwrap();
    let want = format!("client-certificate: {}\n", current.display());
    assert!(kc.contains(&want), "kubeconfig:\n{kc}");
    assert!(kc.contains(&format!("client-key: {}\n", current.display())));
    assert!(
        kc.contains(&format!("server: {}\n", cl.double.url())),
        "kubeconfig:\n{kc}"
    );

    // The node's own requests now carry the issued certificate's identity.
    let node_user = format!("system:node:{NODE}");
    let as_node = cl
        .double
        .audit()
        .iter()
        .any(|e| e["user"] == node_user.as_str());
    assert!(as_node, "no request as {node_user} in the audit log");

    // A pod runs.
    cl.api.create_pod(&api_pod("boot", "sleep 3600"));
    cl.wait_pod_ready("boot", secs(60));

    // A restart reuses the kubeconfig: no second CSR.
    cl.env.kill_kubelet();
    cl.env.start_kubelet_with_args(&args);
    cl.env.wait_healthy(secs(30));
    assert!(cl.env.log().contains("skipping the TLS bootstrap"));
    assert_eq!(csrs(&cl.api).len(), 1);
}

/// An older control plane's approver takes only the usages its own kubelet
/// sent: rkubelet reads `/version` and asks for those, and joins.
fn joins_control_plane(version: &str, n: u32, usages: serde_json::Value) {
    let name = format!("joins_control_plane_{}", version.replace('.', "_"));
    let mut cl = Cluster::with_version(&name, n, version);
    let (args, _, _) = bootstrap_args(&cl);
    cl.env.start_kubelet_with_args(&args);
    cl.wait_node_ready(secs(40));
    let all = csrs(&cl.api);
    assert_eq!(all.len(), 1, "CSRs: {all:?}");
    assert_eq!(all[0]["spec"]["usages"], usages, "{}", all[0]);
    assert!(condition_true(&all[0], "Approved"), "{}", all[0]["status"]);
    let minor = version.trim_start_matches("1.");
    let logged = format!("API server v1.{minor}: ");
    assert!(
        cl.env.log().contains(&logged),
        "no {logged:?} line in the log"
    );
}

#[test]
fn joins_a_v1_22_control_plane() {
    joins_control_plane(
        "1.22",
        89,
        json!(["digital signature", "key encipherment", "client auth"]),
    );
}

#[test]
fn joins_a_v1_28_control_plane() {
    joins_control_plane("1.28", 79, json!(["digital signature", "client auth"]));
}

#[test]
fn without_rotation_a_denied_csr_stops_the_kubelet_naming_it() {
    let mut cl = Cluster::new(
        "without_rotation_a_denied_csr_stops_the_kubelet_naming_it",
        91,
    );
    cl.api.must(
        "POST",
        "/__double/csr",
        Some(&json!({"autoApprove": false})),
        &[200],
    );
    // upstream's LoadClientCert: the blocking bootstrap, before anything runs.
    let (mut args, kubeconfig, _) = bootstrap_args(&cl);
    args.push("--rotate-certificates=false".to_string());
    cl.env.start_kubelet_with_args(&args);
    let csr = eventually(secs(30), "the kubelet's CSR", || csrs(&cl.api).pop());
    let name = csr["metadata"]["name"].as_str().unwrap_or("").to_string();
    assert!(
        name.starts_with("node-csr-"),
        "LoadClientCert's name: {name}"
    );
    // As `kubectl certificate deny` does.
    let mut denied = csr.clone();
    denied["status"]["conditions"] = json!([{"type": "Denied", "status": "True",
        "reason": "NotOnOurList", "message": "node not expected"}]);
    cl.api.must(
        "PUT",
        &format!("{CSRS}/{name}/approval"),
        Some(&denied),
        &[200],
    );

    let status = poll(secs(20), || cl.env.kubelet_exit())
        .unwrap_or_else(|| panic!("rkubelet still runs after CSR {name} was denied"));
    assert!(!status.success(), "exit status {status}");
    let log = cl.env.log();
    let line = log
        .lines()
        .find(|l| l.contains(&name) && l.contains("is denied"))
        .unwrap_or_else(|| {
            panic!(
                "no denial naming {name} in the log:\n{}",
                cl.env.log_tail(20)
            )
        });
    eprintln!("{line}");
    assert!(line.contains("NotOnOurList"), "{line}");
    assert!(
        !kubeconfig.exists(),
        "a kubeconfig was written after a denial"
    );

    // A missing bootstrap kubeconfig is named.
    let at = args
        .iter()
        .position(|a| a == "--bootstrap-kubeconfig")
        .unwrap();
    let missing = cl.env.dir.join("no-such-bootstrap.conf");
    args[at + 1] = missing.display().to_string();
    cl.env.kill_kubelet();
    cl.env.start_kubelet_with_args(&args);
    let status = poll(secs(20), || cl.env.kubelet_exit()).expect("rkubelet exits");
    assert!(!status.success());
    let line = cl
        .env
        .log_lines_with(&missing.display().to_string())
        .pop()
        .unwrap_or_else(|| panic!("the file is not named:\n{}", cl.env.log_tail(10)));
    assert!(
        line.contains("unable to load bootstrap kubeconfig"),
        "{line}"
    );
}

#[test]
fn waits_for_the_api_server_then_joins() {
    let mut cl = Cluster::new("waits_for_the_api_server_then_joins", 92);
    let (args, kubeconfig, _) = bootstrap_args(&cl);
    cl.double.kill();
    cl.env.start_kubelet_with_args(&args);
    let down = poll(secs(20), || {
        cl.env.assert_kubelet_alive();
        (!cl.env
            .log_lines_with("client certificate bootstrap failed")
            .is_empty())
        .then_some(())
    });
    assert!(down.is_some(), "no retry logged:\n{}", cl.env.log_tail(10));
    let line = cl
        .env
        .log_lines_with("client certificate bootstrap failed")
        .pop();
    eprintln!("{line:?}");
    cl.double.start();
    cl.wait_node_ready(secs(60));
    assert!(kubeconfig.exists());
}

/// Sets one condition on a CSR through `/approval`, as `kubectl certificate
/// approve|deny` does.
fn decide(api: &Api, csr: &serde_json::Value, kind: &str, reason: &str) {
    let name = csr["metadata"]["name"].as_str().unwrap_or("");
    let mut v = csr.clone();
    v["status"]["conditions"] = json!([{"type": kind, "status": "True",
        "reason": reason, "message": format!("{kind} by the test")}]);
    api.must("PUT", &format!("{CSRS}/{name}/approval"), Some(&v), &[200]);
}

#[test]
fn static_pods_run_while_the_csr_waits_and_a_denial_is_retried() {
    let mut cl = Cluster::new(
        "static_pods_run_while_the_csr_waits_and_a_denial_is_retried",
        98,
    );
    cl.api.must(
        "POST",
        "/__double/csr",
        Some(&json!({"autoApprove": false})),
        &[200],
    );
    let st = pod("early", vec![ctn("c", "sleep 3600")]);
    cl.env.put_pod(&st);
    let (args, kubeconfig, cert_dir) = bootstrap_args(&cl);
    let current = cert_dir.join("kubelet-client-current.pem");
    let early = st.full_name();
    cl.env.start_kubelet_with_args(&args);

    // The CSR waits; the static pod runs meanwhile, with no certificate.
    let first = eventually(secs(30), "the bootstrap CSR", || csrs(&cl.api).pop());
    cl.env.wait_running(&early, &["c"], secs(60));
    assert!(!current.exists(), "{} exists", current.display());
    assert!(
        kubeconfig.exists(),
        "upstream's LoadClientConfig writes --kubeconfig at once"
    );
    let waiting = eventually(
        secs(30),
        "a 'waiting for the client certificate' error",
        || {
            cl.env
                .log_lines_with("waiting for the client certificate")
                .pop()
        },
    );
    eprintln!("{waiting}");
    assert!(cl.api.node().is_none(), "registered without a certificate");

    // Denied: logged, and asked again with a new CSR; the kubelet stays.
    decide(&cl.api, &first, "Denied", "NotOnOurList");
    let first_name = first["metadata"]["name"].as_str().unwrap_or("").to_string();
    let second = eventually(secs(40), "a second CSR after the denial", || {
        csrs(&cl.api)
            .into_iter()
            .find(|c| c["metadata"]["name"] != first_name.as_str())
    });
    cl.env.assert_kubelet_alive();
    let line = cl
        .env
        .log_lines_with("client certificate bootstrap failed")
        .into_iter()
        .find(|l| l.contains(&first_name))
        .unwrap_or_else(|| panic!("no denial logged:\n{}", cl.env.log_tail(20)));
    eprintln!("{line}");
    assert!(
        line.contains("NotOnOurList") && line.contains("retrying in"),
        "{line}"
    );
    assert_eq!(
        second["spec"]["username"], first["spec"]["username"],
        "the retry uses the bootstrap credentials too"
    );
    assert!(cl.env.snapshot().running(&early, "c").is_some());

    // Approved: the certificate is written and swapped in, the node joins.
    let approved_at = std::time::Instant::now();
    decide(&cl.api, &second, "Approved", "TestApproved");
    cl.wait_node_ready(secs(40));
    eprintln!(
        "FIGURE: approval of the bootstrap CSR to node Ready: {:?}",
        approved_at.elapsed()
    );
    assert!(current.exists());
    let kc = fs::read_to_string(&kubeconfig).unwrap();
    assert!(kc.contains(&format!("client-certificate: {}\n", current.display())));
    // The denial's node event, held by the recorder until it could be sent.
    let ev = cl.eventually(secs(60), "the CertificateRotationFailed event", |api| {
        api.events_for("default", NODE)
            .into_iter()
            .find(|e| e["reason"] == "CertificateRotationFailed")
    });
    assert!(
        ev["message"].as_str().unwrap_or("").contains(&first_name),
        "{ev}"
    );
    // The static pod kept its container, and now has its mirror pod.
    cl.eventually(secs(30), "the mirror pod", |api| api.pod(&early));
    let snap = cl.env.snapshot();
    assert_eq!(snap.instances(&early, "c").len(), 1, "{}", snap.summary());
}
