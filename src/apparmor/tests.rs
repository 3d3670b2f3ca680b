use super::*;
use serde_json::json;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn disabled() -> Validator {
    Validator::with_host(Some("AppArmor is not enabled on the host".into()))
}

#[test]
fn unconfined_or_nothing_needs_no_apparmor() {
    let plain = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}));
    assert!(!is_required(&plain));
    assert_eq!(disabled().validate(&plain), Ok(()));
    let unconfined = pod(json!({
        "metadata": {"name": "p", "annotations": {
            "container.apparmor.security.beta.kubernetes.io/c": "unconfined"}},
        "spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                 "containers": [{"name": "c"}]}}));
    assert!(!is_required(&unconfined));
    assert_eq!(disabled().validate(&unconfined), Ok(()));
}

#[test]
fn any_confinement_on_a_host_without_apparmor_is_refused() {
    for p in [
        json!({"metadata": {"name": "p"}, "spec": {
            "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c"}]}}),
        json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i",
            "securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "x"}}}],
            "containers": [{"name": "c"}]}}),
        json!({"metadata": {"name": "p", "annotations": {
            "container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}},
            "spec": {"containers": [{"name": "c"}]}}),
    ] {
        let p = pod(p);
        assert!(is_required(&p));
        assert_eq!(
            disabled().validate(&p),
            Err("AppArmor is not enabled on the host".to_string())
        );
        assert_eq!(Validator::with_host(None).validate(&p), Ok(()));
    }
}

#[test]
fn an_empty_localhost_name_is_refused_even_where_apparmor_works() {
    let p = pod(json!({"metadata": {"name": "p", "annotations": {
        "container.apparmor.security.beta.kubernetes.io/c": "localhost/"}},
        "spec": {"containers": [{"name": "c"}]}}));
    let err = Validator::with_host(None).validate(&p).unwrap_err();
    assert!(
        err.starts_with("invalid empty AppArmor profile name"),
        "{err}"
    );
}

#[test]
fn container_field_then_annotation_then_pod_field() {
    let p = pod(json!({
        "metadata": {"name": "p", "annotations": {
            "container.apparmor.security.beta.kubernetes.io/b": "localhost/from-annotation",
            "container.apparmor.security.beta.kubernetes.io/x": "bogus"}},
        "spec": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                 "containers": [
                    {"name": "a", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
                    {"name": "b"},
                    {"name": "x"}]}}));
    let of = |i: usize| get_profile(&p, &p.spec.as_ref().unwrap().containers[i]).unwrap();
    assert_eq!(of(0).type_, "Unconfined");
    assert_eq!(
        (of(1).type_.as_str(), of(1).localhost_profile.as_deref()),
        ("Localhost", Some("from-annotation"))
    );
    // An invalid annotation falls through to the pod's field.
    assert_eq!(of(2).type_, "RuntimeDefault");
}

#[test]
fn host_probe_reads_securityfs_and_the_module_parameter() {
    let dir = std::env::temp_dir().join(format!("rk-apparmor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(validate_host(&dir).is_some());
    std::fs::create_dir_all(dir.join("kernel/security/apparmor")).unwrap();
    std::fs::create_dir_all(dir.join("module/apparmor/parameters")).unwrap();
    std::fs::write(dir.join("module/apparmor/parameters/enabled"), "N\n").unwrap();
    assert!(validate_host(&dir).is_some());
    std::fs::write(dir.join("module/apparmor/parameters/enabled"), "Y\n").unwrap();
    assert_eq!(validate_host(&dir), None);
    let _ = std::fs::remove_dir_all(&dir);
}
