//! systemd integration: READY=1 on $NOTIFY_SOCKET once the kubelet is up
//! (after its healthz answers, as upstream notifies after RunKubelet), and
//! STOPPING=1 on SIGTERM. And graceful node shutdown without a system
//! bus: one line says it is off.
//!
//! Test number 72.

mod common;

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use common::*;

#[test]
fn sd_notify_ready_after_healthz_and_stopping_on_sigterm() {
    let mut env = Env::new("sd_notify_ready", 72);
    // An abstract socket, as systemd's own: NOTIFY_SOCKET=@name.
    let name = format!("rkubelet-e2e-notify-{}", std::process::id());
    let listener =
        UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .expect("bind the notify socket");
    listener.set_read_timeout(Some(secs(30))).unwrap();
    env.kubelet_env
        .push(("NOTIFY_SOCKET".into(), format!("@{name}")));
    env.set_config("shutdownGracePeriod", "2s");
    let no_bus = format!("unix:path={}/no-bus-here", env.dir.display());
    env.kubelet_env
        .push(("DBUS_SYSTEM_BUS_ADDRESS".into(), no_bus));
    env.start_kubelet();
    let mut buf = [0u8; 256];
    let n = listener
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no READY=1 within 30 s ({e}):\n{}", env.log_tail(30)));
    assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), "READY=1");
    // Healthz was started before the notification: it answers at once.
    let health = env.healthz();
    assert!(health.is_some(), "READY=1 came before healthz was up");
    env.wait_healthy(secs(20));
    wait_until(secs(10), "the node shutdown manager gives up", || {
        !env.log_lines_with("graceful node shutdown is off")
            .is_empty()
    });
    let pid = env.kubelet_pid().expect("rkubelet runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let n = listener
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no STOPPING=1 after SIGTERM ({e}):\n{}", env.log_tail(30)));
    assert_eq!(std::str::from_utf8(&buf[..n]).unwrap(), "STOPPING=1");
    let status = eventually(secs(15), "rkubelet exits", || env.kubelet_exit());
    assert!(status.success(), "{status:?}");
    let off = env.log_lines_with("graceful node shutdown is off");
    assert_eq!(off.len(), 1, "{off:?}");
    assert!(off[0].contains("no-bus-here"), "{off:?}");
}
