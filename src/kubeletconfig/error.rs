//! The configuration layer's errors: why `--config` or the merged settings
//! were refused, worded for the operator who has to fix them.

use super::types::{API_VERSION, KIND};
use std::path::PathBuf;

/// Why [`super::load`] did not produce a configuration.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `--help`, `--version` or a usage error: call `e.exit()`, which prints
    /// to stdout (exit 0) or stderr (exit 2) as appropriate.
    #[error("{0}")]
    Clap(clap::Error),
    /// The config file or the merged settings are invalid: print and exit 1.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// The config file or the merged settings are invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read kubelet config file {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {error}", .path.display())]
    File { path: PathBuf, error: FileError },
    /// Every problem found, each already naming its flag or field.
    #[error("invalid kubelet configuration:\n  {}", .0.join("\n  "))]
    Problems(Vec<String>),
}

/// What is wrong with a config file's contents (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("kubelet config file was empty")]
    Empty,
    #[error("invalid YAML/JSON: {0}")]
    Syntax(serde_norway::Error),
    #[error("expected a {KIND} object (a mapping) at the top level")]
    NotAMapping,
    #[error("unsupported apiVersion {0:?} (want {API_VERSION:?})")]
    ApiVersion(String),
    #[error("missing required field \"apiVersion\" (want {API_VERSION:?})")]
    NoApiVersion,
    #[error("unsupported kind {0:?} (want {KIND:?})")]
    Kind(String),
    #[error("missing required field \"kind\" (want {KIND:?})")]
    NoKind,
    /// `field` is the full dotted path, e.g. "authentication.webhook.bogus".
    #[error("unknown field {field:?}{}", .at.map(|(l, c)| format!(" at line {l} column {c}")).unwrap_or_default())]
    UnknownField {
        field: String,
        at: Option<(usize, usize)>,
    },
    #[error("{0}")]
    Decode(serde_norway::Error),
}
