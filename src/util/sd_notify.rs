//! systemd's readiness protocol (sd_notify(3), as go-systemd's
//! `daemon.SdNotify` upstream uses): one datagram to `$NOTIFY_SOCKET`, a
//! path or, with a leading '@', a Linux abstract socket. No libsystemd.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The service is up (upstream sends it once the kubelet runs).
pub const READY: &str = "READY=1";
/// The service is stopping.
pub const STOPPING: &str = "STOPPING=1";
/// The service is alive (systemd's watchdog keep-alive).
pub const WATCHDOG: &str = "WATCHDOG=1";

/// Sends `state` to the service manager. Ok(false) when not run under a
/// notifying manager ($NOTIFY_SOCKET unset), as sd_notify returns 0.
pub fn notify(state: &str) -> std::io::Result<bool> {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let addr = socket_addr(std::os::unix::ffi::OsStrExt::as_bytes(socket.as_os_str()))?;
    let sock = UnixDatagram::unbound()?;
    // A datagram socket does not block on a live receiver; the bound is
    // for a manager that stopped reading.
    sock.set_write_timeout(Some(std::time::Duration::from_secs(1)))?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

fn socket_addr(name: &[u8]) -> std::io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    match name.strip_prefix(b"@") {
        Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name),
        None => SocketAddr::from_pathname(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name),
        ),
    }
}

/// Logs instead of failing: a lost notification must not stop the kubelet.
pub fn notify_logged(state: &str) {
    match notify(state) {
        Ok(true) => log::info!("notified the service manager: {state}"),
        Ok(false) => {}
        Err(e) => log::warn!("sd_notify {state}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abstract_and_path_sockets_receive_the_state() {
        let dir = std::env::temp_dir().join(format!("sdnotify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let by_path = UnixDatagram::bind(&path).unwrap();
        let name = format!("rkubelet-sdnotify-test-{}", std::process::id());
        let by_abstract = {
            use std::os::linux::net::SocketAddrExt;
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap()
        };
        let mut buf = [0u8; 64];
        for (env, rx) in [
            (path.display().to_string(), &by_path),
            (format!("@{name}"), &by_abstract),
        ] {
            let addr = socket_addr(env.as_bytes()).unwrap();
            let tx = UnixDatagram::unbound().unwrap();
            tx.send_to_addr(READY.as_bytes(), &addr).unwrap();
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], READY.as_bytes(), "{env}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
