//! Which credentials apply to an image (upstream
//! `pkg/credentialprovider/keyring.go`: `BasicDockerKeyring.Add`/`Lookup`,
//! `URLsMatch`, `isDefaultRegistryMatch`).

use std::collections::{BTreeSet, HashMap};

use super::RegistryAuth;

/// The registry key Docker Hub credentials are filed under once
/// `https://index.docker.io/v1/` is normalised.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";

/// Credentials by normalised registry key, with the keys in reverse
/// lexical order so more specific paths come first (`quay.io/coreos`
/// before `quay.io`).
#[derive(Default)]
pub struct Keyring {
    index: Vec<String>,
    creds: HashMap<String, Vec<RegistryAuth>>,
}

impl Keyring {
    /// Files each entry under its key: scheme dropped, a `/v1/` or `/v2/`
    /// path prefix dropped, a bare `/` path dropped. Entries whose key is
    /// not a URL are skipped, as upstream does.
    pub fn add(&mut self, cfg: &[(String, RegistryAuth)]) {
        for (loc, auth) in cfg {
            let value = if loc.starts_with("https://") || loc.starts_with("http://") {
                loc.clone()
            } else {
                format!("https://{loc}")
            };
            let Some(url) = parse_url(&value) else {
                log::warn!("entry {loc:?} in dockercfg invalid, ignoring");
                continue;
            };
            let mut path = url.path;
            if path.starts_with("/v2/") || path.starts_with("/v1/") {
                path = &path[3..];
            }
            let key = if path.is_empty() || path == "/" {
                url.host.to_string()
            } else {
                format!("{}{path}", url.host)
            };
            self.creds
                .entry(key.clone())
                .or_default()
                .push(auth.clone());
            self.index.push(key);
        }
        let unique: BTreeSet<String> = self.index.drain(..).collect();
        self.index = unique.into_iter().rev().collect();
    }

    /// Every credential whose key matches `image` (a repository name
    /// without tag, e.g. `docker.io/library/busybox`), most specific key
    /// first; failing that, Docker Hub's credentials for Docker Hub images.
    pub fn lookup(&self, image: &str) -> Vec<RegistryAuth> {
        let mut out = Vec::new();
        for key in &self.index {
            if urls_match_str(key, image) {
                out.extend(self.creds[key].iter().cloned());
            }
        }
        if out.is_empty() && is_default_registry_match(image) {
            if let Some(auth) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                out.extend(auth.iter().cloned());
            }
        }
        out
    }
}

/// Whether the image is pulled from Docker Hub, judged by its name.
pub fn is_default_registry_match(image: &str) -> bool {
    let (first, rest) = match image.split_once('/') {
        Some((f, r)) => (f, Some(r)),
        None => (image, None),
    };
    if first.is_empty() {
        return false;
    }
    if rest.is_none() || first == "docker.io" || first == "index.docker.io" {
        return true;
    }
    // A '.' or ':' marks a registry host rather than a user name.
    !first.contains(['.', ':'])
}

/// The parts of a URL the keyring uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Url<'a> {
    /// host[:port], without user info.
    pub host: &'a str,
    pub path: &'a str,
}

/// A minimal `net/url.Parse` for `scheme://authority/path`: what Go
/// rejects here (control characters, a non-numeric port) is rejected too.
pub fn parse_url(s: &str) -> Option<Url<'_>> {
    if s.chars().any(|c| c.is_ascii_control()) {
        return None;
    }
    let (_, rest) = s.split_once("://")?;
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_char =
        |b: u8| b >= 0x80 || b.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"%".contains(&b);
    if !host.bytes().all(host_char) {
        return None;
    }
    // Go's parseHost: "[...]" must end the host or precede ":port"; else
    // whatever follows the last ':' is the port.
    let colon_port = if host.starts_with('[') {
        &host[host.rfind(']')? + 1..]
    } else {
        host.rfind(':').map_or("", |i| &host[i..])
    };
    let valid_port = colon_port.is_empty()
        || colon_port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
    valid_port.then_some(Url { host, path })
}

/// `net.SplitHostPort`, falling back to (host, "") when there is no port.
fn split_host_port(host: &str) -> (&str, &str) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, p)) => match p.strip_prefix(':') {
                Some(port) if !port.contains(':') => (h, port),
                _ => (host, ""),
            },
            None => (host, ""),
        };
    }
    match host.split_once(':') {
        Some((h, p)) if !p.contains(':') => (h, p),
        _ => (host, ""),
    }
}

/// Upstream `URLsMatchStr`: both sides are schemeless (`host[:port]/path`).
pub fn urls_match_str(glob: &str, target: &str) -> bool {
    let (Some(g), Some(t)) = (
        parse_url(&format!("https://{glob}")).map(owned),
        parse_url(&format!("https://{target}")).map(owned),
    ) else {
        return false;
    };
    urls_match(&g.0, &g.1, &t.0, &t.1)
}

