//! Static pod naming, UID stability, and the API defaults applied to pods
//! read from manifests.

use super::*;

#[test]
fn static_pod_name_namespace_and_node() {
    let pod = decode_file("/etc/manifests/web.yaml", GOOD, NODE).unwrap();
    assert_eq!(pod.name(), "web-node-1");
    assert_eq!(pod.namespace(), "default");
    assert_eq!(spec(&pod).node_name.as_deref(), Some(NODE));
    let uid = pod.uid();
    assert_eq!(uid.len(), 32);
    assert!(uid.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(pod.annotation(CONFIG_HASH_ANNOTATION), Some(uid));
    assert_eq!(pod.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
    assert!(is_static_pod(&pod));
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    assert_eq!(phase, Some("Pending"));
}

#[test]
fn static_pod_uid_stability() {
    let path = "/etc/manifests/web.yaml";
    let a = decode_file(path, GOOD, NODE).unwrap();
    let b = decode_file(path, GOOD, NODE).unwrap();
    assert_eq!(a.uid(), b.uid(), "same content, same UID");

    let changed = GOOD.replace("nginx:1.25", "nginx:1.26");
    let c = decode_file(path, &changed, NODE).unwrap();
    assert_ne!(a.uid(), c.uid(), "changed content, new UID");

    let d = decode_file(path, GOOD, "node-2").unwrap();
    assert_ne!(a.uid(), d.uid(), "other node, other UID");

    let e = decode_file("/etc/manifests/other.yaml", GOOD, NODE).unwrap();
    assert_ne!(a.uid(), e.uid(), "other file, other UID");

    // The same pod as JSON, or spelling out a default, hashes the same.
    let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},
        "spec":{"restartPolicy":"Always","containers":[{"name":"nginx","image":"nginx:1.25",
        "ports":[{"containerPort":80,"protocol":"TCP"}]}]}}"#;
    let f = decode_file(path, json, NODE).unwrap();
    assert_eq!(a.uid(), f.uid());

    let g = decode_single_pod(GOOD.as_bytes(), ManifestOrigin::Url("http://x/pods"), NODE).unwrap();
    assert_ne!(a.uid(), g.uid());
    assert_eq!(g.annotation(CONFIG_SOURCE_ANNOTATION), Some("http"));
}

#[test]
fn explicit_uid_and_namespace_are_kept() {
    let yaml = GOOD.replace(
        "  name: web\n",
        "  name: web\n  namespace: kube-system\n  uid: abc\n",
    );
    let pod = decode_file("/m/web.yaml", &yaml, NODE).unwrap();
    assert_eq!(pod.uid(), "abc");
    assert_eq!(pod.namespace(), "kube-system");
}

#[test]
fn pull_policy_defaults() {
    let cases = [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("busybox:1.36", "IfNotPresent"),
        ("busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "IfNotPresent"),
        ("busybox:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "Always"),
        ("host:5000/img", "Always"),
        ("host:5000/img:v2", "IfNotPresent"),
        ("registry.k8s.io/pause:3.10", "IfNotPresent"),
    ];
    for (image, want) in cases {
        assert_eq!(default_pull_policy(image), want, "{image}");
        let pod = decode_file("/m/p.yaml", &manifest("p", image), NODE).unwrap();
        let got = spec(&pod).containers[0].image_pull_policy.as_deref();
        assert_eq!(got, Some(want), "{image}");
    }
    let explicit = manifest("p", "busybox").replace(
        "    image: busybox\n",
        "    image: busybox\n    imagePullPolicy: Never\n",
    );
    let pod = decode_file("/m/p.yaml", &explicit, NODE).unwrap();
    assert_eq!(
        spec(&pod).containers[0].image_pull_policy.as_deref(),
        Some("Never")
    );
}

#[test]
fn api_defaults_applied() {
    let yaml = "apiVersion: v1
kind: Pod
metadata:
  name: full
spec:
  hostNetwork: true
  volumes:
  - name: scratch
  - name: cfg
    hostPath:
      path: /etc/cfg
  initContainers:
  - name: init
    image: busybox:1.36
  containers:
  - name: app
    image: app:v1
    ports:
    - containerPort: 8080
    resources:
      limits:
        cpu: 1
        memory: 64Mi
    livenessProbe:
      httpGet:
        port: 8080
    volumeMounts:
    - name: scratch
      mountPath: /scratch
";
    let pod = decode_file("/m/full.yaml", yaml, NODE).unwrap();
    let s = spec(&pod);
    assert_eq!(s.restart_policy.as_deref(), Some("Always"));
    assert_eq!(s.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(s.termination_grace_period_seconds, Some(30));
    assert_eq!(s.scheduler_name.as_deref(), Some("default-scheduler"));
    assert_eq!(s.enable_service_links, Some(true));
    assert!(s.security_context.is_some());
    let tolerations = s.tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].operator.as_deref(), Some("Exists"));
    assert_eq!(tolerations[0].effect.as_deref(), Some("NoExecute"));
    assert!(tolerations[0].key.is_none());

    for c in s.init_containers.iter().flatten().chain(&s.containers) {
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        assert_eq!(c.termination_message_policy.as_deref(), Some("File"));
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    }
    let app = &s.containers[0];
    let port = &app.ports.as_ref().unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.host_port,
        Some(8080),
        "hostNetwork copies containerPort"
    );
    let requests = app.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("1"));
    assert_eq!(requests.get("memory").map(|q| q.0.as_str()), Some("64Mi"));
    let probe = app.liveness_probe.as_ref().unwrap();
    assert_eq!(
        (
            probe.timeout_seconds,
            probe.period_seconds,
            probe.success_threshold,
            probe.failure_threshold
        ),
        (Some(1), Some(10), Some(1), Some(3))
    );
    let http = probe.http_get.as_ref().unwrap();
    assert_eq!(
        (http.path.as_deref(), http.scheme.as_deref()),
        (Some("/"), Some("HTTP"))
    );

    let volumes = s.volumes.as_ref().unwrap();
    assert!(
        volumes[0].empty_dir.is_some(),
        "a volume with no source is an emptyDir"
    );
    assert_eq!(
        volumes[1].host_path.as_ref().unwrap().type_.as_deref(),
        Some("")
    );
    assert!(volumes[1].empty_dir.is_none());
}

#[test]
fn existing_toleration_not_duplicated() {
    let yaml = GOOD.replace(
        "spec:\n",
        "spec:\n  tolerations:\n  - operator: Exists\n    effect: NoExecute\n    tolerationSeconds: 300\n",
    );
    let pod = decode_file("/m/web.yaml", &yaml, NODE).unwrap();
    let tolerations = spec(&pod).tolerations.as_ref().unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(tolerations[0].toleration_seconds, None);
}
