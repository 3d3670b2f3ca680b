//! Kubelet configuration: the `KubeletConfiguration` file
//! (kubelet.config.k8s.io/v1beta1) and the command-line flags, with
//! upstream names, defaults, precedence and validation
//! (upstream: cmd/kubelet/app/options, pkg/kubelet/apis/config).
//!
//! Precedence, lowest first: built-in defaults < `--config` file < flags
//! given on the command line. As upstream, a kubelet started without
//! `--config` gets the historical command-line defaults (anonymous auth,
//! AlwaysAllow authorization, read-only port 10255) instead of the secure
//! v1beta1 file defaults. Beyond upstream, with `--kubeconfig` those four
//! settings take the file defaults unless a flag sets them
//! ([`cluster_defaults`]); and `rotateCertificates` is on with
//! `--bootstrap-kubeconfig` unless set, as kubeadm's configuration has it.

mod duration;
mod error;
mod file;
mod flags;

mod types;
mod validation;

pub(crate) use duration::format_go_duration;
pub use duration::{Duration, DurationError};
pub use error::{ConfigError, LoadError};
pub(crate) use flags::parse_go_bool;
pub use flags::KubeletFlags;
pub use types::*;
pub use validation::{node_ips, FieldError};

use clap::Parser;
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

/// The Kubernetes release whose kubelet API this implements.
pub const KUBERNETES_VERSION: &str = "v1.34.0";
/// What `--version` prints after "Kubernetes " and what the node reports.
pub const VERSION: &str = "v1.34.0-rkubelet";

/// Parses `args` (`args[0]` is the program name), loads `--config`,
/// applies flag overrides and validates the result.
pub fn load<I, T>(args: I) -> Result<(KubeletFlags, KubeletConfiguration), LoadError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = flags::Cli::try_parse_from(args).map_err(LoadError::Clap)?;
    let config_path = cli.config.clone().filter(|p| !p.as_os_str().is_empty());
    let loaded = match &config_path {
        Some(path) => Some(file::load(path)?),
        None => None,
    };
    resolve(&cli, config_path.as_deref(), loaded)
}

/// What `load` does once the `--config` file (at `config_path`) is read:
/// flag overrides, cluster defaults and validation, each problem named by
/// where its setting came from.
fn resolve(
    cli: &flags::Cli,
    config_path: Option<&Path>,
    file: Option<file::LoadedFile>,
) -> Result<(KubeletFlags, KubeletConfiguration), LoadError> {
    let (mut config, file_keys) = match file {
        Some(loaded) => (loaded.config, loaded.keys),
        None => (
            KubeletConfiguration::legacy_flag_defaults(),
            BTreeSet::new(),
        ),
    };
    let flag_fields = cli.apply_to(&mut config);
    let kubelet_flags = cli.to_flags(&config);
    cluster_defaults(
        &mut config,
        &kubelet_flags,
        config_path.is_some(),
        &file_keys,
        &flag_fields,
    );
    let sources = Sources {
        file: config_path,
        file_keys: &file_keys,
        flag_fields: &flag_fields,
    };
    let mut problems = sources.describe(&validation::validate_configuration(&config));
    problems.extend(validate_flags(&kubelet_flags));
    if !problems.is_empty() {
        return Err(ConfigError::Problems(problems).into());
    }
    Ok((kubelet_flags, config))
}

/// Secure defaults in cluster mode (docs/deviations.md): without a config
/// file, a kubelet with `--kubeconfig` takes the v1beta1 file defaults for
/// anonymous authentication (off), webhook authentication (on),
/// authorization (Webhook) and the read-only port (0) where no flag set
/// them; upstream keeps its flag defaults, which leave /pods, /exec and
/// /logs open. With `--bootstrap-kubeconfig`, `rotateCertificates` defaults
/// to true.
fn cluster_defaults(
    c: &mut KubeletConfiguration,
    flags: &KubeletFlags,
    has_file: bool,
    file_keys: &BTreeSet<String>,
    flag_fields: &flags::FlagFields,
) {
    let by_flag = |f: &str| flag_fields.contains_key(f);
    if flags.kubeconfig.is_some() && !has_file {
        let file = KubeletConfiguration::default();
        if !by_flag("authentication.anonymous.enabled") {
            c.authentication.anonymous.enabled = file.authentication.anonymous.enabled;
        }
        if !by_flag("authentication.webhook.enabled") {
            c.authentication.webhook.enabled = file.authentication.webhook.enabled;
        }
        if !by_flag("authorization.mode") {
            c.authorization.mode = file.authorization.mode;
        }
        if !by_flag("readOnlyPort") {
            c.read_only_port = file.read_only_port;
        }
    }
    if flags.bootstrap_kubeconfig.is_some()
        && !file_keys.contains("rotateCertificates")
        && !by_flag("rotateCertificates")
    {
        c.rotate_certificates = true;
    }
}

