//! End-to-end tests: the real rkubelet binary against a real, private
//! containerd (tests/harness/containerd.sh) with offline busybox/pause images.
//!
//! Needs root, containerd, runc and the CNI plugins (CI installs them with
//! `make deps`); without them every test fails with a clear message.
//! Each test has its own containerd, bridge (rke<N>), subnet (10.88.<100+N>.0/24)
//! and healthz port (20000+N), so tests can run in parallel:
//!
//!     cargo test --release --test e2e -- --test-threads=2

mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::time::{Duration, Instant};

use common::*;

/// Named as their directory, so that `mod` finds the files in it.
mod e2e {
    use super::*;

    // Images and run-once mode (tests 10, 11, 12, 13).
    mod images_runonce;
}

/// The one log file of `container` of `pod` (any uid) under podLogsDir.
fn pod_log_file(
    env: &Env,
    pod_full: &str,
    container: &str,
    restart: u32,
) -> Option<std::path::PathBuf> {
    let prefix = format!("default_{pod_full}_");
    fs::read_dir(&env.pod_logs)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join(container).join(format!("{restart}.log")))
        .filter(|p| p.is_file())
}

/// `kubelet_runtime_operations_total` of one CRI call, from /metrics.
fn runtime_ops(ro_port: u16, op: &str) -> Option<f64> {
    let series = format!("kubelet_runtime_operations_total{{operation_type=\"{op}\"}} ");
    read_only_text(ro_port, "/metrics")?
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

// 1 -------------------------------------------------------------------------------

#[test]
fn pods_start() {
    let mut env = Env::new("pods_start", 1);
    let web = pod(
        "web",
        vec![ctn("web", &format!("echo hello-from-web; {SLEEPER}"))],
    );
    let db = pod(
        "db",
        vec![ctn("db", &format!("echo hello-from-db; {SLEEPER}"))],
    );
    env.put_pod(&web);
    env.put_pod(&db);
    env.start_kubelet();

    let t0 = Instant::now();
    env.wait_running("web-node1", &["web"], secs(15));
    let snap = env.wait_running(
        "db-node1",
        &["db"],
        secs(15).saturating_sub(t0.elapsed()).max(secs(1)),
    );
    eprintln!("both pods running after {:?}", t0.elapsed());

    env.wait_healthy(secs(5));

    for (p, c) in [("web-node1", "web"), ("db-node1", "db")] {
        let sbs = snap.sandboxes(p);
        assert_eq!(
            sbs.len(),
            1,
            "pod {p}: one sandbox expected:\n{}",
            snap.summary()
        );
        let sb = sbs[0];
        assert!(sb.running, "pod {p}: sandbox not running");
        assert_eq!(sb.label("io.kubernetes.pod.namespace"), Some("default"));
        assert!(
            !sb.pod_uid().is_empty(),
            "pod {p}: sandbox has no pod uid label"
        );
        assert_eq!(
            sb.label("app"),
            Some(&p[..p.find('-').unwrap()]),
            "pod labels on the sandbox"
        );
        let ctr = snap.running(p, c).unwrap();
        assert_eq!(
            ctr.pod_uid(),
            sb.pod_uid(),
            "container and sandbox of {p} carry the same uid"
        );
        assert_eq!(ctr.restart_count(), Some(0));

        // podLogsDir/<ns>_<name>_<uid>/<container>/0.log
        let expected = env
            .pod_logs
            .join(format!("default_{p}_{}", sb.pod_uid()))
            .join(c)
            .join("0.log");
        let want = format!("hello-from-{c}");
        wait_until(
            secs(10),
            &format!("{} to contain {want}", expected.display()),
            || log_text(&expected).contains(&want),
        );
    }
}

// 2 -------------------------------------------------------------------------------

#[test]
fn crash_loop_backs_off() {
    let mut env = Env::new("crash_loop_backs_off", 2);
    env.put_pod(&pod("crash", vec![ctn("crash", "exit 3")]));
    env.start_kubelet();
    let p = "crash-node1";

    // The window starts with the first instance.
    let first = eventually(
        secs(15),
        "a first instance of the crashing container",
        || {
            env.try_snapshot()
                .ok()?
                .instances(p, "crash")
                .first()
                .map(|o| (*o).clone())
        },
    );
    let t0 = Instant::now();
    // id -> CRI creation time (ns); polled often enough to see every
    // instance (dead ones are kept until the next start or a GC).
    let mut created: HashMap<String, i64> = HashMap::new();
    let mut max_restart = 0u32;
    let mut seen_exit_3 = false;
    let mut at_25s = None;
    // Instances seen in the last 5 s, long after the last restart (~31 s).
    let mut late_instances = 0;
    while t0.elapsed() < secs(40) {
        env.assert_kubelet_alive();
        if let Ok(s) = env.try_snapshot() {
            if t0.elapsed() >= secs(35) {
                late_instances = late_instances.max(s.instances(p, "crash").len());
            }
            for o in s.instances(p, "crash") {
                if let Some(st) = &o.status {
                    created.entry(o.id.clone()).or_insert(st.created_at);
                    seen_exit_3 |= st.finished_at != 0 && st.exit_code == 3;
                }
                max_restart = max_restart.max(o.restart_count().unwrap_or(0));
            }
        }
        if at_25s.is_none() && t0.elapsed() >= secs(25) {
            // Restart counts are consecutive: they also count instances a
            // GC may have removed between two looks.
            let n =
                (created.len() as u32).max(max_restart + 1 - first.restart_count().unwrap_or(0));
            at_25s = Some(n);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let created_25 = at_25s.expect("window of 25 s observed");
    let mut times: Vec<i64> = created.values().copied().collect();
    times.sort_unstable();
    let offsets: Vec<f64> = times.iter().map(|t| (t - times[0]) as f64 / 1e9).collect();
    eprintln!("instances in the first 25 s: {created_25}; restartCount {max_restart} after 40 s; starts at {offsets:.1?} s");
    assert!(seen_exit_3, "an instance exited with code 3");
    // Upstream cleanUpContainersInPod: each death removes the older dead
    // instances at once (the minute's container GC has not run yet).
    assert!(
        (1..=2).contains(&late_instances),
        "{late_instances} instances left 4 s after the last restart: older dead ones not removed on ContainerDied"
    );
    assert!(
        (2..=5).contains(&created_25),
        "crash loop: expected 2..=5 instances created in 25 s (back-off 10 s, 20 s, ...), saw {created_25}"
    );
    assert!(
        max_restart >= 2,
        "restartCount should reach 2 within 40 s, got {max_restart}"
    );
    assert!(
        max_restart <= 4,
        "restartCount {max_restart} in 40 s: back-off not applied"
    );
    // Upstream: the first restart is immediate, then 10 s, 20 s, 40 s...
    // apart: every gap after the first is at least ~10 s and they grow.
    let gaps: Vec<f64> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
    for (i, g) in gaps.iter().enumerate().skip(1) {
        assert!(
            *g >= 9.0,
            "restart {} only {g:.1} s after the previous one: back-off too short ({gaps:.1?})",
            i + 1
        );
    }
    for w in gaps.windows(2).skip(1) {
        assert!(
            w[1] >= w[0] * 1.5,
            "back-off should double: gaps {gaps:.1?}"
        );
    }
    assert!(
        env.log().contains("CrashLoopBackOff"),
        "rkubelet's log should mention CrashLoopBackOff"
    );
    dead_instances_go_with_their_logs(&env, p);
}

/// Dead instances beyond the newest go (on ContainerDied, else by the
/// container GC every 60 s) together with their log files and
/// /var/log/containers links.
fn dead_instances_go_with_their_logs(env: &Env, pod_full: &str) {
    let links_dir = env.dir.join("containers");
    let prefix = format!("default_{pod_full}_");
    let log_dir = fs::read_dir(&env.pod_logs)
        .ok()
        .and_then(|rd| {
            rd.flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        })
        .map(|e| e.path().join("crash"))
        .expect("the container's log directory");
    let names = |dir: &std::path::Path| -> BTreeSet<String> {
        fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    // The first GC runs a minute after start; the restarts before it left
    // more log files than the one dead instance GC keeps.
    let (files, links, instances) = eventually(
        secs(40),
        "container GC to remove the older dead instances and their logs",
        || {
            let files = names(&log_dir);
            let links = names(&links_dir);
            let snap = env.try_snapshot().ok()?;
            let instances: Vec<Obj> = snap
                .instances(pod_full, "crash")
                .into_iter()
                .cloned()
                .collect();
            (instances.len() <= 2 && files.len() <= instances.len())
                .then_some((files, links, instances))
        },
    );
    let kept: BTreeSet<String> = instances
        .iter()
        .filter_map(|o| o.restart_count())
        .map(|r| format!("{r}.log"))
        .collect();
    assert!(
        files.is_subset(&kept),
        "log files {files:?} outlive their containers (instances with restart counts {kept:?})"
    );
    for l in links.iter().filter(|l| l.starts_with(pod_full)) {
        assert!(
            instances
                .iter()
                .any(|o| l.ends_with(&format!("-{}.log", o.id))),
            "symlink {l} names a removed container (left: {:?})",
            instances.iter().map(|o| &o.id).collect::<Vec<_>>()
        );
    }
}

// 3 -------------------------------------------------------------------------------

#[test]
fn restart_policy_never_stays_exited() {
    let mut env = Env::new("restart_policy_never_stays_exited", 3);
    env.put_pod(&pod("once", vec![ctn("once", "echo done; exit 0")]).restart_policy("Never"));
    env.start_kubelet();
    let p = "once-node1";

    eventually(secs(15), "the container to run and exit 0", || {
        let s = env.try_snapshot().ok()?;
        let i = s.instances(p, "once");
        (i.len() == 1 && !i[0].running && i[0].status.as_ref()?.finished_at != 0).then_some(())
    });
    // Watch for 15 s: never a second instance.
    let t0 = Instant::now();
    let mut ids = BTreeSet::new();
    let mut last = Snapshot::default();
    while t0.elapsed() < secs(15) {
        env.assert_kubelet_alive();
        if let Ok(s) = env.try_snapshot() {
            ids.extend(s.instances(p, "once").iter().map(|o| o.id.clone()));
            last = s;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(
        ids.len(),
        1,
        "restartPolicy Never: exactly one instance, saw {ids:?}:\n{}",
        last.summary()
    );
    let inst = last.instances(p, "once");
    assert_eq!(
        inst.len(),
        1,
        "the exited instance is kept:\n{}",
        last.summary()
    );
    assert!(!inst[0].running, "container should stay exited");
    let st = inst[0].status.clone().expect("CRI status of the container");
    assert_eq!(st.exit_code, 0);
    assert!(st.finished_at != 0);
    assert_eq!(inst[0].restart_count(), Some(0));
    assert!(
        last.sandboxes(p).iter().all(|sb| !sb.running),
        "the sandbox of a succeeded pod should be stopped:\n{}",
        last.summary()
    );
}

// 4 -------------------------------------------------------------------------------

#[test]
fn init_containers_in_order() {
    let mut env = Env::new("init_containers_in_order", 4);
    let m = pod(
        "init",
        vec![ctn("app", &format!("cat /data/order; echo; {SLEEPER}")).mount("data", "/data")],
    )
    .init(vec![
        ctn("first", "sleep 1; printf 1 >> /data/order").mount("data", "/data"),
        ctn("second", "printf 2 >> /data/order").mount("data", "/data"),
    ])
    .empty_dir("data");
    env.put_pod(&m);
    env.start_kubelet();
    let p = "init-node1";
    let snap = env.wait_running(p, &["app"], secs(25));

    let log = eventually(secs(10), "the app's log file", || {
        pod_log_file(&env, p, "app", 0)
    });
    wait_until(
        secs(10),
        "the app's log to show the init containers' output",
        || !log_text(&log).trim().is_empty(),
    );
    let text = log_text(&log);
    assert_eq!(
        text.trim(),
        "12",
        "app saw /data/order = {text:?} (init containers out of order or re-run)"
    );

    // Each init container ran once, succeeded, and finished before the next started.
    let one = |name: &str| {
        let i = snap.instances(p, name);
        assert_eq!(
            i.len(),
            1,
            "init container {name}: one instance expected:\n{}",
            snap.summary()
        );
        assert!(!i[0].running, "init container {name} still running");
        let st = i[0]
            .status
            .clone()
            .unwrap_or_else(|| panic!("CRI status of {name}"));
        assert_eq!(st.exit_code, 0, "init container {name} exit code");
        assert!(st.finished_at != 0);
        st
    };
    let first = one("first");
    let second = one("second");
    let app = snap
        .running(p, "app")
        .unwrap()
        .status
        .clone()
        .expect("CRI status of app");
    assert!(
        first.finished_at <= second.started_at,
        "second init container started before the first finished"
    );
    assert!(
        second.finished_at <= app.started_at,
        "app started before the init containers finished"
    );
}

// 5 -------------------------------------------------------------------------------

#[test]
fn removing_manifest_removes_pod() {
    let mut env = Env::new("removing_manifest_removes_pod", 5);
    let ro_port = env.open_read_only_port();
    env.put_pod(&pod("keep", vec![ctn("keep", SLEEPER)]));
    env.put_pod(&pod("gone", vec![ctn("gone", SLEEPER)]));
    env.start_kubelet();
    env.wait_running("keep-node1", &["keep"], secs(15));
    let before = env.wait_running("gone-node1", &["gone"], secs(15));
    let keep_id = before.running("keep-node1", "keep").unwrap().id.clone();
    let keep_sb = before.sandboxes("keep-node1")[0].id.clone();

    env.remove_manifest("gone.yaml");
    let t0 = Instant::now();
    let mut last = Snapshot::default();
    let gone = poll(secs(15), || {
        let s = env.try_snapshot().ok()?;
        let empty = s.objs.iter().all(|o| o.pod_name() != "gone-node1");
        last = s;
        empty.then_some(())
    });
    assert!(
        gone.is_some(),
        "containers and sandbox of the removed pod still in containerd after 15 s:\n{}",
        last.summary()
    );
    eprintln!("removed pod gone after {:?}", t0.elapsed());
    // Its sandbox was stopped once: each StopPodSandbox runs the CNI
    // teardown again, and RemovePodSandbox needs none first.
    assert_eq!(
        runtime_ops(ro_port, "stop_pod_sandbox"),
        Some(1.0),
        "StopPodSandbox calls for one removed pod"
    );

    let after = env.snapshot();
    let keep = after
        .running("keep-node1", "keep")
        .expect("the other pod still runs");
    assert_eq!(keep.id, keep_id, "the other pod's container was replaced");
    assert_eq!(after.instances("keep-node1", "keep").len(), 1);
    assert_eq!(after.sandboxes("keep-node1").len(), 1);
    assert_eq!(after.sandboxes("keep-node1")[0].id, keep_sb);
    assert_eq!(keep.restart_count(), Some(0));
}

// 6 -------------------------------------------------------------------------------

#[test]
fn editing_manifest_replaces_pod() {
    let mut env = Env::new("editing_manifest_replaces_pod", 6);
    env.put_pod(&pod("edit", vec![ctn("c", &format!("echo v1; {SLEEPER}"))]));
    env.start_kubelet();
    let p = "edit-node1";
    let before = env.wait_running(p, &["c"], secs(15));
    let old = before.running(p, "c").unwrap().clone();

    env.put_pod(&pod("edit", vec![ctn("c", &format!("echo v2; {SLEEPER}"))]));
    let mut last = Snapshot::default();
    let new = poll(secs(20), || {
        let s = env.try_snapshot().ok()?;
        last = s.clone();
        let new = s.running(p, "c")?.clone();
        let old_gone = s.objs.iter().all(|o| o.id != old.id);
        (new.id != old.id && old_gone && s.sandboxes(p).len() == 1).then_some(new)
    })
    .unwrap_or_else(|| panic!("edited pod not replaced within 20 s:\n{}", last.summary()));

    let info = env.ctr(&["containers", "info", &new.id]).unwrap();
    assert!(
        info.contains("echo v2"),
        "the new container runs the new command"
    );
    assert_ne!(
        new.pod_uid(),
        old.pod_uid(),
        "an edited static pod gets a new uid"
    );
    assert!(
        last.objs.iter().all(|o| o.pod_uid() != old.pod_uid()),
        "objects of the old pod remain:\n{}",
        last.summary()
    );
}

// 7 -------------------------------------------------------------------------------

#[test]
fn kubelet_restart_adopts_containers() {
    let mut env = Env::new("kubelet_restart_adopts_containers", 7);
    env.put_pod(&pod("a", vec![ctn("a", SLEEPER)]));
    env.put_pod(&pod("b", vec![ctn("b1", SLEEPER), ctn("b2", SLEEPER)]));
    env.start_kubelet();
    env.wait_running("a-node1", &["a"], secs(15));
    let before = env.wait_running("b-node1", &["b1", "b2"], secs(15));
    let ids_before = before.ids();

    env.kill_kubelet();
    env.start_kubelet_healthy();
    std::thread::sleep(secs(10));
    env.assert_kubelet_alive();
    let after = env.snapshot();
    assert_eq!(
        after.ids(),
        ids_before,
        "containerd objects changed across a kubelet restart:\nbefore:\n{}after:\n{}",
        before.summary(),
        after.summary()
    );
    for (p, c) in [("a-node1", "a"), ("b-node1", "b1"), ("b-node1", "b2")] {
        let o = after
            .running(p, c)
            .unwrap_or_else(|| panic!("{p}/{c} not running after restart"));
        assert_eq!(o.id, before.running(p, c).unwrap().id);
        assert_eq!(o.restart_count(), Some(0));
        assert!(after.sandboxes(p).iter().all(|s| s.running));
    }
}

// 8 -------------------------------------------------------------------------------

#[test]
fn bad_manifest_beside_good_ones() {
    let mut env = Env::new("bad_manifest_beside_good_ones", 8);
    env.write_manifest(
        "a-invalid.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n  name: x\n",
    );
    env.write_manifest(
        "b-service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\nspec:\n  ports:\n  - port: 80\n",
    );
    let mut no_ctrs = pod("empty", vec![]).yaml();
    no_ctrs = no_ctrs.replace("  containers:\n", "  containers: []\n");
    env.write_manifest("c-nocontainers.yaml", &no_ctrs);
    env.put_pod(&pod(
        "dup",
        vec![ctn("same", SLEEPER), ctn("same", SLEEPER)],
    ));
    env.put_pod(&pod("good", vec![ctn("good", SLEEPER)]));
    env.start_kubelet();

    env.wait_running("good-node1", &["good"], secs(15));
    let bad = [
        "a-invalid.yaml",
        "b-service.yaml",
        "c-nocontainers.yaml",
        "dup.yaml",
    ];
    wait_until(secs(5), "the log to name every bad manifest", || {
        let log = env.log();
        bad.iter()
            .all(|f| log.contains(&env.manifests.join(f).display().to_string()))
    });
    // Each file is reported with its own reason.
    for (f, why) in [
        ("a-invalid.yaml", "pars"),
        ("b-service.yaml", "Service"),
        ("c-nocontainers.yaml", "containers"),
        ("dup.yaml", "uplicate"),
    ] {
        let path = env.manifests.join(f).display().to_string();
        let lines = env.log_lines_with(&path);
        eprintln!("{f}: {:?}", lines.first());
        assert!(
            lines.iter().any(|l| l.contains(why)),
            "the log should say why {f} is bad (mentioning {why:?}): {lines:?}"
        );
    }
    env.wait_healthy(secs(5));
    let s = env.snapshot();
    for p in ["empty-node1", "dup-node1", "svc-node1", "x-node1"] {
        assert!(
            s.objs.iter().all(|o| o.pod_name() != p),
            "nothing should run for bad manifest pod {p}:\n{}",
            s.summary()
        );
    }

    // Fixing a bad file starts its pod.
    env.write_manifest(
        "c-nocontainers.yaml",
        &pod("empty", vec![ctn("fixed", SLEEPER)]).yaml(),
    );
    env.wait_running("empty-node1", &["fixed"], secs(15));
    assert!(env.snapshot().running("good-node1", "good").is_some());
}

// 9 -------------------------------------------------------------------------------

#[test]
fn containerd_restart() {
    let mut env = Env::new("containerd_restart", 9);
    env.put_pod(&pod("a", vec![ctn("a", SLEEPER)]));
    env.put_pod(&pod("b", vec![ctn("b", SLEEPER)]));
    env.start_kubelet_healthy();
    env.wait_running("a-node1", &["a"], secs(15));
    let before = env.wait_running("b-node1", &["b"], secs(15));

    env.harness_ok("kill-runtime");
    let t0 = Instant::now();
    let mut last = None;
    let unhealthy = poll(secs(40), || {
        env.assert_kubelet_alive();
        last = env.healthz();
        match &last {
            Some((500, body)) if body.contains("runtime") => Some(body.clone()),
            _ => None,
        }
    });
    let body = unhealthy.unwrap_or_else(|| {
        panic!("healthz did not report the runtime failure within 40 s; last answer {last:?}")
    });
    eprintln!("healthz 500 after {:?}: {body}", t0.elapsed());
    assert!(
        body.contains("[-]runtime"),
        "healthz names the failed runtime check: {body}"
    );
    std::thread::sleep(secs(3));
    env.assert_kubelet_alive();

    env.harness_ok("start");
    env.wait_healthy(secs(30));
    eprintln!(
        "healthy again {:?} after the runtime went down",
        t0.elapsed()
    );
    // Give the kubelet a few sync rounds against the restarted runtime.
    std::thread::sleep(secs(5));
    let after = env.snapshot();
    for (p, c) in [("a-node1", "a"), ("b-node1", "b")] {
        let now = after.running(p, c).unwrap_or_else(|| {
            panic!(
                "{p}/{c} not running after the runtime restart:\n{}",
                after.summary()
            )
        });
        assert_eq!(
            now.id,
            before.running(p, c).unwrap().id,
            "{p}/{c} was replaced"
        );
        assert_eq!(
            after.instances(p, c).len(),
            1,
            "{p}/{c}: extra instances:\n{}",
            after.summary()
        );
    }
    let mut per_uid: HashMap<String, (usize, usize)> = HashMap::new();
    for sb in after.objs.iter().filter(|o| o.is_sandbox()) {
        let e = per_uid.entry(sb.pod_uid().to_string()).or_default();
        e.0 += 1;
        e.1 += usize::from(sb.running);
    }
    assert_eq!(
        per_uid.len(),
        2,
        "sandboxes of two pods expected:\n{}",
        after.summary()
    );
    for (uid, (all, ready)) in per_uid {
        assert_eq!(
            (all, ready),
            (1, 1),
            "pod {uid}: duplicate or stopped sandbox:\n{}",
            after.summary()
        );
    }
}

// termination messages ----------------------------------------------------------------

/// The file's content, then the log tail on failure with
/// FallbackToLogsOnError, reach state.terminated.message (upstream
/// getTerminationMessage / readLastStringFromContainerLogs). A non-root
/// container can write its custom path: the host file is 0666.
#[test]
fn termination_messages() {
    let mut env = Env::new("termination_messages", 19);
    let ro_port = env.open_read_only_port();
    let manifest = pod(
        "term",
        vec![
            ctn("bye", "printf bye > /dev/termination-log; exit 0"),
            ctn("logs", "for i in 1 2 3; do echo line $i; done; exit 1"),
            ctn("quiet", "echo printed; exit 0"),
            ctn("nonroot", "echo -n DONE > /dev/termination-custom-log"),
        ],
    )
    .restart_policy("Never");
    // Ctn has no field for the policy: add it to the rendered YAML.
    let yaml = manifest.yaml().replace(
        "  - name: \"logs\"\n",
        "  - name: \"logs\"\n    terminationMessagePolicy: FallbackToLogsOnError\n",
    );
    let yaml = yaml.replace(
        "  - name: \"quiet\"\n",
        "  - name: \"quiet\"\n    terminationMessagePolicy: FallbackToLogsOnError\n",
    );
    let yaml = yaml.replace(
        "  - name: \"nonroot\"\n",
        "  - name: \"nonroot\"\n    terminationMessagePath: /dev/termination-custom-log\n    \
         securityContext:\n      runAsUser: 1000\n",
    );
    assert_eq!(yaml.matches("FallbackToLogsOnError").count(), 2, "{yaml}");
    assert_eq!(yaml.matches("runAsUser: 1000").count(), 1, "{yaml}");
    env.write_manifest("term.yaml", &yaml);
    env.start_kubelet();

    let statuses = eventually(secs(40), "all four containers terminated in /pods", || {
        let list = read_only_get(ro_port, "/pods")?;
        let item = list["items"]
            .as_array()?
            .iter()
            .find(|p| p["metadata"]["name"] == "term-node1")?
            .clone();
        let cs = item["status"]["containerStatuses"].as_array()?.clone();
        (cs.len() == 4 && cs.iter().all(|c| c["state"]["terminated"].is_object())).then_some(cs)
    });
    let terminated = |name: &str| {
        statuses
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["state"]["terminated"].clone())
            .unwrap_or_else(|| panic!("no status for {name}: {statuses:?}"))
    };
    let bye = terminated("bye");
    assert_eq!(bye["exitCode"], 0, "{bye}");
    assert_eq!(bye["message"], "bye", "{bye}");
    let logs = terminated("logs");
    assert_eq!(logs["exitCode"], 1, "{logs}");
    assert_eq!(logs["message"], "line 1\nline 2\nline 3\n", "{logs}");
    let quiet = terminated("quiet");
    assert_eq!(quiet["exitCode"], 0, "{quiet}");
    assert!(
        quiet.get("message").is_none_or(|m| m.is_null()),
        "a successful container with an empty file has no message: {quiet}"
    );
    let nonroot = terminated("nonroot");
    assert_eq!(nonroot["exitCode"], 0, "{nonroot}");
    assert_eq!(nonroot["message"], "DONE", "{nonroot}");
    env.assert_kubelet_alive();
}
