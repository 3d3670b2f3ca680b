//! The node's addresses (upstream nodestatus.NodeAddress without a cloud
//! provider): InternalIP is `--node-ip` when given, else the host's IP
//! chosen as apimachinery's `ChooseHostInterface` does (the IPv4 address of
//! the interface holding the default route), else the first global address
//! of an up, non-loopback interface; Hostname is the node's hostname.
//! Detection never panics: when nothing fits it returns an error.

use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use k8s_openapi::api::core::v1::NodeAddress;

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub interface: String,
    pub up: bool,
    pub loopback: bool,
    pub ip: IpAddr,
}

/// The host's interface addresses (getifaddrs).
pub fn host_addrs() -> nix::Result<Vec<InterfaceAddr>> {
    use nix::net::if_::InterfaceFlags;
    let addrs = nix::ifaddrs::getifaddrs()?;
    Ok(addrs
        .filter_map(|a| {
            let storage = a.address?;
            let ip = if let Some(v4) = storage.as_sockaddr_in() {
                IpAddr::V4(v4.ip())
            } else if let Some(v6) = storage.as_sockaddr_in6() {
                IpAddr::V6(v6.ip())
            } else {
                return None;
            };
            Some(InterfaceAddr {
                interface: a.interface_name,
                up: a.flags.contains(InterfaceFlags::IFF_UP),
                loopback: a.flags.contains(InterfaceFlags::IFF_LOOPBACK),
                ip,
            })
        })
        .collect())
}

/// Interfaces holding an IPv4 default route in /proc/net/route, in file order.
pub fn parse_default_route_interfaces(route_table: &str) -> Vec<String> {
    route_table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ...
            if f.len() < 8 {
                return None;
            }
            let up = u32::from_str_radix(f[3], 16).is_ok_and(|flags| flags & 0x1 != 0);
            (f[1] == "00000000" && f[7] == "00000000" && up).then(|| f[0].to_string())
        })
        .collect()
}

/// A unicast address usable as a node IP (apimachinery's global-unicast test).
pub fn is_global_unicast(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback() || v6.is_multicast() || v6.is_unspecified() || is_v6_link_local(v6))
        }
    }
}

fn is_v6_link_local(v6: &Ipv6Addr) -> bool {
    (v6.segments()[0] & 0xffc0) == 0xfe80
}

/// Why `ip` cannot be the node IP (upstream validateNodeIP), if it cannot.
pub fn validate_node_ip(ip: &IpAddr, host: &[InterfaceAddr]) -> Result<(), String> {
    if ip.is_loopback() {
        return Err("nodeIP can't be loopback address".into());
    }
    if ip.is_multicast() {
        return Err("nodeIP can't be a multicast address".into());
    }
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => is_v6_link_local(v6),
    };
    if link_local {
        return Err("nodeIP can't be a link-local unicast address".into());
    }
    if ip.is_unspecified() {
        return Err("nodeIP can't be an all zeros address".into());
    }
    if !host.is_empty() && !host.iter().any(|a| a.ip == *ip) {
        return Err(format!(
            "node IP: {ip:?} not found in the host's network interfaces"
        ));
    }
    Ok(())
}

/// The host IP: the default-route interface's first global IPv4 address,
/// else the first global IPv4 then IPv6 address of an up, non-loopback
/// interface.
pub fn choose_host_ip(route_table: &str, host: &[InterfaceAddr]) -> Option<IpAddr> {
    for iface in parse_default_route_interfaces(route_table) {
        if let Some(a) = host
            .iter()
            .find(|a| a.interface == iface && a.ip.is_ipv4() && is_global_unicast(&a.ip))
        {
            return Some(a.ip);
        }
    }
    let usable = |a: &&InterfaceAddr| a.up && !a.loopback && is_global_unicast(&a.ip);
    host.iter()
        .filter(usable)
        .find(|a| a.ip.is_ipv4())
        .or_else(|| host.iter().filter(usable).find(|a| a.ip.is_ipv6()))
        .map(|a| a.ip)
}

/// The node's addresses: `[InternalIP, Hostname]`.
pub fn node_addresses(
    node_ip: Option<IpAddr>,
    hostname: &str,
    route_table: &str,
    host: &[InterfaceAddr],
) -> Result<Vec<NodeAddress>, String> {
    let ip = match node_ip {
        Some(ip) => {
            if let Err(e) = validate_node_ip(&ip, host) {
                // Upstream refuses such an IP; an operator's explicit choice is kept.
                log::warn!("Using node IP {ip} although it does not validate: {e}");
            }
            Some(ip)
        }
        // A hostname that is itself an IP address is used as such.
        None => match hostname.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => choose_host_ip(route_table, host),
        },
    };
    let ip = ip.ok_or_else(|| {
        format!("can't get ip address of node {hostname}. error: no usable host interface address")
    })?;
    Ok(vec![
        NodeAddress {
            type_: "InternalIP".into(),
            address: ip.to_string(),
        },
        NodeAddress {
            type_: "Hostname".into(),
            address: hostname.to_string(),
        },
    ])
}

/// One read of the route table (`net/route` under `proc_dir`) and the
/// interfaces' addresses.
struct HostRead {
    routes: String,
    addrs: Vec<InterfaceAddr>,
    /// Both were read; a read that failed is not kept.
    complete: bool,
}

fn read_host_network(proc_dir: &Path) -> HostRead {
    let routes = std::fs::read_to_string(proc_dir.join("net/route"));
    let addrs = host_addrs();
    HostRead {
        complete: routes.is_ok() && addrs.is_ok(),
        routes: routes.unwrap_or_default(),
        addrs: addrs.unwrap_or_default(),
    }
}

