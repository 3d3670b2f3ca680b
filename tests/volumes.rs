//! Volumes end to end: the real rkubelet with --kubeconfig against the API
//! server double and a private containerd per test, as tests/cluster.rs.
//! What containers see is checked from inside them: each test container
//! copies what it reads into an emptyDir the test reads on the host.
//!
//! Test numbers (bridge, subnet, ports) 41..=46.
//!
//!     cargo test --release --test volumes -- --test-threads=2

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// What volume tests add to the shared cluster.
trait VolumeCluster {
    fn pod_dir(&self, pod: &Value) -> PathBuf;
    fn seen(&self, pod: &Value, file: &str) -> Option<String>;
    fn create(&self, path: &str, obj: Value) -> Value;
}

impl VolumeCluster for Cluster {
    fn pod_dir(&self, pod: &Value) -> PathBuf {
        self.env.root.join("pods").join(uid(pod))
    }

    /// The file a test container copied into its `out` emptyDir.
    fn seen(&self, pod: &Value, file: &str) -> Option<String> {
        seen_in(&self.env.root, pod, file)
    }

    fn create(&self, path: &str, obj: Value) -> Value {
        self.api.must("POST", path, Some(&obj), &[201])
    }
}

fn seen_in(root: &Path, pod: &Value, file: &str) -> Option<String> {
    let p = root
        .join("pods")
        .join(uid(pod))
        .join("volumes/kubernetes.io~empty-dir/out")
        .join(file);
    fs::read_to_string(p).ok()
}

/// Mount points under `dir`, from /proc/self/mountinfo.
fn mounts_under(dir: &Path) -> Vec<(String, String)> {
    let prefix = dir.display().to_string();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let point = f.get(4)?.to_string();
            let dash = f.iter().position(|x| *x == "-")?;
            let fstype = f.get(dash + 1)?.to_string();
            point.starts_with(&prefix).then_some((point, fstype))
        })
        .collect()
}

fn pod_with(name: &str, script: &str, volumes: Value, mounts: Value) -> Value {
    let mut p = api_pod(name, script);
    let mut vols = volumes.as_array().cloned().unwrap_or_default();
    vols.push(json!({"name": "out", "emptyDir": {}}));
    let mut ms = mounts.as_array().cloned().unwrap_or_default();
    ms.push(json!({"name": "out", "mountPath": "/out"}));
    p["spec"]["volumes"] = Value::Array(vols);
    p["spec"]["containers"][0]["volumeMounts"] = Value::Array(ms);
    p
}

/// A shell loop that keeps copying `cmds`' output to /out, so updates show.
fn copier(cmds: &str) -> String {
    format!("trap 'exit 0' TERM; while true; do {cmds}; sleep 1; done")
}

