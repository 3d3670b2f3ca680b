//! Test-only: a strict reader of the Prometheus text exposition format
//! (version 0.0.4), so tests check that what we serve would parse in a
//! scraper (metrics-server uses the same grammar).

use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct Family {
    pub help: String,
    pub kind: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// The family a sample belongs to: histogram/summary series carry suffixes.
fn family_of<'a>(name: &'a str, families: &HashMap<String, Family>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if let Some(f) = families.get(base) {
                if f.kind == "histogram" || f.kind == "summary" {
                    return base;
                }
            }
        }
    }
    name
}

fn parse_labels(s: &str, line: &str) -> Result<(Vec<(String, String)>, usize), String> {
    // s starts just after '{'; returns labels and bytes consumed incl. '}'.
    let b = s.as_bytes();
    let mut i = 0;
    let mut labels = Vec::new();
    loop {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i < b.len() && b[i] == b'}' {
            return Ok((labels, i + 1));
        }
        let start = i;
        while i < b.len() && b[i] != b'=' {
            i += 1;
        }
        let name = s[start..i].trim().to_string();
        if !valid_label_name(&name) {
            return Err(format!("bad label name {name:?} in {line:?}"));
        }
        i += 1;
        if i >= b.len() || b[i] != b'"' {
            return Err(format!("label value must be quoted in {line:?}"));
        }
        i += 1;
        let mut value = String::new();
        loop {
            if i >= b.len() {
                return Err(format!("unterminated label value in {line:?}"));
            }
            match b[i] {
                b'"' => {
                    i += 1;
                    break;
                }
                b'\\' => {
                    match b.get(i + 1) {
                        Some(b'\\') => value.push('\\'),
                        Some(b'"') => value.push('"'),
                        Some(b'n') => value.push('\n'),
                        _ => return Err(format!("bad escape in {line:?}")),
                    }
                    i += 2;
                }
                _ => {
                    let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
                    value.push(ch);
                    i += ch.len_utf8();
                }
            }
        }
        labels.push((name, value));
        if i < b.len() && b[i] == b',' {
            i += 1;
        } else if i < b.len() && b[i] == b'}' {
            return Ok((labels, i + 1));
        } else {
            return Err(format!("expected , or }} in {line:?}"));
        }
    }
}

/// Parses a whole exposition; every sample must belong to a family with a
/// TYPE line, and HELP/TYPE may appear once per family.
pub fn parse(text: &str) -> Result<HashMap<String, Family>, String> {
    let mut families: HashMap<String, Family> = HashMap::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            if !valid_metric_name(name) {
                return Err(format!("bad metric name in {line:?}"));
            }
            let f = families.entry(name.to_string()).or_default();
            if !f.help.is_empty() {
                return Err(format!("duplicate HELP for {name}"));
            }
            f.help = help.to_string();
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| format!("bad TYPE line {line:?}"))?;
            if !matches!(
                kind,
                "counter" | "gauge" | "histogram" | "summary" | "untyped"
            ) {
                return Err(format!("bad type in {line:?}"));
            }
            let f = families.entry(name.to_string()).or_default();
            if !f.kind.is_empty() {
                return Err(format!("duplicate TYPE for {name}"));
            }
            f.kind = kind.to_string();
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| format!("no value in {line:?}"))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(format!("bad metric name in {line:?}"));
        }
        let mut rest = &line[name_end..];
        let mut labels = Vec::new();
        if let Some(after) = rest.strip_prefix('{') {
            let (l, used) = parse_labels(after, line)?;
            labels = l;
            rest = &after[used..];
        }
        let mut fields = rest.split_whitespace();
        let value = fields
            .next()
            .and_then(parse_value)
            .ok_or_else(|| format!("bad value in {line:?}"))?;
        let timestamp_ms = match fields.next() {
            Some(ts) => Some(
                ts.parse::<i64>()
                    .map_err(|_| format!("bad timestamp in {line:?}"))?,
            ),
            None => None,
        };
        if fields.next().is_some() {
            return Err(format!("trailing fields in {line:?}"));
        }
        let fam = family_of(name, &families).to_string();
        let f = families
            .get_mut(&fam)
            .filter(|f| !f.kind.is_empty())
            .ok_or_else(|| format!("sample {name} before its TYPE line"))?;
        f.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
            timestamp_ms,
        });
    }
    Ok(families)
}

#[test]
fn parser_rejects_garbage() {
    assert!(parse("# TYPE a gauge\na{x=\"1\"} 1 123\n").is_ok());
    assert!(parse("a 1\n").is_err());
    assert!(parse("# TYPE a gauge\na{x=1} 1\n").is_err());
    assert!(parse("# TYPE a gauge\na{x=\"1\"} one\n").is_err());
    assert!(parse("# TYPE a gauge\n# TYPE a gauge\n").is_err());
}
