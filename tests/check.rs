//! `rkubelet check`: against a test containerd every check passes (OK
//! lines, exit 0); with a bad runtime socket and a malformed kubeconfig
//! both problems are listed with their fixes, and the exit code is 1;
//! against the API server double the kubeconfig and the clock pass.
//!
//! Test number 74.

mod common;

use std::process::{Command, Stdio};

use common::cluster::*;
use common::*;

/// `rkubelet check ARGS`: (exit code, stdout).
fn check(args: &[String]) -> (i32, String) {
    let out = Command::new(rkubelet_bin())
        .arg("check")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run rkubelet check");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// `args` with the value after `flag` replaced.
fn with(mut args: Vec<String>, flag: &str, value: &str) -> Vec<String> {
    let i = args.iter().position(|a| a == flag).expect(flag);
    args[i + 1] = value.into();
    args
}

#[test]
fn check_passes_on_a_good_node_and_lists_every_problem_on_a_bad_one() {
    let cl = Cluster::new("check", 74);
    let env = &cl.env;
    // Ports of its own, so another kubelet on 10250 does not fail it.
    env.set_config("port", "22074");
    let args = env.kubelet_args(&[]);
    let (code, out) = check(&args);
    eprintln!("{out}");
    assert_eq!(code, 0, "{out}");
    for line in [
        "OK    container runtime: containerd",
        "OK    cgroup driver:",
        "OK    swap:",
        "OK    port 22074:",
        "OK    healthzPort 20074:",
        "OK    root directory:",
        "OK    cgroups:",
        "SKIP  kubeconfig:",
        "rkubelet check: no problems found",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(!out.contains("FAIL"), "{out}");

    // A runtime socket that is not there and a kubeconfig that is not YAML.
    let bad_kubeconfig = env.dir.join("bad-kubeconfig");
    std::fs::write(&bad_kubeconfig, "clusters: [ this is not\n").unwrap();
    let mut bad = with(
        args,
        "--container-runtime-endpoint",
        &format!("unix://{}/nothing.sock", env.dir.display()),
    );
    bad.extend(["--kubeconfig".into(), bad_kubeconfig.display().to_string()]);
    let (code, out) = check(&bad);
    eprintln!("{out}");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL  container runtime: no socket at") && out.contains("nothing.sock"),
        "{out}"
    );
    assert!(
        out.contains("FAIL  kubeconfig:") && out.contains("bad-kubeconfig"),
        "{out}"
    );
    // Every problem comes with its fix (a cluster node is also asked for
    // ip_forward and br_netfilter, which this host may lack).
    let fails = out.matches("\nFAIL  ").count() + usize::from(out.starts_with("FAIL  "));
    assert!(fails >= 2, "{out}");
    assert_eq!(out.matches("      fix: ").count(), fails, "{out}");
    assert!(
        out.contains(&format!("rkubelet check: {fails} problem(s)")),
        "{out}"
    );

    // Reserved CPUs the machine lacks: the start would stop, naming them.
    let mut reserved = env.kubelet_args(&[]);
    reserved.extend(["--reserved-cpus".into(), "0,4090-4095".into()]);
    let (code, out) = check(&reserved);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAIL  configuration: Invalid cpuset \"0,4090-4095\" specified by --reserved-cpus"
        ) && out.contains("CPUs 4090-4095 are not on this machine"),
        "{out}"
    );

    // Cluster mode: the double's kubeconfig loads and its Date is close.
    let (_, out) = check(&cl.kubelet_args());
    eprintln!("{out}");
    for line in ["OK    kubeconfig:", "OK    clock skew:"] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
}
