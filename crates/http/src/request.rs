//! A parsed request: method, decoded path and query, headers, the body
//! read beforehand, and who sent it.

use std::net::SocketAddr;

use crate::conn::{header_value, Head};

/// A request with its body read. `U` is who sent it, as the service
/// authenticated them (`()` where nobody is asked).
pub struct Request<U = ()> {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) user: Option<U>,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) http10: bool,
}

impl<U> Request<U> {
    /// Builds a request from its head; Err for a target that cannot be decoded (400).
    pub(crate) fn from_head(
        head: Head,
        body: Vec<u8>,
        peer: Option<SocketAddr>,
    ) -> Result<Request<U>, String> {
        let (path, query) = split_target(&head.target)?;
        Ok(Request {
            method: head.method,
            target: head.target,
            path,
            query,
            headers: head.headers,
            body,
            user: None,
            peer,
            http10: head.http10,
        })
    }

    pub fn method(&self) -> &str {
        &self.method
    }
    /// The raw request target (path and query) as sent.
    pub fn target(&self) -> &str {
        &self.target
    }
    /// The percent-decoded path.
    pub fn path(&self) -> &str {
        &self.path
    }
    /// The first value of a query parameter.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    /// Every value of a query parameter, in order (`command=a&command=b`).
    pub fn query_all(&self, name: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    pub fn query_pairs(&self) -> &[(String, String)] {
        &self.query
    }
    /// A header's first value (names are case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
    /// All headers, names lower-cased.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }
    pub fn body(&self) -> &[u8] {
        &self.body
    }
    pub fn take_body(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.body)
    }
    /// Who sent the request, once the service has set it.
    pub fn user(&self) -> Option<&U> {
        self.user.as_ref()
    }
    /// Records who sent the request, for the handlers after the service's check.
    pub fn set_user(&mut self, user: U) {
        self.user = Some(user);
    }
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }
    /// `Connection: Upgrade` with an `Upgrade` header (SPDY, WebSocket).
    pub fn is_upgrade(&self) -> bool {
        let conn_upgrade = self.header_all("connection").iter().any(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
        conn_upgrade && self.header("upgrade").is_some()
    }

    pub(crate) fn wants_close(&self) -> bool {
        match self.header("connection") {
            Some(v) if v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")) => true,
            Some(v)
                if v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("keep-alive")) =>
            {
                false
            }
            _ => self.http10,
        }
    }
}

/// Splits an origin-form target into decoded path and query pairs.
pub(super) fn split_target(target: &str) -> Result<(String, Vec<(String, String)>), String> {
    if !target.starts_with('/') {
        return Err(format!("unsupported request target {target:?}"));
    }
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let path = percent_decode(raw_path, false)?;
    if path.contains('\0') {
        return Err("NUL in path".into());
    }
    let mut query = Vec::new();
    for kv in raw_query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        query.push((percent_decode(k, true)?, percent_decode(v, true)?));
    }
    Ok((path, query))
}

/// Strict percent-decoding to UTF-8; `plus` turns '+' into ' ' (queries).
pub(crate) fn percent_decode(s: &str, plus: bool) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or("truncated percent escape")?;
                let hex = std::str::from_utf8(hex).map_err(|_| "bad percent escape")?;
                let b = u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("bad percent escape %{hex}"))?;
                out.push(b);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "escaped bytes are not UTF-8".to_string())
}
