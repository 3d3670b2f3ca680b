//! The node's addresses (upstream nodestatus.NodeAddress without a cloud
//! provider): InternalIP is `--node-ip` when given, else the host's IP
//! chosen as apimachinery's `ChooseHostInterface` does (the IPv4 address of
//! the interface holding the default route), else the first global address
//! of an up, non-loopback interface; Hostname is the node's hostname.
//! Detection never panics: when nothing fits it returns an error.

use std::net::{IpAddr, Ipv6Addr};
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

/// The host's interface addresses (getifaddrs); empty when unreadable.
pub fn host_addrs() -> Vec<InterfaceAddr> {
    use nix::net::if_::InterfaceFlags;
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
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
        .collect()
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

/// Detects the node's addresses on this host.
pub fn detect(
    node_ip: Option<IpAddr>,
    hostname: &str,
    proc_dir: &Path,
) -> Result<Vec<NodeAddress>, String> {
    let routes = std::fs::read_to_string(proc_dir.join("net/route")).unwrap_or_default();
    node_addresses(node_ip, hostname, &routes, &host_addrs())
}
