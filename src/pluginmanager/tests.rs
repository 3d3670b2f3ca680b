//! The plugin manager's thread against real sockets in a temporary root
//! dir, with a fake registration client: what is registered, what is
//! ignored, and how fast it stops.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::*;

use super::CSI_PLUGIN;
use crate::util::worker::join_all;

type Log = Arc<Mutex<Vec<String>>>;

/// Answers GetInfo from the socket's name: `csi-*` is a CSI driver,
/// `dp-*` a device plugin, anything else a type nobody handles. A name
/// with `flaky` cannot be dialled the first time, and fails GetInfo the
/// second; one with `dead` can never be dialled.
struct FakeDialer(Log, DialTimes);

/// When each socket was dialled.
type DialTimes = Arc<Mutex<Vec<(String, Instant)>>>;

struct FakeClient {
    name: String,
    attempt: usize,
    log: Log,
}

impl PluginDialer for FakeDialer {
    fn dial(
        &self,
        socket: &Path,
        _: Duration,
    ) -> Result<Box<dyn PluginClient>, PluginManagerError> {
        let name = socket.file_stem().unwrap().to_string_lossy().into_owned();
        let mut log = self.0.lock().unwrap();
        log.push(format!("dial {name}"));
        self.1.lock().unwrap().push((name.clone(), Instant::now()));
        let attempt = log.iter().filter(|l| **l == format!("dial {name}")).count();
        if name.contains("dead") || (name.contains("flaky") && attempt == 1) {
            return Err(PluginManagerError::Dial {
                socket: socket.to_path_buf(),
                message: "connection refused".into(),
            });
        }
        Ok(Box::new(FakeClient {
            name,
            attempt,
            log: self.0.clone(),
        }))
    }
}

impl PluginClient for FakeClient {
    fn get_info(&self, _: Duration) -> Result<PluginInfo, PluginManagerError> {
        if self.name.contains("flaky") && self.attempt == 2 {
            return Err(PluginManagerError::Rpc {
                call: "GetInfo",
                socket: PathBuf::from(&self.name),
                message: "deadline exceeded".into(),
            });
        }
        let plugin_type = match self.name.split('-').next() {
            Some("csi") => CSI_PLUGIN,
            Some("dp") => DEVICE_PLUGIN,
            _ => "Unknown",
        };
        Ok(PluginInfo {
            plugin_type: plugin_type.into(),
            name: self.name.clone(),
            endpoint: String::new(),
            supported_versions: vec!["1.0.0".into()],
        })
    }

    fn notify_registration_status(
        &self,
        registered: bool,
        error: &str,
        _: Duration,
    ) -> Result<(), PluginManagerError> {
        let line = format!("notify {} {registered} {error}", self.name);
        self.log.lock().unwrap().push(line);
        Ok(())
    }
}

struct FakeHandler(Log);

impl PluginHandler for FakeHandler {
    fn validate_plugin(
        &self,
        name: &str,
        _: &str,
        _: &[String],
        deprecated: bool,
    ) -> Result<(), PluginManagerError> {
        self.0
            .lock()
            .unwrap()
            .push(format!("validate {name} {deprecated}"));
        Ok(())
    }

    /// Refuses plugins whose name has `refused`, after validating them.
    fn register_plugin(&self, name: &str, _: &str, _: &[String]) -> Result<(), PluginManagerError> {
        self.0.lock().unwrap().push(format!("register {name}"));
        if name.contains("refused") {
            return Err(PluginManagerError::Handler("no room".into()));
        }
        Ok(())
    }

    fn deregister_plugin(&self, name: &str, _: &str) {
        self.0.lock().unwrap().push(format!("deregister {name}"));
    }
}

struct Running {
    root: TempDir,
    log: Log,
    dial_times: DialTimes,
    stop: rkubelet_util::shutdown::Trigger,
    worker: crate::util::worker::Worker,
}

impl Running {
    fn registry(&self) -> PathBuf {
        self.root.path().join(PLUGINS_REGISTRY_DIR)
    }

    fn lines(&self, prefix: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|l| l.starts_with(prefix))
            .cloned()
            .collect()
    }

    fn dials(&self, name: &str) -> Vec<Instant> {
        let times = self.dial_times.lock().unwrap();
        times
            .iter()
            .filter(|(n, _)| n == name)
            .map(|t| t.1)
            .collect()
    }

    fn has(&self, line: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l == line)
    }

    /// Stops the thread; it must be gone well within a second, though its
    /// idle wait is a minute: the shutdown descriptor wakes it.
    fn stop(self) {
        let started = Instant::now();
        drop(self.stop);
        let late = join_all(
            ShutdownStage::Workers,
            vec![self.worker],
            Instant::now() + Duration::from_secs(2),
        );
        assert!(late.is_empty(), "the plugin manager stopped");
        assert!(started.elapsed() < Duration::from_secs(1), "promptly");
    }
}

