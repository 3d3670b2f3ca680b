use super::*;
use api::security_profile::ProfileType;
use serde_json::json;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn simple(pod_sc: serde_json::Value, c_sc: serde_json::Value) -> Pod {
    pod(
        json!({"metadata": {"name": "web", "namespace": "ns", "uid": "u1"},
               "spec": {"securityContext": pod_sc,
                        "containers": [{"name": "c", "securityContext": c_sc}]}}),
    )
}

fn ctx(
    p: &Pod,
    root: &Path,
    seccomp_default: bool,
) -> Result<api::LinuxContainerSecurityContext, SecurityContextError> {
    let opts = SecurityOptions {
        seccomp_root: root,
        seccomp_default,
    };
    container_security_context(p, &p.spec.as_ref().unwrap().containers[0], opts)
}

fn kind(p: &protobuf::MessageField<api::SecurityProfile>) -> (ProfileType, String) {
    let p = p.as_ref().expect("a profile");
    (
        p.profile_type.enum_value().unwrap(),
        p.localhost_ref.clone(),
    )
}

#[test]
fn seccomp_container_field_wins_then_pod_then_seccomp_default() {
    let root = Path::new("/var/lib/kubelet/seccomp");
    let p = simple(
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!({"seccompProfile": {"type": "Unconfined"}}),
    );
    assert_eq!(
        kind(&ctx(&p, root, false).unwrap().seccomp),
        (ProfileType::Unconfined, "".into())
    );
    let p = simple(
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!({}),
    );
    assert_eq!(
        kind(&ctx(&p, root, false).unwrap().seccomp),
        (ProfileType::RuntimeDefault, "".into())
    );
    let p = simple(json!({}), json!({}));
    assert_eq!(
        kind(&ctx(&p, root, false).unwrap().seccomp),
        (ProfileType::Unconfined, "".into())
    );
    assert_eq!(
        kind(&ctx(&p, root, true).unwrap().seccomp),
        (ProfileType::RuntimeDefault, "".into())
    );
    // An explicit Unconfined beats seccompDefault.
    let p = simple(json!({"seccompProfile": {"type": "Unconfined"}}), json!({}));
    assert_eq!(
        kind(&ctx(&p, root, true).unwrap().seccomp),
        (ProfileType::Unconfined, "".into())
    );
}

