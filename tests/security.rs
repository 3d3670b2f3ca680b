//! The pod security fields against real containerd, checked from inside the
//! container: seccomp (`/proc/self/status`, a Localhost profile that denies
//! mkdir), runAsNonRoot, sysctls, AppArmor admission on a host without
//! AppArmor, procMount, and RuntimeClass (a second runc handler, `runc-test`,
//! in the harness's containerd config).
//!
//! Env numbers 31..=36. Cluster tests use the API server double on port
//! 21000+N.

mod common;

use std::fs;
use std::time::Duration;

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

const T: Duration = Duration::from_secs(60);

/// A pod bound to the node running `script` in busybox container "c", with
/// `pod_sc` and `c_sc` as the pod's and container's securityContext.
fn secure_pod(name: &str, script: &str, pod_sc: Value, c_sc: Value) -> Value {
    let mut p = api_pod(name, script);
    p["spec"]["securityContext"] = pod_sc;
    p["spec"]["containers"][0]["securityContext"] = c_sc;
    p
}

/// The text of container "c"'s first log of the pod with `uid`.
fn container_log(env: &Env, ns_name: &str, uid: &str) -> String {
    let path = env
        .pod_logs
        .join(format!("{ns_name}_{uid}"))
        .join("c")
        .join("0.log");
    log_text(&path)
}

/// Waits until the API pod's container log holds `needle`; returns the log.
fn wait_log(c: &mut Cluster, pod: &Value, needle: &str) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let uid = uid(pod);
    let env_logs = c.env.pod_logs.clone();
    c.eventually(T, &format!("{needle:?} in {name}'s log"), |_| {
        let env_path = env_logs.join(format!("default_{name}_{uid}/c/0.log"));
        let text = fs::read_to_string(env_path).ok()?;
        text.contains(needle).then_some(text)
    })
}

/// Waits until container "c" of the API pod waits with `reason`; returns
/// the waiting state's message.
fn wait_waiting(c: &mut Cluster, name: &str, reason: &str) -> String {
    c.eventually(T, &format!("{name} waiting with {reason}"), |api| {
        let p = api.pod(name)?;
        let w = &p["status"]["containerStatuses"][0]["state"]["waiting"];
        (w["reason"] == reason).then(|| w["message"].as_str().unwrap_or("").to_string())
    })
}

/// Waits for a Failed pod and returns (reason, message).
fn wait_rejected(c: &mut Cluster, name: &str) -> (String, String) {
    c.eventually(T, &format!("{name} rejected"), |api| {
        let p = api.pod(name)?;
        (phase(&p) == "Failed").then(|| {
            (
                p["status"]["reason"].as_str().unwrap_or("").to_string(),
                p["status"]["message"].as_str().unwrap_or("").to_string(),
            )
        })
    })
}

fn has_event(c: &mut Cluster, name: &str, reason: &str, message: &str) {
    c.eventually(
        T,
        &format!("event {reason} {message:?} for {name}"),
        |api| {
            api.events_for("default", name)
                .iter()
                .any(|e| e["reason"] == reason && e["message"] == message)
                .then_some(())
        },
    );
}

fn seccomp_line(log: &str) -> String {
    log.lines()
        .find(|l| l.contains("Seccomp:"))
        .map(|l| l.split_whitespace().last().unwrap_or("").to_string())
        .unwrap_or_default()
}

// 31 -------------------------------------------------------------------------------

