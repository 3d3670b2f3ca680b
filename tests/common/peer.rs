//! A test peer (a Python program in tests/plugins, written to a protocol's
//! published text) run for one test: its JSON-lines call log, its control
//! file and its stderr in a directory of its own. Killed when dropped; its
//! stderr is printed when the test is failing.

use std::ffi::OsStr;
use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{peer_calls, repo_dir};

pub struct Peer {
    child: Option<Child>,
    pub dir: PathBuf,
    pub log: PathBuf,
    pub control: PathBuf,
}

impl Peer {
    /// Runs `tests/plugins/<script>` with `--log` and `--control` in `dir`,
    /// then `args`.
    pub fn spawn<S: AsRef<OsStr>>(dir: PathBuf, script: &str, args: &[S]) -> Peer {
        fs::create_dir_all(&dir).unwrap();
        let (log, control) = (dir.join("calls.jsonl"), dir.join("control.json"));
        let stderr = fs::File::create(dir.join("stderr.log")).unwrap();
        let child = Command::new("/usr/bin/python3")
            .arg(repo_dir().join("tests/plugins").join(script))
            .arg("--log")
            .arg(&log)
            .arg("--control")
            .arg(&control)
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start tests/plugins/{script}: {e}"));
        Peer {
            child: Some(child),
            dir,
            log,
            control,
        }
    }

    /// The calls the peer answered, by RPC name.
    pub fn calls(&self, rpc: &str) -> Vec<Value> {
        peer_calls(&self.log, rpc)
    }

    /// Replaces the peer's control file at once (it reads it at each call).
    pub fn set_control(&self, control: Value) {
        let tmp = self.control.with_extension("tmp");
        fs::write(&tmp, control.to_string()).unwrap();
        fs::rename(&tmp, &self.control).unwrap();
    }

    /// SIGTERM, as a plugin's owner stops it (it cleans up after itself),
    /// and waits for it to go.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let err = fs::read_to_string(self.dir.join("stderr.log")).unwrap_or_default();
            eprintln!("===== peer {} stderr =====\n{err}", self.dir.display());
        }
    }
}
