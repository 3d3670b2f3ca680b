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
            Ok(_conn) => return (ProbeResult::Success, String::new()),
            Err(e) => last = e.to_string(),
        }
    }
    (ProbeResult::Failure, format!("dial tcp {target}: {last}"))
}