#[test]
fn seccomp_profiles_reach_the_container() {
    let mut c = Cluster::new("seccomp", 31);
    fs::write(&c.config, kubelet_config(&c.env, "seccompDefault: true\n")).unwrap();
    // Localhost profiles live under <root-dir>/seccomp.
    let profiles = c.env.root.join("seccomp/profiles");
    fs::create_dir_all(&profiles).unwrap();
    fs::write(
        profiles.join("deny-mkdir.json"),
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    c.start_kubelet();
    c.wait_node_ready(T);
    let show = "grep Seccomp: /proc/self/status; mkdir /tmp/d && echo mkdir-made || echo mkdir-denied; sleep 3600";
    let default = c
        .api
        .create_pod(&secure_pod("sc-default", show, json!({}), json!({})));
    let unconfined = c.api.create_pod(&secure_pod(
        "sc-unconfined",
        show,
        json!({"seccompProfile": {"type": "Unconfined"}}),
        json!({}),
    ));
    let local = c.api.create_pod(&secure_pod(
        "sc-local",
        show,
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/deny-mkdir.json"}}),
    ));
    c.api.create_pod(&secure_pod(
        "sc-missing",
        show,
        json!({}),
        json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/nope.json"}}),
    ));

    // seccompDefault: no profile means RuntimeDefault (mode 2, filter).
    let log = wait_log(&mut c, &default, "mkdir");
    assert_eq!(seccomp_line(&log), "2", "{log}");
    assert!(log.contains("mkdir-made"), "{log}");
    let log = wait_log(&mut c, &unconfined, "mkdir");
    assert_eq!(seccomp_line(&log), "0", "{log}");
    // The Localhost profile is enforced: mkdir fails inside.
    let log = wait_log(&mut c, &local, "mkdir");
    assert_eq!(seccomp_line(&log), "2", "{log}");
    assert!(log.contains("mkdir-denied"), "{log}");
    // A missing profile: CreateContainerConfigError naming the file.
    let path = c.env.root.join("seccomp/profiles/nope.json");
    let msg = wait_waiting(&mut c, "sc-missing", "CreateContainerConfigError");
    assert!(
        msg.starts_with(&format!(
            "cannot load seccomp profile {:?}",
            path.display().to_string()
        )),
        "{msg}"
    );
    has_event(&mut c, "sc-missing", "Failed", &format!("Error: {msg}"));
}

// 32 -------------------------------------------------------------------------------

#[test]
fn run_as_non_root_is_verified_against_the_image_user() {
    let mut c = Cluster::new("nonroot", 32);
    c.start_kubelet();
    c.wait_node_ready(T);
    // busybox's image has no USER: it runs as root.
    let refused = c.api.create_pod(&secure_pod(
        "nonroot",
        "id -u; sleep 3600",
        json!({"runAsNonRoot": true}),
        json!({}),
    ));
    let msg = wait_waiting(&mut c, "nonroot", "CreateContainerConfigError");
    assert_eq!(
        msg,
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"nonroot_default({})\", container: c)",
            uid(&refused)
        )
    );
    has_event(&mut c, "nonroot", "Failed", &format!("Error: {msg}"));
    // runAsUser vouches for the user: it runs, as that uid.
    let user = c.api.create_pod(&secure_pod(
        "uid1000",
        "echo uid=$(id -u); sleep 3600",
        json!({"runAsNonRoot": true}),
        json!({"runAsUser": 1000}),
    ));
    c.wait_pod_ready("uid1000", T);
    let log = wait_log(&mut c, &user, "uid=");
    assert!(log.contains("uid=1000"), "{log}");
    // The refused pod never got a container.
    let snap = c.env.snapshot();
    assert!(snap.containers("nonroot").is_empty(), "{}", snap.summary());
}

// 33 -------------------------------------------------------------------------------

