//! The systemd side of the cgroup manager under `cgroupDriver: systemd`
//! (upstream: runc's `libcontainer/cgroups/systemd`, which the kubelet's
//! cgroup manager drives through Apply(-1), Set and Destroy).
//!
//! systemd owns every slice below the root. A limit written only to a
//! slice's files lasts until systemd next realizes the unit (as it does
//! when a container scope starts below it) and writes back the unit's own
//! properties, its defaults. So each kubepods, QoS and pod slice is
//! started as a transient unit that carries its limits as properties,
//! later changes go through SetUnitProperties, and a pod slice is stopped,
//! not only rmdir'ed, when its pod goes (or the unit would stay loaded).
//!
//! Every call is on a connection of its own to the system bus, opened
//! and closed around it: pod workers call in parallel and none waits on
//! another's call, and no thread is added. Each call and each job wait has
//! a deadline.

use std::time::{Duration, Instant};

use rkubelet_dbus::{Connection, Message, Value};

use super::cgroup_manager::Version;
use super::cgroup_name::CgroupName;
use super::helpers::{cpu_shares_to_weight, ResourceConfig};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
/// libcontainer's wait for a unit's start or stop job.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// One method call's reply.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    #[error("systemd {call} {unit}: {error}")]
    Bus {
        call: &'static str,
        unit: String,
        error: rkubelet_dbus::Error,
    },
    #[error("systemd {call} {unit}: job ended {result:?}")]
    Job {
        call: &'static str,
        unit: String,
        result: String,
    },
    #[error("systemd {call} {unit}: no JobRemoved within {}s", JOB_TIMEOUT.as_secs())]
    JobTimeout { call: &'static str, unit: String },
}

