//! PodConfig: merging each source's snapshots into adds, updates,
//! removals and deletions, and keeping sources apart.

use super::*;

fn api_pod(uid: &str, name: &str, image: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn storage() -> (PodStorage, Arc<Mutex<HashSet<String>>>) {
    let seen = Arc::new(Mutex::new(HashSet::new()));
    (PodStorage::new(Arc::clone(&seen)), seen)
}

fn ops(out: &[PodUpdate]) -> Vec<(PodOperation, Vec<String>)> {
    out.iter()
        .map(|u| (u.op, u.pods.iter().map(|p| p.uid().to_string()).collect()))
        .collect()
}

#[test]
fn merge_add_update_remove_and_noop() {
    let (mut s, seen) = storage();
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("1", "a", "img:1")]),
    );
    assert_eq!(ops(&out), vec![(PodOperation::Add, vec!["1".into()])]);
    assert!(seen.lock().unwrap().contains("file"));
    let added = &out[0].pods[0];
    assert_eq!(added.annotation(CONFIG_SOURCE_ANNOTATION), Some("file"));
    let first_seen = added
        .annotation(CONFIG_FIRST_SEEN_ANNOTATION)
        .unwrap()
        .to_string();

    // Identical snapshot: nothing.
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("1", "a", "img:1")]),
    );
    assert!(out.is_empty(), "{out:?}");

    // Spec change: UPDATE, keeping the first-seen time.
    thread::sleep(Duration::from_millis(2));
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("1", "a", "img:2")]),
    );
    assert_eq!(ops(&out), vec![(PodOperation::Update, vec!["1".into()])]);
    let updated = &out[0].pods[0];
    assert_eq!(
        updated.annotation(CONFIG_FIRST_SEEN_ANNOTATION),
        Some(first_seen.as_str())
    );
    assert_eq!(spec(updated).containers[0].image.as_deref(), Some("img:2"));

    // Label change is an update; a kubelet-local annotation is not.
    let mut labelled = api_pod("1", "a", "img:2");
    labelled.metadata.labels = Some(BTreeMap::from([("k".into(), "v".into())]));
    let out = s.merge("file", PodUpdate::set("file", vec![labelled.clone()]));
    assert_eq!(ops(&out), vec![(PodOperation::Update, vec!["1".into()])]);
    labelled.metadata.annotations = Some(BTreeMap::from([(
        CONFIG_MIRROR_ANNOTATION.into(),
        "x".into(),
    )]));
    assert!(s
        .merge("file", PodUpdate::set("file", vec![labelled.clone()]))
        .is_empty());

    // Pod 1 replaced by pod 2: REMOVE before ADD.
    let out = s.merge(
        "file",
        PodUpdate::set("file", vec![api_pod("2", "b", "img:1")]),
    );
    assert_eq!(
        ops(&out),
        vec![
            (PodOperation::Remove, vec!["1".into()]),
            (PodOperation::Add, vec!["2".into()])
        ]
    );
    assert_eq!(s.merged_state().len(), 1);
}

#[test]
fn merge_first_empty_set_signals_ready() {
    let (mut s, _) = storage();
    let out = s.merge("file", PodUpdate::set("file", vec![]));
    assert_eq!(ops(&out), vec![(PodOperation::Add, vec![])]);
    assert!(s.merge("file", PodUpdate::set("file", vec![])).is_empty());
}

