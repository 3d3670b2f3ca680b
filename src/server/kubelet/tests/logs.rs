//! /containerLogs (tail, since, follow until the container stops or the
//! client leaves) and /logs/ node log files with traversal refused.

use super::*;

const LOG0: &str = "2024-01-01T00:00:00.5Z stdout F old\n";
const LOG1: &str = "\
2024-01-01T00:00:01.000000000Z stdout F one
2024-01-01T00:00:02.000000000Z stderr F two
2024-01-01T00:00:03.000000000Z stdout P par
2024-01-01T00:00:03.100000000Z stdout P ti
2024-01-01T00:00:03.200000000Z stdout F al
2024-01-01T00:00:04.000000000Z stdout F four
";

fn write_logs(f: &Fixture) -> PathBuf {
    let current = container_log_path(&f.host.logs, "default", "web", "uid1", "app", 1);
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    std::fs::write(current.with_file_name("0.log"), LOG0).unwrap();
    std::fs::write(&current, LOG1).unwrap();
    current
}

#[test]
fn container_logs() {
    let f = start_with(Setup {
        restarts: 1,
        ..Setup::default()
    });
    write_logs(&f);
    let logs = |q: &str| get(&f, &format!("/containerLogs/default/web/app{q}"), ADMIN);
    let r = logs("");
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "one\ntwo\npartial\nfour\n")
    );
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(logs("?tailLines=2").body, "al\nfour\n");
    assert_eq!(logs("?tail=1").body, "four\n");
    assert_eq!(logs("?limitBytes=5").body, "one\nt");
    assert_eq!(logs("?previous=true").body, "old\n");
    assert_eq!(
        logs("?sinceTime=2024-01-01T00:00:03Z").body,
        "partial\nfour\n"
    );
    assert_eq!(logs("?stream=Stderr").body, "two\n");
    let ts = logs("?timestamps=true").body;
    assert!(
        ts.starts_with("2024-01-01T00:00:01Z one\n2024-01-01T00:00:02Z two\n"),
        "{ts}"
    );
    assert!(ts.contains("2024-01-01T00:00:03Z partial\n"), "{ts}");

    assert_eq!(logs("?tailLines=abc").status, 400);
    assert_eq!(logs("?tailLines=-1").status, 422);
    assert_eq!(
        logs("?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z").status,
        422
    );
    assert_eq!(
        get(&f, "/containerLogs/default/nope/app", ADMIN).status,
        404
    );
    assert_eq!(
        get(&f, "/containerLogs/default/web/nope", ADMIN).status,
        404
    );
    assert_eq!(get(&f, "/containerLogs/default/web", ADMIN).status, 404);
    assert_eq!(
        get(&f, "/containerLogs/default/web/app?x=%zz", ADMIN).status,
        400
    );
}

#[test]
fn container_logs_follow_until_the_container_stops() {
    let f = start_with(Setup::default());
    let current = container_log_path(&f.host.logs, "default", "web", "uid1", "app", 0);
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    std::fs::write(&current, "2024-01-01T00:00:01Z stdout F first\n").unwrap();
    let host = f.host.clone();
    let path = current.clone();
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        for i in 0..3 {
            std::thread::sleep(Duration::from_millis(150));
            writeln!(file, "2024-01-01T00:00:0{}Z stdout F line{i}", i + 2).unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        host.running.store(false, Ordering::SeqCst);
    });
    let t0 = Instant::now();
    let r = get(&f, "/containerLogs/default/web/app?follow=true", ADMIN);
    writer.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "first\nline0\nline1\nline2\n");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "ended after the container stopped"
    );
}

#[test]
fn follow_ends_when_the_client_goes_away() {
    let f = start_with(Setup::default());
    let current = container_log_path(&f.host.logs, "default", "web", "uid1", "app", 0);
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    std::fs::write(&current, "2024-01-01T00:00:01Z stdout F first\n").unwrap();
    let mut s = tls_stream(f.started.secure, client_config(&f, &ADMIN));
    s.write_all(
        request_text("GET", "/containerLogs/default/web/app?follow=1", &ADMIN, "").as_bytes(),
    )
    .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    drop(s);
    let t0 = Instant::now();
    while f.started.servers[0].active_connections() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "follower still running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn node_logs_and_traversal() {
    let f = start_with(Setup::default());
    let varlog = f.dir.path().join("varlog");
    std::fs::create_dir_all(varlog.join("pods")).unwrap();
    std::fs::write(varlog.join("syslog"), "hello syslog\n").unwrap();
    std::fs::write(f.dir.path().join("secret"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(f.dir.path().join("secret"), varlog.join("escape")).unwrap();

    let r = get(&f, "/logs/", ADMIN);
    assert_eq!(r.status, 200);
    assert!(r.body.contains("<a href=\"pods/\">pods/</a>"), "{}", r.body);
    assert!(
        r.body.contains("<a href=\"syslog\">syslog</a>"),
        "{}",
        r.body
    );
    let r = get(&f, "/logs/syslog", ADMIN);
    assert_eq!((r.status, r.body.as_str()), (200, "hello syslog\n"));
    assert_eq!(
        get(&f, "/logs/pods", ADMIN).header("location"),
        Some("pods/")
    );
    assert_eq!(get(&f, "/logs/../secret", ADMIN).status, 400);
    assert_eq!(get(&f, "/logs/%2e%2e/secret", ADMIN).status, 400);
    assert_eq!(get(&f, "/logs/pods/..%2f..%2fsecret", ADMIN).status, 400);
    let r = get(&f, "/logs/escape", ADMIN);
    assert_eq!(r.status, 404);
    assert!(!r.body.contains("secret"));
    assert_eq!(get(&f, "/logs/missing", ADMIN).status, 404);
}