/// A unit property: its name and value (the `(sv)` of systemd's calls).
pub type Property = (&'static str, Value);

/// The unit of a cgroup and the slice it sits in (upstream
/// libctCgroupConfig: Name is the last path element, Parent the one
/// before it, `-.slice` at the top).
pub fn unit_and_parent(name: &CgroupName) -> (String, String) {
    let path = name.to_systemd();
    let mut parts = path.rsplit('/').filter(|p| !p.is_empty());
    let unit = parts.next().unwrap_or("-.slice").to_string();
    let parent = parts.next().unwrap_or("-.slice").to_string();
    (unit, parent)
}

/// The resource properties for `rc` (runc's genV1ResourcesProperties and
/// genV2ResourcesProperties): on v2 MemoryMax, CPUWeight and TasksMax,
/// on v1 MemoryLimit and CPUShares; the CPU quota on both.
pub fn resource_properties(version: Version, rc: &ResourceConfig) -> Vec<Property> {
    let mut out = Vec::new();
    if let Some(m) = rc.memory.filter(|m| *m != 0) {
        let key = match version {
            Version::V2 => "MemoryMax",
            Version::V1 => "MemoryLimit",
        };
        out.push((key, Value::U64(unlimited_as_max(m))));
    }
    if let Some(s) = rc.cpu_shares {
        out.push(match version {
            Version::V2 => ("CPUWeight", Value::U64(cpu_shares_to_weight(s))),
            Version::V1 => ("CPUShares", Value::U64(s)),
        });
    }
    cpu_quota(
        &mut out,
        rc.cpu_quota.unwrap_or(0),
        rc.cpu_period.unwrap_or(0),
    );
    if let Some(p) = rc.pids_limit.filter(|p| *p > 0 || *p == -1) {
        out.push(("TasksAccounting", Value::Bool(true)));
        out.push(("TasksMax", Value::U64(unlimited_as_max(p))));
    }
    out
}

/// -1 (unlimited) is systemd's infinity, u64::MAX.
fn unlimited_as_max(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// runc's addCpuQuota: the quota per second of time, rounded up to
/// systemd's 10 ms granularity, and the period it is spread over.
fn cpu_quota(out: &mut Vec<Property>, quota: i64, period: u64) {
    if period != 0 {
        out.push(("CPUQuotaPeriodUSec", Value::U64(period)));
    }
    if quota == 0 && period == 0 {
        return;
    }
    let mut per_sec = u64::MAX;
    if quota > 0 {
        let period = if period == 0 { 100_000 } else { period };
        per_sec = (quota as u64).saturating_mul(1_000_000) / period;
        if per_sec % 10_000 != 0 {
            per_sec = (per_sec / 10_000 + 1) * 10_000;
        }
    }
    out.push(("CPUQuotaPerSecUSec", Value::U64(per_sec)));
}

/// The properties a slice starts with besides its resources (runc's
/// Apply for a slice: its parent through Wants=, every accounting on, no
/// default dependencies).
fn slice_properties(version: Version, unit: &str, parent: &str) -> Vec<Property> {
    let io = match version {
        Version::V2 => "IOAccounting",
        Version::V1 => "BlockIOAccounting",
    };
    vec![
        (
            "Description",
            Value::Str(format!("libcontainer container {unit}")),
        ),
        ("Wants", Value::strings([parent])),
        ("MemoryAccounting", Value::Bool(true)),
        ("CPUAccounting", Value::Bool(true)),
        (io, Value::Bool(true)),
        ("TasksAccounting", Value::Bool(true)),
        ("DefaultDependencies", Value::Bool(false)),
    ]
}

fn property_array(props: Vec<Property>) -> Value {
    Value::Array {
        elem: "(sv)".into(),
        items: props
            .into_iter()
            .map(|(k, v)| Value::Struct(vec![Value::Str(k.into()), v.into_variant()]))
            .collect(),
    }
}

/// systemd's unit manager on the system bus.
#[derive(Clone, Debug)]
pub struct Systemd {
    pub version: Version,
}

impl Systemd {
    /// Starts `name`'s slice with `rc` as its properties (runc's Apply(-1)
    /// then Set's properties). A slice that exists already (runc ignores
    /// UnitExists for the kubelet's slices) gets `rc` set on it instead.
    pub fn start_slice(&self, name: &CgroupName, rc: &ResourceConfig) -> Result<(), SystemdError> {
        let (unit, parent) = unit_and_parent(name);
        let mut props = slice_properties(self.version, &unit, &parent);
        props.extend(resource_properties(self.version, rc));
        let body = vec![
            Value::Str(unit.clone()),
            Value::Str("replace".into()),
            property_array(props),
            Value::Array {
                elem: "(sa(sv))".into(),
                items: Vec::new(),
            },
        ];
        match self.job("StartTransientUnit", &unit, body) {
            Err(SystemdError::Bus {
                error: rkubelet_dbus::Error::Remote(ref n, _),
                ..
            }) if n == "org.freedesktop.systemd1.UnitExists" => self.set_properties(name, rc),
            other => other,
        }
    }

    /// Sets `rc` on `name`'s unit at run time (runc's Set).
    pub fn set_properties(
        &self,
        name: &CgroupName,
        rc: &ResourceConfig,
    ) -> Result<(), SystemdError> {
        let (unit, _) = unit_and_parent(name);
        let props = resource_properties(self.version, rc);
        if props.is_empty() {
            return Ok(());
        }
        let body = vec![
            Value::Str(unit.clone()),
            Value::Bool(true),
            property_array(props),
        ];
        let call = "SetUnitProperties";
        let mut conn = connect(call, &unit)?;
        conn.call(manager_call(call, body), CALL_TIMEOUT)
            .map_err(|error| SystemdError::Bus { call, unit, error })?;
        Ok(())
    }

    /// Stops `name`'s unit and waits for it to go (runc's Destroy); a unit
    /// systemd does not know is already gone.
    pub fn stop(&self, name: &CgroupName) -> Result<(), SystemdError> {
        let (unit, _) = unit_and_parent(name);
        let body = vec![Value::Str(unit.clone()), Value::Str("replace".into())];
        match self.job("StopUnit", &unit, body) {
            Err(SystemdError::Bus {
                error: rkubelet_dbus::Error::Remote(ref n, _),
                ..
            }) if n == "org.freedesktop.systemd1.NoSuchUnit" => Ok(()),
            other => other,
        }
    }

    /// Calls `call` (which answers with a job) and waits for the job's
    /// JobRemoved signal. The signal is subscribed to before the call, so
    /// it cannot pass unseen.
    fn job(&self, call: &'static str, unit: &str, body: Vec<Value>) -> Result<(), SystemdError> {
        let bus = |error| SystemdError::Bus {
            call,
            unit: unit.to_string(),
            error,
        };
        let mut conn = connect(call, unit)?;
        let rule = format!(
            "type='signal',sender='{DEST}',path='{PATH}',interface='{MANAGER}',member='JobRemoved'"
        );
        let add_match = Message::method_call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "AddMatch",
            vec![Value::Str(rule)],
        );
        conn.call(add_match, CALL_TIMEOUT).map_err(bus)?;
        conn.call(manager_call("Subscribe", Vec::new()), CALL_TIMEOUT)
            .map_err(bus)?;
        let reply = conn
            .call(manager_call(call, body), CALL_TIMEOUT)
            .map_err(bus)?;
        let job = reply.body.first().and_then(Value::as_str).unwrap_or("");
        let job = job.to_string();
        let deadline = Instant::now() + JOB_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SystemdError::JobTimeout {
                    call,
                    unit: unit.to_string(),
                });
            }
            let Some(m) = conn.recv(left).map_err(bus)? else {
                continue;
            };
            if !m.is(MANAGER, "JobRemoved") {
                continue;
            }
            // JobRemoved(u id, o job, s unit, s result)
            if m.body.get(1).and_then(Value::as_str) != Some(job.as_str()) {
                continue;
            }
            let result = m.body.get(3).and_then(Value::as_str).unwrap_or("");
            if result == "done" {
                return Ok(());
            }
            return Err(SystemdError::Job {
                call,
                unit: unit.to_string(),
                result: result.to_string(),
            });
        }
    }
}

