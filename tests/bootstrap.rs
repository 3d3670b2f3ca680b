//! The client TLS bootstrap end to end: rkubelet started with only the
//! double's bootstrap kubeconfig (a bootstrap token, as `kubeadm join`
//! writes `bootstrap-kubelet.conf`) and no `--kubeconfig` file, against the
//! API server double (whose csrapproving/csrsigning stand-ins approve and
//! sign node client CSRs, or leave them to the test) and a real containerd.
//!
//! Env numbers 90..=92: healthz 20000+N, API server 21000+N.
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

    // One CSR, asked for with the bootstrap token, approved and issued.
    let all = csrs(&cl.api);
    assert_eq!(all.len(), 1, "CSRs: {all:?}");
    let csr = &all[0];
    let name = csr["metadata"]["name"].as_str().unwrap_or("");
    assert!(name.starts_with("node-csr-"), "name {name}");
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

#[test]
fn denied_csr_stops_the_kubelet_naming_it() {
    let mut cl = Cluster::new("denied_csr_stops_the_kubelet_naming_it", 91);
    cl.api.must(
        "POST",
        "/__double/csr",
        Some(&json!({"autoApprove": false})),
        &[200],
    );
    let (args, kubeconfig, _) = bootstrap_args(&cl);
    cl.env.start_kubelet_with_args(&args);
    let csr = eventually(secs(30), "the kubelet's CSR", || csrs(&cl.api).pop());
    let name = csr["metadata"]["name"].as_str().unwrap_or("").to_string();
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
    let mut args = args;
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
            .log_lines_with("failed to connect to apiserver")
            .is_empty())
        .then_some(())
    });
    assert!(down.is_some(), "no retry logged:\n{}", cl.env.log_tail(10));
    cl.double.start();
    cl.wait_node_ready(secs(60));
    assert!(kubeconfig.exists());
}
