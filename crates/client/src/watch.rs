//! Watch streams: newline-delimited JSON events over a chunked response
//! (client-go's watch.StreamWatcher).
//!
//! A reader thread owns the response and sends decoded events over a
//! bounded channel, so a consumer can `select!` on it together with a
//! shutdown channel instead of sitting in a socket read. Dropping the stream
//! shuts the TLS socket down, which ends the reader at once; for plain
//! http:// (tests) the reader ends at its next event, the server's timeout or
//! the idle timeout, whichever is first.
//!
//! The reflectors and the CSR wait use this rather than [`crate::multiwatch`]:
//! their handlers may block (backpressure through the bounded channel), and
//! the CSR wait runs on the bootstrap kubeconfig's own client
//! (docs/client.md, "Two watch transports").

use std::io::{BufRead, BufReader, Read};
use std::net::Shutdown;
use std::thread;

use crossbeam_channel::{Receiver, Sender};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use rkubelet_util::lock;
use serde::Deserialize;

use super::tls::SocketSlot;
use super::ApiError;

/// Longest accepted event line; a longer one fails the stream.
pub const MAX_EVENT_LINE: usize = 16 << 20;
/// Events read ahead of the consumer.
const EVENT_BUFFER: usize = 16;
const READ_BUFFER: usize = 64 << 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
    /// Only the object's resourceVersion is meaningful.
    Bookmark,
    /// Never yielded by [`WatchStream`]: an ERROR event arrives as
    /// `Err(ApiError::Status)` built from its Status object (410 → `is_gone()`).
    Error,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WatchEvent {
    pub kind: WatchEventType,
    pub object: serde_json::Value,
}

impl WatchEvent {
    /// `object.metadata.resourceVersion`, if present.
    pub fn resource_version(&self) -> Option<&str> {
        self.object
            .get("metadata")?
            .get("resourceVersion")?
            .as_str()
    }
}

/// Events of one watch; ends after the server closes it or after the first
/// `Err` (malformed event, ERROR event, broken or idle connection).
pub struct WatchStream {
    events: Receiver<Result<WatchEvent, ApiError>>,
    socket: SocketSlot,
}

impl WatchStream {
    pub(crate) fn start(
        resp: ureq::Response,
        socket: SocketSlot,
        request: String,
    ) -> Result<WatchStream, ApiError> {
        let mut stream = WatchStream::from_reader(resp.into_reader(), request)?;
        stream.socket = socket;
        Ok(stream)
    }

    /// A stream over any reader of event lines (also for fakes in tests).
    /// `request` names the watch in errors.
    pub(crate) fn from_reader(
        reader: impl Read + Send + 'static,
        request: String,
    ) -> Result<WatchStream, ApiError> {
        let (tx, rx) = crossbeam_channel::bounded(EVENT_BUFFER);
        thread::Builder::new()
            .name("watch-reader".to_string())
            .spawn({
                let request = request.clone();
                move || read_events(reader, &tx, &request)
            })
            .map_err(|e| ApiError::transport(&request, format!("starting watch reader: {e}")))?;
        Ok(WatchStream {
            events: rx,
            socket: SocketSlot::default(),
        })
    }

    /// The event channel, to `select!` with a shutdown channel. It
    /// disconnects when the stream ends.
    pub fn events(&self) -> &Receiver<Result<WatchEvent, ApiError>> {
        &self.events
    }
}

impl Iterator for WatchStream {
    type Item = Result<WatchEvent, ApiError>;

    /// Blocks until the next event; None once the stream has ended.
    fn next(&mut self) -> Option<Self::Item> {
        self.events.recv().ok()
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        let sock = lock(&self.socket).take();
        if let Some(sock) = sock {
            let _ = sock.shutdown(Shutdown::Both);
        }
    }
}

/// The reader thread: one event per line until EOF, the first error, or
/// the consumer going away.
fn read_events(reader: impl Read, tx: &Sender<Result<WatchEvent, ApiError>>, request: &str) {
    let mut reader = BufReader::with_capacity(READ_BUFFER, reader);
    let mut line = Vec::new();
    loop {
        line.clear();
        if let Err(err) = read_line(&mut reader, &mut line, request) {
            let _ = tx.send(Err(err));
            return;
        }
        let complete = line.last() == Some(&b'\n');
        let text = line.trim_ascii();
        if text.is_empty() {
            if complete {
                continue;
            }
            return; // clean end of stream
        }
        let item = parse_event(text, request)
            .and_then(|ev| into_result(ev, request))
            .map_err(|e| truncated(e, complete, request));
        let end = item.is_err();
        if tx.send(item).is_err() || end {
            return;
        }
    }
}

/// One line into `buf` (with its '\n' unless at EOF), bounded by [`MAX_EVENT_LINE`].
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>, request: &str) -> Result<(), ApiError> {
    let limit = MAX_EVENT_LINE as u64 + 1;
    match reader.take(limit).read_until(b'\n', buf) {
        Ok(_) if buf.len() > MAX_EVENT_LINE => Err(ApiError::decode(
            request,
            format!("watch event longer than {MAX_EVENT_LINE} bytes"),
        )),
        Ok(_) => Ok(()),
        Err(e) if is_timeout(&e) => Err(ApiError::transport(
            request,
            "watch stream idle: no data within the read timeout",
        )),
        Err(e) => Err(ApiError::transport(
            request,
            format!("reading watch stream: {e}"),
        )),
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
    )
}

/// A bad last line without its newline is a cut-off stream: say so.
fn truncated(err: ApiError, complete: bool, request: &str) -> ApiError {
    match err {
        ApiError::Decode(msg) if !complete => {
            ApiError::decode(request, format!("truncated watch event ({msg})"))
        }
        e => e,
    }
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: serde_json::Value,
}

/// One `{"type": ..., "object": ...}` line.
pub(crate) fn parse_event(line: &[u8], request: &str) -> Result<WatchEvent, ApiError> {
    let raw: RawEvent = serde_json::from_slice(line)
        .map_err(|e| ApiError::decode(request, format!("invalid watch event: {e}")))?;
    let kind = match raw.kind.as_str() {
        "ADDED" => WatchEventType::Added,
        "MODIFIED" => WatchEventType::Modified,
        "DELETED" => WatchEventType::Deleted,
        "BOOKMARK" => WatchEventType::Bookmark,
        "ERROR" => WatchEventType::Error,
        other => {
            let msg = format!("unknown watch event type {other:?}");
            return Err(ApiError::decode(request, msg));
        }
    };
    Ok(WatchEvent {
        kind,
        object: raw.object,
    })
}

/// ERROR events become the ApiError their Status describes.
pub(crate) fn into_result(ev: WatchEvent, request: &str) -> Result<WatchEvent, ApiError> {
    if ev.kind != WatchEventType::Error {
        return Ok(ev);
    }
    match serde_json::from_value::<Status>(ev.object.clone()) {
        Ok(status) if status.code.is_some() || status.reason.is_some() => {
            Err(ApiError::from_status(&status, 500, request))
        }
        _ => Err(ApiError::from_response(
            500,
            ev.object.to_string().as_bytes(),
            request,
        )),
    }
}