/// Starts the manager on `root` (whatever is already in it stays).
fn run_in(root: TempDir) -> Running {
    let log = Log::default();
    let dial_times = DialTimes::default();
    let dialer = FakeDialer(log.clone(), dial_times.clone());
    let mut reconciler = Reconciler::new(Box::new(dialer));
    let failures = log.clone();
    reconciler.on_failure(Box::new(move |msg| {
        failures.lock().unwrap().push(format!("failure {msg}"));
    }));
    reconciler.add_handler(CSI_PLUGIN, Arc::new(FakeHandler(log.clone())));
    reconciler.add_handler(DEVICE_PLUGIN, Arc::new(FakeHandler(log.clone())));
    let (stop, shutdown) = rkubelet_util::shutdown::channel().unwrap();
    let worker = start(root.path(), reconciler, shutdown).unwrap();
    Running {
        root,
        log,
        dial_times,
        stop,
        worker,
    }
}

fn run() -> Running {
    run_in(TempDir::with_prefix("rkubelet-plugins-").unwrap())
}

fn bind(path: &Path) {
    UnixListener::bind(path).unwrap();
}

use crate::util::testing::eventually;

#[test]
fn existing_sockets_are_registered_at_start() {
    let root = TempDir::with_prefix("rkubelet-plugins-").unwrap();
    let registry = root.path().join(PLUGINS_REGISTRY_DIR);
    fs::create_dir_all(registry.join("sub")).unwrap();
    bind(&registry.join("csi-a.sock"));
    bind(&registry.join("sub/dp-b.sock"));
    bind(&registry.join(".csi-hidden.sock"));
    fs::write(registry.join("csi-file.sock"), "not a socket").unwrap();
    let m = run_in(root);
    eventually("both plugins", || {
        m.has("register csi-a") && m.has("register dp-b")
    });
    assert!(m.has("notify csi-a true "));
    assert_eq!(m.lines("dial").len(), 2, "{:?}", m.lines(""));
    m.stop();
}

#[test]
fn the_registry_is_made_private_and_followed() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    // 0750, less what the umask takes.
    let mode = fs::metadata(m.registry()).unwrap().permissions().mode();
    assert_eq!(mode & 0o007, 0, "others see nothing");
    assert_eq!(mode & 0o700, 0o700);

    let sock = m.registry().join("csi-a.sock");
    bind(&sock);
    eventually("registration", || m.has("register csi-a"));
    fs::remove_file(&sock).unwrap();
    eventually("deregistration", || m.has("deregister csi-a"));
    m.stop();
}

#[test]
fn regular_files_and_dot_files_are_ignored() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    fs::write(m.registry().join("csi-file"), "x").unwrap();
    bind(&m.registry().join(".csi-hidden.sock"));
    fs::create_dir(m.registry().join(".hidden-dir")).unwrap();
    bind(&m.registry().join(".hidden-dir/csi-in-hidden.sock"));
    // Created last, so once it is in, the others were seen and passed over.
    bind(&m.registry().join("csi-real.sock"));
    eventually("the real socket", || m.has("register csi-real"));
    assert_eq!(m.lines("dial"), ["dial csi-real"]);
    m.stop();
}

#[test]
fn subdirectories_created_later_are_followed() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    let sub = m.registry().join("sub/deeper");
    fs::create_dir_all(&sub).unwrap();
    bind(&sub.join("dp-x.sock"));
    eventually("registration", || m.has("register dp-x"));
    // The new directories are watched, not only walked once.
    bind(&m.registry().join("sub/csi-y.sock"));
    eventually("a later socket", || m.has("register csi-y"));
    fs::remove_dir_all(m.registry().join("sub")).unwrap();
    eventually("both gone", || {
        m.has("deregister dp-x") && m.has("deregister csi-y")
    });
    m.stop();
}

#[test]
fn a_replaced_socket_is_registered_again() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    let sock = m.registry().join("csi-a.sock");
    bind(&sock);
    eventually("registration", || m.has("register csi-a"));
    // A restarting plugin unlinks and binds again.
    fs::remove_file(&sock).unwrap();
    bind(&sock);
    eventually("re-registration", || m.lines("register").len() == 2);
    let log = m.lines("");
    let handler: Vec<_> = log.iter().filter(|l| l.contains("register")).collect();
    assert_eq!(
        handler,
        ["register csi-a", "deregister csi-a", "register csi-a"],
        "taken back before given again"
    );
    m.stop();
}

#[test]
fn a_plugin_of_unknown_type_is_told_why() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    bind(&m.registry().join("gpu-a.sock"));
    eventually("the refusal", || {
        m.lines("notify gpu-a false")
            .iter()
            .any(|l| l.contains("no handler registered for plugin type: Unknown"))
    });
    assert!(m.lines("register").is_empty());
    m.stop();
}

#[test]
fn a_plugin_that_cannot_be_reached_is_tried_again() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    bind(&m.registry().join("csi-flaky.sock"));
    eventually("registration at the third try", || {
        m.has("register csi-flaky")
    });
    assert_eq!(m.lines("dial").len(), 3);
    assert!(m.lines("notify").iter().all(|l| l.contains("true")));
    m.stop();
}

