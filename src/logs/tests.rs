use super::*;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use tempfile::TempDir;

/// Behaves like containerd's ReopenContainerLog: creates a fresh log file.
struct FakeRuntime {
    path: PathBuf,
    calls: Mutex<Vec<String>>,
    fail: AtomicBool,
}

impl LogRuntime for FakeRuntime {
    fn reopen_log(&self, id: &str) -> Result<(), String> {
        self.calls.lock().unwrap().push(id.to_string());
        if self.fail.load(Ordering::SeqCst) {
            return Err("injected".into());
        }
        fs::File::create(&self.path)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

fn setup(
    tag: &str,
    size: usize,
    max_files: usize,
) -> (TempDir, PathBuf, Arc<FakeRuntime>, Arc<LogManager>) {
    let dir = TempDir::with_prefix(format!("rkubelet-logs-{tag}-")).unwrap();
    let log = dir.path().join("0.log");
    fs::write(&log, vec![b'x'; size]).unwrap();
    let rt = Arc::new(FakeRuntime {
        path: log.clone(),
        calls: Mutex::new(Vec::new()),
        fail: AtomicBool::new(false),
    });
    let cfg = LogConfig {
        max_size: 100,
        max_files,
        monitor_interval: Duration::from_millis(10),
    };
    let l = log.clone();
    let mgr = LogManager::new(
        rt.clone(),
        cfg,
        Box::new(move || vec![("c1".to_string(), l.clone())]),
    );
    (dir, log, rt, mgr)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn is_ts(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 15
        && b[8] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 8 || c.is_ascii_digit())
}

#[test]
fn below_threshold_is_left_alone() {
    let (dir, _log, rt, mgr) = setup("small", 99, 5);
    mgr.rotate_once();
    assert_eq!(names(dir.path()), vec!["0.log"]);
    assert!(rt.calls.lock().unwrap().is_empty());
}

#[test]
fn over_threshold_rotates_with_upstream_name_and_reopens() {
    let (dir, log, rt, mgr) = setup("rotate", 100, 5);
    mgr.rotate_once();
    assert_eq!(*rt.calls.lock().unwrap(), vec!["c1".to_string()]);
    let n = names(dir.path());
    assert_eq!(n.len(), 2, "{n:?}");
    assert_eq!(n[0], "0.log");
    let ts = n[1].strip_prefix("0.log.").expect("rotated name");
    assert!(is_ts(ts), "{ts}");
    assert_eq!(
        fs::metadata(&log).unwrap().len(),
        0,
        "runtime reopened a fresh file"
    );
    assert_eq!(fs::metadata(dir.path().join(&n[1])).unwrap().len(), 100);
}

#[test]
fn keeps_at_most_max_files_and_compresses_older_rotations() {
    let (dir, _log, rt, mgr) = setup("maxfiles", 500, 5);
    // Older rotations: plain and compressed, plus leftovers of a failed round.
    for ts in ["20200101-000000", "20200102-000000", "20200103-000000"] {
        fs::write(dir.path().join(format!("0.log.{ts}.gz")), b"old").unwrap();
    }
    fs::write(dir.path().join("0.log.20200104-000000"), b"plain rotated").unwrap();
    fs::write(dir.path().join("0.log.20200105-000000"), b"half compressed").unwrap();
    fs::write(dir.path().join("0.log.20200105-000000.gz"), b"gz").unwrap();
    fs::write(dir.path().join("0.log.20200106-000000.tmp"), b"tmp").unwrap();
    // Another container's files are not touched.
    fs::write(dir.path().join("1.log.20200101-000000"), b"other").unwrap();

    mgr.rotate_once();
    assert_eq!(rt.calls.lock().unwrap().len(), 1);
    let n = names(dir.path());
    let mine: Vec<&String> = n.iter().filter(|s| s.starts_with("0.log")).collect();
    // current + max_files-2 older (compressed) + the one rotated now = max_files
    assert_eq!(mine.len(), 5, "{n:?}");
    assert!(n.contains(&"1.log.20200101-000000".to_string()));
    assert!(!n.iter().any(|s| s.ends_with(".tmp")), "{n:?}");
    assert!(
        !n.contains(&"0.log.20200101-000000.gz".to_string()),
        "oldest dropped: {n:?}"
    );
    assert!(
        !n.contains(&"0.log.20200102-000000.gz".to_string()),
        "oldest dropped: {n:?}"
    );
    assert!(n.contains(&"0.log.20200103-000000.gz".to_string()));
    assert!(
        n.contains(&"0.log.20200104-000000.gz".to_string()),
        "compressed: {n:?}"
    );
    assert!(n.contains(&"0.log.20200105-000000.gz".to_string()));
    assert!(!n.contains(&"0.log.20200104-000000".to_string()));
    // The freshly rotated file stays uncompressed.
    let newest = mine
        .iter()
        .find(|s| s.len() == "0.log.".len() + 15)
        .expect("new rotation");
    assert_eq!(fs::metadata(dir.path().join(newest)).unwrap().len(), 500);
    // The compression is real gzip.
    let f = fs::File::open(dir.path().join("0.log.20200104-000000.gz")).unwrap();
    let mut s = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "plain rotated");
}

#[test]
fn failed_reopen_renames_back() {
    let (dir, log, rt, mgr) = setup("reopenfail", 200, 5);
    rt.fail.store(true, Ordering::SeqCst);
    mgr.rotate_once();
    assert_eq!(rt.calls.lock().unwrap().len(), 1);
    assert_eq!(names(dir.path()), vec!["0.log"]);
    assert_eq!(fs::metadata(&log).unwrap().len(), 200);
}

#[test]
fn missing_log_is_recovered_by_reopen() {
    let (dir, log, rt, mgr) = setup("missing", 0, 5);
    fs::remove_file(&log).unwrap();
    mgr.rotate_once();
    assert_eq!(*rt.calls.lock().unwrap(), vec!["c1".to_string()]);
    assert_eq!(names(dir.path()), vec!["0.log"]);
}

#[test]
fn start_rotates_periodically_and_stops() {
    let (dir, _log, rt, mgr) = setup("thread", 150, 5);
    let (tx, rx) = crossbeam_channel::bounded(1);
    let h = mgr.start(rx).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rt.calls.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    tx.send(()).unwrap();
    h.join().unwrap();
    assert!(!rt.calls.lock().unwrap().is_empty());
    assert_eq!(names(dir.path()).len(), 2);
}

#[test]
fn clean_removes_current_and_rotated() {
    let (dir, log, _rt, _mgr) = setup("clean", 10, 5);
    fs::write(dir.path().join("0.log.20200101-000000.gz"), b"x").unwrap();
    fs::write(dir.path().join("0.log.20200102-000000"), b"x").unwrap();
    fs::write(dir.path().join("1.log"), b"x").unwrap();
    clean_logs(&log);
    assert_eq!(names(dir.path()), vec!["1.log"]);
}

#[test]
fn timestamp_layout() {
    let ts = format_timestamp(0);
    assert!(is_ts(&ts), "{ts}");
}

#[test]
fn symlink_naming_and_truncation() {
    let d = Path::new("/var/log/containers");
    assert_eq!(
        symlink_path(d, "web", "prod", "nginx", "containerd://abcdef123456"),
        PathBuf::from("/var/log/containers/web_prod_nginx-abcdef123456.log")
    );
    let long = "p".repeat(300);
    let p = symlink_path(d, &long, "ns", "c", "abcdef");
    let name = p.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(name.len(), 255);
    assert!(name.ends_with(".log"));
    assert_eq!(
        container_id_from_symlink(Path::new("/x/web_prod_nginx-abcdef123456.log")).as_deref(),
        Some("abcdef123456")
    );
    assert_eq!(
        container_id_from_symlink(Path::new("/x/web_prod_nginx-abc.log")),
        None
    );
}

#[test]
fn symlinks_create_remove_and_sweep() {
    let dir = TempDir::with_prefix("rkubelet-logs-symlinks-").unwrap();
    let links = dir.path().join("containers");
    let target = dir.path().join("0.log");
    // No target yet: nothing is created.
    assert_eq!(
        create_symlink(&links, "web", "prod", "app", "aaaaaa111111", &target).unwrap(),
        None
    );
    fs::write(&target, b"hello").unwrap();
    let link = create_symlink(&links, "web", "prod", "app", "aaaaaa111111", &target)
        .unwrap()
        .unwrap();
    assert_eq!(fs::read_link(&link).unwrap(), target);
    assert_eq!(fs::read_to_string(&link).unwrap(), "hello");
    // Re-creating replaces.
    create_symlink(&links, "web", "prod", "app", "aaaaaa111111", &target).unwrap();

    // Two dangling links: one of a running container is kept.
    let gone = dir.path().join("gone.log");
    std::os::unix::fs::symlink(&gone, links.join("a_b_c-bbbbbb222222.log")).unwrap();
    std::os::unix::fs::symlink(&gone, links.join("a_b_c-cccccc333333.log")).unwrap();
    let removed = cleanup_dangling_symlinks(&links, &|id| id == "cccccc333333");
    assert_eq!(removed, 1);
    assert_eq!(
        names(&links),
        vec!["a_b_c-cccccc333333.log", "web_prod_app-aaaaaa111111.log"]
    );

    remove_symlink(&links, "web", "prod", "app", "aaaaaa111111").unwrap();
    remove_symlink(&links, "web", "prod", "app", "aaaaaa111111").unwrap();
    assert_eq!(names(&links), vec!["a_b_c-cccccc333333.log"]);
    assert_eq!(
        cleanup_dangling_symlinks(&dir.path().join("nope"), &|_| false),
        0
    );
}

/// A container's log path is asked once while it keeps running; a
/// container that stopped is forgotten, a failed status is asked again,
/// and one without a log path is left out.
#[test]
fn log_paths_are_asked_once_per_running_container() {
    use std::cell::RefCell;
    let paths = LogPaths::default();
    let asked = RefCell::new(Vec::new());
    let status = |id: &str| {
        asked.borrow_mut().push(id.to_string());
        match id {
            "bad" if asked.borrow().iter().filter(|a| *a == "bad").count() == 1 => {
                Err("unavailable".to_string())
            }
            "nolog" => Ok(String::new()),
            _ => Ok(format!("/logs/{id}/0.log")),
        }
    };
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let sorted = |mut v: Vec<(String, PathBuf)>| {
        v.sort();
        v
    };

    let first = sorted(paths.resolve(ids(&["a", "bad", "nolog"]), status));
    assert_eq!(first, vec![("a".into(), PathBuf::from("/logs/a/0.log"))]);
    let second = sorted(paths.resolve(ids(&["a", "bad", "nolog", "b"]), status));
    assert_eq!(
        second,
        vec![
            ("a".into(), PathBuf::from("/logs/a/0.log")),
            ("b".into(), PathBuf::from("/logs/b/0.log")),
            ("bad".into(), PathBuf::from("/logs/bad/0.log")),
        ]
    );
    // "a" stopped and came back under the same ID: asked again.
    paths.resolve(ids(&["b"]), status);
    paths.resolve(ids(&["a", "b"]), status);
    assert_eq!(*asked.borrow(), ["a", "bad", "nolog", "bad", "b", "a"]);
}
