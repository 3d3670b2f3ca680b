//! `rkubelet check` (beyond upstream): a preflight of everything a start
//! needs, every problem printed at once with its fix; exit code 0 or 1.
//! Each check calls what the real start calls, so the two cannot disagree.

use std::fmt::Display;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

use crate::certificate::x509::Certificate;
use crate::client::kubeconfig;
use crate::cri::RemoteRuntime;
use crate::kubeletconfig::{KubeletConfiguration, KubeletFlags};

/// Clock skew against the API server above this is a problem (leases,
/// token and certificate validity all compare times across machines).
const MAX_CLOCK_SKEW_SECS: i64 = 10;
/// A client certificate expiring sooner than this is a problem.
const CERT_EXPIRY_WARNING_DAYS: i64 = 30;

/// What was found, printed as it is found.
#[derive(Default)]
struct Report {
    problems: usize,
}

impl Report {
    fn ok(&mut self, what: &str, detail: impl Display) {
        println!("OK    {what}: {detail}");
    }

    fn skip(&mut self, what: &str, why: impl Display) {
        println!("SKIP  {what}: {why}");
    }

    fn problem(&mut self, what: &str, problem: impl Display, fix: impl Display) {
        self.problems += 1;
        println!("FAIL  {what}: {problem}\n      fix: {fix}");
    }
}

/// Runs every check; the exit code.
pub fn run(flags: &KubeletFlags, config: &KubeletConfiguration) -> i32 {
    let mut r = Report::default();
    let runtime = check_runtime(&mut r, config);
    match &runtime {
        Some(rt) => match super::kubelet::check_cgroup_driver(config, rt) {
            Ok(()) => r.ok(
                "cgroup driver",
                format!("cgroupDriver {} (the runtime agrees or does not say)", config.cgroup_driver),
            ),
            Err(e) => r.problem(
                "cgroup driver",
                format!("{e:#}"),
                "set cgroupDriver (--cgroup-driver) to the runtime's (containerd: SystemdCgroup in its runc options)",
            ),
        },
        None => r.skip("cgroup driver", "the runtime did not answer"),
    }
    match crate::cm::check_swap(config.fail_swap_on, Path::new("/proc/swaps")) {
        Ok(()) if config.fail_swap_on => r.ok("swap", "off"),
        Ok(()) => r.ok("swap", "allowed (failSwapOn: false)"),
        Err(e) => r.problem(
            "swap",
            format!("{e:#}"),
            "swapoff -a (and remove swap from /etc/fstab), or set failSwapOn: false",
        ),
    }
    check_ports(&mut r, config);
    let client = check_kubeconfigs(&mut r, flags);
    match client {
        Some(c) => check_clock(&mut r, &c),
        None => r.skip("clock skew", "no API server to compare with"),
    }
    check_root_dir(&mut r, &flags.root_dir);
    check_kernel(&mut r, flags.kubeconfig.is_some());
    if r.problems == 0 {
        println!("rkubelet check: no problems found");
        0
    } else {
        println!("rkubelet check: {} problem(s)", r.problems);
        1
    }
}

/// The runtime socket and CRI version, through the client the start builds.
fn check_runtime(r: &mut Report, config: &KubeletConfiguration) -> Option<RemoteRuntime> {
    const WHAT: &str = "container runtime";
    let endpoint = &config.container_runtime_endpoint;
    let fix = "start the runtime (systemctl start containerd) or point --container-runtime-endpoint at its socket";
    if let Some(path) = endpoint.strip_prefix("unix://") {
        if !Path::new(path).exists() {
            r.problem(WHAT, format!("no socket at {path}"), fix);
            return None;
        }
    }
    let runtime = match RemoteRuntime::with_image_endpoint(
        endpoint,
        config.effective_image_service_endpoint(),
        config.runtime_request_timeout.0,
        std::sync::Arc::new(crate::metrics::RuntimeOps),
    ) {
        Ok(rt) => rt,
        Err(e) => {
            r.problem(WHAT, format!("{endpoint}: {e:#}"), fix);
            return None;
        }
    };
    match runtime.version() {
        Ok(v) => {
            r.ok(
                WHAT,
                format!(
                    "{} {} at {endpoint}, CRI {}",
                    v.runtime_name, v.runtime_version, v.runtime_api_version
                ),
            );
            Some(runtime)
        }
        Err(e) => {
            r.problem(
                WHAT,
                format!("{endpoint} does not answer CRI v1 Version: {e}"),
                "check that the runtime serves CRI v1 (containerd >= 1.6 with its cri plugin enabled)",
            );
            None
        }
    }
}