fn jwt_claims(token: &str) -> Value {
    let part = token.split('.').nth(1).unwrap_or("");
    let mut b64 = part.replace('-', "+").replace('_', "/");
    while !b64.len().is_multiple_of(4) {
        b64.push('=');
    }
    let bytes = base64_decode(&b64).unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// A Deployment's pod as the ServiceAccount admission plugin leaves it:
/// the projected kube-api-access volume (token, ca.crt, namespace) works.
#[test]
fn default_service_account_volume_works() {
    let mut cl = Cluster::new("default_service_account_volume_works", 41);
    cl.start_kubelet();
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = copier(&format!(
        "cat {sa}/token > /out/token; cat {sa}/ca.crt > /out/ca.crt; \
         cat {sa}/namespace > /out/namespace; ls -a {sa} > /out/ls"
    ));
    // No volumes of its own but the test's emptyDir: admission adds the rest.
    let created = cl
        .api
        .create_pod(&pod_with("deploy-like", &script, json!([]), json!([])));
    let vols = created["spec"]["volumes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let access = vols
        .iter()
        .find(|v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kube-api-access-"))
        })
        .unwrap_or_else(|| {
            panic!(
                "the double's ServiceAccount admission added no kube-api-access volume: {created}"
            )
        })
        .clone();
    let p = cl.wait_pod_ready("deploy-like", secs(30));
    let root = cl.env.root.clone();
    let token = cl.eventually(secs(10), "the container copied the token files", |_| {
        seen_in(&root, &p, "ls").and(seen_in(&root, &p, "token").filter(|t| !t.is_empty()))
    });
    let claims = jwt_claims(&token);
    assert_eq!(
        claims["sub"], "system:serviceaccount:default:default",
        "token claims: {claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["pod"]["uid"],
        uid(&created),
        "bound to the pod: {claims}"
    );
    assert_eq!(cl.seen(&p, "namespace").as_deref(), Some("default"));
    let ca = fs::read_to_string(cl.double.dir.join("ca.crt")).unwrap_or_default();
    let seen_ca = cl.seen(&p, "ca.crt").unwrap_or_default();
    assert!(seen_ca.contains("BEGIN CERTIFICATE"), "ca.crt: {seen_ca:?}");
    if !ca.is_empty() {
        assert_eq!(seen_ca.trim(), ca.trim(), "ca.crt is kube-root-ca.crt's");
    }
    let ls = cl.seen(&p, "ls").unwrap_or_default();
    for entry in ["..data", "token", "ca.crt", "namespace"] {
        assert!(ls.lines().any(|l| l == entry), "{entry} missing in {ls:?}");
    }
    // On tmpfs, so the token never touches the disk; mode 0644 (420).
    let dir = cl
        .pod_dir(&p)
        .join("volumes/kubernetes.io~projected")
        .join(access["name"].as_str().unwrap());
    let mounts = mounts_under(&cl.env.root);
    assert!(
        mounts
            .iter()
            .any(|(m, t)| Path::new(m) == dir && t == "tmpfs"),
        "{} is not a tmpfs: {mounts:?}",
        dir.display()
    );
    let mode = fs::metadata(dir.join("token"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644);
    // One TokenRequest, bound to the pod.
    let requests = cl
        .double
        .audit()
        .into_iter()
        .filter(|e| e["resource"] == "serviceaccounts" && e["subresource"] == "token")
        .count();
    assert_eq!(requests, 1, "token requests");

    // Deleting the pod unmounts and removes everything.
    let pod_dir = cl.pod_dir(&p);
    cl.api.must(
        "DELETE",
        &pod_path("deploy-like"),
        Some(&json!({"gracePeriodSeconds": 1})),
        &[200],
    );
    cl.eventually(secs(30), "the pod is gone from the API", |api| {
        api.get_or_gone(&pod_path("deploy-like"))
            .ok()?
            .is_none()
            .then_some(())
    });
    wait_until(secs(10), "the pod directory is removed", || {
        !pod_dir.exists()
    });
    assert!(
        mounts_under(&cl.env.root).is_empty(),
        "{:?}",
        mounts_under(&cl.env.root)
    );
}

/// configMap, secret, downwardAPI, memory emptyDir and env from the
/// downward API, with items, modes, fsGroup and subPath; a ConfigMap update
/// reaches the mounted files (not the subPath one, as upstream).
#[test]
fn content_volumes_items_modes_and_updates() {
    let mut cl = Cluster::new("content_volumes_items_modes_and_updates", 42);
    cl.create(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
               "data": {"greeting": "hello", "other": "x"}}),
    );
    cl.create(
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
               "data": {"password": "czNjcjN0"}}),
    );
    cl.start_kubelet();
    let script = copier(
        "cat /cfg/hi > /out/hi; cat /sub/greeting > /out/sub; cat /sec/password > /out/pw; \
         cat /info/labels > /out/labels; cat /info/cpu > /out/cpu; \
         echo $MEM_MI $POD_NS $NODE > /out/env; echo $HOST_IP > /out/hostip; \
         touch /mem/ok && echo ok > /out/mem",
    );
    let mut p = pod_with(
        "content",
        &script,
        json!([
            {"name": "cfg", "configMap": {"name": "app", "items": [{"key": "greeting", "path": "hi", "mode": 0o600}]}},
            {"name": "whole", "configMap": {"name": "app"}},
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}},
            {"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}}]}},
            {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
            {"name": "absent", "configMap": {"name": "nope", "optional": true}}
        ]),
        json!([
            {"name": "cfg", "mountPath": "/cfg"},
            {"name": "whole", "mountPath": "/sub/greeting", "subPath": "greeting"},
            {"name": "sec", "mountPath": "/sec"},
            {"name": "info", "mountPath": "/info"},
            {"name": "mem", "mountPath": "/mem"},
            {"name": "absent", "mountPath": "/absent"}
        ]),
    );
    p["spec"]["securityContext"] = json!({"fsGroup": 2000});
    p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "250m", "memory": "64Mi"}});
    p["spec"]["containers"][0]["env"] = json!([
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}
    ]);
    cl.api.create_pod(&p);
    let p = cl.wait_pod_ready("content", secs(30));
    let root = cl.env.root.clone();
    cl.eventually(secs(10), "the container copied its files", |_| {
        seen_in(&root, &p, "mem").map(|_| ())
    });
    assert_eq!(cl.seen(&p, "hi").as_deref(), Some("hello"));
    assert_eq!(cl.seen(&p, "sub").as_deref(), Some("hello"));
    assert_eq!(cl.seen(&p, "pw").as_deref(), Some("s3cr3t"));
    assert_eq!(cl.seen(&p, "labels").as_deref(), Some("app=\"content\""));
    assert_eq!(cl.seen(&p, "cpu").as_deref(), Some("250"));
    assert_eq!(cl.seen(&p, "env").as_deref(), Some("64 default node1\n"));
    // Without --node-ip, status.hostIP is the Node's InternalIP, as upstream.
    let node_ip = p["status"]["hostIP"].as_str().unwrap_or("").to_string();
    assert!(!node_ip.is_empty(), "{}", pretty_status(&p));
    assert_eq!(cl.seen(&p, "hostip"), Some(format!("{node_ip}\n")));

    // Modes and fsGroup on the node side, where the container's mounts come from.
    let vols = cl.pod_dir(&p).join("volumes");
    let meta = |rel: &str| fs::metadata(vols.join(rel)).unwrap();
    assert_eq!(
        meta("kubernetes.io~configmap/cfg/hi").mode() & 0o7777,
        0o640,
        "0600 + fsGroup's g+r"
    );
    assert_eq!(
        meta("kubernetes.io~secret/sec/password").mode() & 0o7777,
        0o440
    );
    assert_eq!(meta("kubernetes.io~secret/sec/password").gid(), 2000);
    assert_eq!(meta("kubernetes.io~empty-dir/out").mode() & 0o777, 0o777);
    assert_eq!(
        meta("kubernetes.io~empty-dir/out").mode() & 0o2000,
        0o2000,
        "setgid for fsGroup"
    );
    let mounts = mounts_under(&cl.env.root);
    for tmpfs in ["kubernetes.io~secret/sec", "kubernetes.io~empty-dir/mem"] {
        let dir = vols.join(tmpfs);
        assert!(
            mounts
                .iter()
                .any(|(m, t)| Path::new(m) == dir && t == "tmpfs"),
            "{tmpfs} is not a tmpfs: {mounts:?}"
        );
    }
    assert!(
        !mounts
            .iter()
            .any(|(m, _)| m.contains("kubernetes.io~configmap")),
        "configMaps live on disk: {mounts:?}"
    );

    // An update reaches the mounted file; the subPath keeps the old content.
    cl.api.must(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/app",
        Some(&json!({"data": {"greeting": "bonjour"}})),
        &[200],
    );
    cl.eventually(
        secs(60),
        "the ConfigMap update reaches the container",
        |_| (seen_in(&root, &p, "hi")? == "bonjour").then_some(()),
    );
    // The loop copies `sub` right after `hi`: a read in between finds it
    // truncated, not yet rewritten.
    let sub = cl.eventually(secs(5), "a whole copy of sub", |_| {
        seen_in(&root, &p, "sub").filter(|s| !s.is_empty())
    });
    assert_eq!(sub, "hello", "subPath mounts do not update");
}

