//! Unit tests of node status, split by the concern they cover:
//! `registration` (the initial node, reconciling an existing one),
//! `machine_info` (capacity, allocatable, /proc and /sys parsing),
//! `addresses` (node address detection), `conditions` (the setters:
//! Ready, pressure, events, images, versions), `status_patch` (change
//! detection and the strategic merge patch) and `api_server` (the
//! loops against a scripted API server). This file holds the shared
//! helpers.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};

use super::address::{self, InterfaceAddr};
use super::machine::{self, quantity, HugePages, MachineInfo};
use super::patch::{node_status_has_changed, node_status_patch};
use super::setters::{self, NodeEvent, Pressure, Reservation};
use super::*;
use crate::client::testing::{client, Reply, TestServer};
use crate::stats::FsInfo;

mod addresses;
mod api_server;
mod conditions;
mod machine_info;
mod registration;
mod status_patch;

fn t(secs: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs).unwrap())
}

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

fn named(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn conditions(node: &Node) -> Vec<NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

fn machine_info() -> MachineInfo {
    MachineInfo {
        num_cores: 4,
        memory_capacity: 16318936 * 1024,
        swap_capacity: 0,
        hugepages: vec![
            HugePages {
                page_size: 2 << 20,
                num_pages: 512,
            },
            HugePages {
                page_size: 1 << 30,
                num_pages: 0,
            },
        ],
        machine_id: "mid".into(),
        system_uuid: "uuid".into(),
        boot_id: "boot-1".into(),
    }
}

/// A Ready condition (the conditions and the status-patch tests use it).
fn ready(
    status: &str,
    reason: &str,
    message: &str,
    transition: i64,
    heartbeat: i64,
) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(t(heartbeat)),
        last_transition_time: Some(t(transition)),
    }
}
