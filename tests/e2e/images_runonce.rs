//! End-to-end: image pull policy and image GC, and `--runonce` mode
//! (part of tests/e2e.rs).

use std::collections::BTreeSet;
use std::time::Instant;

use super::common::*;

// 10 ------------------------------------------------------------------------------

#[test]
fn image_never_pull() {
    let mut env = Env::new("image_never_pull", 10);
    env.put_pod(&pod(
        "nope",
        vec![ctn("nope", SLEEPER).image("example.invalid/nope:1", "Never")],
    ));
    env.put_pod(&pod("fine", vec![ctn("fine", SLEEPER)]));
    env.start_kubelet();
    env.wait_running("fine-node1", &["fine"], secs(15));
    wait_until(secs(15), "ErrImageNeverPull in rkubelet's log", || {
        env.log().contains("ErrImageNeverPull")
    });
    let first = env.log_lines_with("ErrImageNeverPull").len();
    let t0 = Instant::now();
    while t0.elapsed() < secs(25) {
        env.assert_kubelet_alive();
        let s = env.snapshot();
        assert!(
            s.containers("nope-node1").is_empty(),
            "no container may be created for an image that is absent with pullPolicy Never:\n{}",
            s.summary()
        );
        std::thread::sleep(secs(1));
    }
    let lines = env.log_lines_with("ErrImageNeverPull");
    eprintln!(
        "ErrImageNeverPull lines: {} at first, {} after 25 s; e.g. {:?}",
        first,
        lines.len(),
        lines.first()
    );
    assert!(
        lines.len() > first,
        "rkubelet should keep retrying the pod (ErrImageNeverPull again after 25 s)"
    );
    assert!(
        lines.iter().any(|l| l.contains("example.invalid/nope:1")),
        "the message should name the image"
    );
    let s = env.snapshot();
    assert!(s.running("fine-node1", "fine").is_some());
    assert_eq!(s.instances("fine-node1", "fine").len(), 1);
}

// 11 ------------------------------------------------------------------------------

#[test]
fn runonce_runs_pods_and_exits() {
    let env = Env::new("runonce_runs_pods_and_exits", 11);
    env.put_pod(&pod("one", vec![ctn("one", SLEEPER)]));
    env.put_pod(&pod("two", vec![ctn("two", SLEEPER)]));
    let (status, out, took) = env.run_kubelet(&["--runonce"], secs(60));
    eprintln!("runonce took {took:?}; stdout:\n{out}");
    let status =
        status.unwrap_or_else(|| panic!("--runonce did not exit within 60 s; stdout:\n{out}"));
    assert!(
        status.success(),
        "--runonce with good pods should exit 0, got {status}"
    );
    for p in ["one-node1", "two-node1"] {
        let line = out
            .lines()
            .find(|l| l.contains(p))
            .unwrap_or_else(|| panic!("status table lacks pod {p}:\n{out}"));
        assert!(
            line.contains("Running"),
            "pod {p} not Running in the status table: {line}"
        );
    }
    let s = env.snapshot();
    assert!(s.running("one-node1", "one").is_some() && s.running("two-node1", "two").is_some());
}

#[test]
fn runonce_fails_on_missing_image() {
    let env = Env::new("runonce_fails_on_missing_image", 12);
    env.put_pod(&pod("ok", vec![ctn("ok", SLEEPER)]));
    env.put_pod(&pod(
        "nope",
        vec![ctn("nope", SLEEPER).image("example.invalid/nope:1", "Never")],
    ));
    let (status, out, took) = env.run_kubelet(&["--runonce"], secs(120));
    eprintln!("runonce took {took:?}; stdout:\n{out}");
    let status =
        status.unwrap_or_else(|| panic!("--runonce did not exit within 120 s; stdout:\n{out}"));
    assert!(
        !status.success(),
        "--runonce with an unrunnable pod should exit non-zero"
    );
    let line = out
        .lines()
        .find(|l| l.contains("nope-node1"))
        .unwrap_or_else(|| panic!("no status line for nope:\n{out}"));
    assert!(!line.contains("Running"), "{line}");
    assert!(env.log().contains("ErrImageNeverPull"));
}

// 13 ------------------------------------------------------------------------------

/// Image GC (upstream image_gc_manager): with the image filesystem over the
/// high threshold (1% here, so any disk is), the first round, a minute after
/// start, removes the image no container uses and keeps the running pod's
/// image and the sandbox image (--pod-infra-container-image).
#[test]
fn image_gc_removes_unused_images() {
    let mut env = Env::new("image_gc_removes_unused_images", 13);
    env.set_config("imageGCHighThresholdPercent", "1");
    env.set_config("imageGCLowThresholdPercent", "0");
    let spare_tar = format!("{TEMP_ROOT}/images/spare.tar");
    env.ctr(&["images", "import", "--no-unpack", &spare_tar])
        .expect("import the spare image");
    let images = |env: &Env| -> BTreeSet<String> {
        env.ctr(&["images", "ls", "-q"])
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    };
    assert!(images(&env).contains(SPARE_IMAGE), "{:?}", images(&env));
    env.put_pod(&pod("keep", vec![ctn("keep", SLEEPER)]));
    env.start_kubelet();
    env.wait_running("keep-node1", &["keep"], secs(15));

    wait_until(secs(100), "image GC to remove the unused image", || {
        env.assert_kubelet_alive();
        !images(&env).contains(SPARE_IMAGE)
    });
    let left = images(&env);
    assert!(
        left.contains(BUSYBOX),
        "the running pod's image was removed: {left:?}"
    );
    assert!(
        left.contains(PAUSE_IMAGE),
        "the sandbox image was removed: {left:?}"
    );
    assert!(
        env.log().contains("over the high threshold"),
        "rkubelet should log why it removed images"
    );
    let s = env.snapshot();
    assert!(s.running("keep-node1", "keep").is_some(), "{}", s.summary());
}
