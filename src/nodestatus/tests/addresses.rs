//! Node addresses: detection from interfaces and routes, and garbage input.

use super::*;

fn iface(name: &str, ip: &str, up: bool, loopback: bool) -> InterfaceAddr {
    InterfaceAddr {
        interface: name.into(),
        up,
        loopback,
        ip: ip.parse().unwrap(),
    }
}

const ROUTES: &str =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth1\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";

#[test]
fn address_detection() {
    let host = vec![
        iface("lo", "127.0.0.1", true, true),
        iface("eth1", "192.168.0.5", true, false),
        iface("eth0", "fe80::1", true, false),
        iface("eth0", "10.1.2.3", true, false),
    ];
    assert_eq!(
        address::parse_default_route_interfaces(ROUTES),
        vec!["eth0".to_string()]
    );
    assert_eq!(
        address::choose_host_ip(ROUTES, &host),
        Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)))
    );
    // Without a default route: the first usable interface.
    assert_eq!(
        address::choose_host_ip("", &host),
        Some("192.168.0.5".parse().unwrap())
    );
    // Nothing usable.
    assert_eq!(
        address::choose_host_ip("", &[iface("lo", "127.0.0.1", true, true)]),
        None
    );
    assert_eq!(
        address::choose_host_ip("", &[iface("eth9", "10.0.0.9", false, false)]),
        None
    );
    assert_eq!(
        address::choose_host_ip("", &[iface("eth0", "fd00::5", true, false)]),
        Some("fd00::5".parse().unwrap())
    );

    let addrs = address::node_addresses(None, "node-a", ROUTES, &host).unwrap();
    assert_eq!(
        addrs,
        vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.1.2.3".into()
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: "node-a".into()
            },
        ]
    );
    let explicit = address::node_addresses(
        Some("192.168.0.5".parse().unwrap()),
        "node-a",
        ROUTES,
        &host,
    )
    .unwrap();
    assert_eq!(explicit[0].address, "192.168.0.5");
    let by_name = address::node_addresses(None, "172.16.0.4", "", &[]).unwrap();
    assert_eq!(by_name[0].address, "172.16.0.4");
    assert!(address::node_addresses(None, "node-a", "", &[]).is_err());

    assert!(address::validate_node_ip(&"127.0.0.1".parse().unwrap(), &host).is_err());
    assert!(address::validate_node_ip(&"10.9.9.9".parse().unwrap(), &host).is_err());
    assert!(address::validate_node_ip(&"10.1.2.3".parse().unwrap(), &host).is_ok());
}

#[test]
fn address_detection_never_panics_on_garbage() {
    for routes in [
        "",
        "\n\n",
        "Iface\n",
        "eth0 zz yy",
        "a\tb\tc\td\te\tf\tg\th\n\u{0}\u{1}",
        "Iface\nx 00000000 0 zz 0 0 0 00000000\n",
    ] {
        let _ = address::parse_default_route_interfaces(routes);
        let _ = address::node_addresses(None, "n", routes, &[]);
    }
    // The real host: an answer or an error, never a panic.
    let mut host = address::HostNetwork::new();
    let _ = host.detect(None, "n", std::path::Path::new("/proc"));
    let _ = address::HostNetwork::new().detect(None, "n", std::path::Path::new("/nonexistent"));
    let _ = address::host_addrs();
}
