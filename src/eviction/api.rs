//! Eviction signals and thresholds (upstream `pkg/kubelet/eviction/api/types.go`
//! and the threshold parsing of `helpers.go`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::kubeletconfig::DurationError;
use crate::util::quantity::{parse_quantity, QuantityError};

/// An evictionHard/Soft/SoftGracePeriod/MinimumReclaim entry that does
/// not parse, named as upstream names it.
#[derive(Debug, thiserror::Error)]
pub enum ThresholdError {
    #[error("unsupported eviction signal {0}")]
    UnsupportedSignal(String),
    #[error("invalid percentage {value:?}: {error}")]
    Percentage {
        value: String,
        error: std::num::ParseFloatError,
    },
    #[error("invalid percentage {0:?}: must be in (0%, 100%]")]
    PercentageRange(String),
    #[error("{0}")]
    Quantity(QuantityError),
    #[error("must not be negative")]
    Negative,
    #[error("eviction threshold {signal}: {error}")]
    Statement {
        signal: Signal,
        error: Box<ThresholdError>,
    },
    #[error("eviction threshold {signal} must be positive: {value}")]
    NotPositive { signal: Signal, value: String },
    #[error("grace period must be specified for the soft eviction threshold {0}")]
    NoGracePeriod(Signal),
    #[error("evictionSoftGracePeriod {signal}: {error}")]
    GracePeriod {
        signal: Signal,
        error: DurationError,
    },
    #[error("evictionMinimumReclaim {signal}: {error}")]
    MinimumReclaim {
        signal: Signal,
        error: Box<ThresholdError>,
    },
}

/// What the eviction manager observes (upstream evictionapi.Signal). The
/// containerfs signals are not separate here: this kubelet has no split
/// image filesystem, and upstream derives them from nodefs or imagefs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

/// A node condition the eviction manager reports (upstream's names).
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeCondition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl NodeCondition {
    /// The condition type in the Node's status.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeCondition::MemoryPressure => "MemoryPressure",
            NodeCondition::DiskPressure => "DiskPressure",
            NodeCondition::PidPressure => "PIDPressure",
        }
    }
}

/// The resource a signal measures (upstream signalToResource).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Signal {
    pub const ALL: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(s: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|sig| sig.as_str() == s)
    }

    /// upstream signalToNodeCondition.
    pub fn node_condition(self) -> NodeCondition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
                NodeCondition::MemoryPressure
            }
            Signal::PidAvailable => NodeCondition::PidPressure,
            _ => NodeCondition::DiskPressure,
        }
    }

    /// upstream signalToResource.
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Resource::EphemeralStorage,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    pub fn is_memory(self) -> bool {
        self.resource() == Resource::Memory
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A threshold's value: a quantity or a fraction of capacity (upstream
/// ThresholdValue). Node allocatable reads the hard thresholds through
/// this type too, so both agree on every value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThresholdValue {
    /// Milli-units.
    Quantity(i128),
    /// A fraction in float32, as upstream's ParsePercentage keeps it.
    Percentage(f32),
}

impl ThresholdValue {
    /// `"100Mi"` or `"10%"`; 0% is rejected (see [`parse_statement`] for
    /// how eviction treats 0% and 100%).
    pub fn parse(s: &str) -> Result<ThresholdValue, ThresholdError> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f32 = p.parse().map_err(|error| ThresholdError::Percentage {
                value: s.to_string(),
                error,
            })?;
            let v = v / 100.0;
            if !(0.0..=1.0).contains(&v) || v == 0.0 {
                return Err(ThresholdError::PercentageRange(s.to_string()));
            }
            return Ok(ThresholdValue::Percentage(v));
        }
        parse_quantity(s)
            .map(ThresholdValue::Quantity)
            .map_err(ThresholdError::Quantity)
    }

    /// The threshold in whole units against `capacity` whole units
    /// (upstream GetThresholdQuantity).
    pub fn value(&self, capacity: i128) -> i128 {
        match *self {
            ThresholdValue::Quantity(milli) => ceil_div(milli, 1000),
            ThresholdValue::Percentage(p) => ((capacity as f64) * f64::from(p)) as i64 as i128,
        }
    }

    /// The threshold in milli-units against `capacity_milli`.
    pub fn milli(&self, capacity_milli: i128) -> i128 {
        match *self {
            ThresholdValue::Quantity(milli) => milli,
            ThresholdValue::Percentage(_) => self.value(ceil_div(capacity_milli, 1000)) * 1000,
        }
    }
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d > 0 {
        q + 1
    } else {
        q
    }
}