#[test]
fn merge_status_only_reconciles_and_deletion_deletes() {
    let (mut s, _) = storage();
    s.merge("api", PodUpdate::set("api", vec![api_pod("1", "a", "img")]));

    let mut with_status = api_pod("1", "a", "img");
    with_status.status = Some(PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    let out = s.merge("api", PodUpdate::set("api", vec![with_status.clone()]));
    assert_eq!(ops(&out), vec![(PodOperation::Reconcile, vec!["1".into()])]);

    let mut deleting = with_status.clone();
    deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    deleting.metadata.deletion_grace_period_seconds = Some(30);
    let update = PodUpdate {
        pods: vec![Arc::new(deleting)],
        op: PodOperation::Update,
        source: "api".into(),
    };
    let out = s.merge("api", update);
    assert_eq!(ops(&out), vec![(PodOperation::Delete, vec!["1".into()])]);

    // Incremental ADD of another pod leaves the first one alone; REMOVE drops it.
    let add = PodUpdate {
        pods: vec![Arc::new(api_pod("2", "b", "img"))],
        op: PodOperation::Add,
        source: "api".into(),
    };
    assert_eq!(
        ops(&s.merge("api", add)),
        vec![(PodOperation::Add, vec!["2".into()])]
    );
    let remove = PodUpdate {
        pods: vec![Arc::new(api_pod("1", "a", "img"))],
        op: PodOperation::Remove,
        source: "api".into(),
    };
    assert_eq!(
        ops(&s.merge("api", remove)),
        vec![(PodOperation::Remove, vec!["1".into()])]
    );
    assert_eq!(s.merged_state().len(), 1);
}

#[test]
fn merge_drops_duplicate_names_in_one_snapshot() {
    let (mut s, _) = storage();
    let out = s.merge(
        "http",
        PodUpdate::set("http", vec![api_pod("1", "a", "x"), api_pod("2", "a", "y")]),
    );
    assert_eq!(ops(&out), vec![(PodOperation::Add, vec!["1".into()])]);
}

#[test]
fn pod_config_keeps_sources_apart_and_tracks_seen() {
    let config = PodConfig::new();
    let updates = config.updates();
    let file = config.channel(FILE_SOURCE);
    let http = config.channel(HTTP_SOURCE);
    let all = vec![FILE_SOURCE.to_string(), HTTP_SOURCE.to_string()];
    assert!(!config.seen_all_sources(&all));

    // The update's own source field is ignored: the channel decides.
    file.send(PodUpdate::set("bogus", vec![api_pod("f1", "a", "img")]))
        .unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!((u.op, u.source.as_str()), (PodOperation::Add, FILE_SOURCE));
    assert!(!config.seen_all_sources(&all), "http has not delivered yet");

    http.send(PodUpdate::set(HTTP_SOURCE, vec![api_pod("h1", "a", "img")]))
        .unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!((u.op, u.source.as_str()), (PodOperation::Add, HTTP_SOURCE));
    assert_eq!(u.pods[0].uid(), "h1");
    assert!(config.seen_all_sources(&all));
    assert!(
        !config.seen_all_sources(&all[..1]),
        "caller has not seen http yet"
    );

    // An empty file snapshot removes only the file pod.
    file.send(PodUpdate::set(FILE_SOURCE, vec![])).unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!(
        (u.op, u.source.as_str()),
        (PodOperation::Remove, FILE_SOURCE)
    );
    assert_eq!(u.pods[0].uid(), "f1");
    assert!(updates.recv_timeout(Duration::from_millis(200)).is_err());

    // Asking for a source again returns the same channel.
    config
        .channel(FILE_SOURCE)
        .send(PodUpdate::set(FILE_SOURCE, vec![]))
        .unwrap();
    assert!(updates.recv_timeout(Duration::from_millis(200)).is_err());
    assert_eq!(
        config.sources(),
        vec!["file".to_string(), "http".to_string()]
    );
}

#[test]
fn pod_config_with_file_source_end_to_end() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    write_file(&dir, "web.yaml", GOOD);
    let config = PodConfig::new();
    let updates = config.updates();
    let (stop, shutdown) = bounded(1);
    let handle = start_file_source(
        dir.path(),
        NODE,
        Duration::from_millis(200),
        config.channel(FILE_SOURCE),
        shutdown,
    )
    .unwrap();
    let u = recv_within(&updates, Duration::from_secs(2));
    assert_eq!(u.op, PodOperation::Add);
    assert_eq!(names(&u), vec!["web-node-1"]);
    // Periodic identical snapshots produce nothing further.
    assert!(updates.recv_timeout(Duration::from_millis(700)).is_err());
    assert!(config.seen_all_sources(&[FILE_SOURCE.to_string()]));
    Running { handle, stop }.stop();
}
