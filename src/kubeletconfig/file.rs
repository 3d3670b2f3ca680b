//! Reading the `--config` file: YAML or JSON (JSON is YAML), strict about
//! type metadata and unknown fields, defaulted like upstream.

use super::error::{ConfigError, FileError};
use super::types::{KubeletConfiguration, API_VERSION, KIND};
use std::collections::BTreeSet;
use std::path::Path;

/// A decoded config file plus the top-level keys it spelled out.
pub(crate) struct LoadedFile {
    pub config: KubeletConfiguration,
    pub keys: BTreeSet<String>,
}

/// Reads, checks, decodes and defaults a KubeletConfiguration file.
pub(crate) fn load(path: &Path) -> Result<LoadedFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })?;
    let mut loaded = parse(&text).map_err(|error| ConfigError::File {
        path: path.to_owned(),
        error,
    })?;
    resolve_relative_paths(&mut loaded.config, path);
    Ok(loaded)
}

/// Decodes file contents; errors carry no file name (the caller adds it).
pub(crate) fn parse(text: &str) -> Result<LoadedFile, FileError> {
    if text.trim().is_empty() {
        return Err(FileError::Empty);
    }
    let keys = check_type_meta(text)?;
    let ViaMap(mut config): ViaMap<KubeletConfiguration> =
        serde_norway::from_str(text).map_err(describe_decode_error)?;
    config.set_defaults(&keys);
    Ok(LoadedFile { config, keys })
}

/// Decodes `T` from a mapping through `deserialize_any`. serde_norway's
/// `deserialize_struct` builds a derived struct's map visitor twice (a
/// second, by-value map access serves an empty document, which [`parse`]
/// has refused already): 26 KB of the static binary for
/// KubeletConfiguration alone. Errors keep their path and position.
struct ViaMap<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for ViaMap<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Forward<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Forward<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_any(Forward(std::marker::PhantomData))
            .map(ViaMap)
    }
}

/// Checks apiVersion/kind before the typed decode so a file of the wrong
/// type is reported as such, not as a pile of unknown fields.
fn check_type_meta(text: &str) -> Result<BTreeSet<String>, FileError> {
    let value: serde_norway::Value = serde_norway::from_str(text).map_err(FileError::Syntax)?;
    let map = value.as_mapping().ok_or(FileError::NotAMapping)?;
    let field = |name: &str| map.get(name).and_then(|v| v.as_str()).map(str::to_owned);
    match field("apiVersion") {
        Some(v) if v == API_VERSION => {}
        Some(v) => return Err(FileError::ApiVersion(v)),
        None => return Err(FileError::NoApiVersion),
    }
    match field("kind") {
        Some(k) if k == KIND => {}
        Some(k) => return Err(FileError::Kind(k)),
        None => return Err(FileError::NoKind),
    }
    Ok(map
        .keys()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect())
}

/// Rewrites serde's unknown-field message (which lists every known field)
/// into one naming the full path of the offending field.
fn describe_decode_error(err: serde_norway::Error) -> FileError {
    let msg = err.to_string();
    let Some(start) = msg.find("unknown field `") else {
        return FileError::Decode(err);
    };
    let name_start = start + "unknown field `".len();
    let name = msg[name_start..].split('`').next().unwrap_or_default();
    // serde_norway prefixes nested errors with their path, e.g. "authentication.webhook: ".
    let parent = msg[..start].strip_suffix(": ").unwrap_or_default();
    let full = if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    };
    FileError::UnknownField {
        field: full,
        at: err.location().map(|loc| (loc.line(), loc.column())),
    }
}

/// Upstream resolves relative paths in the file against the file's
/// directory (KubeletConfigurationPathRefs), so a config can ship with its
/// certificates and manifests beside it.
fn resolve_relative_paths(c: &mut KubeletConfiguration, file: &Path) {
    let Some(dir) = file.parent() else { return };
    let fields = [
        &mut c.static_pod_path,
        &mut c.authentication.x509.client_ca_file,
        &mut c.tls_cert_file,
        &mut c.tls_private_key_file,
        &mut c.resolv_conf,
        &mut c.volume_plugin_dir,
    ];
    for field in fields {
        if !field.is_empty() && Path::new(field.as_str()).is_relative() {
            *field = dir.join(field.as_str()).to_string_lossy().into_owned();
        }
    }
}
