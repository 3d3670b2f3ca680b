use super::*;
use serde_json::json;

fn pod(sysctls: &[&str], host_net: bool, host_ipc: bool) -> Pod {
    let s: Vec<_> = sysctls
        .iter()
        .map(|n| json!({"name": n, "value": "1"}))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
        "hostNetwork": host_net, "hostIPC": host_ipc,
        "securityContext": {"sysctls": s}, "containers": [{"name": "c"}]}}))
    .unwrap()
}

fn node(unsafe_: &[&str]) -> Allowlist {
    let u: Vec<String> = unsafe_.iter().map(|s| s.to_string()).collect();
    Allowlist::for_node(&u).unwrap()
}

#[test]
fn safe_sysctls_pass_and_others_are_forbidden_with_upstreams_message() {
    let w = node(&[]);
    assert_eq!(
        w.admit(&pod(
            &[
                "kernel.shm_rmid_forced",
                "net.ipv4.ip_unprivileged_port_start"
            ],
            false,
            false
        )),
        Ok(())
    );
    let r = w
        .admit(&pod(&["net.core.somaxconn"], false, false))
        .unwrap_err();
    assert_eq!(r.reason, "SysctlForbidden");
    assert_eq!(
        r.message,
        "forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
    );
}

#[test]
fn allowed_unsafe_names_and_prefix_patterns() {
    let w = node(&["net.core.*", "kernel.msgmax"]);
    assert_eq!(
        w.admit(&pod(&["net.core.somaxconn", "kernel.msgmax"], false, false)),
        Ok(())
    );
    assert!(w.admit(&pod(&["kernel.msgmnb"], false, false)).is_err());
    // Slashed names are the dotted ones.
    assert_eq!(w.admit(&pod(&["net/core/somaxconn"], false, false)), Ok(()));
}

#[test]
fn host_namespaces_forbid_their_sysctls() {
    let w = node(&["kernel.shm*"]);
    let r = w
        .admit(&pod(&["net.ipv4.tcp_syncookies"], true, false))
        .unwrap_err();
    assert_eq!(
        r.message,
        "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host net enabled"
    );
    let r = w.admit(&pod(&["kernel.shmmax"], false, true)).unwrap_err();
    assert_eq!(
        r.message,
        "forbidden sysctl: \"kernel.shmmax\" not allowed with host ipc enabled"
    );
    assert_eq!(w.admit(&pod(&["kernel.shmmax"], true, false)), Ok(()));
}

#[test]
fn bad_or_unnamespaced_patterns_are_refused_at_start() {
    let e = Allowlist::new(&["kernel.hostname".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the sysctl \"kernel.hostname\" are not known to be namespaced"
    );
    let e = Allowlist::new(&["vm.*".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the sysctls \"vm.*\" are not known to be namespaced"
    );
    assert!(Allowlist::new(&["Net.Core".into()])
        .unwrap_err()
        .to_string()
        .contains("must have at most"));
    assert!(Allowlist::new(&["net..core".into()]).is_err());
    assert!(Allowlist::new(&["net.core.*".into(), "fs.mqueue.*".into()]).is_ok());
}

#[test]
fn names_are_normalized_like_upstream() {
    assert_eq!(
        normalize_name("net.ipv4.conf.eth0/100.rp_filter"),
        "net.ipv4.conf.eth0/100.rp_filter"
    );
    assert_eq!(
        normalize_name("net/ipv4/conf/eth0.100/rp_filter"),
        "net.ipv4.conf.eth0/100.rp_filter"
    );
    assert_eq!(namespaced_by("kernel.sem"), Some(Namespace::Ipc));
    assert_eq!(namespaced_by("fs.mqueue.msg_max"), Some(Namespace::Ipc));
    assert_eq!(namespaced_by("vm.swappiness"), None);
}

#[test]
fn newer_safe_sysctls_need_the_kernel_that_namespaced_them() {
    let old = safe_sysctl_allowlist(Some((4, 4)));
    assert!(old.contains(&"net.ipv4.ip_local_reserved_ports".to_string()));
    assert!(!old.contains(&"net.ipv4.tcp_keepalive_time".to_string()));
    let new = safe_sysctl_allowlist(Some((6, 1)));
    assert_eq!(new.len(), SAFE_SYSCTLS.len());
}