/// One threshold (upstream evictionapi.Threshold; the operator is always
/// LessThan). A zero grace period makes it a hard threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    pub grace_period: Duration,
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// upstream isHardEvictionThreshold.
    pub fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "threshold(signal={}, operator=LessThan, value={:?}, gracePeriod={:?})",
            self.signal, self.value, self.grace_period
        )
    }
}

/// The eviction part of the KubeletConfiguration, as strings.
#[derive(Clone, Debug)]
pub struct ThresholdConfig<'a> {
    /// enforceNodeAllocatable: `pods` adds allocatableMemory.available.
    pub enforce_node_allocatable: &'a [String],
    pub hard: &'a BTreeMap<String, String>,
    pub soft: &'a BTreeMap<String, String>,
    pub soft_grace_period: &'a BTreeMap<String, String>,
    pub minimum_reclaim: &'a BTreeMap<String, String>,
}

/// upstream ParseThresholdConfig: hard thresholds, then soft ones with
/// their grace periods, minimum reclaims on both, and with
/// `enforceNodeAllocatable: [pods]` a copy of the hard memory.available
/// threshold as allocatableMemory.available.
pub fn parse_threshold_config(c: &ThresholdConfig<'_>) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = parse_statements(c.hard)?;
    let mut soft = parse_statements(c.soft)?;
    for t in &mut soft {
        let period = c
            .soft_grace_period
            .get(t.signal.as_str())
            .ok_or(ThresholdError::NoGracePeriod(t.signal))?;
        t.grace_period = parse_grace_period(t.signal, period)?;
    }
    out.extend(soft);
    let reclaims = parse_minimum_reclaims(c.minimum_reclaim)?;
    for t in &mut out {
        t.min_reclaim = reclaims.get(&t.signal).copied();
    }
    if c.enforce_node_allocatable.iter().any(|k| k == "pods") {
        let extra: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..t.clone()
            })
            .collect();
        out.extend(extra);
    }
    Ok(out)
}

fn parse_signal(s: &str) -> Result<Option<Signal>, ThresholdError> {
    if let Some(sig) = Signal::parse(s) {
        return Ok(Some(sig));
    }
    if s.starts_with("containerfs.") {
        // Upstream overrides these from nodefs/imagefs; without a split
        // image filesystem they add nothing.
        log::warn!("eviction signal {s} is derived from nodefs here; ignoring its threshold");
        return Ok(None);
    }
    Err(ThresholdError::UnsupportedSignal(s.to_string()))
}

fn parse_statements(map: &BTreeMap<String, String>) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = Vec::new();
    for (signal, value) in map {
        let Some(signal) = parse_signal(signal)? else {
            continue;
        };
        if let Some(value) = parse_statement(signal, value)? {
            out.push(Threshold {
                signal,
                value,
                grace_period: Duration::ZERO,
                min_reclaim: None,
            });
        }
    }
    Ok(out)
}

/// upstream parseThresholdStatement: `0%` and `100%` turn a threshold off;
/// a quantity must be positive.
pub fn parse_statement(
    signal: Signal,
    value: &str,
) -> Result<Option<ThresholdValue>, ThresholdError> {
    let in_statement = |error| ThresholdError::Statement {
        signal,
        error: Box::new(error),
    };
    let value = value.trim();
    if value == "0%" || value == "100%" {
        return Ok(None);
    }
    if value.ends_with('%') {
        return ThresholdValue::parse(value).map(Some).map_err(in_statement);
    }
    let milli = parse_quantity(value).map_err(|e| in_statement(ThresholdError::Quantity(e)))?;
    if milli <= 0 {
        return Err(ThresholdError::NotPositive {
            signal,
            value: value.to_string(),
        });
    }
    Ok(Some(ThresholdValue::Quantity(milli)))
}

fn parse_grace_period(signal: Signal, s: &str) -> Result<Duration, ThresholdError> {
    crate::kubeletconfig::Duration::parse(s.trim())
        .map(|d| d.std())
        .map_err(|error| ThresholdError::GracePeriod { signal, error })
}

fn parse_minimum_reclaims(
    map: &BTreeMap<String, String>,
) -> Result<BTreeMap<Signal, ThresholdValue>, ThresholdError> {
    let mut out = BTreeMap::new();
    for (signal, value) in map {
        let Some(signal) = parse_signal(signal)? else {
            continue;
        };
        let v = if value.trim().ends_with('%') {
            ThresholdValue::parse(value)
        } else {
            parse_quantity(value.trim())
                .map_err(ThresholdError::Quantity)
                .and_then(|m| {
                    if m < 0 {
                        Err(ThresholdError::Negative)
                    } else {
                        Ok(ThresholdValue::Quantity(m))
                    }
                })
        }
        .map_err(|e| ThresholdError::MinimumReclaim {
            signal,
            error: Box::new(e),
        })?;
        out.insert(signal, v);
    }
    Ok(out)
}