/// A pod whose ConfigMap does not exist waits in ContainerCreating with a
/// FailedMount event naming it, and starts once it appears; unsupported
/// PV sources are refused by name; a PVC bound to a hostPath PV works.
#[test]
fn missing_objects_wait_and_persistent_volumes() {
    let mut cl = Cluster::new("missing_objects_wait_and_persistent_volumes", 43);
    cl.start_kubelet();
    let waiting = pod_with(
        "waits",
        &copier("cat /cfg/k > /out/k"),
        json!([{"name": "cfg", "configMap": {"name": "later"}}]),
        json!([{"name": "cfg", "mountPath": "/cfg"}]),
    );
    cl.api.create_pod(&waiting);
    let ev = cl.eventually(
        secs(20),
        "a FailedMount event naming the ConfigMap",
        |api| {
            api.events_for("default", "waits")
                .into_iter()
                .find(|e| e["reason"] == "FailedMount")
        },
    );
    assert_eq!(ev["type"], "Warning");
    let msg = ev["message"].as_str().unwrap_or("");
    assert!(msg.contains("\"later\""), "{msg}");
    let p = cl.api.pod("waits").unwrap();
    assert_eq!(phase(&p), "Pending", "{}", pretty_status(&p));
    let reason = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
    assert_eq!(reason, "ContainerCreating", "{}", pretty_status(&p));

    // A plain pod is not held up meanwhile.
    cl.api.create_pod(&api_pod("plain", SLEEPER));
    cl.wait_pod_ready("plain", secs(20));

    cl.create(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later"}, "data": {"k": "v"}}),
    );
    let p = cl.wait_pod_ready("waits", secs(30));
    let root = cl.env.root.clone();
    cl.eventually(secs(10), "the late ConfigMap's file", |_| {
        (seen_in(&root, &p, "k")? == "v").then_some(())
    });

    // PVC → hostPath PV, mounted read-only as the claim asks.
    let data = cl.env.dir.join("pv-data");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("f"), "persisted").unwrap();
    cl.create(
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "hostPath": {"path": data.display().to_string(), "type": "Directory"}}}),
    );
    cl.create(
        "/apis/storage.k8s.io/v1/csidrivers",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "x.csi.example"}, "spec": {}}),
    );
    cl.create(
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-csi"},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "csi": {"driver": "x.csi.example", "volumeHandle": "h"}}}),
    );
    for (claim, pv) in [("claim", "pv1"), ("csi-claim", "pv-csi")] {
        bound_claim(&cl.api, claim, pv, json!({}));
    }
    cl.api.create_pod(&pod_with(
        "pvc",
        &copier("cat /data/f > /out/f; (touch /data/new 2>/dev/null && echo rw || echo ro) > /out/rw"),
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "claim", "readOnly": true}}]),
        json!([{"name": "data", "mountPath": "/data"}]),
    ));
    let p = cl.wait_pod_ready("pvc", secs(30));
    cl.eventually(secs(10), "the PV's file", |_| {
        (seen_in(&root, &p, "rw")? == "ro\n").then_some(())
    });
    assert_eq!(cl.seen(&p, "f").as_deref(), Some("persisted"));
    cl.api.create_pod(&pod_with(
        "csi",
        SLEEPER,
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "csi-claim"}}]),
        json!([{"name": "data", "mountPath": "/data"}]),
    ));
    let ev = cl.eventually(
        secs(20),
        "a FailedMount event naming the unregistered CSI driver",
        |api| {
            api.events_for("default", "csi")
                .into_iter()
                .find(|e| e["reason"] == "FailedMount")
        },
    );
    let msg = ev["message"].as_str().unwrap_or("");
    assert!(
        msg.contains("driver name x.csi.example not found in the list of registered CSI drivers"),
        "{msg}"
    );

    generic_ephemeral_volume(&mut cl);
}

