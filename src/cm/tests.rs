//! The container manager on fake cgroup trees (plain directories under a
//! tempdir standing in for v1 controllers or the v2 unified mount).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tempfile::TempDir;

use super::cgroup_manager::{parse_mountinfo, v1_files, v2_files, Mount, Version};
use super::helpers::ResourceConfig;
use super::*;

const V1_CONTROLLERS: &[&str] = &["cpu", "cpuacct", "cpuset", "memory", "pids", "devices"];

fn fake_v1(t: &TempDir) -> Hierarchies {
    let mut mounts = Vec::new();
    for c in V1_CONTROLLERS {
        let p = t.path().join(c);
        fs::create_dir_all(&p).unwrap();
        if *c == "cpuset" {
            fs::write(p.join("cpuset.cpus"), "0-3\n").unwrap();
            fs::write(p.join("cpuset.mems"), "0\n").unwrap();
        }
        mounts.push(Mount {
            path: p,
            controllers: vec![c.to_string()],
        });
    }
    Hierarchies {
        version: Version::V1,
        mounts,
        fake: true,
    }
}

fn config(driver: Driver, root: &str) -> NodeConfig {
    NodeConfig {
        driver,
        cgroup_root: root.into(),
        limits: PodLimits {
            cfs_quota: true,
            cfs_period_us: 100_000,
            pod_pids_limit: 1024,
        },
        enforce_node_allocatable: vec!["pods".into()],
        system_reserved: [("memory".to_string(), "1Gi".to_string())].into(),
        kube_reserved: [("cpu".to_string(), "500m".to_string())].into(),
        system_reserved_cgroup: String::new(),
        kube_reserved_cgroup: String::new(),
    }
}

const CAPACITY: Capacity = Capacity {
    cpu_milli: 4000,
    memory: 8 << 30,
    pids: Some(32768),
};

fn res(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect(),
    )
    .filter(|m: &BTreeMap<_, _>| !m.is_empty())
}

