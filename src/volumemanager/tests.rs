use super::*;
use crate::fieldpath::NodeAllocatable;
use crate::util::testing::eventually;
use crate::volume::HostError;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EmptyDirVolumeSource, PodSpec, Secret, Volume,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Default)]
struct FakeHost {
    config_maps: Mutex<HashMap<String, Arc<ConfigMap>>>,
}

impl VolumeHost for FakeHost {
    fn config_map(&self, ns: &str, name: &str) -> Result<Option<Arc<ConfigMap>>, HostError> {
        Ok(self
            .config_maps
            .lock()
            .unwrap()
            .get(&format!("{ns}/{name}"))
            .cloned())
    }
    fn secret(&self, _: &str, _: &str) -> Result<Option<Arc<Secret>>, HostError> {
        Err(HostError::NeedsApiServer("a secret volume"))
    }
    fn service_account_token(&self, _: &Pod, _: &str, _: i64) -> Result<String, HostError> {
        Err(HostError::NeedsApiServer(
            "a serviceAccountToken projection",
        ))
    }
    fn persistent_volume_claim(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<crate::volume::pvc::ClaimBinding>, HostError> {
        Ok(None)
    }
    fn persistent_volume(
        &self,
        _: &str,
    ) -> Result<Option<crate::volume::pvc::PersistentVolumeSource>, HostError> {
        Ok(None)
    }
    fn node_allocatable(&self) -> NodeAllocatable {
        NodeAllocatable::default()
    }
    fn host_ips(&self) -> Vec<String> {
        vec![]
    }
}

fn pod(uid: &str) -> Arc<Pod> {
    let mut p = Pod {
        spec: Some(PodSpec {
            volumes: Some(vec![
                Volume {
                    name: "scratch".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
                Volume {
                    name: "cfg".into(),
                    config_map: Some(ConfigMapVolumeSource {
                        name: "app".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some("p".into());
    p.metadata.namespace = Some("ns".into());
    Arc::new(p)
}

fn config_map(value: &str) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        data: Some(BTreeMap::from([("key".to_string(), value.to_string())])),
        ..Default::default()
    })
}

#[test]
fn waits_for_a_missing_config_map_then_mounts_updates_and_tears_down() {
    let root = std::env::temp_dir().join(format!("rkubelet-vm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let host = Arc::new(FakeHost::default());
    let ready = Arc::new(AtomicUsize::new(0));
    let r = ready.clone();
    let vm = VolumeManager::new(
        host.clone(),
        root.clone(),
        Arc::new(crate::events::LogRecorder),
        Box::new(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        }),
    );
    let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
    let runner = Arc::clone(&vm);
    let (changes, changes_rx) = crossbeam_channel::bounded(1);
    let thread = std::thread::spawn(move || runner.run(&stop_rx, &changes_rx));
    let app_changed = || ObjectRef {
        kind: "ConfigMap",
        namespace: "ns".into(),
        name: "app".into(),
    };

    let p = pod("u1");
    let err = vm
        .wait_for_attach_and_mount(&p, Duration::from_millis(300))
        .unwrap_err();
    assert_eq!(err.unmounted, ["cfg"]);
    assert!(
        err.to_string().contains("configmap \"app\" not found"),
        "{err}"
    );
    let scratch = root.join("pods/u1/volumes/kubernetes.io~empty-dir/scratch");
    assert!(scratch.is_dir(), "the other volume is set up meanwhile");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&scratch).unwrap().permissions().mode() & 0o777,
        0o777
    );

    host.config_maps
        .lock()
        .unwrap()
        .insert("ns/app".into(), config_map("v1"));
    changes.send(app_changed()).unwrap();
    vm.wait_for_attach_and_mount(&p, Duration::from_secs(5))
        .unwrap();
    let file = root.join("pods/u1/volumes/kubernetes.io~configmap/cfg/key");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "v1");
    eventually("the pod re-queued", || ready.load(Ordering::SeqCst) > 0);
    assert_eq!(ready.load(Ordering::SeqCst), 1, "the pod is re-queued once");
    let mounted = vm.get_mounted_volumes_for_pod("u1");
    assert_eq!(mounted["cfg"].host_path, file.parent().unwrap());
    assert!(mounted["cfg"].read_only);

    // An update reaches the file through a remount.
    host.config_maps
        .lock()
        .unwrap()
        .insert("ns/app".into(), config_map("v2"));
    changes.send(app_changed()).unwrap();
    eventually("the remount with v2", || {
        std::fs::read_to_string(&file).unwrap() == "v2"
    });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "v2");

    assert!(vm.remove_pod("u1", Duration::from_secs(5)));
    assert!(!scratch.exists());
    assert!(!file.exists());
    // volumesInUse is unknown until the pods' directories were looked at
    assert_eq!(vm.volumes_in_use(), None);
    vm.cleanup_orphaned_pod_dirs(&HashSet::new());
    assert_eq!(vm.volumes_in_use(), Some(vec![]));
    assert!(!root.join("pods/u1").exists());
    drop(stop_tx);
    thread.join().unwrap();
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn orphaned_dirs_of_active_pods_are_kept() {
    let root = std::env::temp_dir().join(format!("rkubelet-vm-orphan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("pods/keep/volumes/kubernetes.io~empty-dir/a")).unwrap();
    std::fs::create_dir_all(root.join("pods/gone/volumes/kubernetes.io~empty-dir/a")).unwrap();
    std::fs::write(
        root.join("pods/gone/volumes/kubernetes.io~empty-dir/a/f"),
        "x",
    )
    .unwrap();
    let vm = VolumeManager::new(
        Arc::new(FakeHost::default()),
        root.clone(),
        Arc::new(crate::events::LogRecorder),
        Box::new(|_| {}),
    );
    vm.cleanup_orphaned_pod_dirs(&HashSet::from(["keep".to_string()]));
    assert!(root.join("pods/keep").exists());
    assert!(!root.join("pods/gone").exists());
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_orphan_scan_runs_again_when_the_active_pods_change() {
    let root = std::env::temp_dir().join(format!("rkubelet-vm-rescan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("pods/keep")).unwrap();
    let vm = VolumeManager::new(
        Arc::new(FakeHost::default()),
        root.clone(),
        Arc::new(crate::events::LogRecorder),
        Box::new(|_| {}),
    );
    let keep = HashSet::from(["keep".to_string()]);
    vm.cleanup_orphaned_pod_dirs(&keep);
    // Nothing but the kubelet makes a pod directory; this one stands for
    // a pod that came and went between two housekeepings.
    std::fs::create_dir_all(root.join("pods/late")).unwrap();
    vm.cleanup_orphaned_pod_dirs(&keep);
    assert!(
        root.join("pods/late").exists(),
        "the same active set after a clean scan: no new scan yet"
    );
    let changed = HashSet::from(["keep".to_string(), "new".to_string()]);
    vm.cleanup_orphaned_pod_dirs(&changed);
    assert!(!root.join("pods/late").exists(), "scanned again");
    assert!(root.join("pods/keep").exists());
    let _ = std::fs::remove_dir_all(&root);
}
