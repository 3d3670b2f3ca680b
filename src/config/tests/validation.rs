//! Manifests that fail validation name the file and the field; bad,
//! hidden and duplicate files in a directory.

use super::*;

fn file_error(dir: &TempDir, name: &str, content: &str) -> String {
    let path = write_file(dir, name, content);
    let err = extract_from_file(&path, NODE).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains(&path.display().to_string()),
        "error should name the file: {message}"
    );
    message
}

#[test]
fn validation_errors_name_file_and_field() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    let m = file_error(&dir, "bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n");
    assert!(m.contains("couldn't parse as pod"), "{m}");

    let m = file_error(
        &dir,
        "deploy.yaml",
        &GOOD.replace("kind: Pod", "kind: Deployment"),
    );
    assert!(m.contains("Deployment"), "{m}");

    let m = file_error(
        &dir,
        "v2.yaml",
        &GOOD.replace("apiVersion: v1", "apiVersion: v2"),
    );
    assert!(m.contains("v2"), "{m}");

    let m = file_error(&dir, "nokind.yaml", &GOOD.replace("kind: Pod\n", ""));
    assert!(m.contains("Kind"), "{m}");

    let m = file_error(&dir, "empty.yaml", "");
    assert!(m.contains("empty"), "{m}");

    let m = file_error(
        &dir,
        "noname.yaml",
        &GOOD.replace("  name: web\n", "  labels: {a: b}\n"),
    );
    assert!(m.contains("name is needed"), "{m}");

    let m = file_error(
        &dir,
        "nocontainers.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers: []\n",
    );
    assert!(m.contains("spec.containers: Required value"), "{m}");

    let dup = "apiVersion: v1
kind: Pod
metadata:
  name: dup
spec:
  initContainers:
  - name: c
    image: busybox
  containers:
  - name: c
    image: busybox
";
    let m = file_error(&dir, "dup.yaml", dup);
    assert!(
        m.contains("spec.containers[0].name: Duplicate value: \"c\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "upper.yaml",
        &GOOD.replace("name: nginx", "name: Nginx_1"),
    );
    assert!(
        m.contains("spec.containers[0].name: Invalid value: \"Nginx_1\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "noimage.yaml",
        &GOOD.replace("    image: nginx:1.25\n", ""),
    );
    assert!(
        m.contains("spec.containers[0].image: Required value"),
        "{m}"
    );

    let m = file_error(
        &dir,
        "restart.yaml",
        &GOOD.replace("spec:\n", "spec:\n  restartPolicy: Sometimes\n"),
    );
    assert!(
        m.contains("spec.restartPolicy: Unsupported value: \"Sometimes\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "badname.yaml",
        &GOOD.replace("name: web", "name: Web_App"),
    );
    assert!(m.contains("metadata.name: Invalid value"), "{m}");

    let m = file_error(
        &dir,
        "mount.yaml",
        &GOOD.replace(
            "    ports:",
            "    volumeMounts:\n    - name: missing\n      mountPath: /x\n    ports:",
        ),
    );
    assert!(
        m.contains("volumeMounts[0].name: Not found: \"missing\""),
        "{m}"
    );

    let m = file_error(
        &dir,
        "port.yaml",
        &GOOD.replace("containerPort: 80", "containerPort: 70000"),
    );
    assert!(m.contains("ports[0].containerPort: Invalid value"), "{m}");
}

#[test]
fn directory_skips_bad_and_hidden_files() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    write_file(&dir, "a.yaml", &manifest("alpha", "busybox:1.36"));
    write_file(
        &dir,
        "b-broken.yaml",
        "kind: Pod\napiVersion: v1\nmetadata: {name: broken}\nspec: {containers: []}\n",
    );
    write_file(
        &dir,
        "c.json",
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"gamma"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}"#,
    );
    write_file(&dir, ".hidden.yaml", &manifest("hidden", "busybox"));
    write_file(&dir, ".a.yaml.swp", "garbage");
    fs::create_dir(dir.path().join("sub")).unwrap();
    write_file(&dir, "sub/nested.yaml", &manifest("nested", "busybox"));

    let (pods, errors) = extract_from_dir(dir.path(), NODE).unwrap();
    let names: Vec<&str> = pods.iter().map(|p| p.name()).collect();
    assert_eq!(names, vec!["alpha-node-1", "gamma-node-1"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].0.ends_with("b-broken.yaml"));
    assert!(errors[0].1.contains("b-broken.yaml"), "{}", errors[0].1);
}

#[test]
fn directory_rejects_duplicate_pod_names() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    write_file(&dir, "a.yaml", &manifest("same", "busybox:1"));
    write_file(&dir, "b.yaml", &manifest("same", "busybox:2"));
    let (pods, errors) = extract_from_dir(dir.path(), NODE).unwrap();
    assert_eq!(pods.len(), 1);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].1.contains("duplicate pod name") && errors[0].1.contains("a.yaml"),
        "{:?}",
        errors
    );
}

/// What the API server refuses is refused for static pods too: an
/// unmasked /proc outside the pod's own user namespace, and Bidirectional
/// propagation into an unprivileged container.
#[test]
fn static_pods_get_the_servers_isolation_rules() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    let unmasked = format!("{GOOD}    securityContext: {{procMount: Unmasked}}\n");
    let m = file_error(&dir, "unmasked.yaml", &unmasked);
    assert!(
        m.contains("spec.containers[0].securityContext.procMount: Invalid value: \"Unmasked\": `hostUsers` must be false to use `Unmasked`"),
        "{m}"
    );
    let own_users = unmasked.replace("spec:\n", "spec:\n  hostUsers: false\n");
    let path = write_file(&dir, "ownusers.yaml", &own_users);
    assert!(extract_from_file(&path, NODE).is_ok());

    let bidi = format!(
        "{GOOD}    volumeMounts: [{{name: v, mountPath: /v, mountPropagation: Bidirectional}}]\n  volumes: [{{name: v, emptyDir: {{}}}}]\n"
    );
    let m = file_error(&dir, "bidi.yaml", &bidi);
    assert!(
        m.contains("spec.containers[0].volumeMounts[0].mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers"),
        "{m}"
    );
    let privileged = bidi.replace(
        "    volumeMounts:",
        "    securityContext: {privileged: true}\n    volumeMounts:",
    );
    let path = write_file(&dir, "privileged.yaml", &privileged);
    assert!(extract_from_file(&path, NODE).is_ok());
}