/// The settings that open the kubelet API to anyone who reaches it, to warn
/// about at start in cluster mode (where they can only be explicit).
pub fn insecure_settings(c: &KubeletConfiguration) -> Vec<String> {
    let mut out = Vec::new();
    if c.authentication.anonymous.enabled {
        out.push("authentication.anonymous.enabled (--anonymous-auth) is true: requests without credentials reach the kubelet API".to_string());
    }
    if c.authorization.mode == AUTHORIZATION_MODE_ALWAYS_ALLOW {
        out.push("authorization.mode (--authorization-mode) is AlwaysAllow: every authenticated request is allowed, /exec and /pods included".to_string());
    }
    if c.read_only_port != 0 {
        out.push(format!(
            "readOnlyPort (--read-only-port) is {}: /pods and /stats are served without authentication over plain HTTP",
            c.read_only_port
        ));
    }
    out
}

/// The fuzz targets' way in (fuzz/): a KubeletConfiguration file's text
/// through decoding and validation, as `load` takes it.
#[cfg(feature = "fuzzing")]
pub fn fuzz_config_file(text: &str) {
    if let Ok(loaded) = file::parse(text) {
        let _ = validation::validate_configuration(&loaded.config);
    }
}

/// The fuzz targets' way in: command-line arguments through `load`'s own
/// steps after the file (flag overrides, cluster defaults, validation),
/// without reading a --config file.
#[cfg(feature = "fuzzing")]
pub fn fuzz_flags(args: Vec<String>) {
    if let Ok(cli) = flags::Cli::try_parse_from(args) {
        let _ = resolve(&cli, None, None);
    }
}

/// Validates a configuration on its own (no source attribution).
#[cfg(test)]
pub fn validate(config: &KubeletConfiguration) -> Result<(), ConfigError> {
    let errs = validation::validate_configuration(config);
    if errs.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = errs
        .iter()
        .map(|e| format_field_error("config", e, None))
        .collect();
    Err(ConfigError::Problems(lines))
}

/// Where each setting came from, to name it in error messages.
struct Sources<'a> {
    file: Option<&'a Path>,
    file_keys: &'a BTreeSet<String>,
    flag_fields: &'a flags::FlagFields,
}

impl Sources<'_> {
    fn describe(&self, errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(|e| self.describe_one(e)).collect()
    }

    fn describe_one(&self, e: &FieldError) -> String {
        if let Some(flag) = self.flag_for(&e.field) {
            return format_field_error("flags", e, Some(flag));
        }
        let top = e.field.split(['.', '[']).next().unwrap_or_default();
        match self.file {
            Some(path) if self.file_keys.contains(top) => {
                format_field_error(&path.display().to_string(), e, None)
            }
            _ => format_field_error("defaults", e, None),
        }
    }

    /// The flag that set this field, matching nested fields under a flag-set parent too.
    fn flag_for(&self, field: &str) -> Option<&'static str> {
        self.flag_fields
            .iter()
            .find(|(f, _)| field == **f || field.starts_with(&format!("{f}.")))
            .map(|(_, flag)| *flag)
    }
}

fn format_field_error(source: &str, e: &FieldError, flag: Option<&str>) -> String {
    let flag = flag.map(|f| format!(" ({f})")).unwrap_or_default();
    format!(
        "{source}: invalid value {:?} for field {:?}{flag}: {}",
        e.value, e.field, e.reason
    )
}

/// Checks on settings that only exist as flags.
fn validate_flags(f: &KubeletFlags) -> Vec<String> {
    let mut out: Vec<String> = validation::validate_node_labels(&f.node_labels)
        .into_iter()
        .map(|m| format!("flags: --node-labels: {m}"))
        .collect();
    if let Some(ip) = &f.node_ip {
        if let Err(m) = validation::validate_node_ip(ip) {
            out.push(format!(
                "flags: invalid value {ip:?} for flag --node-ip: {m}"
            ));
        }
    }
    if f.root_dir.as_os_str().is_empty() {
        out.push("flags: invalid value \"\" for flag --root-dir: must not be empty".into());
    }
    out
}

#[cfg(test)]
mod tests;
