//! `hostUsers: false` against a runtime's CRI Status (the handler lists a
//! fake runtime answers): refused where no handler supports user
//! namespaces, its own ID block where one does, and the sandbox config
//! carrying it to the runtime.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::*;
use crate::userns::{IdRange, UsernsManager, MAPPINGS_FILE};

fn pod(uid: &str, host_users: Option<bool>) -> Pod {
    let mut p = Pod {
        spec: Some(PodSpec {
            host_users,
            containers: vec![Container {
                name: "c".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    p.metadata.name = Some(uid.into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some(uid.into());
    p
}

fn runc(userns: bool) -> Vec<api::RuntimeHandler> {
    vec![api::RuntimeHandler {
        name: String::new(),
        features: Some(api::RuntimeHandlerFeatures {
            user_namespaces: userns,
            ..Default::default()
        })
        .into(),
        ..Default::default()
    }]
}

fn pods_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "rkubelet-sandbox-userns-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("pods dir");
    dir
}

fn manager(dir: &std::path::Path) -> UsernsManager {
    UsernsManager::with_max_pods(dir.to_path_buf(), IdRange::default_range(), 110)
        .expect("the default range")
}

#[test]
fn pods_without_host_users_false_never_ask_the_runtime() {
    for host_users in [None, Some(true)] {
        let asked = || -> Result<Vec<api::RuntimeHandler>, String> {
            panic!("the runtime was asked for a pod in the node's user namespace")
        };
        assert_eq!(
            user_namespace_for(&pod("p", host_users), asked, "", None),
            Ok(None)
        );
    }
    // Said explicitly to the runtime: the node's user namespace.
    let ns = namespace_options(&pod("p", None), None);
    let userns = ns.userns_options.as_ref().expect("userns_options");
    assert_eq!(
        userns.mode.enum_value_or_default(),
        api::NamespaceMode::NODE
    );
    assert!(userns.uids.is_empty() && userns.gids.is_empty());
}

#[test]
fn a_runtime_without_user_namespaces_refuses_with_upstreams_message() {
    let dir = pods_dir("refused");
    let m = manager(&dir);
    let p = pod("p", Some(false));
    for handlers in [Vec::new(), runc(false)] {
        assert_eq!(
            user_namespace_for(&p, || Ok(handlers.clone()), "", Some(&m)),
            Err(USERNS_UNSUPPORTED.to_string())
        );
    }
    assert!(
        !dir.join("p").join(MAPPINGS_FILE).exists(),
        "no block for a refused pod"
    );
    let e = user_namespace_for(&p, || Err("connection refused".into()), "", Some(&m));
    assert_eq!(e, Err("connection refused".to_string()));
}

#[test]
fn a_supporting_runtime_gives_each_pod_its_own_block_in_the_sandbox_config() {
    let dir = pods_dir("supported");
    let m = manager(&dir);
    let (a, b) = (pod("a", Some(false)), pod("b", Some(false)));
    let ma = user_namespace_for(&a, || Ok(runc(true)), "", Some(&m))
        .expect("supported")
        .expect("a block");
    let mb = user_namespace_for(&b, || Ok(runc(true)), "", Some(&m))
        .expect("supported")
        .expect("a block");
    let (ua, ub) = (ma.uids[0], mb.uids[0]);
    assert_eq!((ua.container_id, ua.length), (0, 65536));
    assert!(ua.host_id >= 65536 && ua.host_id % 65536 == 0, "{ua:?}");
    assert_ne!(ua.host_id, ub.host_id, "two pods share a block");
    assert_eq!(ma.uids, ma.gids);
    // The same block again, and after a restart of the kubelet.
    let again = user_namespace_for(&a, || Ok(runc(true)), "", Some(&m));
    assert_eq!(again, Ok(Some(ma.clone())));
    let restarted = manager(&dir);
    assert_eq!(
        restarted.get_or_create("a", true).ok().flatten(),
        Some(ma.clone())
    );
    let c = restarted
        .get_or_create("c", true)
        .ok()
        .flatten()
        .expect("a block for c");
    assert!(![ua.host_id, ub.host_id].contains(&c.uids[0].host_id));

    let cfg = RuntimeManagerConfig::for_tests();
    let config = generate_sandbox_config(&a, 0, &cfg, Some(&ma));
    let ns = config
        .linux
        .security_context
        .namespace_options
        .as_ref()
        .expect("namespace options");
    let userns = ns.userns_options.as_ref().expect("userns_options");
    assert_eq!(userns.mode.enum_value_or_default(), api::NamespaceMode::POD);
    let host_ids: Vec<u32> = userns.uids.iter().map(|m| m.host_id).collect();
    assert_eq!(host_ids, [ua.host_id]);
    assert_eq!(userns.uids[0].length, 65536);
    assert_eq!(userns.gids.len(), 1);
}

#[test]
fn without_an_allocator_the_pod_is_refused() {
    let e = user_namespace_for(&pod("p", Some(false)), || Ok(runc(true)), "", None);
    assert_eq!(e, Err(USERNS_NO_ALLOCATOR.to_string()));
}

#[test]
fn a_containers_mounts_carry_its_pods_id_mappings() {
    let dir = pods_dir("mounts");
    let m = manager(&dir);
    let p = pod("p", Some(false));
    let mappings = m.get_or_create("p", true).ok().flatten().expect("a block");
    let ns = namespace_options(&p, Some(&mappings));
    let mounts = map_mount_ids(
        vec![api::Mount {
            container_path: "/var/run/secrets".into(),
            ..Default::default()
        }],
        &ns,
    );
    let host_ids: Vec<u32> = mounts[0].uid_mappings.iter().map(|m| m.host_id).collect();
    assert_eq!(host_ids, [mappings.uids[0].host_id]);
    assert_eq!(mounts[0].gid_mappings.len(), 1);
    // In the node's user namespace, mounts stay unmapped.
    let plain = map_mount_ids(vec![api::Mount::default()], &namespace_options(&p, None));
    assert!(plain[0].uid_mappings.is_empty() && plain[0].gid_mappings.is_empty());
}