fn owned(u: Url<'_>) -> (String, String) {
    (u.host.to_string(), u.path.to_string())
}

/// Upstream `URLsMatch`: same port, same number of host labels, each
/// label matching its glob (`*.example.com`), and the glob's path a prefix
/// of the target's. No wildcards in ports or paths.
pub fn urls_match(glob_host: &str, glob_path: &str, host: &str, path: &str) -> bool {
    let (gh, gport) = split_host_port(glob_host);
    let (th, tport) = split_host_port(host);
    if gport != tport {
        return false;
    }
    let gparts: Vec<&str> = gh.split('.').collect();
    let tparts: Vec<&str> = th.split('.').collect();
    if gparts.len() != tparts.len() || !path.starts_with(glob_path) {
        return false;
    }
    gparts
        .iter()
        .zip(&tparts)
        .all(|(g, t)| glob_match(g.as_bytes(), t.as_bytes()) == Some(true))
}

/// `filepath.Match` on one host label: `*`, `?`, `[...]` classes with
/// ranges and `^` negation, `\` escapes. `None` for a malformed pattern.
pub fn glob_match(pat: &[u8], name: &[u8]) -> Option<bool> {
    match pat.first() {
        None => Some(name.is_empty()),
        Some(b'*') => {
            let rest = &pat[1..];
            for i in 0..=name.len() {
                if glob_match(rest, &name[i..])? {
                    return Some(true);
                }
            }
            Some(false)
        }
        Some(b'?') => match name.split_first() {
            Some((_, n)) => glob_match(&pat[1..], n),
            None => {
                glob_match(&pat[1..], b"")?;
                Some(false)
            }
        },
        Some(b'[') => {
            let (matched, rest) = class(&pat[1..], name.first().copied())?;
            match name.split_first() {
                Some((_, n)) if matched => glob_match(rest, n),
                _ => {
                    glob_match(rest, b"")?;
                    Some(false)
                }
            }
        }
        Some(b'\\') => {
            let (&c, rest) = pat[1..].split_first()?;
            match name.split_first() {
                Some((&n, tail)) if n == c => glob_match(rest, tail),
                _ => Some(false),
            }
        }
        Some(&c) => match name.split_first() {
            Some((&n, tail)) if n == c => glob_match(&pat[1..], tail),
            _ => {
                glob_match(&pat[1..], b"")?;
                Some(false)
            }
        },
    }
}

/// A `[...]` class after its `[`: whether `c` is in it, and what follows.
fn class(mut pat: &[u8], c: Option<u8>) -> Option<(bool, &[u8])> {
    let negated = pat.first() == Some(&b'^');
    if negated {
        pat = &pat[1..];
    }
    let mut matched = false;
    let mut first = true;
    loop {
        match pat.first()? {
            b']' if !first => break,
            _ => {}
        }
        first = false;
        let (lo, rest) = class_char(pat)?;
        pat = rest;
        let hi = if pat.first() == Some(&b'-') && pat.get(1) != Some(&b']') {
            let (hi, rest) = class_char(&pat[1..])?;
            pat = rest;
            hi
        } else {
            lo
        };
        if lo > hi {
            return None;
        }
        if c.is_some_and(|c| lo <= c && c <= hi) {
            matched = true;
        }
    }
    Some((matched != negated && c.is_some(), &pat[1..]))
}

fn class_char(pat: &[u8]) -> Option<(u8, &[u8])> {
    match pat.split_first()? {
        (b'\\', rest) => rest.split_first().map(|(c, r)| (*c, r)),
        (b'-' | b']', _) => None,
        (c, rest) => Some((*c, rest)),
    }
}

/// The repository an image is pulled from, as `ParseNormalizedNamed(image).Name()`:
/// tag and digest dropped, Docker Hub names given `docker.io/` (and
/// `library/` for single names), `index.docker.io` spelt `docker.io`.
pub fn repository(image: &str) -> String {
    let name = image.split('@').next().unwrap_or(image);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let name = match name[last_slash..].find(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    };
    let (domain, remainder) = match name.split_once('/') {
        Some((d, r)) if d.contains(['.', ':']) || d == "localhost" || d != d.to_lowercase() => {
            (d, r.to_string())
        }
        _ => ("docker.io", name.to_string()),
    };
    let domain = if domain == "index.docker.io" {
        "docker.io"
    } else {
        domain
    };
    if domain == "docker.io" && !remainder.contains('/') {
        return format!("docker.io/library/{remainder}");
    }
    format!("{domain}/{remainder}")
}
