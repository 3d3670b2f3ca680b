//! The allocator against upstream userns_manager_test.go's cases, on real
//! pod directories under the system temp dir.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A pods directory, removed on drop.
struct PodsDir(PathBuf);

impl PodsDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("rkubelet-userns-{name}-{pid}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        PodsDir(dir)
    }

    fn path(&self) -> PathBuf {
        self.0.clone()
    }

    fn file(&self, pod: &str) -> PathBuf {
        self.0.join(pod).join(MAPPINGS_FILE)
    }

    fn write(&self, pod: &str, body: &str) {
        std::fs::create_dir_all(self.0.join(pod)).unwrap();
        std::fs::write(self.file(pod), body).unwrap();
    }
}

impl Drop for PodsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `blocks` blocks from 65536, as upstream's tests skip the first block.
fn blocks(n: u32) -> IdRange {
    IdRange {
        first: USERNS_LENGTH,
        len: n * USERNS_LENGTH,
    }
}

/// The manager's error, for a pods directory it must refuse.
fn new_err(pods: &PodsDir, range: IdRange) -> UsernsError {
    match UsernsManager::new(pods.path(), range) {
        Ok(_) => panic!("the manager was built"),
        Err(e) => e,
    }
}

/// The file upstream writes for a block at `host`.
fn canonical(host: u32) -> String {
    let m = format!(r#"[{{"hostId":{host},"containerId":0,"length":65536}}]"#);
    format!(r#"{{"uidMappings":{m},"gidMappings":{m}}}"#)
}

fn host_of(m: &Mappings) -> u32 {
    m.uids[0].host_id
}

#[test]
fn allocates_a_distinct_block_per_pod_and_writes_upstreams_json() {
    let pods = PodsDir::new("alloc");
    let m = UsernsManager::new(pods.path(), blocks(4)).unwrap();
    let mut seen = HashSet::new();
    for pod in ["a", "b", "c", "d"] {
        let got = m.get_or_create(pod, true).unwrap().unwrap();
        let host = host_of(&got);
        assert_eq!(got, Mappings::single(host, USERNS_LENGTH));
        assert!(host.is_multiple_of(USERNS_LENGTH));
        assert!((USERNS_LENGTH..5 * USERNS_LENGTH).contains(&host), "{host}");
        assert!(seen.insert(host), "block {host} handed out twice");
        assert_eq!(
            std::fs::read_to_string(pods.file(pod)).unwrap(),
            canonical(host)
        );
        assert_eq!(m.pod_allocated(pod), Some(host));
    }
    // Full: the fifth pod gets nothing, and no file.
    let err = m.get_or_create("e", true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "create user namespace: could not find an empty slot to allocate a user namespace"
    );
    assert!(!pods.file("e").exists());
    assert_eq!(m.pod_allocated("e"), None);
}

#[test]
fn same_pod_gets_the_same_block() {
    let pods = PodsDir::new("same");
    let m = UsernsManager::new(pods.path(), blocks(8)).unwrap();
    let first = m.get_or_create("a", true).unwrap();
    assert_eq!(m.get_or_create("a", true).unwrap(), first);
    assert_eq!(lock(&m.state).used.count(), 1);
}

#[test]
fn host_users_true_or_unset_has_no_mappings_and_no_file() {
    let pods = PodsDir::new("hostusers");
    let m = UsernsManager::new(pods.path(), blocks(2)).unwrap();
    assert_eq!(m.get_or_create("a", false).unwrap(), None);
    assert!(!pods.path().join("a").exists());
}

#[test]
fn a_restart_records_existing_blocks_and_never_hands_them_out_again() {
    let pods = PodsDir::new("restart");
    let (a, b) = {
        let m = UsernsManager::new(pods.path(), blocks(3)).unwrap();
        let a = host_of(&m.get_or_create("a", true).unwrap().unwrap());
        let b = host_of(&m.get_or_create("b", true).unwrap().unwrap());
        (a, b)
    };
    let m = UsernsManager::new(pods.path(), blocks(3)).unwrap();
    assert_eq!(m.pod_allocated("a"), Some(a));
    assert_eq!(m.pod_allocated("b"), Some(b));
    // The file is read back, not reallocated.
    assert_eq!(host_of(&m.get_or_create("a", true).unwrap().unwrap()), a);
    let c = host_of(&m.get_or_create("c", true).unwrap().unwrap());
    assert!(c != a && c != b);
    // Three blocks, three pods: nothing is left.
    assert!(m.get_or_create("d", true).is_err());
}

#[test]
fn release_frees_the_block_and_removes_the_file() {
    let pods = PodsDir::new("release");
    let m = UsernsManager::new(pods.path(), blocks(1)).unwrap();
    let a = host_of(&m.get_or_create("a", true).unwrap().unwrap());
    assert!(m.get_or_create("b", true).is_err());
    m.release("a");
    assert!(!pods.file("a").exists());
    assert!(pods.path().join("a").is_dir(), "only the file goes");
    assert_eq!(m.pod_allocated("a"), None);
    assert_eq!(host_of(&m.get_or_create("b", true).unwrap().unwrap()), a);
    // Releasing a pod without a block does nothing.
    m.release("nobody");
    assert_eq!(m.pod_allocated("b"), Some(a));
}

#[test]
fn a_bad_file_at_start_fails_the_manager_naming_the_pod() {
    let pods = PodsDir::new("badstart");
    pods.write("p1", "not json");
    let err = new_err(&pods, blocks(4));
    let text = err.to_string();
    assert!(
        text.starts_with(
            "record pod mappings for existing pod \"p1\": invalid user namespace mappings file: "
        ),
        "{text}"
    );
    match err {
        UsernsError::RecordExisting { pod, path, .. } => {
            assert_eq!(pod, "p1");
            assert_eq!(path, pods.file("p1"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_file_outside_the_range_or_on_a_taken_block_fails_the_start() {
    let pods = PodsDir::new("range");
    pods.write("p1", &canonical(10 * USERNS_LENGTH));
    let err = new_err(&pods, blocks(4));
    assert_eq!(
        err.to_string(),
        "record pod mappings for existing pod \"p1\": id 655360 is out of range"
    );

    let pods = PodsDir::new("taken");
    pods.write("p1", &canonical(2 * USERNS_LENGTH));
    pods.write("p2", &canonical(2 * USERNS_LENGTH));
    let err = new_err(&pods, blocks(4));
    assert_eq!(
        err.to_string(),
        "record pod mappings for existing pod \"p2\": range picked for pod \"p2\" already taken"
    );
}

#[test]
fn empty_files_and_other_entries_are_not_user_namespaces() {
    let pods = PodsDir::new("empty");
    pods.write("p1", "");
    std::fs::create_dir_all(pods.path().join("p2")).unwrap();
    std::fs::write(pods.path().join("stray-file"), "x").unwrap();
    let m = UsernsManager::new(pods.path(), blocks(2)).unwrap();
    assert_eq!(m.pod_allocated("p1"), None);
    // An empty file is overwritten with a new block.
    let host = host_of(&m.get_or_create("p1", true).unwrap().unwrap());
    assert_eq!(
        std::fs::read_to_string(pods.file("p1")).unwrap(),
        canonical(host)
    );
}

#[test]
fn a_missing_pods_dir_has_nothing_to_record() {
    let pods = PodsDir::new("missing");
    let m = UsernsManager::new(pods.path().join("pods"), blocks(2)).unwrap();
    // The pod directory is created with its parents, as FileStore does.
    let got = m.get_or_create("a", true).unwrap().unwrap();
    assert!(pods.path().join("pods/a/userns").is_file());
    assert_eq!(got.gids, got.uids);
}

#[test]
fn a_bad_file_at_get_or_create_is_a_user_namespace_error() {
    let pods = PodsDir::new("badget");
    let m = UsernsManager::new(pods.path(), blocks(2)).unwrap();
    pods.write(
        "p1",
        r#"{"uidMappings":[{"hostId":131072,"containerId":1,"length":65536}],
            "gidMappings":[{"hostId":131072,"containerId":1,"length":65536}]}"#,
    );
    let err = m.get_or_create("p1", true).unwrap_err();
    assert_eq!(
        err.to_string(),
        "user namespace: invalid user namespace configuration: UID 0 must be mapped"
    );
    assert_eq!(m.pod_allocated("p1"), None);
}

/// Upstream TestUserNsManagerParseUserNsFile, plus Go's lenient decoding.
#[test]
fn parse_checks_as_upstream() {
    let map =
        |h: u32, c: u32, l: u32| format!(r#"{{"hostId":{h},"containerId":{c},"length":{l}}}"#);
    let file = |u: Vec<String>, g: Vec<String>| {
        format!(
            r#"{{"uidMappings":[{}],"gidMappings":[{}]}}"#,
            u.join(","),
            g.join(",")
        )
    };
    let ok = map(131072, 0, 65536);
    let cases = [
        (canonical(131072), None),
        (
            file(vec![map(131072, 0, 0)], vec![map(131072, 0, 0)]),
            Some("wrong user namespace length 0"),
        ),
        (
            file(vec![map(131073, 0, 65536)], vec![map(131073, 0, 65536)]),
            Some("wrong user namespace offset specified 131073"),
        ),
        (
            file(vec![ok.clone()], vec![ok.clone(), map(196608, 0, 65536)]),
            Some("invalid user namespace configuration: GID and UID mappings should be identical."),
        ),
        (
            file(vec![ok.clone(), map(196608, 0, 65536)], vec![ok.clone()]),
            Some("invalid user namespace configuration: no more than one mapping allowed."),
        ),
        (
            file(vec![map(131072, 1, 65536)], vec![map(131072, 1, 65536)]),
            Some("invalid user namespace configuration: UID 0 must be mapped"),
        ),
        (
            file(vec![ok.clone()], vec![map(131072, 1, 65536)]),
            Some("invalid user namespace configuration: GID and UID mapping should be identical"),
        ),
        (
            "null".to_string(),
            Some("invalid user namespace configuration: no more than one mapping allowed."),
        ),
        (
            format!(r#"{{"uidMappings":[{ok}],"gidMappings":null}}"#),
            Some("invalid user namespace configuration: GID and UID mappings should be identical."),
        ),
    ];
    let pods = PodsDir::new("parse");
    let m = UsernsManager::new(pods.path(), blocks(2000)).unwrap();
    for (i, (body, want)) in cases.iter().enumerate() {
        let pod = format!("pod-{i}");
        let got = m.parse_and_record(&mut lock(&m.state), &pod, body.as_bytes());
        match (got, want) {
            (Ok(_), None) => {}
            (Err(e), Some(w)) => assert_eq!(e.to_string(), *w, "case {i}"),
            (got, _) => panic!("case {i}: {got:?}"),
        }
    }
}

/// Upstream TestUserNsManagerAllocate's record checks and TestRecordBounds.
#[test]
fn record_accepts_the_same_block_again_and_refuses_others() {
    let pods = PodsDir::new("record");
    let m = UsernsManager::new(pods.path(), blocks(1)).unwrap();
    let mut state = lock(&m.state);
    m.record(&mut state, "a", 65536, 65536).unwrap();
    m.record(&mut state, "a", 65536, 65536).unwrap();
    let err = m.record(&mut state, "a", 131072, 65536).unwrap_err();
    assert_eq!(
        err.to_string(),
        "different user namespace range already used by pod \"a\""
    );
    let err = m.record(&mut state, "b", 131072, 65536).unwrap_err();
    assert_eq!(err.to_string(), "id 131072 is out of range");
    let err = m.record(&mut state, "b", 0, 65536).unwrap_err();
    assert_eq!(err.to_string(), "id 0 is out of range");
    assert_eq!(state.used.count(), 1);
}

/// Upstream TestCleanupOrphanedPodUsernsAllocations.
#[test]
fn clean_up_releases_unknown_pods_and_pods_without_a_directory() {
    let pods = PodsDir::new("cleanup");
    let m = UsernsManager::new(pods.path(), blocks(8)).unwrap();
    for pod in ["pod-1", "pod-2", "pod-3"] {
        m.get_or_create(pod, true).unwrap();
    }
    // pod-3's directory goes, though the pod is still known.
    std::fs::remove_dir_all(pods.path().join("pod-3")).unwrap();
    let active: HashSet<String> = ["pod-1", "pod-3"].iter().map(|s| s.to_string()).collect();
    m.clean_up_orphans(&active);
    assert!(m.pod_allocated("pod-1").is_some());
    assert!(pods.file("pod-1").exists());
    assert_eq!(m.pod_allocated("pod-2"), None);
    assert!(!pods.file("pod-2").exists());
    assert_eq!(m.pod_allocated("pod-3"), None);
    assert_eq!(lock(&m.state).used.count(), 1);

    // Nothing on disk and nothing known: every block goes.
    m.clean_up_orphans(&HashSet::new());
    assert_eq!(m.pod_allocated("pod-1"), None);
}

#[test]
fn the_block_reaching_id_2_to_the_32_minus_1_is_never_handed_out() {
    let pods = PodsDir::new("top");
    let top = 65535 * USERNS_LENGTH;
    let range = IdRange {
        first: top,
        len: USERNS_LENGTH,
    };
    let m = UsernsManager::new(pods.path(), range).unwrap();
    assert!(m.get_or_create("a", true).is_err());
    // An upstream-written file naming it is still recorded.
    pods.write("b", &canonical(top));
    let got = m.get_or_create("b", true).unwrap().unwrap();
    assert_eq!(host_of(&got), top);

    // The default range: 65535 blocks, the last one withheld.
    let m = UsernsManager::new(pods.path().join("x"), IdRange::default_range()).unwrap();
    assert_eq!((m.off, m.blocks, m.allocatable_blocks()), (1, 65535, 65534));
}

#[test]
fn bitmap_scans_from_the_start_and_wraps() {
    let mut b = bitmap::Bitmap::new(130);
    assert_eq!(b.allocate_next(130, 128), Some(128));
    assert_eq!(b.allocate_next(130, 129), Some(129));
    assert_eq!(b.allocate_next(130, 129), Some(0));
    assert!(b.has(0) && !b.has(1) && !b.has(500));
    assert!(!b.allocate(0));
    b.release(0);
    b.release(0);
    assert_eq!(b.count(), 2);
    assert_eq!(b.allocate_next(2, 1), Some(1));
    assert_eq!(b.allocate_next(2, 0), Some(0));
    assert_eq!(b.allocate_next(2, 0), None);
    assert_eq!(b.allocate_next(0, 0), None);
}