#[test]
fn sysctls_and_apparmor_are_checked_at_admission() {
    let mut c = Cluster::new("sysctl-aa", 33);
    fs::write(
        &c.config,
        kubelet_config(&c.env, "allowedUnsafeSysctls: [\"kernel.msgmax\"]\n"),
    )
    .unwrap();
    c.start_kubelet();
    c.wait_node_ready(T);
    let sysctls = |l: &[(&str, &str)]| {
        let v: Vec<Value> = l
            .iter()
            .map(|(n, v)| json!({"name": n, "value": v}))
            .collect();
        json!({"sysctls": v})
    };
    let ok = c.api.create_pod(&secure_pod(
        "sysctl-ok",
        "echo values $(cat /proc/sys/net/ipv4/ip_unprivileged_port_start /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/msgmax); sleep 3600",
        sysctls(&[
            ("net.ipv4.ip_unprivileged_port_start", "100"),
            ("kernel.shm_rmid_forced", "1"),
            ("kernel.msgmax", "12345"),
        ]),
        json!({}),
    ));
    c.api.create_pod(&secure_pod(
        "sysctl-bad",
        "sleep 3600",
        sysctls(&[("net.core.somaxconn", "1024")]),
        json!({}),
    ));
    let log = wait_log(&mut c, &ok, "values");
    assert!(log.contains("values 100 1 12345"), "{log}");
    let (reason, msg) = wait_rejected(&mut c, "sysctl-bad");
    assert_eq!(reason, "SysctlForbidden");
    assert_eq!(
        msg,
        "Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
    );
    has_event(
        &mut c,
        "sysctl-bad",
        "SysctlForbidden",
        "forbidden sysctl: \"net.core.somaxconn\" not allowlisted",
    );

    if std::path::Path::new("/sys/module/apparmor").exists() {
        eprintln!("this host has AppArmor: the rejection checks do not apply");
        return;
    }
    c.api.create_pod(&secure_pod(
        "aa-field",
        "sleep 3600",
        json!({}),
        json!({"appArmorProfile": {"type": "RuntimeDefault"}}),
    ));
    let mut annotated = api_pod("aa-annotation", "sleep 3600");
    annotated["metadata"]["annotations"] =
        json!({"container.apparmor.security.beta.kubernetes.io/c": "localhost/k8s-deny"});
    c.api.create_pod(&annotated);
    c.api.create_pod(&secure_pod(
        "aa-unconfined",
        "sleep 3600",
        json!({"appArmorProfile": {"type": "Unconfined"}}),
        json!({}),
    ));
    for name in ["aa-field", "aa-annotation"] {
        let (reason, msg) = wait_rejected(&mut c, name);
        assert_eq!(reason, "AppArmor", "{name}");
        assert_eq!(
            msg, "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host",
            "{name}"
        );
    }
    c.wait_pod_ready("aa-unconfined", T);
    let snap = c.env.snapshot();
    for name in ["aa-field", "aa-annotation", "sysctl-bad"] {
        assert!(
            snap.sandboxes(name).is_empty(),
            "{name}: {}",
            snap.summary()
        );
    }
}

// 34 -------------------------------------------------------------------------------

