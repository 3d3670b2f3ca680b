//! Shared machinery for the end-to-end tests (tests/e2e.rs): a private
//! containerd per test (tests/harness/containerd.sh), the release rkubelet
//! binary driven against it, and a `ctr`-based observer of what the kubelet
//! created. Standard library only (plus serde_json, already a dependency).
//!
//! Every test gets its own containerd, bridge, subnet, healthz port and
//! temporary directory, because rkubelet removes containers it does not own.
//! The `Env` guard tears everything down in Drop and, when the test panicked,
//! prints the tails of rkubelet's and containerd's logs (and keeps a copy of
//! rkubelet's log next to the temporary root).

#![allow(dead_code)] // each test binary compiles this shared module and uses only part of it

pub mod cgroups;
pub mod cluster;
pub mod fidelity;
mod manifests;
mod observer;
pub mod peer;
pub mod threads;

pub use manifests::*;
pub use observer::*;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const BUSYBOX: &str = "docker.io/library/busybox:1.36";
pub const NODE: &str = "node1";
/// The harness's sandbox image (containerd's sandbox_image).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.9";
/// An image no pod uses, imported on demand (tests/harness/images.sh).
pub const SPARE_IMAGE: &str = "example.test/rkubelet/spare:1";
/// Config lines that turn image GC's disk-usage trigger off: the tests'
/// images cannot be pulled again, and how full the CI disk is must not
/// decide whether they survive. The image GC test turns it back on.
pub const IMAGE_GC_OFF: &str = "imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 80\n";
/// Everything of the e2e tests lives under here; the image tarballs are
/// shared by all tests (built once by images.sh, which serializes itself).
pub const TEMP_ROOT: &str = "/tmp/rk-e2e";

/// A shell script for a long-running container that stops promptly on TERM
/// (as PID 1 a shell ignores TERM unless it traps it).
pub const SLEEPER: &str = "trap 'exit 0' TERM INT; while true; do sleep 1; done";

pub fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The rkubelet binary cargo built for this test run (the release one under
/// `cargo test --release`), or `$RKUBELET_TEST_BIN`: the suites run as they
/// are against another build, such as `make static`'s (whose std and flags
/// differ from the release build's).
pub fn rkubelet_bin() -> PathBuf {
    match std::env::var_os("RKUBELET_TEST_BIN") {
        Some(bin) if !bin.is_empty() => PathBuf::from(bin),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_rkubelet")),
    }
}

fn harness_script() -> PathBuf {
    repo_dir().join("tests/harness/containerd.sh")
}

fn in_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// These tests need root and a real containerd: fail loudly, never skip.
pub fn require_prerequisites() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the e2e tests need root (containerd, mounts, network namespaces); run them as root"
    );
    let missing: Vec<&str> = [
        "containerd",
        "ctr",
        "runc",
        "flock",
        "setsid",
        "ip",
        "timeout",
    ]
    .into_iter()
    .filter(|p| !in_path(p))
    .collect();
    assert!(
        missing.is_empty(),
        "the e2e tests need {missing:?} in PATH (Debian: apt-get install containerd runc \
         containernetworking-plugins busybox-static iproute2 iptables; or `make deps`)"
    );
    assert!(
        Path::new("/usr/lib/cni/bridge").exists(),
        "the e2e tests need the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)"
    );
    let bin = rkubelet_bin();
    assert!(bin.is_file(), "rkubelet binary {} missing", bin.display());
}

// --- polling -------------------------------------------------------------------

/// Polls `f` every 250 ms until it returns Some, for at most `timeout`.
pub fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Polls `f` until it returns Some; panics with `what` after `timeout`.
pub fn eventually<T>(timeout: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    match poll(timeout, f) {
        Some(v) => v,
        None => panic!("timed out after {timeout:?} waiting for: {what}"),
    }
}

/// Polls `cond` until true; panics with `what` after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    eventually(timeout, what, || cond().then_some(()));
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

// --- the environment -------------------------------------------------------------

/// One test's world: its containerd, its rkubelet, its directories.
pub struct Env {
    pub name: String,
    pub n: u32,
    pub dir: PathBuf,
    pub sock: String,
    pub manifests: PathBuf,
    pub pod_logs: PathBuf,
    pub root: PathBuf,
    pub config: PathBuf,
    pub log_path: PathBuf,
    pub port: u16,
    /// Extra environment for rkubelet (e.g. NOTIFY_SOCKET).
    pub kubelet_env: Vec<(String, String)>,
    kubelet: Option<Child>,
    started: Instant,
}

