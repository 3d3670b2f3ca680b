//! The file source thread: inotify, periodic re-reads, missing paths,
//! shutdown.

use super::*;

#[test]
fn file_source_empty_dir_then_inotify_add_and_delete() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    let (running, rx) = start_file(dir.path(), Duration::from_secs(60));

    let first = recv_within(&rx, Duration::from_secs(2));
    assert_eq!(first.op, PodOperation::Set);
    assert_eq!(first.source, FILE_SOURCE);
    assert!(
        first.pods.is_empty(),
        "an empty directory still yields a snapshot"
    );

    let started = Instant::now();
    write_file(&dir, "web.yaml", GOOD);
    let update = recv_until(&rx, Duration::from_millis(1500), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);
    assert!(started.elapsed() < Duration::from_millis(1500));

    // Hidden files do not trigger a re-read.
    write_file(&dir, ".scratch", "x");
    assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());

    fs::remove_file(dir.path().join("web.yaml")).unwrap();
    recv_until(&rx, Duration::from_millis(1500), |u| u.pods.is_empty());
    running.stop();
}

#[test]
fn file_source_single_file_and_missing_path() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    let path = dir.path().join("only.yaml");
    let (running, rx) = start_file(&path, Duration::from_secs(60));
    let first = recv_within(&rx, Duration::from_secs(2));
    assert!(first.pods.is_empty(), "missing path reads as no pods");

    // Created later: the parent directory watch notices it.
    fs::write(&path, GOOD).unwrap();
    let update = recv_until(&rx, Duration::from_millis(1500), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);

    // Replaced by rename, as editors and config tools do.
    let tmp = write_file(
        &dir,
        ".only.yaml.tmp",
        &GOOD.replace("nginx:1.25", "nginx:1.26"),
    );
    fs::rename(&tmp, &path).unwrap();
    let update = recv_until(&rx, Duration::from_millis(1500), |u| {
        u.pods
            .first()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.containers[0].image.as_deref())
            == Some("nginx:1.26")
    });
    assert_eq!(update.pods.len(), 1);

    // A broken edit of a single manifest keeps the last good state.
    fs::write(&path, "kind: Pod\nmetadata: [").unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(600)).is_err());
    fs::write(&path, GOOD).unwrap();
    let update = recv_until(&rx, Duration::from_millis(1500), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);
    running.stop();
}

#[test]
fn file_source_periodic_reread_and_directory_created_later() {
    let parent = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    let dir = parent.path().join("manifests");
    let (running, rx) = start_file(&dir, Duration::from_millis(300));
    assert!(recv_within(&rx, Duration::from_secs(2)).pods.is_empty());
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("web.yaml"), GOOD).unwrap();
    let update = recv_until(&rx, Duration::from_secs(2), |u| !u.pods.is_empty());
    assert_eq!(names(&update), vec!["web-node-1"]);
    // Periodic snapshots keep coming even without changes.
    let again = recv_within(&rx, Duration::from_secs(2));
    assert_eq!(names(&again), vec!["web-node-1"]);
    running.stop();
}

#[test]
fn file_source_stops_when_shutdown_sender_dropped() {
    let dir = tempfile::TempDir::with_prefix("rkubelet-config-").unwrap();
    let (tx, rx) = bounded(4);
    let (stop, shutdown) = bounded::<()>(1);
    let handle =
        start_file_source(dir.path(), NODE, Duration::from_secs(60), tx, shutdown).unwrap();
    recv_within(&rx, Duration::from_secs(2));
    drop(stop);
    eventually_within("the file source to stop", Duration::from_secs(2), || {
        handle.is_finished()
    });
}
