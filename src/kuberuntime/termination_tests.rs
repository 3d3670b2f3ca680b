use std::collections::HashSet;
use std::path::PathBuf;

use tempfile::TempDir;

use super::*;

/// Writes `content` to `name` under `dir`; the file's path.
fn file(dir: &TempDir, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p
}

fn status(msg_file: &Path, log: &Path, policy: &str, exit_code: i32) -> api::ContainerStatus {
    api::ContainerStatus {
        id: "c1".into(),
        exit_code,
        annotations: [
            (
                labels::TERMINATION_MESSAGE_PATH_ANNOTATION.to_string(),
                "/dev/termination-log".to_string(),
            ),
            (
                labels::TERMINATION_MESSAGE_POLICY_ANNOTATION.to_string(),
                policy.to_string(),
            ),
        ]
        .into(),
        mounts: vec![
            api::Mount {
                container_path: "/etc/hosts".into(),
                host_path: "/nonexistent/hosts".into(),
                ..Default::default()
            },
            api::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: msg_file.to_string_lossy().into_owned(),
                ..Default::default()
            },
        ],
        log_path: log.to_string_lossy().into_owned(),
        ..Default::default()
    }
}

fn cri_log(lines: &[&str]) -> Vec<u8> {
    lines
        .iter()
        .map(|l| format!("2024-01-01T00:00:01.000000000Z stdout F {l}\n"))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn message_file_is_the_message() {
    let d = TempDir::with_prefix("rkubelet-term-file-").unwrap();
    let f = file(&d, "termination-log-0", b"bye");
    let log = file(&d, "0.log", &cri_log(&["noise"]));
    assert_eq!(
        exited_container_message(&status(&f, &log, "File", 0)),
        "bye"
    );
    // The file wins over the logs even on failure.
    let s = status(&f, &log, "FallbackToLogsOnError", 1);
    assert_eq!(exited_container_message(&s), "bye");
}

#[test]
fn message_file_keeps_its_last_4096_bytes() {
    let d = TempDir::with_prefix("rkubelet-term-long-").unwrap();
    let mut content = vec![b'a'; 100];
    content.extend(vec![b'b'; 4096]);
    let f = file(&d, "termination-log-0", &content);
    let m = exited_container_message(&status(&f, Path::new("/nonexistent"), "File", 0));
    assert_eq!(m.len(), 4096);
    assert!(m.bytes().all(|b| b == b'b'), "the tail is kept");
}

#[test]
fn fallback_to_logs_on_error() {
    let d = TempDir::with_prefix("rkubelet-term-fallback-").unwrap();
    let f = file(&d, "termination-log-0", b"");
    let lines: Vec<String> = (1..=100).map(|i| format!("line {i}")).collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let log = file(&d, "0.log", &cri_log(&refs));
    let m = exited_container_message(&status(&f, &log, "FallbackToLogsOnError", 1));
    let want: String = (21..=100).map(|i| format!("line {i}\n")).collect();
    assert_eq!(m, want, "the last 80 lines");

    // At most 2048 bytes, from the end.
    let long: Vec<String> = (0..80)
        .map(|i| format!("{i:03}{}", "x".repeat(60)))
        .collect();
    let refs: Vec<&str> = long.iter().map(String::as_str).collect();
    let log = file(&d, "1.log", &cri_log(&refs));
    let m = exited_container_message(&status(&f, &log, "FallbackToLogsOnError", 2));
    assert_eq!(m.len(), MAX_TERMINATION_MESSAGE_LOG_LENGTH);
    assert!(m.ends_with(&format!("079{}\n", "x".repeat(60))));
}

#[test]
fn no_fallback_on_success_or_file_policy() {
    let d = TempDir::with_prefix("rkubelet-term-nofallback-").unwrap();
    let f = file(&d, "termination-log-0", b"");
    let log = file(&d, "0.log", &cri_log(&["printed"]));
    assert_eq!(
        exited_container_message(&status(&f, &log, "FallbackToLogsOnError", 0)),
        ""
    );
    assert_eq!(exited_container_message(&status(&f, &log, "File", 1)), "");
    // A container that could not run has no logs to fall back to.
    let mut s = status(&f, &log, "FallbackToLogsOnError", 128);
    s.reason = "ContainerCannotRun".into();
    assert_eq!(exited_container_message(&s), "");
}

#[test]
fn missing_file_falls_back_and_missing_mount_too() {
    let d = TempDir::with_prefix("rkubelet-term-missing-").unwrap();
    let log = file(&d, "0.log", &cri_log(&["boom"]));
    let gone = d.path().join("gone");
    let s = status(&gone, &log, "FallbackToLogsOnError", 1);
    assert_eq!(exited_container_message(&s), "boom\n");
    let mut s = status(&gone, &log, "FallbackToLogsOnError", 1);
    s.mounts.clear();
    assert_eq!(exited_container_message(&s), "boom\n");
    assert_eq!(
        exited_container_message(&status(&gone, &log, "File", 1)),
        ""
    );
}

#[test]
fn unreadable_file_and_log_are_reported() {
    let d = TempDir::with_prefix("rkubelet-term-unreadable-").unwrap();
    // A directory where the file should be: reading it fails.
    let s = status(
        d.path(),
        Path::new("/nonexistent"),
        "FallbackToLogsOnError",
        1,
    );
    let m = exited_container_message(&s);
    assert!(m.starts_with("Error on reading termination log "), "{m}");
    let f = file(&d, "termination-log-0", b"");
    let s = status(&f, &d.path().join("no.log"), "FallbackToLogsOnError", 1);
    let m = exited_container_message(&s);
    assert!(
        m.starts_with("Error on reading termination message from logs: "),
        "{m}"
    );
}

#[test]
fn runtime_message_comes_first() {
    let d = TempDir::with_prefix("rkubelet-term-runtime-").unwrap();
    let f = file(&d, "termination-log-0", b"bye");
    let mut s = status(&f, Path::new("/nonexistent"), "File", 137);
    s.message = "OOMKilled".into();
    assert_eq!(exited_container_message(&s), "OOMKilled: bye");
    let empty = file(&d, "empty", b"");
    let mut s = status(&empty, Path::new("/nonexistent"), "File", 137);
    s.message = "OOMKilled".into();
    assert_eq!(exited_container_message(&s), "OOMKilled");
}

#[test]
fn cache_reads_each_instance_once() {
    let d = TempDir::with_prefix("rkubelet-term-cache-").unwrap();
    let f = file(&d, "termination-log-0", b"first");
    let s = status(&f, Path::new("/nonexistent"), "File", 0);
    let cache = TerminationMessages::default();
    assert_eq!(cache.message("pod", &s), "first");
    std::fs::write(&f, b"second").unwrap();
    assert_eq!(cache.message("pod", &s), "first", "cached by container ID");
    assert_eq!(cache.cached(), 1);
    cache.retain("pod", &HashSet::from(["c1"]));
    assert_eq!(cache.cached(), 1);
    cache.retain("pod", &HashSet::new());
    assert_eq!(cache.cached(), 0, "gone containers are forgotten");
    assert_eq!(cache.message("pod", &s), "second");
    cache.forget_pod("pod");
    assert_eq!(cache.cached(), 0);
}

/// upstream setTerminationGracePeriod: a deleted pod's grace wins, then
/// the failed probe's own, then the pod's; never under 2 s.
#[test]
fn probe_grace_replaces_the_pods_unless_deleted() {
    use crate::kuberuntime::actions::ContainerToKill;
    let mut pod = k8s_openapi::api::core::v1::Pod {
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            termination_grace_period_seconds: Some(600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let kill = |probe_grace| ContainerToKill {
        id: "c1".into(),
        name: "c".into(),
        reason: String::new(),
        probe_grace,
    };
    assert_eq!(
        crate::kuberuntime::container_kill_grace(&pod, &kill(Some(10))),
        10
    );
    assert_eq!(
        crate::kuberuntime::container_kill_grace(&pod, &kill(Some(0))),
        2
    );
    assert_eq!(
        crate::kuberuntime::container_kill_grace(&pod, &kill(None)),
        600
    );
    pod.metadata.deletion_grace_period_seconds = Some(30);
    assert_eq!(
        crate::kuberuntime::container_kill_grace(&pod, &kill(Some(10))),
        30
    );
}
