//! Docker config entries as found in pull secrets (upstream
//! `pkg/credentialprovider/config.go`: `DockerConfig`, `DockerConfigJSON`,
//! `DockerConfigEntry.UnmarshalJSON`, `decodeDockerConfigFieldAuth`).
//!
//! Errors describe what is wrong and where (the registry key and field),
//! never the values: a secret's content must not reach a log or an event.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde_json::{Map, Value};

use super::RegistryAuth;

/// One registry key (`quay.io`, `https://index.docker.io/v1/`, ...) and its
/// credentials, in the order the document lists them.
pub type DockerConfig = Vec<(String, RegistryAuth)>;

/// `.dockercfg`: the bare map of registry keys to entries.
pub fn parse_dockercfg(data: &[u8]) -> Result<DockerConfig, String> {
    match parse_json(data)? {
        Value::Object(map) => parse_entries(&map),
        // Go decodes `null` into a nil map without complaint.
        Value::Null => Ok(Vec::new()),
        _ => Err("is not a JSON object".into()),
    }
}

/// `.dockerconfigjson`: `{"auths": {...}}`; a missing `auths` is an empty
/// config, as Go's decoder leaves the field nil.
pub fn parse_dockerconfigjson(data: &[u8]) -> Result<DockerConfig, String> {
    let map = match parse_json(data)? {
        Value::Object(map) => map,
        Value::Null => return Ok(Vec::new()),
        _ => return Err("is not a JSON object".into()),
    };
    match field(&map, "auths") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(auths)) => parse_entries(auths),
        Some(_) => Err("\"auths\" is not a JSON object".into()),
    }
}

fn parse_json(data: &[u8]) -> Result<Value, String> {
    // serde_json's syntax errors name a line and column, not the content.
    serde_json::from_slice(data).map_err(|e| format!("is not valid JSON: {e}"))
}

fn parse_entries(map: &Map<String, Value>) -> Result<DockerConfig, String> {
    map.iter()
        .map(|(registry, v)| {
            parse_entry(v)
                .map(|auth| (registry.clone(), auth))
                .map_err(|e| format!("entry {registry:?}: {e}"))
        })
        .collect()
}

/// Upstream's UnmarshalJSON: username, password and email as given; a
/// non-empty `auth` (base64 `user:pass`) replaces username and password.
/// Other keys (identitytoken, registrytoken, ...) are not read upstream.
fn parse_entry(v: &Value) -> Result<RegistryAuth, String> {
    let map = match v {
        Value::Object(map) => map,
        Value::Null => return Ok(RegistryAuth::default()),
        _ => return Err("is not a JSON object".into()),
    };
    let mut auth = RegistryAuth {
        username: string_field(map, "username")?,
        password: string_field(map, "password")?,
        email: string_field(map, "email")?,
    };
    let field = string_field(map, "auth")?;
    if !field.is_empty() {
        let (user, pass) = decode_auth_field(&field)?;
        auth.username = user;
        auth.password = pass;
    }
    Ok(auth)
}

/// Go's encoding/json matches field names exactly first, then ignoring case.
fn field<'a>(map: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    map.get(name).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

fn string_field(map: &Map<String, Value>, name: &str) -> Result<String, String> {
    match field(map, name) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{name:?} is not a string")),
    }
}

/// Go's base64 decoders ignore CR and LF and, not being strict, accept
/// non-zero trailing bits.
const PADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);
const UNPADDED: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// `base64(username:password)`: padded input is decoded as StdEncoding,
/// unpadded as RawStdEncoding, as upstream chooses.
pub fn decode_auth_field(field: &str) -> Result<(String, String), String> {
    let cleaned: String = field.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    let engine = if field.trim().ends_with('=') {
        &PADDED
    } else {
        &UNPADDED
    };
    let decoded = engine
        .decode(cleaned)
        .map_err(|_| "\"auth\" is not valid base64".to_string())?;
    // Go's string conversion keeps invalid UTF-8 bytes; lossy is the closest.
    let text = String::from_utf8_lossy(&decoded);
    match text.split_once(':') {
        Some((user, pass)) => Ok((user.to_string(), pass.to_string())),
        None => {
            Err("unable to parse auth field, must be formatted as base64(username:password)".into())
        }
    }
}