fn manager_call(member: &str, body: Vec<Value>) -> Message {
    Message::method_call(DEST, PATH, MANAGER, member, body)
}

fn connect(call: &'static str, unit: &str) -> Result<Connection, SystemdError> {
    Connection::system(CALL_TIMEOUT).map_err(|error| SystemdError::Bus {
        call,
        unit: unit.to_string(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(version: Version, rc: ResourceConfig) -> Vec<(&'static str, Value)> {
        resource_properties(version, &rc)
    }

    #[test]
    fn units_and_parents_are_the_kubelets() {
        let kubepods = CgroupName::root().child("kubepods");
        assert_eq!(
            unit_and_parent(&kubepods),
            ("kubepods.slice".to_string(), "-.slice".to_string())
        );
        let pod = kubepods.child("burstable").child("pod12-ab");
        assert_eq!(
            unit_and_parent(&pod),
            (
                "kubepods-burstable-pod12_ab.slice".to_string(),
                "kubepods-burstable.slice".to_string()
            )
        );
    }

    #[test]
    fn v2_properties_carry_runcs_values() {
        let got = props(
            Version::V2,
            ResourceConfig {
                memory: Some(67_108_864),
                cpu_shares: Some(512),
                cpu_quota: Some(50_000),
                cpu_period: Some(100_000),
                pids_limit: Some(-1),
            },
        );
        assert_eq!(
            got,
            vec![
                ("MemoryMax", Value::U64(67_108_864)),
                ("CPUWeight", Value::U64(20)),
                ("CPUQuotaPeriodUSec", Value::U64(100_000)),
                ("CPUQuotaPerSecUSec", Value::U64(500_000)),
                ("TasksAccounting", Value::Bool(true)),
                ("TasksMax", Value::U64(u64::MAX)),
            ]
        );
    }

    #[test]
    fn v1_properties_and_quota_rounding() {
        // 1 ms of a 100 ms period is 10 ms a second: already a multiple of
        // 10 ms. 1.5 ms of 100 ms is 15 ms a second, rounded up to 20.
        let got = props(
            Version::V1,
            ResourceConfig {
                memory: Some(-1),
                cpu_shares: Some(2),
                cpu_quota: Some(1_500),
                cpu_period: Some(100_000),
                pids_limit: None,
            },
        );
        assert_eq!(
            got,
            vec![
                ("MemoryLimit", Value::U64(u64::MAX)),
                ("CPUShares", Value::U64(2)),
                ("CPUQuotaPeriodUSec", Value::U64(100_000)),
                ("CPUQuotaPerSecUSec", Value::U64(20_000)),
            ]
        );
        // Unlimited quota with a period is infinity per second.
        let mut out = Vec::new();
        cpu_quota(&mut out, -1, 100_000);
        assert_eq!(out[1], ("CPUQuotaPerSecUSec", Value::U64(u64::MAX)));
        // Nothing asked, nothing sent.
        assert!(props(Version::V2, ResourceConfig::default()).is_empty());
    }
}
