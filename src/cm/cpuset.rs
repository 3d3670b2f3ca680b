//! A set of CPU IDs in the kernel's list format, `0-3,8,10-11` (upstream
//! `pkg/kubelet/cm/cpuset`, later `k8s.io/utils/cpuset`): what
//! `reservedSystemCPUs`, sysfs' `cpulist` files, the CPU manager's state
//! file and CRI's `cpuset_cpus` all speak.

use std::fmt;

/// The largest CPU ID a list may name: a bound on what a typo can make
/// the kubelet allocate (the kernel's own limit is 8191 by default).
pub const MAX_CPU: u32 = 65535;

/// CPU IDs, sorted and without duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(Vec<u32>);

/// Why a CPU list does not parse; names the part that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("{part:?} in CPU list {list:?} is not a CPU number or a range of them")]
    NotACpu { list: String, part: String },
    #[error("range {part:?} in CPU list {list:?} ends before it starts")]
    BackwardRange { list: String, part: String },
    #[error("CPU {part:?} in CPU list {list:?} is beyond {MAX_CPU}, more than any machine has")]
    TooLarge { list: String, part: String },
}

impl CpuSet {
    pub fn new(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut v: Vec<u32> = cpus.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        CpuSet(v)
    }

    /// Parses the list format; blanks around it and an empty list are
    /// allowed (an empty list is the empty set, as upstream's Parse).
    pub fn parse(list: &str) -> Result<CpuSet, CpuSetError> {
        let mut cpus = Vec::new();
        let trimmed = list.trim();
        if trimmed.is_empty() {
            return Ok(CpuSet::default());
        }
        for part in trimmed.split(',') {
            let err = |bad: fn(String, String) -> CpuSetError| bad(list.into(), part.into());
            let num = |s: &str| {
                let n = s
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| err(|list, part| CpuSetError::NotACpu { list, part }))?;
                match n {
                    0..=MAX_CPU => Ok(n),
                    _ => Err(err(|list, part| CpuSetError::TooLarge { list, part })),
                }
            };
            match part.split_once('-') {
                None => cpus.push(num(part)?),
                Some((lo, hi)) => {
                    let (lo, hi) = (num(lo)?, num(hi)?);
                    if hi < lo {
                        return Err(err(|list, part| CpuSetError::BackwardRange { list, part }));
                    }
                    cpus.extend(lo..=hi);
                }
            }
        }
        Ok(CpuSet::new(cpus))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.binary_search(&cpu).is_ok()
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn is_subset_of(&self, other: &CpuSet) -> bool {
        self.iter().all(|c| other.contains(c))
    }

    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.iter().filter(|c| !other.contains(*c)).collect())
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.iter().filter(|c| other.contains(*c)).collect())
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet::new(self.iter().chain(other.iter()))
    }
}

impl fmt::Display for CpuSet {
    /// Runs of consecutive CPUs as ranges, as the kernel and upstream
    /// write them: `0-3,8,10-11`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match end - start {
                0 => write!(f, "{start}")?,
                _ => write!(f, "{start}-{end}")?,
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_as_the_kernel_writes_them() {
        for (list, cpus, printed) in [
            ("", vec![], ""),
            ("0", vec![0], "0"),
            ("0-3", vec![0, 1, 2, 3], "0-3"),
            ("0-1,3,5-6", vec![0, 1, 3, 5, 6], "0-1,3,5-6"),
            (" 3,1,2 \n", vec![1, 2, 3], "1-3"),
            ("2,2,0-2", vec![0, 1, 2], "0-2"),
            ("7-7", vec![7], "7"),
        ] {
            let set = CpuSet::parse(list).unwrap();
            assert_eq!(set.iter().collect::<Vec<_>>(), cpus, "{list:?}");
            assert_eq!(set.to_string(), printed, "{list:?}");
        }
    }

    #[test]
    fn bad_lists_name_the_part_that_is_wrong() {
        let e = CpuSet::parse("0-2,x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"x\" in CPU list \"0-2,x\" is not a CPU number or a range of them"
        );
        assert!(matches!(
            CpuSet::parse("3-1"),
            Err(CpuSetError::BackwardRange { part, .. }) if part == "3-1"
        ));
        assert!(matches!(
            CpuSet::parse("0-4000000000"),
            Err(CpuSetError::TooLarge { .. })
        ));
        for bad in ["-1", "1-", ",", "1,,2", "0x1", "4294967296"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-5").unwrap();
        let b = CpuSet::parse("4-7").unwrap();
        assert_eq!(a.difference(&b).to_string(), "0-3");
        assert_eq!(b.difference(&a).to_string(), "6-7");
        assert!(CpuSet::parse("1,3").unwrap().is_subset_of(&a));
        assert!(!b.is_subset_of(&a));
        assert!(a.contains(5) && !a.contains(6));
        assert_eq!(a.intersection(&b).to_string(), "4-5");
        assert_eq!(a.union(&b).to_string(), "0-7");
        assert_eq!(CpuSet::default().union(&b), b);
    }
}
