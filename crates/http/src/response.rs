//! Writing a response: whole with a Content-Length, streamed chunked (or
//! until close for HTTP/1.0), or the stream handed over for an upgrade.

use std::io::{self, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::conn::{taken, Conn};
use crate::stream::{CancelToken, RawStream, Transport, Upgraded};
use crate::Request;

pub(crate) fn reason(code: u16) -> &'static str {
    match code {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Request Entity Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

fn http_date() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(0);
    jiff::Timestamp::from_second(secs)
        .ok()
        .and_then(|ts| {
            jiff::fmt::rfc2822::DateTimePrinter::new()
                .timestamp_to_rfc9110_string(&ts)
                .ok()
        })
        .unwrap_or_default()
}

/// Where a response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing sent yet.
    Pending,
    /// Head sent with Content-Length; this many body bytes still due.
    Fixed(u64),
    Chunked,
    /// HTTP/1.0 streaming: body delimited by closing the connection.
    UntilClose,
    Done,
    /// The stream was handed to the handler.
    Taken,
}

/// Buffered body bytes are sent as a chunk once this large.
const CHUNK: usize = 16 << 10;

/// The response to one request. Set status and headers, then either call
/// [`ResponseWriter::send`] (whole body) or write through [`Write`]
/// (streams chunked; set a `Content-Length` header first for a fixed length).
pub struct ResponseWriter<'a> {
    conn: &'a mut Conn,
    status: u16,
    headers: Vec<(String, String)>,
    state: State,
    head_only: bool,
    http10: bool,
    close: bool,
    buf: Vec<u8>,
    stopping: Arc<AtomicBool>,
}

impl<'a> ResponseWriter<'a> {
    pub(crate) fn new<U>(conn: &'a mut Conn, req: &Request<U>, stopping: Arc<AtomicBool>) -> Self {
        ResponseWriter {
            conn,
            status: 200,
            headers: Vec::new(),
            state: State::Pending,
            head_only: req.method == "HEAD",
            http10: req.http10,
            close: req.wants_close(),
            buf: Vec::new(),
            stopping,
        }
    }

    pub fn set_status(&mut self, code: u16) {
        self.status = code;
    }

