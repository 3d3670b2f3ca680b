//! The host IDs the kubelet may hand to pods (upstream kubelet_pods.go
//! `getKubeletMappings` and `parseGetSubIdsOutput`, and the checks at the
//! top of userns_manager.go `MakeUserNsManager`).
//!
//! Upstream asks `getsubids kubelet` and `getsubids -g kubelet` (shadow's
//! tool, which reads /etc/subuid, /etc/subgid or NSS) when a `kubelet`
//! account exists, and otherwise takes every ID from 65536 up. The feature
//! gate (on by default at v1.34) and the kernel-version warning are the
//! caller's.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::error::parse_u32_go;
use super::{UsernsError, USERNS_LENGTH};

/// Upstream `kubeletUser`: the account whose subordinate IDs the kubelet uses.
pub const KUBELET_USER: &str = "kubelet";

/// The tool upstream runs (`exec.LookPath("getsubids")`).
const GETSUBIDS: &str = "getsubids";

/// Upstream `defaultFirstID` (1 << 16): the host's own IDs stay below it.
const DEFAULT_FIRST_ID: u32 = 1 << 16;

/// Upstream `defaultLen` (1<<32 - defaultFirstID): every ID above.
const DEFAULT_LEN: u32 = (u32::MAX - DEFAULT_FIRST_ID) + 1;

/// The host IDs pods' user namespaces are cut from: `len` IDs from `first`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    pub first: u32,
    pub len: u32,
}

impl IdRange {
    /// Upstream's range when no `kubelet` account or no getsubids is
    /// configured: 65536 and the 4294901760 IDs above it (65535 blocks).
    pub const fn default_range() -> Self {
        IdRange {
            first: DEFAULT_FIRST_ID,
            len: DEFAULT_LEN,
        }
    }

    /// Upstream `parseGetSubIdsOutput`: exactly one line
    /// `0: kubelet 65536 2147483648`, whose last two fields are the first ID
    /// and the count. Errors quote the whole output, as upstream's do.
    pub fn parse_getsubids_output(input: &str) -> Result<Self, UsernsError> {
        let lines: Vec<&str> = input.trim_matches('\n').split('\n').collect();
        let line = match lines.as_slice() {
            [line] => *line,
            _ => {
                return Err(UsernsError::NotOneLine {
                    input: input.to_string(),
                })
            }
        };
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            [_, _, first, len] => Ok(IdRange {
                first: number(input, first)?,
                len: number(input, len)?,
            }),
            _ => Err(UsernsError::InvalidLine {
                input: input.to_string(),
            }),
        }
    }

    /// Upstream `MakeUserNsManager`'s checks, in its order: whole blocks of
    /// 65536, never the host's first block, and room for `max_pods` pods
    /// (0 skips that last check).
    pub fn validate(&self, max_pods: u32) -> Result<(), UsernsError> {
        let unit = USERNS_LENGTH;
        if !self.first.is_multiple_of(unit) {
            return Err(UsernsError::FirstNotMultiple {
                first: self.first,
                unit,
            });
        }
        if self.first < unit {
            return Err(UsernsError::FirstTooLow {
                first: self.first,
                unit,
            });
        }
        if !self.len.is_multiple_of(unit) {
            return Err(UsernsError::LenNotMultiple {
                len: self.len,
                unit,
            });
        }
        if self.len / unit < max_pods {
            return Err(UsernsError::NotEnoughIds { max_pods });
        }
        Ok(())
    }

    /// Upstream `getKubeletMappings` with the feature gate on: the default
    /// range when /etc/passwd has no `kubelet` account, else getsubids'
    /// answer. Errors come wrapped as upstream's `kubelet mappings: …`.
    pub fn kubelet_mappings() -> Result<Self, UsernsError> {
        let path_var = std::env::var_os("PATH");
        Self::kubelet_mappings_from(Path::new("/etc/passwd"), path_var.as_deref())
            .map_err(|e| UsernsError::KubeletMappings(Box::new(e)))
    }

    /// [`IdRange::kubelet_mappings`] with the passwd file and `$PATH` given,
    /// unwrapped.
    pub(super) fn kubelet_mappings_from(
        passwd: &Path,
        path_var: Option<&OsStr>,
    ) -> Result<Self, UsernsError> {
        // user.Lookup: an unknown account means "not configured". rkubelet
        // reads the file only (no NSS); a missing file has no accounts.
        let accounts = match std::fs::read_to_string(passwd) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(UsernsError::io("open", passwd, e)),
        };
        if !has_account(&accounts, KUBELET_USER) {
            return Ok(Self::default_range());
        }
        // v1.34 checks LookPath's error with os.IsNotExist, which an
        // *exec.Error never matches: a missing tool is an error, not the
        // default range (open upstream PRs #141345 and #141971 change that).
        let tool =
            look_path(GETSUBIDS, path_var).ok_or_else(|| UsernsError::ExecutableNotFound {
                name: GETSUBIDS.to_string(),
            })?;
        let uids = run(&tool, &[KUBELET_USER]).ok_or_else(|| UsernsError::RetrieveIds {
            user: KUBELET_USER.to_string(),
        })?;
        let gids = run(&tool, &["-g", KUBELET_USER]).ok_or_else(|| UsernsError::RetrieveGids {
            user: KUBELET_USER.to_string(),
        })?;
        Self::from_getsubids_outputs(&uids, &gids)
    }

    /// The tail of `getKubeletMappings`: both outputs must be the same bytes,
    /// then they are parsed once.
    pub(super) fn from_getsubids_outputs(uids: &[u8], gids: &[u8]) -> Result<Self, UsernsError> {
        if uids != gids {
            return Err(UsernsError::MismatchedSubids {
                user: KUBELET_USER.to_string(),
            });
        }
        Self::parse_getsubids_output(&String::from_utf8_lossy(uids))
    }
}

/// One numeric field, with upstream's `error parsing line %q: %w`.
fn number(input: &str, field: &str) -> Result<u32, UsernsError> {
    parse_u32_go(field).map_err(|detail| UsernsError::ParseNumber {
        input: input.to_string(),
        detail,
    })
}

/// Whether a passwd(5) text has an entry named `name`.
pub(super) fn has_account(passwd: &str, name: &str) -> bool {
    passwd
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|l| l.split(':').next() == Some(name))
}

/// Go's `exec.LookPath` for a bare name: the first regular file in `$PATH`
/// with an execute bit, in an absolute `$PATH` entry.
fn look_path(name: &str, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let path_var = path_var?;
    // Never the working directory (an empty or relative entry), as Go
    // 1.19's LookPath refuses it (ErrDot).
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Go's `exec.Command(tool, args...).Output()`: stdout when the tool ran and
/// exited 0, `None` otherwise (upstream drops the cause).
/// Bounded by [`RUN_TIMEOUT`]: a tool that hangs is killed and counts as
/// failed (upstream waits for it).
fn run(tool: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    // A line of output: it fits the pipe, so the tool never blocked on it.
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take()?, &mut out).ok()?;
    status.success().then_some(out)
}

/// How long getsubids may take.
const RUN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
