//! A private dbus-daemon for tests (Debian package dbus): a system-type bus
//! that allows everything, listening in a directory the caller owns.

use std::fs;
use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the daemon may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running private bus; killed on drop (its directory stays the caller's).
pub struct TestBus {
    child: Child,
    address: String,
}

impl TestBus {
    /// Starts `dbus-daemon` listening at `dir/system_bus_socket` and waits
    /// until it does. Fails when dbus-daemon is missing, exits, or does not
    /// listen in time.
    pub fn start(dir: &Path) -> io::Result<TestBus> {
        let sock = dir.join("system_bus_socket");
        let conf = dir.join("bus.conf");
        fs::write(&conf, config(&sock))?;
        let child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--nopidfile"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // Killed by drop on every early return below.
        let mut bus = TestBus {
            child,
            address: format!("unix:path={}", sock.display()),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        // The socket's file appears at bind(), before listen(): a connect
        // in between is refused, so wait for one that is accepted.
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            if let Some(status) = bus.child.try_wait()? {
                return Err(io::Error::other(format!("dbus-daemon exited: {status}")));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("dbus-daemon did not listen at {}", sock.display()),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(bus)
    }

    /// The address to connect to (`unix:path=...`).
    pub fn address(&self) -> &str {
        &self.address
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Anyone may own, send and receive anything: the tests stand in for
/// system services.
fn config(sock: &Path) -> String {
    format!(
        "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN\"\n \
         \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
         <busconfig>\n  <type>system</type>\n  <listen>unix:path={}</listen>\n  \
         <auth>EXTERNAL</auth>\n  <policy context=\"default\">\n    <allow user=\"*\"/>\n    \
         <allow own=\"*\"/>\n    <allow send_destination=\"*\"/>\n    \
         <allow receive_sender=\"*\"/>\n  </policy>\n</busconfig>\n",
        sock.display()
    )
}