    /// Sets a header, replacing any of the same name.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self.add_header(name, value);
    }

    /// Adds a header (repeatable names such as Set-Cookie).
    pub fn add_header(&mut self, name: &str, value: &str) {
        // CR/LF in a value would split the response.
        let clean: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        self.headers.push((name.to_string(), clean));
    }

    /// True once the status line has gone out.
    pub fn headers_sent(&self) -> bool {
        self.state != State::Pending
    }

    /// Closes the connection after this response (no keep-alive).
    pub fn close_after(&mut self) {
        self.close = true;
    }

    /// Sends a complete response with a Content-Length.
    pub fn send(&mut self, code: u16, content_type: &str, body: &[u8]) -> io::Result<()> {
        if self.headers_sent() {
            return Err(io::Error::other("response already started"));
        }
        self.status = code;
        if !content_type.is_empty() {
            self.set_header("Content-Type", content_type);
        }
        self.set_header("Content-Length", &body.len().to_string());
        self.write_head()?;
        if !self.head_only {
            self.io()?.write_all(body)?;
        }
        self.state = State::Done;
        self.io()?.flush()
    }

    /// A plain-text response, as Go's http.Error writes it.
    pub fn send_text(&mut self, code: u16, text: &str) -> io::Result<()> {
        self.set_header("X-Content-Type-Options", "nosniff");
        self.send(code, "text/plain; charset=utf-8", text.as_bytes())
    }

    pub fn send_json<T: serde::Serialize + ?Sized>(
        &mut self,
        code: u16,
        value: &T,
    ) -> io::Result<()> {
        let body = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.send(code, "application/json", &body)
    }

    /// A token that turns true when the server stops or the client hangs up.
    pub fn cancel_token(&self) -> CancelToken {
        let tcp = self
            .conn
            .io
            .as_ref()
            .and_then(|io| io.sock().tcp().try_clone().ok())
            .map(Arc::new);
        CancelToken {
            stopping: self.stopping.clone(),
            tcp,
        }
    }

    /// Hands the raw stream to the handler without writing anything (it
    /// writes its own `101 Switching Protocols`). The connection is not
    /// reused afterwards; the read timeout is cleared and the socket's
    /// write timeout left at the server's value.
    pub fn take_stream(&mut self) -> io::Result<Upgraded> {
        if self.headers_sent() {
            return Err(io::Error::other("response already started"));
        }
        let io = self.conn.io.take().ok_or_else(taken)?;
        self.state = State::Taken;
        Ok(Upgraded {
            stream: RawStream::from_transport(io)?,
            buffered: std::mem::take(&mut self.conn.buf),
        })
    }

    /// Writes `101 Switching Protocols` with `headers` and hands over the stream.
    pub fn switch_protocols(&mut self, headers: &[(&str, &str)]) -> io::Result<Upgraded> {
        let mut head = String::from("HTTP/1.1 101 Switching Protocols\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut up = self.take_stream()?;
        up.stream.write_all(head.as_bytes())?;
        up.stream.flush()?;
        Ok(up)
    }

    fn io(&mut self) -> io::Result<&mut Transport> {
        self.conn.io.as_mut().ok_or_else(taken)
    }

    fn write_head(&mut self) -> io::Result<()> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Date: {}\r\n", http_date()));
        if self.close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        self.io()?.write_all(head.as_bytes())
    }

    /// Sends the head for a streamed body, choosing its framing.
    fn start_stream(&mut self) -> io::Result<()> {
        let fixed = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<u64>().ok());
        self.state = match fixed {
            Some(n) => State::Fixed(n),
            None if self.http10 => {
                self.close = true;
                State::UntilClose
            }
            None => {
                self.set_header("Transfer-Encoding", "chunked");
                State::Chunked
            }
        };
        if self.head_only && self.state == State::Chunked {
            self.headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case("transfer-encoding"));
        }
        self.write_head()
    }

    fn emit(&mut self) -> io::Result<()> {
        if self.buf.is_empty() || self.head_only {
            self.buf.clear();
            return Ok(());
        }
        let data = std::mem::take(&mut self.buf);
        match self.state {
            State::Chunked => {
                let mut out = format!("{:x}\r\n", data.len()).into_bytes();
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
                self.io()?.write_all(&out)
            }
            State::Fixed(left) => {
                let n = (data.len() as u64).min(left);
                self.state = State::Fixed(left - n);
                // usize::try_from cannot fail: n <= data.len().
                let n = usize::try_from(n).unwrap_or(data.len());
                self.io()?.write_all(&data[..n])
            }
            State::UntilClose => self.io()?.write_all(&data),
            _ => Err(io::Error::other("response is finished")),
        }
    }

    /// Completes the response: an empty one if nothing was written, the last
    /// chunk if streaming. Returns whether the connection can be reused.
    pub(crate) fn finish(&mut self) -> io::Result<bool> {
        match self.state {
            State::Taken => return Ok(false),
            State::Done => {}
            State::Pending => {
                let code = self.status;
                self.send(code, "", &[])?;
            }
            State::Chunked | State::Fixed(_) | State::UntilClose => {
                self.emit()?;
                if self.state == State::Chunked && !self.head_only {
                    self.io()?.write_all(b"0\r\n\r\n")?;
                }
                if matches!(self.state, State::Fixed(left) if left > 0 && !self.head_only) {
                    self.close = true;
                }
                self.state = State::Done;
                self.io()?.flush()?;
            }
        }
        Ok(!self.close)
    }
}

impl Write for ResponseWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.state == State::Pending {
            self.start_stream()?;
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.emit()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.state == State::Pending {
            self.start_stream()?;
        }
        self.emit()?;
        self.io()?.flush()
    }
}

/// Writes a whole error response on a connection about to close.
pub(crate) fn write_error(io: &mut dyn Write, code: u16, text: &str) -> io::Result<()> {
    let resp = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        reason(code),
        text.len()
    );
    io.write_all(resp.as_bytes())?;
    io.flush()
}