impl Env {
    /// Starts a private containerd for test number `n` (unique per test:
    /// it picks the bridge, subnet and healthz port).
    pub fn new(name: &str, n: u32) -> Env {
        require_prerequisites();
        assert!((1..=99).contains(&n));
        let dir = PathBuf::from(format!("{TEMP_ROOT}/{name}-{}", std::process::id()));
        let mut env = Env {
            name: name.into(),
            n,
            manifests: dir.join("manifests"),
            pod_logs: dir.join("pod-logs"),
            root: dir.join("kubelet"),
            config: dir.join("kubelet-config.yaml"),
            log_path: dir.join("rkubelet.log"),
            sock: String::new(),
            dir,
            port: 20000 + n as u16,
            kubelet_env: Vec::new(),
            kubelet: None,
            started: Instant::now(),
        };
        if env.dir.exists() {
            // A leftover of an earlier run with the same pid.
            let _ = env.harness("stop");
            let _ = fs::remove_dir_all(&env.dir);
        }
        for d in [&env.dir, &env.manifests, &env.pod_logs, &env.root] {
            fs::create_dir_all(d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
        }
        // A leftover of a killed run with the same number goes first.
        remove_cgroup_tree(&env.cgroup_root());
        create_cgroup_root(&env.cgroup_root());
        fs::write(
            &env.config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\n\
                 kind: KubeletConfiguration\n\
                 podLogsDir: {}\n\
                 fileCheckFrequency: 1s\n\
                 syncFrequency: 10s\n\
                 failSwapOn: false\n\
                 cgroupRoot: {}\n\
                 {IMAGE_GC_OFF}",
                env.pod_logs.display(),
                env.cgroup_root()
            ),
        )
        .unwrap();
        let out = env.harness("start");
        assert!(
            out.status.success(),
            "containerd.sh start {} failed ({}):\n{}",
            env.dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        env.sock = stdout
            .lines()
            .find_map(|l| l.strip_prefix("CONTAINERD_SOCK="))
            .unwrap_or_else(|| panic!("containerd.sh start printed no CONTAINERD_SOCK:\n{stdout}"))
            .trim()
            .to_string();
        eprintln!(
            "[{name}] containerd up at {} ({:?})",
            env.sock,
            env.started.elapsed()
        );
        env
    }

    /// Runs `containerd.sh CMD DIR` with this test's bridge/subnet/cache.
    pub fn harness(&self, cmd: &str) -> Output {
        Command::new("bash")
            .arg(harness_script())
            .arg(cmd)
            .arg(&self.dir)
            .env("RKUBELET_IMAGE_CACHE", format!("{TEMP_ROOT}/images"))
            .env("RKUBELET_CNI_BRIDGE", format!("rke{}", self.n))
            .env(
                "RKUBELET_CNI_SUBNET",
                format!("10.88.{}.0/24", 100 + self.n),
            )
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run containerd.sh {cmd}: {e}"))
    }

    pub fn harness_ok(&self, cmd: &str) {
        let out = self.harness(cmd);
        assert!(
            out.status.success(),
            "containerd.sh {cmd} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Replaces a `key: value` line of the kubelet config file (before the
    /// kubelet starts).
    pub fn set_config(&self, key: &str, value: &str) {
        let text = fs::read_to_string(&self.config).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with(&format!("{key}:")))
            .map(String::from)
            .collect();
        lines.push(format!("{key}: {value}"));
        fs::write(&self.config, lines.join("\n") + "\n").unwrap();
    }

    /// The flags every test passes (plus `extra`).
    pub fn kubelet_args(&self, extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "--config".into(),
            self.config.display().to_string(),
            "--pod-manifest-path".into(),
            self.manifests.display().to_string(),
            "--container-runtime-endpoint".into(),
            format!("unix://{}", self.sock),
            "--root-dir".into(),
            self.root.display().to_string(),
            "--hostname-override".into(),
            NODE.into(),
            "--pod-infra-container-image".into(),
            PAUSE_IMAGE.into(),
            "--healthz-port".into(),
            self.port.to_string(),
            "--file-check-frequency".into(),
            "1s".into(),
            "--v".into(),
            "2".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    fn log_file(&self) -> fs::File {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap()
    }

    /// Starts rkubelet in the background, output appended to rkubelet.log.
    pub fn start_kubelet(&mut self) {
        self.start_kubelet_with(&[]);
    }

    /// [`Env::start_kubelet`] with extra flags.
    pub fn start_kubelet_with(&mut self, extra: &[&str]) {
        let args = self.kubelet_args(extra);
        self.start_kubelet_with_args(&args);
    }

    /// Starts rkubelet and waits for healthz to say ok.
    pub fn start_kubelet_healthy(&mut self) {
        self.start_kubelet();
        self.wait_healthy(secs(20));
    }

    pub fn wait_healthy(&mut self, timeout: Duration) {
        let mut last = None;
        let ok = poll(timeout, || {
            self.assert_kubelet_alive();
            last = self.healthz();
            matches!(&last, Some((200, b)) if b.trim() == "ok").then_some(())
        });
        assert!(
            ok.is_some(),
            "healthz not ok within {timeout:?}; last answer: {last:?}"
        );
    }

    /// SIGKILLs rkubelet (containers live on).
    pub fn kill_kubelet(&mut self) {
        if let Some(mut c) = self.kubelet.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet.as_ref().map(Child::id)
    }

    pub fn kubelet_exit(&mut self) -> Option<ExitStatus> {
        self.kubelet
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn assert_kubelet_alive(&mut self) {
        if let Some(st) = self.kubelet_exit() {
            panic!("rkubelet exited unexpectedly: {st}");
        }
    }

    /// Runs rkubelet in the foreground with `extra` flags (e.g. --runonce),
    /// killing it after `timeout`. Returns (exit status or None on timeout,
    /// stdout); stderr goes to rkubelet.log.
    pub fn run_kubelet(
        &self,
        extra: &[&str],
        timeout: Duration,
    ) -> (Option<ExitStatus>, String, Duration) {
        let stdout_path = self.dir.join("rkubelet.stdout");
        let mut f = self.log_file();
        writeln!(f, "===== e2e: running rkubelet {extra:?} =====").unwrap();
        let start = Instant::now();
        let mut child = Command::new(rkubelet_bin())
            .args(self.kubelet_args(extra))
            .stdin(Stdio::null())
            .stdout(fs::File::create(&stdout_path).unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn rkubelet");
        let status = poll(timeout, || child.try_wait().ok().flatten());
        let took = start.elapsed();
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let out = fs::read_to_string(&stdout_path).unwrap_or_default();
        (status, out, took)
    }

    // --- manifests

    /// Writes a manifest atomically (a hidden temp file, then rename: the
    /// file source ignores dot files).
    pub fn write_manifest(&self, file: &str, content: &str) {
        let tmp = self.manifests.join(format!(".{file}.tmp"));
        fs::write(&tmp, content).unwrap();
        fs::rename(&tmp, self.manifests.join(file)).unwrap();
    }

    pub fn put_pod(&self, p: &PodManifest) {
        self.write_manifest(&format!("{}.yaml", p.name), &p.yaml());
    }

    pub fn remove_manifest(&self, file: &str) {
        fs::remove_file(self.manifests.join(file)).unwrap();
    }

    // --- rkubelet's log

    pub fn log(&self) -> String {
        fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn log_lines_with(&self, needle: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(needle))
            .map(String::from)
            .collect()
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    // --- healthz

    /// GET /healthz: (status code, body), or None if nothing answers.
    pub fn healthz(&self) -> Option<(u16, String)> {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.port).parse().unwrap();
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Some((code, body))
    }

    // --- ctr

    /// `ctr --address SOCK -n k8s.io ARGS`, bounded by `timeout 20`.
    pub fn ctr(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("timeout")
            .args([
                "20",
                "ctr",
                "--address",
                &self.sock,
                "--connect-timeout",
                "3s",
                "-n",
                "k8s.io",
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run ctr: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "ctr {args:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn cri_status(&self, id: &str) -> Option<CriStatus> {
        let p = self
            .dir
            .join("root/io.containerd.grpc.v1.cri/containers")
            .join(id)
            .join("status");
        let v: serde_json::Value = serde_json::from_slice(&fs::read(p).ok()?).ok()?;
        let i = |k: &str| v.get(k).and_then(serde_json::Value::as_i64).unwrap_or(0);
        Some(CriStatus {
            created_at: i("CreatedAt"),
            started_at: i("StartedAt"),
            finished_at: i("FinishedAt"),
            exit_code: i("ExitCode"),
            reason: v
                .get("Reason")
                .and_then(|r| r.as_str())
                .unwrap_or("")
                .into(),
        })
    }

    /// Everything in containerd's k8s.io namespace, or the ctr error.
    pub fn try_snapshot(&self) -> Result<Snapshot, String> {
        let tasks_out = self.ctr(&["tasks", "ls"])?;
        let mut tasks: HashMap<String, String> = HashMap::new();
        for l in tasks_out.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 3 {
                tasks.insert(f[0].to_string(), f[2].to_string());
            }
        }
        let ids = self.ctr(&["containers", "ls", "-q"])?;
        let mut objs = Vec::new();
        for id in ids.lines().map(str::trim).filter(|l| !l.is_empty()) {
            // Removed since the listing: skip it.
            let Ok(info) = self.ctr(&["containers", "info", id]) else {
                continue;
            };
            let v: serde_json::Value = serde_json::from_str(&info)
                .map_err(|e| format!("ctr containers info {id}: bad JSON: {e}"))?;
            let labels = str_map(&v["Labels"]);
            let kind = labels
                .get("io.cri-containerd.kind")
                .cloned()
                .unwrap_or_default();
            let mut annotations = BTreeMap::new();
            if let Some(b64) =
                v["Extensions"]["io.cri-containerd.container.metadata"]["value"].as_str()
            {
                if let Some(meta) = base64_decode(b64)
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                {
                    annotations = str_map(&meta["Metadata"]["Config"]["annotations"]);
                }
            }
            let status = if kind == "container" {
                self.cri_status(id)
            } else {
                None
            };
            objs.push(Obj {
                id: id.to_string(),
                running: tasks.get(id).is_some_and(|s| s == "RUNNING"),
                kind,
                labels,
                annotations,
                created_at: v["CreatedAt"].as_str().unwrap_or("").into(),
                status,
            });
        }
        Ok(Snapshot { objs })
    }

    pub fn snapshot(&self) -> Snapshot {
        self.try_snapshot()
            .unwrap_or_else(|e| panic!("observe containerd: {e}"))
    }

    /// Waits until every named container of `pod` has a running instance
    /// (and the pod a running sandbox); returns that snapshot.
    pub fn wait_running(&mut self, pod: &str, containers: &[&str], timeout: Duration) -> Snapshot {
        let mut last = Snapshot::default();
        let got = poll(timeout, || {
            self.assert_kubelet_alive();
            let s = self.try_snapshot().ok()?;
            let ok = s.sandboxes(pod).iter().any(|o| o.running)
                && containers.iter().all(|c| s.running(pod, c).is_some());
            last = s.clone();
            ok.then_some(s)
        });
        got.unwrap_or_else(|| {
            panic!(
                "pod {pod}: containers {containers:?} not all running within {timeout:?}; containerd has:\n{}",
                last.summary()
            )
        })
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// This test's cgroupRoot: its own, because parallel tests share the
    /// host's /sys/fs/cgroup and each rkubelet removes pod cgroups it does
    /// not know below its root.
    pub fn cgroup_root(&self) -> String {
        format!("/rk-test-{}", self.n)
    }
}

/// The mount point of every cgroup hierarchy: v1 controllers and cgroup2
/// (the fstype follows the "-" that ends mountinfo's optional fields).
pub fn cgroup_mounts() -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-")?;
            matches!(*f.get(dash + 1)?, "cgroup" | "cgroup2").then(|| PathBuf::from(f[4]))
        })
        .collect()
}

/// `mkdir` of a cgroupRoot in every hierarchy (rkubelet, like upstream,
/// requires it to exist).
pub fn create_cgroup_root(name: &str) {
    for m in cgroup_mounts() {
        let d = m.join(name.trim_start_matches('/'));
        fs::create_dir_all(&d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
    }
}

/// Removes a cgroup and everything below it from every hierarchy, the
/// deepest first (rmdir is the only way to remove a cgroup), retrying
/// while killed processes are still leaving.
pub fn remove_cgroup_tree(name: &str) {
    fn dirs(d: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(rd) = fs::read_dir(d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs(&e.path(), out);
                }
            }
        }
        out.push(d.to_path_buf());
    }
    for _ in 0..20 {
        let mut left = Vec::new();
        for m in cgroup_mounts() {
            let top = m.join(name.trim_start_matches('/'));
            if !top.exists() {
                continue;
            }
            let mut all = Vec::new();
            dirs(&top, &mut all);
            for d in all {
                if fs::remove_dir(&d).is_err() {
                    left.push(d);
                }
            }
        }
        if left.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("cgroup {name}: could not remove all of it");
}

impl Drop for Env {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        self.kill_kubelet();
        if failed {
            eprintln!(
                "\n===== [{}] test failed after {:?}; last lines of rkubelet's log ({}) =====",
                self.name,
                self.started.elapsed(),
                self.log_path.display()
            );
            eprintln!("{}", self.log_tail(120));
            if let Ok(s) = self.try_snapshot() {
                eprintln!(
                    "===== [{}] containerd objects =====\n{}",
                    self.name,
                    s.summary()
                );
            }
            let clog = fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
            let lines: Vec<&str> = clog.lines().collect();
            eprintln!(
                "===== [{}] last lines of containerd's log =====\n{}",
                self.name,
                lines[lines.len().saturating_sub(25)..].join("\n")
            );
            let keep = PathBuf::from(format!(
                "{TEMP_ROOT}/failed-{}-{}.rkubelet.log",
                self.name,
                std::process::id()
            ));
            if fs::copy(&self.log_path, &keep).is_ok() {
                eprintln!(
                    "===== [{}] full rkubelet log kept at {} =====",
                    self.name,
                    keep.display()
                );
            }
        }
        let out = self.harness("stop");
        if !out.status.success() {
            eprintln!(
                "[{}] containerd.sh stop failed ({}):\n{}",
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        remove_cgroup_tree(&self.cgroup_root());
        unmount_all_under(&self.dir);
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("[{}] remove {}: {e}", self.name, self.dir.display());
        }
    }
}

/// Detaches every mount below `dir` (volumes a killed kubelet left), the
/// deepest first, so removing the test's directory never empties a tmpfs
/// in use or fails on one.
pub fn unmount_all_under(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let mut points: Vec<String> = fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let _ = nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

// --- cluster mode (tests/cluster.rs) ----------------------------------------------

impl Env {
    /// Starts rkubelet in the background with exactly `args` (cluster mode
    /// builds its own command line), output appended to rkubelet.log.
    pub fn start_kubelet_with_args(&mut self, args: &[String]) {
        assert!(self.kubelet.is_none(), "rkubelet already started");
        let mut f = self.log_file();
        writeln!(
            f,
            "===== e2e: starting rkubelet {args:?} at +{:?} =====",
            self.started.elapsed()
        )
        .unwrap();
        let child = Command::new(rkubelet_bin())
            .args(args)
            .envs(self.kubelet_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("spawn rkubelet");
        self.kubelet = Some(child);
    }
}

/// The lines of a test peer's JSON-lines log (tests/plugins) whose
/// `rpc` is `rpc`.
pub fn peer_calls(log: &Path, rpc: &str) -> Vec<serde_json::Value> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["rpc"] == rpc)
        .collect()
}

/// GET `path` from a kubelet's read-only port: the JSON body, or None.
pub fn read_only_get(port: u16, path: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&read_only_text(port, path)?).ok()
}

/// GET `path` from a kubelet's read-only port: the body of a 200, or
/// None. HTTP/1.0, so that a streamed body comes unchunked (the server
/// chunks a streamed HTTP/1.1 answer, which this reader would not undo).
pub fn read_only_text(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, secs(2)).ok()?;
    s.set_read_timeout(Some(secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

impl Env {
    /// Opens the kubelet API on 127.0.0.1 (port 22000+n) and the read-only
    /// port (23000+n, returned) with anonymous access: standalone there is
    /// no API server for webhook authentication or authorization.
    pub fn open_read_only_port(&self) -> u16 {
        let ro_port = 23000 + self.n as u16;
        self.set_config("address", "127.0.0.1");
        self.set_config("port", &(22000 + self.n).to_string());
        self.set_config("readOnlyPort", &ro_port.to_string());
        self.set_config(
            "authentication",
            "\n  anonymous:\n    enabled: true\n  webhook:\n    enabled: false",
        );
        self.set_config("authorization", "\n  mode: AlwaysAllow");
        ro_port
    }
}

/// The text of CRI-format log lines ("<time> <stream> <P|F> <text>").
pub fn log_text(path: &std::path::Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The log lines of container `c` of pod `pod` (namespace default), from
/// the pod logs directory, every instance.
pub fn container_log(pod_logs: &Path, pod: &str, c: &str) -> String {
    let mut out = String::new();
    for dir in fs::read_dir(pod_logs).into_iter().flatten().flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&format!("default_{pod}_")) {
            continue;
        }
        let cdir: PathBuf = dir.path().join(c);
        for f in fs::read_dir(cdir).into_iter().flatten().flatten() {
            out.push_str(&fs::read_to_string(f.path()).unwrap_or_default());
        }
    }
    out
}

/// One call of the pod resources API of the kubelet whose root dir is
/// `root`, through tests/plugins/podresources.py, a client written to the
/// v1 api.proto text, as a monitoring agent is.
pub fn pod_resources(root: &Path, args: &[&str]) -> serde_json::Value {
    let socket = root.join("pod-resources/kubelet.sock");
    let out = Command::new("/usr/bin/python3")
        .arg(repo_dir().join("tests/plugins/podresources.py"))
        .arg(&socket)
        .args(args)
        .output()
        .expect("run tests/plugins/podresources.py");
    assert!(out.status.success(), "podresources.py {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}