/// A generic ephemeral volume waits for the claim `<pod>-<volume>`, and is
/// used once the claim the pod owns is bound (this test plays the
/// ephemeral volume controller).
fn generic_ephemeral_volume(cl: &mut Cluster) {
    let eph = cl.api.create_pod(&pod_with(
        "eph",
        &copier("echo scratch > /scratch/written; cat /scratch/written > /out/eph"),
        json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]),
        json!([{"name": "scratch", "mountPath": "/scratch"}]),
    ));
    let ev = cl.eventually(secs(20), "a FailedMount event naming the claim", |api| {
        api.events_for("default", "eph")
            .into_iter()
            .find(|e| e["reason"] == "FailedMount")
    });
    let msg = ev["message"].as_str().unwrap_or("");
    assert!(msg.contains("\"eph-scratch\" not found"), "{msg}");

    let data = cl.env.dir.join("pv-eph");
    fs::create_dir_all(&data).unwrap();
    cl.create(
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-eph"},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "hostPath": {"path": data.display().to_string(), "type": "Directory"}}}),
    );
    let owner = json!([{"apiVersion": "v1", "kind": "Pod", "name": "eph", "uid": uid(&eph),
                        "controller": true, "blockOwnerDeletion": true}]);
    cl.create(
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "eph-scratch", "ownerReferences": owner},
               "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-eph",
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    cl.api.must(
        "PATCH",
        "/api/v1/namespaces/default/persistentvolumeclaims/eph-scratch/status",
        Some(&json!({"status": {"phase": "Bound"}})),
        &[200],
    );
    let p = cl.wait_pod_ready("eph", secs(40));
    let root = cl.env.root.clone();
    cl.eventually(secs(10), "the ephemeral volume's file", |_| {
        (seen_in(&root, &p, "eph")? == "scratch\n").then_some(())
    });
    assert_eq!(
        fs::read_to_string(data.join("written")).ok().as_deref(),
        Some("scratch\n"),
        "the claim's PersistentVolume holds what the pod wrote"
    );
}

