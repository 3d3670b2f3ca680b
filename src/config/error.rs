//! Why a static pod manifest (a file or a URL) yields no pods: worded as
//! upstream's decoder words it, prefixed by the file or URL it came from.

use super::common::MAX_CONFIG_LENGTH;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Reading the manifest directory or file.
    #[error("{0}")]
    Read(std::io::Error),
    #[error("listing {dir}: {error}")]
    Listing { dir: String, error: std::io::Error },
    #[error("manifest is larger than {MAX_CONFIG_LENGTH} bytes")]
    TooLarge,
    /// The document is not a Pod (or list of them): `reason` is upstream's
    /// parenthesised detail ("empty document", "Object 'Kind' is missing").
    #[error("couldn't parse as pod ({0}), please check config file")]
    Parse(String),
    #[error("couldn't parse as pod (no kind {kind:?} is registered for version {api_version:?})")]
    UnknownVersion { kind: String, api_version: String },
    #[error("couldn't parse as pod list: items is not a list")]
    ItemsNotList,
    #[error("expected a v1 Pod, got kind {kind:?} apiVersion {api_version:?}")]
    NotV1Pod { kind: String, api_version: String },
    #[error("invalid pod: kind is {kind:?}, expected {expected}")]
    WrongKind { kind: String, expected: String },
    #[error("invalid pod: name is needed for the pod")]
    NoName,
    /// Every field error of the pod, together.
    #[error("invalid pod: [{}]", .0.join(", "))]
    Invalid(Vec<String>),
    #[error("static pods may not use {0}")]
    StaticPodUses(&'static str),
    #[error("serializing pod for its UID: {0}")]
    Hash(serde_json::Error),
    /// The error of one item of a list, or of one file or URL.
    #[error("{at}: {error}")]
    At {
        at: String,
        error: Box<ManifestError>,
    },
    /// The http source's fetch: `detail` is the status or transport error.
    #[error("{url}: {detail}")]
    Fetch { url: String, detail: String },
}

impl ManifestError {
    /// `self` prefixed by where it happened (an item, a file, a URL).
    pub fn at(self, at: impl Into<String>) -> ManifestError {
        ManifestError::At {
            at: at.into(),
            error: Box::new(self),
        }
    }

    /// The manifest file went away (deleted between listing and reading).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ManifestError::Read(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}