/// The ports the servers bind: 10250 (and the read-only port) with
/// enableServer, healthz when its port is set.
fn check_ports(r: &mut Report, config: &KubeletConfiguration) {
    let mut ports = Vec::new();
    if config.enable_server {
        ports.push(("port", config.address.as_str(), config.port));
        if config.read_only_port > 0 {
            ports.push((
                "readOnlyPort",
                config.address.as_str(),
                config.read_only_port,
            ));
        }
    }
    if config.healthz_port > 0 {
        ports.push((
            "healthzPort",
            config.healthz_bind_address.as_str(),
            config.healthz_port,
        ));
    }
    for (field, host, port) in ports {
        let what = format!("{field} {port}");
        let addr: SocketAddr = match format!("{host}:{port}").parse() {
            Ok(a) => a,
            Err(e) => {
                r.problem(
                    &what,
                    format!("address {host:?}: {e}"),
                    "set a valid IP address",
                );
                continue;
            }
        };
        match TcpListener::bind(addr) {
            Ok(_) => r.ok(&what, format!("{addr} is free")),
            Err(e) => r.problem(
                &what,
                format!("cannot listen on {addr}: {e}"),
                format!("stop what listens there (ss -ltnp 'sport = :{port}') or change {field}"),
            ),
        }
    }
}

/// --kubeconfig and --bootstrap-kubeconfig as the start loads them, and
/// the client certificate's expiry. The client to compare clocks with.
fn check_kubeconfigs(r: &mut Report, flags: &KubeletFlags) -> Option<crate::client::Client> {
    let (kc, boot) = (
        flags.kubeconfig.as_deref(),
        flags.bootstrap_kubeconfig.as_deref(),
    );
    let Some(kc) = kc else {
        r.skip("kubeconfig", "no --kubeconfig: standalone mode");
        return None;
    };
    let mut client = None;
    if kc.exists() || boot.is_none() {
        client = check_one_kubeconfig(r, "kubeconfig", kc, boot.is_some());
    } else {
        r.ok(
            "kubeconfig",
            format!(
                "{} is absent; the TLS bootstrap will write it",
                kc.display()
            ),
        );
    }
    if let Some(boot) = boot {
        let needed = client.is_none();
        let c = check_one_kubeconfig(r, "bootstrap kubeconfig", boot, false);
        if needed {
            client = c;
        }
    }
    client
}

/// One kubeconfig: loaded as the start loads it, its client certificate
/// not expired nor about to. `renewable`: a bootstrap kubeconfig renews it.
fn check_one_kubeconfig(
    r: &mut Report,
    what: &str,
    path: &Path,
    renewable: bool,
) -> Option<crate::client::Client> {
    let rest = match kubeconfig::load(path) {
        Ok(rest) => rest,
        Err(e) => {
            let fix = if renewable {
                "remove it: --bootstrap-kubeconfig will write a new one"
            } else {
                "fix or replace the file (kubeadm: kubeadm join writes it)"
            };
            // The loader's error names the file.
            r.problem(what, format!("{e:#}"), fix);
            return None;
        }
    };
    let now = crate::types::unix_now();
    let expiry = kubeconfig::load_current(path)
        .ok()
        .and_then(|c| c.client_cert)
        .and_then(|pem| crate::client::tls::parse_certs(&pem).ok())
        .and_then(|certs| {
            certs
                .iter()
                .map(|c| Certificate::from_der(c).ok().map(|c| c.not_after()))
                .min()
                .flatten()
        });
    match expiry {
        Some(t) if t < now => r.problem(
            what,
            format!(
                "{}: the client certificate expired {} days ago",
                path.display(),
                (now - t) / 86400
            ),
            if renewable {
                "nothing: --bootstrap-kubeconfig requests a new one at start"
            } else {
                "renew it (kubeadm certs renew, or a new kubeconfig)"
            },
        ),
        Some(t) if t - now < CERT_EXPIRY_WARNING_DAYS * 86400 => r.problem(
            what,
            format!(
                "{}: the client certificate expires in {} days",
                path.display(),
                (t - now) / 86400
            ),
            "renew it before then (rotation is not done yet)",
        ),
        Some(t) => r.ok(
            what,
            format!(
                "{}, server {}, client certificate valid for {} days",
                path.display(),
                rest.server,
                (t - now) / 86400
            ),
        ),
        None => r.ok(what, format!("{}, server {}", path.display(), rest.server)),
    }
    match crate::client::Client::new(
        rest,
        std::sync::Arc::new(crate::metrics::RestClientRequests),
    ) {
        Ok(c) => Some(c),
        Err(e) => {
            r.problem(
                what,
                format!("{}: {e:#}", path.display()),
                "fix its TLS settings",
            );
            None
        }
    }
}