/// kill -9 leaves tmpfs mounts behind; a pod deleted meanwhile is torn down
/// after the restart, and no mount under --root-dir outlives its pod.
#[test]
fn teardown_after_kill_and_restart() {
    let mut cl = Cluster::new("teardown_after_kill_and_restart", 44);
    cl.create(
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}}),
    );
    cl.start_kubelet();
    for name in ["keep", "gone"] {
        cl.api.create_pod(&pod_with(
            name,
            SLEEPER,
            json!([{"name": "sec", "secret": {"secretName": "s"}},
                   {"name": "mem", "emptyDir": {"medium": "Memory"}}]),
            json!([{"name": "sec", "mountPath": "/sec"}, {"name": "mem", "mountPath": "/mem"}]),
        ));
    }
    let keep = cl.wait_pod_ready("keep", secs(30));
    let gone = cl.wait_pod_ready("gone", secs(30));
    // secret, memory emptyDir and the admission's kube-api-access: tmpfs each.
    assert_eq!(mounts_under(&cl.pod_dir(&gone)).len(), 3);
    let keep_mounts = mounts_under(&cl.pod_dir(&keep));
    cl.env.kill_kubelet();
    // Deleted while the kubelet is down: nobody waits for it (grace 0).
    cl.api.must(
        "DELETE",
        &pod_path("gone"),
        Some(&json!({"gracePeriodSeconds": 0})),
        &[200],
    );
    cl.start_kubelet();
    let gone_dir = cl.pod_dir(&gone);
    cl.eventually(
        secs(30),
        "the deleted pod's mounts and directory are gone",
        |_| (mounts_under(&gone_dir).is_empty() && !gone_dir.exists()).then_some(()),
    );
    assert_eq!(
        mounts_under(&cl.pod_dir(&keep)),
        keep_mounts,
        "the running pod keeps its volumes"
    );
    let keep = cl.wait_pod_ready("keep", secs(20));
    assert_eq!(keep["status"]["containerStatuses"][0]["restartCount"], 0);
}

/// emptyDir directories are 0777 on disk and on tmpfs, so a container
/// running as a non-root user can write to both (upstream's mode).
#[test]
fn empty_dirs_are_writable_by_non_root() {
    let mut cl = Cluster::new("empty_dirs_are_writable_by_non_root", 45);
    cl.start_kubelet();
    let mut p = pod_with(
        "nonroot",
        &copier(
            "id -u > /out/uid; (touch /disk/f && touch /mem/f && echo ok || echo denied) > /out/w",
        ),
        json!([{"name": "disk", "emptyDir": {}},
               {"name": "mem", "emptyDir": {"medium": "Memory"}}]),
        json!([{"name": "disk", "mountPath": "/disk"}, {"name": "mem", "mountPath": "/mem"}]),
    );
    p["spec"]["securityContext"] = json!({"runAsUser": 1000, "runAsGroup": 1000});
    cl.api.create_pod(&p);
    let p = cl.wait_pod_ready("nonroot", secs(30));
    let root = cl.env.root.clone();
    let w = cl.eventually(secs(10), "the non-root container wrote its result", |_| {
        seen_in(&root, &p, "w")
    });
    assert_eq!(cl.seen(&p, "uid").as_deref(), Some("1000\n"));
    assert_eq!(
        w, "ok\n",
        "a non-root container could not write to its emptyDirs"
    );
}
