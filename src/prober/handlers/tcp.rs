//! TCP socket probes (upstream `pkg/probe/tcp`): success when a connection
//! can be opened within the timeout.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::join_host_port;
use crate::prober::ProbeResult;

pub fn run_tcp(host: &str, port: u16, timeout: Duration) -> (ProbeResult, String) {
    let target = join_host_port(host, port);
    let deadline = Instant::now() + timeout;
    let addrs = match (host.trim_matches(|c| c == '[' || c == ']'), port).to_socket_addrs() {
        Ok(addrs) => addrs,
        Err(e) => return (ProbeResult::Failure, format!("dial tcp {target}: {e}")),
    };
    let mut last = String::from("no addresses");
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            last = "i/o timeout".to_string();
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(conn) => {
                short_linger(&conn);
                return (ProbeResult::Success, String::new());
            }
            Err(e) => last = e.to_string(),
        }
    }
    (ProbeResult::Failure, format!("dial tcp {target}: {last}"))
}

/// upstream ProbeDialer (kubernetes#89898): SO_LINGER of 1 s, so the close
/// still ends with a FIN but a node probing many pods every few seconds
/// does not pile up sockets in TIME-WAIT for the kernel to keep.
fn short_linger(conn: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 1,
    };
    if let Err(e) = nix::sys::socket::setsockopt(conn, nix::sys::socket::sockopt::Linger, &linger) {
        log::debug!("probe socket: SO_LINGER: {e}");
    }
}
