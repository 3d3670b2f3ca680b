//! Checks of the settings that together size node allocatable: eviction
//! thresholds (signals, values, grace periods), `systemReserved` /
//! `kubeReserved`, and `enforceNodeAllocatable` with the cgroups it needs.

use super::{Duration, Errors, KubeletConfiguration};
use crate::util::quantity::parse_quantity;
use std::collections::{BTreeMap, BTreeSet};

pub const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "allocatableMemory.available",
    "pid.available",
];

/// An eviction threshold value: a percentage in [0%, 100%] or a
/// non-negative quantity.
fn check_threshold_value(field: &str, signal: &str, value: &str, e: &mut Errors) {
    let shown = format!("{signal}={value}");
    if let Some(pct) = value.strip_suffix('%') {
        let ok = pct.parse::<f64>().is_ok_and(|p| (0.0..=100.0).contains(&p));
        e.check(ok, field, shown, "percentage must be between 0% and 100%");
        return;
    }
    match parse_quantity(value) {
        Ok(q) => e.check(q >= 0, field, shown, "quantity must not be negative"),
        Err(err) => e.push(field, shown, err.to_string()),
    }
}

fn check_signal(field: &str, signal: &str, e: &mut Errors) -> bool {
    let known = EVICTION_SIGNALS.contains(&signal);
    e.check(
        known,
        field,
        signal,
        format!("unknown eviction signal; known signals: {EVICTION_SIGNALS:?}"),
    );
    known
}

fn validate_threshold_map(field: &str, map: &BTreeMap<String, String>, e: &mut Errors) {
    for (signal, value) in map {
        if check_signal(field, signal, e) {
            check_threshold_value(field, signal, value, e);
        }
    }
}

pub(super) fn validate_eviction(c: &KubeletConfiguration, e: &mut Errors) {
    validate_threshold_map("evictionHard", &c.eviction_hard, e);
    validate_threshold_map("evictionSoft", &c.eviction_soft, e);
    validate_threshold_map("evictionMinimumReclaim", &c.eviction_minimum_reclaim, e);
    for (signal, period) in &c.eviction_soft_grace_period {
        if check_signal("evictionSoftGracePeriod", signal, e) {
            if let Err(err) = Duration::parse(period) {
                e.push(
                    "evictionSoftGracePeriod",
                    format!("{signal}={period}"),
                    err.to_string(),
                );
            }
        }
    }
    // A soft threshold without a grace period would never fire.
    for signal in c.eviction_soft.keys() {
        e.check(
            c.eviction_soft_grace_period.contains_key(signal),
            "evictionSoftGracePeriod",
            signal,
            "every evictionSoft signal needs a grace period",
        );
    }
}

pub(super) fn validate_reserved(c: &KubeletConfiguration, e: &mut Errors) {
    const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];
    for (field, map) in [
        ("systemReserved", &c.system_reserved),
        ("kubeReserved", &c.kube_reserved),
    ] {
        for (res, qty) in map {
            let shown = format!("{res}={qty}");
            if !RESERVABLE.contains(&res.as_str()) {
                e.push(
                    field,
                    shown,
                    format!("cannot reserve this resource; allowed: {RESERVABLE:?}"),
                );
                continue;
            }
            match parse_quantity(qty) {
                Ok(q) => e.check(q >= 0, field, shown, "quantity must not be negative"),
                Err(err) => e.push(field, shown, err.to_string()),
            }
        }
    }
}

pub(super) fn validate_node_allocatable(c: &KubeletConfiguration, e: &mut Errors) {
    const F: &str = "enforceNodeAllocatable";
    let list = &c.enforce_node_allocatable;
    let has = |k: &str| list.iter().any(|v| v == k);
    for (a, b) in [
        ("system-reserved", "system-reserved-compressible"),
        ("kube-reserved", "kube-reserved-compressible"),
    ] {
        e.check(
            !(has(a) && has(b)),
            F,
            format!("{a},{b}"),
            "cannot be specified together",
        );
    }
    let mut seen = BTreeSet::new();
    for v in list {
        if !seen.insert(v.as_str()) {
            e.push(F, v, "duplicated enforcement");
            continue;
        }
        let needs_qos = match v.as_str() {
            "pods" => true,
            "system-reserved" | "system-reserved-compressible" => {
                let ok = !c.system_reserved_cgroup.is_empty();
                e.check(ok, F, v, "requires systemReservedCgroup to be set");
                true
            }
            "kube-reserved" | "kube-reserved-compressible" => {
                let ok = !c.kube_reserved_cgroup.is_empty();
                e.check(ok, F, v, "requires kubeReservedCgroup to be set");
                true
            }
            "none" => {
                e.check(
                    list.len() == 1,
                    F,
                    v,
                    "may not be combined with other enforcements",
                );
                false
            }
            _ => {
                e.push(
                    F,
                    v,
                    "valid options are pods, system-reserved, system-reserved-compressible, \
                     kube-reserved, kube-reserved-compressible or none",
                );
                false
            }
        };
        if needs_qos {
            e.check(c.cgroups_per_qos, F, v, "requires cgroupsPerQOS to be true");
        }
    }
}