#[test]
fn localhost_seccomp_profiles_live_under_the_root_and_must_exist() {
    let root = std::env::temp_dir().join(format!("rk-seccomp-{}", std::process::id()));
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(root.join("profiles/deny.json"), "{}").unwrap();
    let p = simple(
        json!({}),
        json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/deny.json"}}),
    );
    let got = kind(&ctx(&p, &root, false).unwrap().seccomp);
    assert_eq!(
        got,
        (
            ProfileType::Localhost,
            root.join("profiles/deny.json").display().to_string()
        )
    );
    let p = simple(
        json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "missing.json"}}),
        json!({}),
    );
    let err = ctx(&p, &root, false).unwrap_err().to_string();
    let path = root.join("missing.json").display().to_string();
    assert!(
        err.starts_with(&format!("cannot load seccomp profile {path:?}: ")),
        "{err}"
    );
    let p = simple(json!({}), json!({"seccompProfile": {"type": "Localhost"}}));
    assert_eq!(
        ctx(&p, &root, false).unwrap_err(),
        SecurityContextError::MissingLocalhostSeccomp
    );
    assert_eq!(
        ctx(&p, &root, false).unwrap_err().to_string(),
        "localhostProfile must be set if seccompProfile type is Localhost."
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn apparmor_profiles_map_to_the_cri_and_the_legacy_string() {
    let root = Path::new("/nonexistent");
    let cases = [
        (
            json!({"type": "RuntimeDefault"}),
            ProfileType::RuntimeDefault,
            "",
            "runtime/default",
        ),
        (
            json!({"type": "Unconfined"}),
            ProfileType::Unconfined,
            "",
            "unconfined",
        ),
        (
            json!({"type": "Localhost", "localhostProfile": "k8s-deny"}),
            ProfileType::Localhost,
            "k8s-deny",
            "localhost/k8s-deny",
        ),
    ];
    for (field, want, name, legacy) in cases {
        let p = simple(json!({}), json!({"appArmorProfile": field}));
        let sc = ctx(&p, root, false).unwrap();
        assert_eq!(kind(&sc.apparmor), (want, name.to_string()));
        assert_eq!(sc.apparmor_profile, legacy);
    }
    // The deprecated annotation, and nothing at all.
    let p = pod(json!({"metadata": {"name": "p", "annotations": {
        "container.apparmor.security.beta.kubernetes.io/c": "localhost/legacy"}},
        "spec": {"containers": [{"name": "c"}]}}));
    let sc = ctx(&p, root, false).unwrap();
    assert_eq!(
        kind(&sc.apparmor),
        (ProfileType::Localhost, "legacy".into())
    );
    assert_eq!(sc.apparmor_profile, "localhost/legacy");
    let sc = ctx(&simple(json!({}), json!({})), root, false).unwrap();
    assert!(sc.apparmor.is_none() && sc.apparmor_profile.is_empty());
    let p = simple(json!({}), json!({"appArmorProfile": {"type": "Localhost"}}));
    assert_eq!(
        ctx(&p, root, false).unwrap_err().to_string(),
        "missing localhost apparmor profile name"
    );
}

#[test]
fn selinux_options_pass_through_container_over_pod() {
    let root = Path::new("/nonexistent");
    let pod_opts =
        json!({"user": "system_u", "role": "system_r", "type": "spc_t", "level": "s0:c1,c2"});
    let p = simple(json!({"seLinuxOptions": pod_opts}), json!({}));
    let sc = ctx(&p, root, false).unwrap();
    let o = sc.selinux_options.as_ref().unwrap();
    assert_eq!(
        (
            o.user.as_str(),
            o.role.as_str(),
            o.type_.as_str(),
            o.level.as_str()
        ),
        ("system_u", "system_r", "spc_t", "s0:c1,c2")
    );
    let sb = sandbox_security_context(&p);
    assert_eq!(sb.selinux_options.as_ref().unwrap().level, "s0:c1,c2");
    let p = simple(
        json!({"seLinuxOptions": pod_opts}),
        json!({"seLinuxOptions": {"level": "s0:c9"}}),
    );
    let o = ctx(&p, root, false).unwrap().selinux_options.unwrap();
    // The container's options replace the pod's whole, as upstream.
    assert_eq!((o.type_.as_str(), o.level.as_str()), ("", "s0:c9"));
    assert!(ctx(&simple(json!({}), json!({})), root, false)
        .unwrap()
        .selinux_options
        .is_none());
}

#[test]
fn proc_mount_unmasked_drops_masked_and_readonly_paths() {
    let root = Path::new("/nonexistent");
    let sc = ctx(
        &simple(json!({}), json!({"procMount": "Default"})),
        root,
        false,
    )
    .unwrap();
    assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
    assert_eq!(sc.readonly_paths, DEFAULT_READONLY_PATHS);
    let sc = ctx(
        &simple(json!({}), json!({"procMount": "Unmasked"})),
        root,
        false,
    )
    .unwrap();
    assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
    let sc = ctx(&simple(json!({}), json!({"privileged": true})), root, false).unwrap();
    assert!(sc.privileged && sc.masked_paths.is_empty());
}

#[test]
fn users_groups_and_the_sandbox() {
    let root = Path::new("/nonexistent");
    let p = simple(
        json!({"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]}),
        json!({"runAsUser": 1001}),
    );
    let sc = ctx(&p, root, false).unwrap();
    assert_eq!(sc.run_as_user.as_ref().unwrap().value, 1001);
    assert_eq!(sc.run_as_group.as_ref().unwrap().value, 3000);
    assert_eq!(sc.supplemental_groups, vec![2000, 4000]);
    let sb = sandbox_security_context(&p);
    assert_eq!(sb.run_as_user.as_ref().unwrap().value, 1000);
    assert_eq!(sb.supplemental_groups, vec![2000, 4000]);
    // The sandbox is always RuntimeDefault, whatever the pod asks.
    assert_eq!(kind(&sb.seccomp), (ProfileType::RuntimeDefault, "".into()));
}

#[test]
fn run_as_non_root_is_verified_with_upstreams_messages() {
    let who = "(pod: \"web_ns(u1)\", container: c)";
    let root_user = ImageUser::from_image(None);
    assert_eq!(root_user.uid, Some(0));
    let check = |pod_sc: serde_json::Value, c_sc: serde_json::Value, u: &ImageUser| {
        let p = simple(pod_sc, c_sc);
        verify_run_as_non_root(&p, &p.spec.as_ref().unwrap().containers[0], u)
            .map_err(|e| e.to_string())
    };
    assert_eq!(check(json!({}), json!({}), &root_user), Ok(()));
    assert_eq!(
        check(json!({"runAsNonRoot": true}), json!({}), &root_user),
        Err(format!(
            "container has runAsNonRoot and image will run as root {who}"
        ))
    );
    assert_eq!(
        check(
            json!({"runAsNonRoot": true, "runAsUser": 1000}),
            json!({}),
            &root_user
        ),
        Ok(())
    );
    assert_eq!(
        check(
            json!({"runAsNonRoot": true}),
            json!({"runAsUser": 0}),
            &root_user
        ),
        Err(format!(
            "container's runAsUser breaks non-root policy {who}"
        ))
    );
    // The container may lift the pod's requirement.
    assert_eq!(
        check(
            json!({"runAsNonRoot": true}),
            json!({"runAsNonRoot": false}),
            &root_user
        ),
        Ok(())
    );
    let named = ImageUser {
        uid: None,
        username: "nginx".into(),
    };
    assert_eq!(
        check(json!({}), json!({"runAsNonRoot": true}), &named),
        Err(format!("container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root {who}"))
    );
    let image = api::Image {
        uid: Some(api::Int64Value {
            value: 65532,
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let u = ImageUser::from_image(Some(&image));
    assert_eq!(check(json!({"runAsNonRoot": true}), json!({}), &u), Ok(()));
    let p = simple(json!({"runAsNonRoot": true}), json!({}));
    assert!(needs_image_user(
        &p,
        &p.spec.as_ref().unwrap().containers[0]
    ));
    let p = simple(json!({"runAsNonRoot": true, "runAsUser": 5}), json!({}));
    assert!(!needs_image_user(
        &p,
        &p.spec.as_ref().unwrap().containers[0]
    ));
}
