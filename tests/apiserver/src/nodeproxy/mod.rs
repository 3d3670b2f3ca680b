//! The pod subresources the real kube-apiserver proxies to the node's
//! kubelet: `pods/{name}/log`, `pods/{name}/exec`, `pods/{name}/attach` and
//! `pods/{name}/portforward` (pkg/registry/core/pod/rest/{log,subresources}.go
//! with the locations of pkg/registry/core/pod/strategy.go: LogLocation,
//! ExecLocation, AttachLocation, PortForwardLocation).
//!
//! The pod's spec.nodeName names a Node; its status.daemonEndpoints
//! .kubeletEndpoint.port (10250 when unset) and its first address by
//! kubeadm's `--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname`
//! give `https://ADDRESS:PORT`. The double connects there with TLS and a
//! kubelet client certificate (upstream --kubelet-client-certificate /
//! --kubelet-client-key); the kubelet's serving certificate is verified
//! against --kubelet-certificate-authority when given and not at all
//! otherwise, as upstream's kubelet client does without a CA.
//!
//! Logs are fetched with a fresh GET and streamed back as `text/plain`
//! (upstream LocationStreamer; a non-2xx kubelet answer becomes a Status as
//! GenericHttpResponseChecker makes it). exec/attach/portforward need an
//! upgrade request; the upgrade is replayed to the kubelet and, once it
//! answers 101, the two connections are joined byte for byte, whatever the
//! protocol on top (SPDY/3.1 or WebSocket): this is the UpgradeAwareHandler
//! of kube-apiserver before 1.30. Since 1.30 a real apiserver instead
//! terminates WebSocket (v5.channel.k8s.io) requests itself and speaks
//! SPDY to the kubelet (the StreamTranslator / TranslatingStreams feature);
//! the double does not. A kubectl whose WebSocket upgrade fails (here: the
//! runtime's stream server does not offer v5.channel.k8s.io and answers
//! non-101) falls back to SPDY on a new request, which is what a kubectl
//! talking to a pre-1.30 apiserver does too.
//!
//! Every blocking call is bounded: connect, handshake and response head by
//! fixed timeouts; a log stream and an upgraded stream wake every second to
//! notice a client that went away or an idle deadline.
//!
//! Files: `client.rs` (TLS to the kubelet, upstream pkg/kubelet/client),
//! `location.rs` (which kubelet URL a pod subresource maps to),
//! `logs.rs` (streaming a log), `upgradeaware.rs` (dialing and relaying
//! an upgrade); this file keeps the bounds and the reading of the
//! kubelet's HTTP/1.1 responses that both use.

mod client;
mod location;
mod logs;
#[cfg(test)]
mod tests;
mod upgradeaware;

pub use client::{KubeletClient, KubeletClientFiles};
pub use location::{pod_call, KubeletCall, Location};
pub use logs::{serve_log, LogError};
pub use upgradeaware::{
    dial_upgrade, is_upgrade_request, offered_protocols, relay, Dialed, Upgraded,
};

use std::io::{self, Read};
use std::time::Duration;

/// Default kubelet port when the Node reports none (upstream KubeletPort).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TLS handshake plus the kubelet's response head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a blocked read wakes to look at the client and the deadlines.
const TICK: Duration = Duration::from_secs(1);
/// A non-follow log read that gets nothing for this long fails.
const LOG_IDLE: Duration = Duration::from_secs(60);
/// An upgraded stream without traffic either way for this long is closed
/// (the kubelet's own streamingConnectionIdleTimeout is 4 h).
const STREAM_IDLE: Duration = Duration::from_secs(30 * 60);
const MAX_HEAD: usize = 64 * 1024;
/// How much of a kubelet error body goes into the Status (upstream maxReadLength).
const MAX_ERROR_BODY: usize = 50_000;
const COPY_BUF: usize = 32 * 1024;

// ------------------------------------------------------------------ HTTP to the kubelet