/// The host's route table and interface addresses, read again only when
/// the kernel has announced a change of links, addresses or routes since
/// the last read. Node status needs them every 10 s, and getifaddrs dumps
/// every link with its statistics: with a veth per pod that was half of
/// node status's CPU. The announcements wait in a netlink socket that is
/// drained without blocking before each use, so no thread waits on it.
pub struct HostNetwork {
    /// None when the socket could not be made: then every use reads.
    changes: Option<OwnedFd>,
    last: Option<HostRead>,
}

/// Links, IPv4 and IPv6 addresses and routes.
const CHANGE_GROUPS: libc::c_int = libc::RTMGRP_LINK
    | libc::RTMGRP_IPV4_IFADDR
    | libc::RTMGRP_IPV4_ROUTE
    | libc::RTMGRP_IPV6_IFADDR
    | libc::RTMGRP_IPV6_ROUTE;

impl HostNetwork {
    /// Subscribes to the changes first, so none is missed between the
    /// first read and the subscription.
    pub fn new() -> Self {
        let changes = subscribe()
            .inspect_err(|e| log::info!("host network changes not watched; read each time: {e}"))
            .ok();
        Self::with_changes(changes)
    }

    fn with_changes(changes: Option<OwnedFd>) -> Self {
        Self {
            changes,
            last: None,
        }
    }

    /// Detects the node's addresses on this host, from the last read when
    /// nothing changed since.
    pub fn detect(
        &mut self,
        node_ip: Option<IpAddr>,
        hostname: &str,
        proc_dir: &Path,
    ) -> Result<Vec<NodeAddress>, String> {
        let read = self.current(|| read_host_network(proc_dir));
        node_addresses(node_ip, hostname, &read.routes, &read.addrs)
    }

    /// The last read, or a new one when something was announced since or
    /// the last read failed.
    fn current(&mut self, read: impl FnOnce() -> HostRead) -> &HostRead {
        let changed = self.changes.as_ref().is_none_or(drain);
        if changed || self.last.as_ref().is_some_and(|r| !r.complete) {
            self.last = None;
        }
        self.last.get_or_insert_with(read)
    }
}

impl Default for HostNetwork {
    fn default() -> Self {
        Self::new()
    }
}

/// A non-blocking rtnetlink socket in the change groups.
fn subscribe() -> nix::Result<OwnedFd> {
    use nix::sys::socket::{
        bind, socket, AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType,
    };
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, CHANGE_GROUPS as u32))?;
    Ok(fd)
}

/// Whether anything was announced since the last drain; reads it all.
/// An error (ENOBUFS: announcements were dropped) counts as a change.
fn drain(fd: &OwnedFd) -> bool {
    use nix::errno::Errno;
    use nix::sys::socket::{recv, MsgFlags};
    // (bounded: a host whose network changes without pause is read anyway)
    const MAX_MESSAGES: usize = 256;
    let mut buf = [0u8; 8192];
    let mut changed = false;
    for _ in 0..MAX_MESSAGES {
        match recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(_) => changed = true,
            Err(Errno::EAGAIN) => return changed,
            Err(Errno::EINTR) => {}
            Err(_) => return true,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn counting(reads: &mut usize) -> impl FnOnce() -> HostRead + '_ {
        move || {
            *reads += 1;
            HostRead {
                routes: format!("read {reads}"),
                addrs: Vec::new(),
                complete: true,
            }
        }
    }

    #[test]
    fn the_host_network_is_read_again_only_after_an_announcement() {
        let (ours, kernel) = UnixDatagram::pair().expect("socketpair");
        let mut net = HostNetwork::with_changes(Some(OwnedFd::from(ours)));
        let mut reads = 0;
        net.current(counting(&mut reads));
        assert_eq!(net.current(counting(&mut reads)).routes, "read 1");
        assert_eq!(reads, 1, "nothing announced: the last read serves");
        kernel.send(b"link").expect("send");
        kernel.send(b"route").expect("send");
        assert_eq!(net.current(counting(&mut reads)).routes, "read 2");
        net.current(counting(&mut reads));
        assert_eq!(reads, 2, "two announcements, one read");
    }

    #[test]
    fn a_failed_read_is_not_kept() {
        let (ours, _kernel) = UnixDatagram::pair().expect("socketpair");
        let mut net = HostNetwork::with_changes(Some(OwnedFd::from(ours)));
        let mut reads = 0;
        let failing = |reads: &mut usize| {
            *reads += 1;
            HostRead {
                routes: String::new(),
                addrs: Vec::new(),
                complete: false,
            }
        };
        net.current(|| failing(&mut reads));
        net.current(counting(&mut reads));
        assert_eq!(reads, 2, "read again after the failure");
        net.current(counting(&mut reads));
        assert_eq!(reads, 2, "a complete read is kept");
    }

    #[test]
    fn without_announcements_every_use_reads() {
        let mut net = HostNetwork::with_changes(None);
        let mut reads = 0;
        net.current(counting(&mut reads));
        net.current(counting(&mut reads));
        assert_eq!(reads, 2);
    }

    #[test]
    fn a_socket_that_errs_counts_as_a_change() {
        // (ENOTSOCK here; ENOBUFS from the kernel when it dropped some)
        let fd = std::fs::File::open("/dev/null")
            .map(OwnedFd::from)
            .expect("null");
        assert!(drain(&fd));
    }

    #[test]
    fn the_kernel_accepts_the_subscription_and_draining_does_not_block() {
        let fd = subscribe().expect("rtnetlink subscription");
        // Non-blocking: returns at once whether or not the host changed.
        drain(&fd);
    }
}
