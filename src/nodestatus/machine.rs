//! What the node status reports about the machine: cadvisor's MachineInfo
//! and VersionInfo as the kubelet's setters use them (CPU count, memory,
//! huge pages, machine/system/boot IDs, kernel and OS image), and the pid
//! signal behind PIDPressure. Memory and filesystem sizes come from the host
//! stats provider ([`crate::stats`]), which `/stats/summary` reads too.
//!
//! Every reader takes its `/proc`, `/sys` and `/etc` from [`HostPaths`] so
//! tests can point them at sample trees; the parsers are pure functions.

use std::path::{Path, PathBuf};

/// Where the host's pseudo-filesystems are (tests use sample trees).
#[derive(Clone, Debug)]
pub struct HostPaths {
    pub proc_dir: PathBuf,
    pub sys_dir: PathBuf,
    pub etc_dir: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths {
            proc_dir: PathBuf::from("/proc"),
            sys_dir: PathBuf::from("/sys"),
            etc_dir: PathBuf::from("/etc"),
        }
    }
}

impl HostPaths {
    /// The host stats provider over this `/proc`.
    pub fn stats(&self) -> crate::stats::Provider {
        crate::stats::Provider::new(&self.proc_dir)
    }
}

/// One huge page size and how many pages of it the kernel holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HugePages {
    /// Page size in bytes.
    pub page_size: u64,
    pub num_pages: u64,
}

/// cadvisor's MachineInfo, the parts the node status uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineInfo {
    pub num_cores: u64,
    /// Bytes (MemTotal).
    pub memory_capacity: u64,
    /// Bytes (SwapTotal); 0 without swap.
    pub swap_capacity: u64,
    pub hugepages: Vec<HugePages>,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Reads the machine info; fails only when CPU count or memory is unknown.
pub fn read_machine_info(paths: &HostPaths) -> Result<MachineInfo, String> {
    let cpuinfo = std::fs::read_to_string(paths.proc_dir.join("cpuinfo")).unwrap_or_default();
    let mut num_cores = parse_cpuinfo_processors(&cpuinfo);
    if num_cores == 0 {
        let online = paths.sys_dir.join("devices/system/cpu/online");
        num_cores = read_trimmed(&online)
            .map(|s| parse_cpu_list(&s))
            .unwrap_or(0);
    }
    if num_cores == 0 {
        num_cores = std::thread::available_parallelism()
            .map(|n| n.get() as u64)
            .unwrap_or(0);
    }
    if num_cores == 0 {
        return Err("unable to determine the number of CPUs".to_string());
    }
    let meminfo = paths.stats().meminfo().map_err(|e| e.to_string())?;
    let memory_capacity = *meminfo
        .get("MemTotal")
        .ok_or("/proc/meminfo has no MemTotal")?;
    let swap_capacity = meminfo.get("SwapTotal").copied().unwrap_or(0);
    let machine_id = read_trimmed(&paths.etc_dir.join("machine-id"))
        .or_else(|| read_trimmed(Path::new("/var/lib/dbus/machine-id")))
        .unwrap_or_default();
    Ok(MachineInfo {
        num_cores,
        memory_capacity,
        swap_capacity,
        hugepages: read_hugepages(&paths.sys_dir.join("kernel/mm/hugepages")),
        machine_id,
        system_uuid: read_trimmed(&paths.sys_dir.join("class/dmi/id/product_uuid"))
            .unwrap_or_default(),
        boot_id: read_trimmed(&paths.proc_dir.join("sys/kernel/random/boot_id"))
            .unwrap_or_default(),
    })
}

/// The number of `processor : N` entries in /proc/cpuinfo.
pub fn parse_cpuinfo_processors(text: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(k, _)| k.trim() == "processor")
        })
        .count() as u64
}

/// The number of CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> u64 {
    let mut n = 0u64;
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
                    if b >= a {
                        n += b - a + 1;
                    }
                }
            }
            None => {
                if part.trim().parse::<u64>().is_ok() {
                    n += 1;
                }
            }
        }
    }
    n
}