/// The API server's Date header against the local clock.
fn check_clock(r: &mut Report, client: &crate::client::Client) {
    const WHAT: &str = "clock skew";
    let before = crate::types::unix_now();
    let date = match client.get_date("/healthz") {
        Ok(Some(d)) => d,
        Ok(None) => return r.skip(WHAT, "the API server sent no Date header"),
        Err(e) => {
            return r.problem(
                WHAT,
                format!("cannot reach the API server at {}: {e}", client.server()),
                "check the network path and the server URL in the kubeconfig",
            )
        }
    };
    match clock_skew(&date, before) {
        Ok(skew) if skew.abs() <= MAX_CLOCK_SKEW_SECS => {
            r.ok(WHAT, format!("{skew:+} s against {}", client.server()))
        }
        Ok(skew) => r.problem(
            WHAT,
            format!(
                "this node's clock is {} s {} the API server's",
                skew.abs(),
                if skew > 0 { "behind" } else { "ahead of" }
            ),
            "synchronise the clock (systemd-timesyncd, chrony)",
        ),
        Err(e) => r.skip(WHAT, e),
    }
}

/// Server time − local time in seconds, from an HTTP Date header; the
/// header's one-second resolution is within the tolerance.
pub fn clock_skew(date: &str, local_unix: i64) -> Result<i64, String> {
    let ts = k8s_openapi::jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(date.trim())
        .map_err(|e| format!("unparsable Date header {date:?}: {e}"))?;
    Ok(ts.as_second() - local_unix)
}

/// --root-dir exists or can be made, and takes a file.
fn check_root_dir(r: &mut Report, root: &Path) {
    const WHAT: &str = "root directory";
    let probe = root.join(format!(".rkubelet-check-{}", std::process::id()));
    let result = std::fs::create_dir_all(root)
        .and_then(|()| std::fs::write(&probe, b"check"))
        .and_then(|()| std::fs::remove_file(&probe));
    match result {
        Ok(()) => r.ok(WHAT, format!("{} is writable", root.display())),
        Err(e) => r.problem(
            WHAT,
            format!("{}: {e}", root.display()),
            "run as root, or point --root-dir at a writable local directory",
        ),
    }
}

/// cgroups with the controllers pods are limited by, overlayfs for the
/// runtime's snapshotter, and (in a cluster) forwarding and br_netfilter
/// as kubeadm's preflight asks.
fn check_kernel(r: &mut Report, cluster: bool) {
    match crate::cm::Hierarchies::detect() {
        Ok(h) => match h.missing_controllers() {
            missing if missing.is_empty() => r.ok("cgroups", format!("{:?}, every controller pods need", h.version)),
            missing => r.problem(
                "cgroups",
                format!("{:?} without the {} controller(s)", h.version, missing.join(", ")),
                "enable them (kernel command line cgroup_enable=..., or cgroup.subtree_control on v2)",
            ),
        },
        Err(e) => r.problem("cgroups", e.to_string(), "mount cgroup2 at /sys/fs/cgroup (or the v1 hierarchies)"),
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"))
    {
        r.ok("overlay", "overlayfs is available");
    } else {
        r.problem(
            "overlay",
            "overlayfs is not in /proc/filesystems",
            "modprobe overlay (and add it to /etc/modules-load.d)",
        );
    }
    if !cluster {
        r.skip("ip_forward, br_netfilter", "standalone mode");
        return;
    }
    for (what, file, fix) in [
        (
            "ip_forward",
            "/proc/sys/net/ipv4/ip_forward",
            "sysctl -w net.ipv4.ip_forward=1",
        ),
        (
            "br_netfilter",
            "/proc/sys/net/bridge/bridge-nf-call-iptables",
            "modprobe br_netfilter && sysctl -w net.bridge.bridge-nf-call-iptables=1",
        ),
    ] {
        match std::fs::read_to_string(file) {
            Ok(v) if v.trim() == "1" => r.ok(what, format!("{file} is 1")),
            Ok(v) => r.problem(what, format!("{file} is {}", v.trim()), fix),
            Err(e) => r.problem(what, format!("{file}: {e}"), fix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_skew_from_an_http_date() {
        // 2026-11-24T05:00:00Z
        let t = 1_795_496_400;
        assert_eq!(clock_skew("Tue, 24 Nov 2026 05:00:00 GMT", t), Ok(0));
        assert_eq!(clock_skew("Tue, 24 Nov 2026 05:00:30 GMT", t), Ok(30));
        assert_eq!(clock_skew("Tue, 24 Nov 2026 04:59:00 GMT", t), Ok(-60));
        assert!(clock_skew("yesterday", t).is_err());
    }

    #[test]
    fn a_taken_port_is_a_problem_with_its_fix() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let config = KubeletConfiguration {
            enable_server: false,
            healthz_bind_address: "127.0.0.1".into(),
            healthz_port: i32::from(port),
            ..Default::default()
        };
        let mut r = Report::default();
        check_ports(&mut r, &config);
        assert_eq!(r.problems, 1);
        drop(held);
        let mut r = Report::default();
        check_ports(&mut r, &config);
        assert_eq!(r.problems, 0);
    }
}