/// The runtime handler containerd recorded for the pod's sandbox.
fn sandbox_handler(env: &Env, pod: &str) -> Option<String> {
    let snap = env.try_snapshot().ok()?;
    let sb = snap.sandboxes(pod).into_iter().find(|o| o.running)?;
    let info: Value = serde_json::from_str(&env.ctr(&["containers", "info", &sb.id]).ok()?).ok()?;
    let b64 = info["Extensions"]["io.cri-containerd.sandbox.metadata"]["value"].as_str()?;
    let meta: Value = serde_json::from_slice(&base64_decode(b64)?).ok()?;
    Some(
        meta["Metadata"]["RuntimeHandler"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    )
}

#[test]
fn runtime_class_picks_the_sandbox_handler() {
    let mut c = Cluster::new("runtimeclass", 34);
    c.api.must(
        "POST",
        "/apis/node.k8s.io/v1/runtimeclasses",
        Some(
            &json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": "test"}, "handler": "runc-test"}),
        ),
        &[201],
    );
    // A static pod naming a class that does not exist (the API server's
    // admission refuses such pods, so only a static pod gets this far).
    let missing = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "rc-missing", "namespace": "default"},
        "spec": {"runtimeClassName": "missing",
                 "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "3600"]}]}});
    c.env
        .write_manifest("rc-missing.json", &missing.to_string());
    c.start_kubelet();
    c.wait_node_ready(T);
    let mut p = api_pod("rc-pod", "sleep 3600");
    p["spec"]["runtimeClassName"] = json!("test");
    c.api.create_pod(&p);
    let plain = c.api.create_pod(&api_pod("plain", "sleep 3600"));
    c.wait_pod_ready("rc-pod", T);
    c.wait_pod_ready("plain", T);
    assert_eq!(
        sandbox_handler(&c.env, "rc-pod").as_deref(),
        Some("runc-test")
    );
    assert_eq!(sandbox_handler(&c.env, "plain").as_deref(), Some(""));
    assert!(!uid(&plain).is_empty());

    // Upstream: the sandbox is not created, FailedCreatePodSandBox says why,
    // and the kubelet retries (the pod stays Pending).
    let static_name = format!("rc-missing-{NODE}");
    has_event(
        &mut c,
        &static_name,
        "FailedCreatePodSandBox",
        "Failed to create pod sandbox: runtimeclasses.node.k8s.io \"missing\" not found",
    );
    let snap = c.env.snapshot();
    assert!(
        snap.sandboxes(&static_name).is_empty(),
        "{}",
        snap.summary()
    );
}

// 35 -------------------------------------------------------------------------------

#[test]
fn standalone_runtime_class_is_a_clear_error_and_proc_mount_is_honoured() {
    let mut env = Env::new("standalone-security", 35);
    let pod_json = |name: &str, extra_spec: Value, c_sc: Value| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "echo proc-masks $(grep -c -E ' /proc/(keys|timer_list|sys) ' /proc/self/mounts); sleep 3600"],
                "securityContext": c_sc}]}});
        if let (Some(spec), Some(extra)) = (p["spec"].as_object_mut(), extra_spec.as_object()) {
            for (k, v) in extra {
                spec.insert(k.clone(), v.clone());
            }
        }
        p.to_string()
    };
    env.write_manifest(
        "rc.json",
        &pod_json("rc", json!({"runtimeClassName": "gvisor"}), json!({})),
    );
    env.write_manifest(
        "pm-default.json",
        &pod_json("pm-default", json!({}), json!({"procMount": "Default"})),
    );
    env.write_manifest(
        "pm-unmasked.json",
        &pod_json("pm-unmasked", json!({}), json!({"procMount": "Unmasked"})),
    );
    env.start_kubelet();
    let full = |n: &str| format!("{n}-{NODE}");
    env.wait_running(&full("pm-default"), &["c"], T);
    let read = |env: &Env, n: &str| {
        let dir = fs::read_dir(&env.pod_logs).ok()?.flatten().find(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("default_{}_", full(n)))
        })?;
        let log = container_log(
            env,
            &format!("default_{}", full(n)),
            dir.file_name().to_string_lossy().rsplit('_').next()?,
        );
        log.contains("proc-masks").then_some(log)
    };
    let masked = eventually(T, "pm-default's log", || read(&env, "pm-default"));
    // /proc/keys and /proc/timer_list masked, /proc/sys read-only (this
    // kernel has no /proc/kcore, whose mask runc then skips).
    assert!(masked.contains("proc-masks 3"), "{masked}");
    // An unmasked /proc needs a user namespace (validation since v1.30):
    // with the host's users the manifest is refused, never run unmasked.
    let refused = eventually(T, "pm-unmasked refused in the log", || {
        env.log_lines_with("pm-unmasked.json").into_iter().next()
    });
    assert!(
        refused.contains("`hostUsers` must be false to use `Unmasked`"),
        "{refused}"
    );
    let line = eventually(T, "the runtimeClassName error in the log", || {
        env.log_lines_with("cannot be resolved").into_iter().next()
    });
    assert!(
        line.contains("runtimeClassName \"gvisor\" cannot be resolved")
            && line.contains("standalone mode"),
        "{line}"
    );
    let snap = env.snapshot();
    assert!(snap.sandboxes(&full("rc")).is_empty(), "{}", snap.summary());
    assert!(
        snap.sandboxes(&full("pm-unmasked")).is_empty(),
        "{}",
        snap.summary()
    );
}