/// Huge page pools from `<dir>/hugepages-<size>kB/nr_hugepages`: the
/// machine's (`/sys/kernel/mm/hugepages`) or a NUMA node's.
pub(crate) fn read_hugepages(dir: &Path) -> Vec<HugePages> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<HugePages> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let page_size = parse_hugepage_dir_name(&name)?;
            let num_pages = read_trimmed(&e.path().join("nr_hugepages"))?
                .parse::<u64>()
                .ok()?;
            Some(HugePages {
                page_size,
                num_pages,
            })
        })
        .collect();
    out.sort_by_key(|h| h.page_size);
    out
}

/// `hugepages-2048kB` → 2097152 bytes.
pub fn parse_hugepage_dir_name(name: &str) -> Option<u64> {
    let kb = name.strip_prefix("hugepages-")?.strip_suffix("kB")?;
    kb.parse::<u64>().ok()?.checked_mul(1024)
}

/// `uname -r`: the kernel release.
pub fn kernel_version(paths: &HostPaths) -> String {
    read_trimmed(&paths.proc_dir.join("sys/kernel/osrelease")).unwrap_or_default()
}

/// The OS image as cadvisor reports it: PRETTY_NAME from os-release, or
/// "Linux" when it has none.
pub fn os_image(paths: &HostPaths) -> String {
    let text = std::fs::read_to_string(paths.etc_dir.join("os-release"))
        .or_else(|_| std::fs::read_to_string("/usr/lib/os-release"));
    match text {
        Ok(t) => parse_os_release_pretty_name(&t).unwrap_or_else(|| "Linux".to_string()),
        Err(_) => "Unknown".to_string(),
    }
}

/// PRETTY_NAME's value, unquoted.
pub fn parse_os_release_pretty_name(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let v = l.trim().strip_prefix("PRETTY_NAME=")?;
        Some(v.trim_matches('"').trim_matches('\'').to_string())
    })
}

/// Go's GOARCH name for the architecture this binary runs on.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        "loongarch64" => "loong64",
        "mips64" if cfg!(target_endian = "little") => "mips64le",
        "mips64" => "mips64",
        "mips" if cfg!(target_endian = "little") => "mipsle",
        other => other,
    }
}

/// Formatting of quantities the way apimachinery's `Quantity.String()`
/// prints them in canonical form, for the integral values the kubelet
/// computes. Values are in milli-units, as `util::quantity::parse_quantity`
/// returns them.
pub mod quantity {
    /// DecimalSI canonical form: the largest power-of-1000 suffix that keeps
    /// the mantissa integral (`3500m`, `4`, `110`, `10k`).
    pub fn decimal_si(milli: i128) -> String {
        if milli == 0 {
            return "0".to_string();
        }
        const SUFFIXES: [(i128, &str); 8] = [
            (1_000_000_000_000_000_000_000, "E"),
            (1_000_000_000_000_000_000, "P"),
            (1_000_000_000_000_000, "T"),
            (1_000_000_000_000, "G"),
            (1_000_000_000, "M"),
            (1_000_000, "k"),
            (1_000, ""),
            (1, "m"),
        ];
        for (div, suffix) in SUFFIXES {
            if milli % div == 0 {
                return format!("{}{suffix}", milli / div);
            }
        }
        format!("{milli}m")
    }

    /// BinarySI canonical form: the largest power-of-1024 suffix that keeps
    /// the mantissa integral (`16318936Ki`, `2Mi`); values under 1024 and
    /// fractional values print as DecimalSI, as apimachinery does.
    pub fn binary_si(milli: i128) -> String {
        if milli % 1000 != 0 {
            return decimal_si(milli);
        }
        let v = milli / 1000;
        if v.abs() < 1024 {
            return decimal_si(milli);
        }
        const SUFFIXES: [(u32, &str); 6] = [
            (60, "Ei"),
            (50, "Pi"),
            (40, "Ti"),
            (30, "Gi"),
            (20, "Mi"),
            (10, "Ki"),
        ];
        for (shift, suffix) in SUFFIXES {
            let div = 1i128 << shift;
            if v % div == 0 {
                return format!("{}{suffix}", v / div);
            }
        }
        v.to_string()
    }

    /// How a resource's quantities are formatted: memory-like resources in
    /// BinarySI, everything else in DecimalSI.
    pub fn for_resource(name: &str, milli: i128) -> String {
        if name == "memory" || name == "ephemeral-storage" || name.starts_with("hugepages-") {
            binary_si(milli)
        } else {
            decimal_si(milli)
        }
    }
}