/// (status, headers, bytes read past the head).
type Head = (u16, Vec<(String, String)>, Vec<u8>, Vec<u8>);

/// Reads a response head: (status, headers, raw head, bytes after it).
fn read_head<R: Read>(r: &mut R) -> io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the kubelet closed the connection before answering",
            ));
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + i + 4;
            let extra = buf.split_off(end);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(_)) => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed response head from the kubelet",
                    ))
                }
            }
            let code = resp.code.unwrap_or(0);
            let hs = resp
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).trim().to_string(),
                    )
                })
                .collect();
            return Ok((code, hs, buf, extra));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "response head from the kubelet too large",
            ));
        }
    }
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A response body: Content-Length, chunked, or up to EOF.
struct Body<R: Read> {
    r: R,
    pending: Vec<u8>,
    mode: BodyMode,
}

enum BodyMode {
    Length(usize),
    /// Bytes left in the current chunk (0: read a size line next).
    Chunked(usize),
    Eof,
    Done,
}

impl<R: Read> Body<R> {
    fn fill(&mut self) -> io::Result<bool> {
        let mut tmp = [0u8; 16 * 1024];
        let n = self.r.read(&mut tmp)?;
        self.pending.extend_from_slice(&tmp[..n]);
        Ok(n > 0)
    }

    /// The next piece of the body; Ok(None) at its end. A read timeout of
    /// the underlying stream comes back as an error that [`is_timeout`]
    /// recognises, without losing data.
    fn next(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            match self.mode {
                BodyMode::Done => return Ok(None),
                BodyMode::Length(0) => {
                    self.mode = BodyMode::Done;
                    return Ok(None);
                }
                BodyMode::Length(left) => {
                    if self.pending.is_empty() && !self.fill()? {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the kubelet's response body ended early",
                        ));
                    }
                    let n = left.min(self.pending.len());
                    let rest = self.pending.split_off(n);
                    self.mode = BodyMode::Length(left - n);
                    return Ok(Some(std::mem::replace(&mut self.pending, rest)));
                }
                BodyMode::Eof => {
                    if !self.pending.is_empty() {
                        return Ok(Some(std::mem::take(&mut self.pending)));
                    }
                    if !self.fill()? {
                        self.mode = BodyMode::Done;
                        return Ok(None);
                    }
                }
                BodyMode::Chunked(0) => {
                    let Some(i) = self.pending.windows(2).position(|w| w == b"\r\n") else {
                        if self.pending.len() > 4096 {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "chunk size line too long",
                            ));
                        }
                        if !self.fill()? {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the kubelet's chunked body ended early",
                            ));
                        }
                        continue;
                    };
                    let line = String::from_utf8_lossy(&self.pending[..i]).into_owned();
                    let size =
                        usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                            .map_err(|_| {
                                io::Error::new(io::ErrorKind::InvalidData, "bad chunk size")
                            })?;
                    self.pending.drain(..i + 2);
                    if size == 0 {
                        // Trailers are not needed: the body is complete.
                        self.mode = BodyMode::Done;
                        return Ok(None);
                    }
                    // +2 for the CRLF after the data.
                    self.mode = BodyMode::Chunked(size + 2);
                }
                BodyMode::Chunked(left) => {
                    if self.pending.is_empty() && !self.fill()? {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the kubelet's chunked body ended early",
                        ));
                    }
                    let n = left.min(self.pending.len());
                    let mut piece: Vec<u8> = self.pending.drain(..n).collect();
                    let left = left - n;
                    // Strip what belongs to the chunk's trailing CRLF.
                    let data_len = piece.len().saturating_sub(2usize.saturating_sub(left));
                    piece.truncate(data_len);
                    self.mode = BodyMode::Chunked(left);
                    if !piece.is_empty() {
                        return Ok(Some(piece));
                    }
                }
            }
        }
    }
}
