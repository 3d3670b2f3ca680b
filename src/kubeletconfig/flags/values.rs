//! Flag value syntaxes: Go booleans as pflag parses them, durations,
//! `--v`, and the map, list and taint flags of component-base cli/flag
//! (MapStringString, ColonSeparatedMultimapStringString, MapStringBool,
//! ConfigurationMap) and utiltaints.

use super::{Duration, MAX_VERBOSITY};
use crate::kubeletconfig::Taint;
use std::path::PathBuf;

/// One occurrence of a key/value-list flag, already split into pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pairs(pub Vec<(String, String)>);

/// One occurrence of a comma-separated list flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct List(pub Vec<String>);

/// One occurrence of `--feature-gates`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Gates(pub Vec<(String, bool)>);

/// One occurrence of `--register-with-taints`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Taints(pub Vec<Taint>);

/// Go's strconv.ParseBool, which pflag uses for boolean flags.
pub(crate) fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
    }
}

/// Like clap's PathBuf parser but accepting `--kubeconfig=""`, which
/// upstream treats as "unset".
pub(super) fn path_value_parser() -> impl clap::builder::TypedValueParser<Value = PathBuf> {
    use clap::builder::TypedValueParser;
    clap::builder::OsStringValueParser::new().map(PathBuf::from)
}

pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    Duration::parse(s).map_err(|e| e.to_string())
}

pub(crate) fn parse_verbosity(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(v) if v <= MAX_VERBOSITY => Ok(v),
        _ => Err(format!("must be an integer between 0 and {MAX_VERBOSITY}")),
    }
}

/// Splits a comma-separated flag value, skipping empty items as pflag does.
fn items(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').filter(|item| !item.is_empty())
}

/// `--node-labels`: `k=v,k2=v2`; a bare key means an empty value
/// (cliflag.ConfigurationMap).
pub(crate) fn parse_node_labels(s: &str) -> Result<Pairs, String> {
    Ok(Pairs(
        items(s)
            .map(|item| match item.split_once('=') {
                Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                None => (item.trim().to_string(), String::new()),
            })
            .collect(),
    ))
}

/// Splits `k<sep>v` pairs, rejecting items without the separator
/// (cliflag.MapStringString and friends).
fn parse_pairs(s: &str, sep: char) -> Result<Pairs, String> {
    let mut out = Vec::new();
    for item in items(s) {
        let (k, v) = item
            .split_once(sep)
            .ok_or_else(|| format!("malformed pair {item:?}, expected key{sep}value"))?;
        let k = k.trim();
        if k.is_empty() {
            return Err(format!("malformed pair {item:?}: empty key"));
        }
        out.push((k.to_string(), v.trim().to_string()));
    }
    Ok(Pairs(out))
}

/// `key=value,key2=value2` (cliflag.MapStringString).
pub(crate) fn parse_map_string_string(s: &str) -> Result<Pairs, String> {
    parse_pairs(s, '=')
}

/// `--manifest-url-header 'a:hello,b:again'` (cliflag.ColonSeparatedMultimapStringString).
pub(crate) fn parse_header_pairs(s: &str) -> Result<Pairs, String> {
    parse_pairs(s, ':')
}

/// `--eviction-hard memory.available<1Gi,nodefs.available<10%`.
pub(crate) fn parse_langle_pairs(s: &str) -> Result<Pairs, String> {
    parse_pairs(s, '<')
}

/// `--feature-gates A=true,B=false` (cliflag.MapStringBool).
pub(crate) fn parse_feature_gates(s: &str) -> Result<Gates, String> {
    let Pairs(pairs) = parse_pairs(s, '=')?;
    pairs
        .into_iter()
        .map(|(k, v)| {
            parse_go_bool(&v)
                .map(|b| (k.clone(), b))
                .map_err(|e| format!("invalid value of {k}: {v}, err: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Gates)
}

pub(crate) fn parse_list(s: &str) -> Result<List, String> {
    Ok(List(items(s).map(|i| i.trim().to_string()).collect()))
}

/// `--register-with-taints key=value:Effect,key2:Effect` (utiltaints.parseTaint).
/// Syntax only; key/value/effect validity is checked with the config file's taints.
pub(crate) fn parse_taints(s: &str) -> Result<Taints, String> {
    let mut out = Vec::new();
    for spec in items(s) {
        let (kv, effect) = spec
            .rsplit_once(':')
            .ok_or_else(|| format!("invalid taint spec {spec:?}: expected key[=value]:effect"))?;
        if kv.contains(':') || kv.matches('=').count() > 1 {
            return Err(format!("invalid taint spec {spec:?}"));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        out.push(Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
            time_added: None,
        });
    }
    Ok(Taints(out))
}
