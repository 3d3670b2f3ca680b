//! `pods/{name}/log`: a fresh GET to the kubelet streamed back as
//! chunked `text/plain` (upstream LocationStreamer), a non-2xx answer
//! turned into a Status (GenericHttpResponseChecker).

use super::{header, is_timeout, read_head, Body, BodyMode, KubeletClient, Location};
use super::{HEAD_TIMEOUT, LOG_IDLE, MAX_ERROR_BODY, TICK};
use crate::status::ApiError;
use std::io::{self, Write};
use std::time::Instant;

/// Why a log request failed before any of the body went out.
pub enum LogError {
    Api(ApiError),
    /// The body was being streamed; the connection must close.
    Midstream(String),
}

/// GET the log from the kubelet and stream it to `w` as a chunked
/// text/plain response. Ok(status written) or the error to answer.
pub fn serve_log<W: Write>(
    client: &KubeletClient,
    loc: &Location,
    follow: bool,
    pod: &str,
    w: &mut W,
    alive: &dyn Fn() -> bool,
) -> Result<u16, LogError> {
    let dial_err =
        |e: io::Error| LogError::Api(ApiError::internal(&format!("Get \"{}\": {}", loc.url(), e)));
    let mut s = client.connect(loc).map_err(dial_err)?;
    let head = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: apiserver-double\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n",
        loc.target, loc.host, loc.port
    );
    s.write_all(head.as_bytes()).map_err(dial_err)?;
    s.flush().map_err(dial_err)?;
    let (code, headers, _raw, extra) = read_head(&mut s).map_err(dial_err)?;
    let _ = s.sock.set_read_timeout(Some(TICK));
    let mode = if header(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        BodyMode::Chunked(0)
    } else if let Some(n) = header(&headers, "content-length").and_then(|v| v.parse().ok()) {
        BodyMode::Length(n)
    } else {
        BodyMode::Eof
    };
    let mut body = Body {
        r: s,
        pending: extra,
        mode,
    };
    if !(200..=206).contains(&code) {
        // upstream GenericHttpResponseChecker
        let mut text = Vec::new();
        let deadline = Instant::now() + HEAD_TIMEOUT;
        while text.len() < MAX_ERROR_BODY {
            match body.next() {
                Ok(Some(p)) => text.extend_from_slice(&p),
                Ok(None) => break,
                Err(e) if is_timeout(&e) && Instant::now() < deadline => {}
                Err(_) => break,
            }
        }
        text.truncate(MAX_ERROR_BODY);
        let text = String::from_utf8_lossy(&text).into_owned();
        let e = match code {
            500 => ApiError::internal(&text),
            400 => ApiError::bad_request(text),
            _ => {
                let mut e = ApiError::for_code(code, None);
                e.message = text;
                e.details = Some(serde_json::json!({"name": pod, "kind": "pods/log"}));
                e
            }
        };
        return Err(LogError::Api(e));
    }
    let h = vec![
        ("Content-Type".to_string(), "text/plain".to_string()),
        ("Cache-Control".to_string(), "no-cache, private".to_string()),
    ];
    crate::http::write_chunked_head(w, 200, &h).map_err(|e| LogError::Midstream(e.to_string()))?;
    let mut last = Instant::now();
    loop {
        match body.next() {
            Ok(Some(p)) => {
                last = Instant::now();
                crate::http::write_chunk(w, &p).map_err(|e| LogError::Midstream(e.to_string()))?;
            }
            Ok(None) => break,
            Err(e) if is_timeout(&e) => {
                if !alive() {
                    return Err(LogError::Midstream("the client went away".into()));
                }
                if !follow && last.elapsed() >= LOG_IDLE {
                    return Err(LogError::Midstream(format!(
                        "no data from the kubelet for {:?}",
                        LOG_IDLE
                    )));
                }
            }
            Err(e) => return Err(LogError::Midstream(e.to_string())),
        }
    }
    crate::http::end_chunks(w).map_err(|e| LogError::Midstream(e.to_string()))?;
    Ok(200)
}
