//! Values a kubelet puts in CRI messages when the pod says nothing
//! (upstream `pkg/securitycontext`). rkubelet's security context and the
//! runtime floor bench (`examples/runtime_floor.rs`) both send them.

/// What an unprivileged container may not see (`defaultMaskedPaths`,
/// kept in step with moby): `masked_paths` of its security context.
pub const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// What an unprivileged container sees read-only (`defaultReadonlyPaths`):
/// `readonly_paths` of its security context.
pub const READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];