/// A socket that never answers is tried less and less often (500 ms
/// doubling), each failure reported, and it holds no other plugin back.
#[test]
fn a_socket_that_never_answers_is_backed_off() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    bind(&m.registry().join("csi-dead.sock"));
    // Delays of 0.5, 1 and 2 s after the first three failures, checked in
    // 1 s rounds: the fourth try comes at least 2 s after the third, where
    // a try every round would come 1 s after. A loaded machine only
    // stretches the gaps, so only their lower bounds are asserted.
    eventually("four tries", || m.dials("csi-dead").len() >= 4);
    let at = m.dials("csi-dead");
    assert!(
        at[3] - at[2] >= Duration::from_secs(2),
        "tries at {at:?}: the fourth within 2 s of the third"
    );
    assert!(at[3] - at[2] > at[1] - at[0], "growing gaps: {at:?}");
    eventually("a failure reported per try", || {
        m.lines("failure").len() == 4
    });
    assert!(
        m.lines("failure")[0].contains("csi-dead.sock"),
        "{:?}",
        m.lines("failure")
    );
    bind(&m.registry().join("csi-good.sock"));
    eventually("another plugin registered meanwhile", || {
        m.has("register csi-good")
    });
    m.stop();
}

#[test]
fn a_removed_registry_is_made_again() {
    let m = run();
    eventually("the registry dir", || m.registry().is_dir());
    bind(&m.registry().join("csi-a.sock"));
    eventually("registration", || m.has("register csi-a"));
    fs::remove_dir_all(m.registry()).unwrap();
    eventually("deregistration", || m.has("deregister csi-a"));
    eventually("the registry again", || m.registry().is_dir());
    bind(&m.registry().join("csi-b.sock"));
    eventually("a new plugin", || m.has("register csi-b"));
    m.stop();
}

/// The registry of before upstream 1.13 (`plugins/`): its first level
/// only, never `kubernetes.io`. Its sockets reach the handler marked as
/// found there; one that does not answer (a CSI driver's own endpoint
/// lives there too) is retried without an event.
#[test]
fn the_deprecated_directory_is_watched_one_level_deep() {
    let root = TempDir::with_prefix("rkubelet-plugins-").unwrap();
    let old = root.path().join(DEPRECATED_PLUGINS_DIR);
    fs::create_dir_all(old.join("drv/deeper")).unwrap();
    fs::create_dir_all(old.join("kubernetes.io/csi")).unwrap();
    bind(&old.join("dp-top.sock"));
    bind(&old.join("drv/dp-inner.sock"));
    bind(&old.join("drv/deeper/dp-deep.sock"));
    bind(&old.join("kubernetes.io/dp-mine.sock"));
    bind(&old.join("drv/dead-endpoint.sock"));
    let m = run_in(root);
    eventually("the old directory's plugins", || {
        m.has("register dp-top") && m.has("register dp-inner")
    });
    assert!(m.has("validate dp-top true"), "{:?}", m.lines("validate"));
    eventually("the endpoint dialled", || m.has("dial dead-endpoint"));

    fs::create_dir(old.join("drv2")).unwrap();
    bind(&old.join("drv2/dp-late.sock"));
    eventually("a driver directory made later", || {
        m.has("register dp-late")
    });
    bind(&m.registry().join("dp-new.sock"));
    eventually("the registry's plugin", || m.has("register dp-new"));
    assert!(m.has("validate dp-new false"));

    let dials = m.lines("dial");
    assert!(
        !dials
            .iter()
            .any(|l| l.contains("deep") || l.contains("mine")),
        "{dials:?}"
    );
    assert!(m.lines("failure").is_empty(), "{:?}", m.lines("failure"));
    m.stop();
}

#[test]
fn a_plugin_refused_after_validation_leaves_no_retry_to_wake_for() {
    let root = TempDir::with_prefix("rkubelet-plugins-").unwrap();
    let socket = root.path().join("csi-refused.sock");
    bind(&socket);
    let log = Log::default();
    let dial_times = DialTimes::default();
    let dialer = FakeDialer(log.clone(), dial_times.clone());
    let mut reconciler = Reconciler::new(Box::new(dialer));
    reconciler.add_handler(CSI_PLUGIN, Arc::new(FakeHandler(log.clone())));
    let mut desired = DesiredStateOfWorld::default();
    desired.add_or_update(&socket);
    let mut actual = ActualStateOfWorld::default();
    reconciler.reconcile(&desired, &mut actual);
    assert!(log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.starts_with("notify csi-refused false")));
    // As upstream, it stays in the actual state and is not tried again;
    // a retry left for it would be due at once forever after.
    reconciler.reconcile(&desired, &mut actual);
    assert_eq!(reconciler.next_retry(), None);
    let registers = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| *l == "register csi-refused")
        .count();
    assert_eq!(registers, 1);
}