fn pod(uid: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{uid}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: res(req),
                    limits: res(lim),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn guaranteed(uid: &str) -> Pod {
    pod(uid, &[], &[("cpu", "500m"), ("memory", "64Mi")])
}
fn burstable(uid: &str) -> Pod {
    pod(uid, &[("cpu", "250m")], &[("memory", "128Mi")])
}
fn best_effort(uid: &str) -> Pod {
    pod(uid, &[], &[])
}

fn read(p: &Path) -> String {
    fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
        .trim()
        .to_string()
}

fn started(h: Hierarchies, cfg: NodeConfig, root_dirs: &[PathBuf]) -> ContainerManager {
    for d in root_dirs {
        fs::create_dir_all(d).unwrap();
    }
    let cm = ContainerManager::new(cfg, h, CAPACITY);
    cm.start().unwrap();
    cm
}

#[test]
fn v1_cgroupfs_hierarchy_and_pods() {
    let t = TempDir::with_prefix("rkubelet-cm-v1-").unwrap();
    let h = fake_v1(&t);
    let roots: Vec<PathBuf> = V1_CONTROLLERS
        .iter()
        .map(|c| t.path().join(c).join("rk"))
        .collect();
    // cgroupRoot made with plain mkdir: cpuset's cpus and mems are empty.
    fs::create_dir_all(&roots[2]).unwrap();
    fs::write(roots[2].join("cpuset.cpus"), "\n").unwrap();
    fs::write(roots[2].join("cpuset.mems"), "\n").unwrap();
    let cm = started(h, config(Driver::Cgroupfs, "/rk"), &roots);
    let kp = |c: &str| t.path().join(c).join("rk/kubepods");
    // kubepods: capacity less system and kube reserved (no eviction).
    assert_eq!(
        read(&kp("memory").join("memory.limit_in_bytes")),
        ((7u64) << 30).to_string()
    );
    assert_eq!(read(&kp("cpu").join("cpu.shares")), "3584");
    assert_eq!(read(&kp("pids").join("pids.max")), "32768");
    assert_eq!(read(&kp("cpu").join("besteffort/cpu.shares")), "2");
    assert!(kp("devices").join("burstable").is_dir());
    assert!(!kp("cpuset").join("burstable/cpuset.cpus").exists());

    let g = guaranteed("g-1");
    let b0 = || vec![Arc::new(burstable("b-0"))];
    cm.ensure_pod_cgroup(&g, &b0).unwrap();
    let pg = kp("cpu").join("podg-1");
    assert_eq!(read(&pg.join("cpu.shares")), "512");
    assert_eq!(read(&pg.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(&pg.join("cpu.cfs_period_us")), "100000");
    assert_eq!(
        read(&kp("memory").join("podg-1/memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );
    assert_eq!(read(&kp("pids").join("podg-1/pids.max")), "1024");
    assert_eq!(cm.namer().cgroup_parent(&g), "/rk/kubepods/podg-1");
    // Burstable tier sized for the active pods when a pod cgroup is made.
    assert_eq!(read(&kp("cpu").join("burstable/cpu.shares")), "256");

    let b = burstable("b-1");
    cm.ensure_pod_cgroup(&b, &b0).unwrap();
    let pb = kp("memory").join("burstable/podb-1");
    assert_eq!(
        read(&pb.join("memory.limit_in_bytes")),
        (128u64 << 20).to_string()
    );
    assert!(!kp("cpu").join("burstable/podb-1/cpu.cfs_quota_us").exists());
    assert_eq!(
        cm.namer().cgroup_parent(&b),
        "/rk/kubepods/burstable/podb-1"
    );

    let e = best_effort("e-1");
    cm.ensure_pod_cgroup(&e, &b0).unwrap();
    assert_eq!(read(&kp("cpu").join("besteffort/pode-1/cpu.shares")), "2");

    // An existing pod cgroup is adopted, not rewritten.
    fs::write(pg.join("cpu.shares"), "999").unwrap();
    cm.ensure_pod_cgroup(&g, &b0).unwrap();
    assert_eq!(read(&pg.join("cpu.shares")), "999");

    // Removal reaches every hierarchy, child cgroups (containers) first.
    fs::create_dir_all(kp("devices").join("podg-1/ctr")).unwrap();
    cm.destroy_pod_cgroup("g-1");
    for c in V1_CONTROLLERS {
        assert!(!kp(c).join("podg-1").exists(), "{c}");
    }
}

#[test]
fn orphans_are_removed_only_when_unknown_and_not_running() {
    let t = TempDir::with_prefix("rkubelet-cm-orphans-").unwrap();
    let h = fake_v1(&t);
    let cm = started(h, config(Driver::Cgroupfs, "/"), &[]);
    for p in [guaranteed("keep"), burstable("gone"), best_effort("vols")] {
        cm.ensure_pod_cgroup(&p, &Vec::new).unwrap();
    }
    // Not a pod cgroup: never touched.
    fs::create_dir_all(t.path().join("cpu/kubepods/burstable/other")).unwrap();
    let known: HashSet<String> = ["keep".to_string()].into();
    cm.housekeeping(&known, &|uid| uid == "vols", &[]);
    let kp = t.path().join("memory/kubepods");
    assert!(kp.join("podkeep").is_dir());
    assert!(!kp.join("burstable/podgone").exists());
    assert!(kp.join("besteffort/podvols").is_dir());
    assert!(t.path().join("cpu/kubepods/burstable/other").is_dir());
    // Outside cgroupRoot's kubepods nothing is looked at.
    assert!(t.path().join("cpu/kubepods/burstable").is_dir());

    // An orphan kept for its volumes is looked at again: the scan that
    // kept it did not count as clean.
    cm.housekeeping(&known, &|_| false, &[]);
    assert!(!kp.join("besteffort/podvols").exists());
    // A clean scan is not repeated for the same pods, but a pod cgroup
    // made since, or a pod that left, is scanned for.
    cm.housekeeping(&known, &|_| false, &[]);
    cm.ensure_pod_cgroup(&burstable("brief"), &Vec::new)
        .unwrap();
    cm.housekeeping(&known, &|_| false, &[]);
    assert!(!kp.join("burstable/podbrief").exists());
    cm.housekeeping(&HashSet::new(), &|_| false, &[]);
    assert!(!kp.join("podkeep").exists());
}

/// Under the systemd driver, orphaned pod slices found after a restart are
/// decoded back to their pods' UIDs and removed (the VM tests check the
/// names, values and units with a real systemd; this, the scan, they do
/// not reach). A fake tree has no systemd to ask, so only files move.
#[test]
fn systemd_orphans_decode_to_their_uids() {
    let t = TempDir::with_prefix("rkubelet-cm-systemd-").unwrap();
    let h = fake_v1(&t);
    let cm = started(h, config(Driver::Systemd, "/"), &[]);
    let b = burstable("12ab-34cd");
    cm.ensure_pod_cgroup(&b, &Vec::new).unwrap();
    let parent = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12ab_34cd.slice";
    assert_eq!(cm.namer().cgroup_parent(&b), parent);
    let dir = t.path().join("memory").join(parent.trim_start_matches('/'));
    assert!(dir.is_dir());
    let mut known = HashSet::new();
    known.insert("12ab-34cd".to_string());
    cm.housekeeping(&known, &|_| false, &[]);
    assert!(dir.is_dir(), "a known pod's slice stays");
    cm.housekeeping(&HashSet::new(), &|_| false, &[]);
    assert!(!dir.exists());
}

#[test]
fn unwritable_cgroup_names_path_and_errno() {
    let t = TempDir::with_prefix("rkubelet-cm-fail-").unwrap();
    let h = fake_v1(&t);
    let cm = started(h, config(Driver::Cgroupfs, "/"), &[]);
    // A file where the burstable tier's pod directory should go.
    fs::write(t.path().join("cpu/kubepods/burstable/podbad"), "").unwrap();
    fs::remove_dir_all(t.path().join("memory/kubepods/burstable")).unwrap();
    fs::write(t.path().join("memory/kubepods/burstable"), "").unwrap();
    let e = cm
        .ensure_pod_cgroup(&burstable("bad"), &Vec::new)
        .unwrap_err()
        .to_string();
    assert!(e.contains("memory/kubepods/burstable/podbad"), "{e}");
    assert!(e.contains("ENOTDIR"), "{e}");
    // What was made in the other hierarchies is rolled back, so the next
    // attempt does not adopt a cgroup without limits.
    assert!(!t.path().join("pids/kubepods/burstable/podbad").exists());
}

#[test]
fn missing_cgroup_root_is_a_clear_error() {
    let t = TempDir::with_prefix("rkubelet-cm-noroot-").unwrap();
    let cm = ContainerManager::new(config(Driver::Cgroupfs, "/nope"), fake_v1(&t), CAPACITY);
    let e = cm.start().unwrap_err().to_string();
    assert!(e.contains("cgroupRoot \"/nope\" does not exist"), "{e}");
}

#[test]
fn no_enforcement_caps_at_capacity() {
    let t = TempDir::with_prefix("rkubelet-cm-noenforce-").unwrap();
    let mut cfg = config(Driver::Cgroupfs, "/");
    cfg.enforce_node_allocatable.clear();
    let _cm = started(fake_v1(&t), cfg, &[]);
    assert_eq!(
        read(&t.path().join("memory/kubepods/memory.limit_in_bytes")),
        (8u64 << 30).to_string()
    );
}

#[test]
fn file_names_per_version() {
    let rc = ResourceConfig {
        memory: Some(1 << 20),
        cpu_shares: Some(1024),
        cpu_quota: Some(-1),
        cpu_period: Some(100_000),
        pids_limit: Some(-1),
    };
    let v1: Vec<(&str, &str, String)> = v1_files(&rc);
    assert_eq!(
        v1,
        vec![
            ("cpu", "cpu.shares", "1024".to_string()),
            ("cpu", "cpu.cfs_period_us", "100000".to_string()),
            ("cpu", "cpu.cfs_quota_us", "-1".to_string()),
            ("memory", "memory.limit_in_bytes", "1048576".to_string()),
            ("pids", "pids.max", "max".to_string()),
        ]
    );
    assert_eq!(
        v2_files(&rc),
        vec![
            ("cpu.weight", "39".to_string()),
            ("cpu.max", "max 100000".to_string()),
            ("memory.max", "1048576".to_string()),
            ("pids.max", "max".to_string()),
        ]
    );
    assert!(v2_files(&ResourceConfig::default()).is_empty());
}

#[test]
fn mountinfo_hybrid() {
    let text = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                34 31 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                40 31 0:37 / /sys/fs/cgroup/systemd rw shared:9 - cgroup cgroup rw,xattr,name=systemd\n\
                41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n\
                31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n";
    let m = parse_mountinfo(text);
    assert_eq!(m.len(), 4);
    assert_eq!(m[1].controllers, vec!["cpu", "cpuacct"]);
    assert_eq!(m[2].controllers, vec!["name=systemd"]);
    assert!(m[3].controllers.is_empty());
}

#[test]
fn swap_check() {
    let t = TempDir::with_prefix("rkubelet-cm-swap-").unwrap();
    let p = t.path().join("swaps");
    fs::write(&p, "Filename\tType\tSize\tUsed\tPriority\n").unwrap();
    check_swap(true, &p).unwrap();
    fs::write(
        &p,
        "Filename\tType\tSize\tUsed\tPriority\n/swapfile file 1024 0 -2\n",
    )
    .unwrap();
    let e = check_swap(true, &p).unwrap_err().to_string();
    assert!(e.contains("running with swap on is not supported"), "{e}");
    check_swap(false, &p).unwrap();
}

#[test]
fn driver_names() {
    assert_eq!(Driver::parse("systemd").ok(), Some(Driver::Systemd));
    let e = Driver::parse("cgroupv2").unwrap_err().to_string();
    assert!(e.contains("cgroupv2") && e.contains("cgroupfs"), "{e}");
}

#[test]
fn qos_tier_follows_pods() {
    let t = TempDir::with_prefix("rkubelet-cm-qos-").unwrap();
    let cm = started(fake_v1(&t), config(Driver::Cgroupfs, "/"), &[]);
    let shares = || read(&t.path().join("cpu/kubepods/burstable/cpu.shares"));
    let pods = [
        Arc::new(burstable("a")),
        Arc::new(burstable("b")),
        Arc::new(guaranteed("g")),
    ];
    cm.housekeeping(&HashSet::new(), &|_| false, &pods);
    assert_eq!(shares(), "512");
    cm.housekeeping(&HashSet::new(), &|_| false, &[]);
    assert_eq!(shares(), "2");
}

/// RuntimeConfig's answer maps onto our drivers; a disagreement names
/// both drivers and the runtime's setting to change.
#[test]
fn the_runtime_cgroup_driver_must_match_the_configured_one() {
    use crate::cri::api;
    let answer = |d: api::CgroupDriver| api::RuntimeConfigResponse {
        linux: Some(api::LinuxRuntimeConfiguration {
            cgroup_driver: d.into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    assert_eq!(
        Driver::from_runtime_config(&answer(api::CgroupDriver::SYSTEMD)),
        Some(Driver::Systemd)
    );
    assert_eq!(
        Driver::from_runtime_config(&answer(api::CgroupDriver::CGROUPFS)),
        Some(Driver::Cgroupfs)
    );
    assert_eq!(
        Driver::from_runtime_config(&api::RuntimeConfigResponse::default()),
        None,
        "no linux section: nothing to compare"
    );
    assert!(check_runtime_driver(Driver::Systemd, Driver::Systemd).is_ok());
    let err = check_runtime_driver(Driver::Cgroupfs, Driver::Systemd)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cgroupDriver \"cgroupfs\"")
            && err.contains("\"systemd\"")
            && err.contains("SystemdCgroup"),
        "{err}"
    );
}
