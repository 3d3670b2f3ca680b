//! Reading requests off a connection: the head under a deadline and size
//! limits, with framing that refuses smuggling, and the body whole and
//! bounded (Content-Length or chunked, with `Expect: 100-continue`).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::Instant;

use crate::stream::Transport;
use crate::Limits;

#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed, or stayed idle, before a request started.
    Closed,
    /// The head or body did not arrive in time: 408, close.
    TimedOut,
    Io(io::Error),
    /// Malformed request: 400, close.
    Bad(String),
    /// Headers over the limit: 431, close.
    HeadTooLarge,
    /// Body over the limit: 413, close.
    BodyTooLarge,
}

fn io_to_read_error(e: io::Error) -> ReadError {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ReadError::TimedOut,
        _ => ReadError::Io(e),
    }
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    pub http10: bool,
    pub headers: Vec<(String, String)>,
    pub content_length: Option<usize>,
    pub chunked: bool,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

pub(super) fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A connection: its stream (None once a handler took it) and read-ahead bytes.
pub(crate) struct Conn {
    pub io: Option<Transport>,
    pub buf: Vec<u8>,
    pub peer: Option<SocketAddr>,
}

pub(super) fn taken() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "connection handed to a handler",
    )
}

impl Conn {
    pub fn new(io: Transport, peer: Option<SocketAddr>) -> Conn {
        Conn {
            io: Some(io),
            buf: Vec::with_capacity(4096),
            peer,
        }
    }

    fn io(&mut self) -> io::Result<&mut Transport> {
        self.io.as_mut().ok_or_else(taken)
    }

    fn set_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.io()?.sock_mut().set_deadline(deadline)
    }

    /// Reads more bytes into the buffer; Ok(0) at end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 8192];
        let n = match self.io()?.read(&mut tmp) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            r => r?,
        };
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Reads a request head. `deadline` bounds the whole head (the first
    /// request: from accept); without one the first byte may take
    /// `idle_timeout` and the rest `header_timeout` after it.
    pub fn read_head(
        &mut self,
        deadline: Option<Instant>,
        limits: &Limits,
    ) -> Result<Head, ReadError> {
        let started = !self.buf.is_empty();
        let first = deadline.unwrap_or_else(|| Instant::now() + limits.idle_timeout);
        self.set_deadline(Some(first)).map_err(ReadError::Io)?;
        if !started {
            match self.fill() {
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => {}
                Err(e) if is_timeout(&e) || is_disconnect(&e) => return Err(ReadError::Closed),
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        if deadline.is_none() {
            let head_deadline = Instant::now() + limits.header_timeout;
            self.set_deadline(Some(head_deadline))
                .map_err(ReadError::Io)?;
        }
        loop {
            if let Some((head, n)) = parse_head(&self.buf, limits)? {
                self.buf.drain(..n);
                return Ok(head);
            }
            if self.buf.len() > limits.max_head {
                return Err(ReadError::HeadTooLarge);
            }
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("connection closed mid-request".into())),
                Ok(_) => {}
                Err(e) => return Err(io_to_read_error(e)),
            }
        }
    }

    /// Reads the body `head` announces, whole and bounded.
    pub fn read_body(&mut self, head: &Head, limits: &Limits) -> Result<Vec<u8>, ReadError> {
        if !head.chunked && head.content_length.unwrap_or(0) == 0 {
            return Ok(Vec::new());
        }
        if head.content_length.is_some_and(|n| n > limits.max_body) {
            return Err(ReadError::BodyTooLarge);
        }
        if head
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            let io = self.io().map_err(ReadError::Io)?;
            io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(ReadError::Io)?;
            io.flush().map_err(ReadError::Io)?;
        }
        self.set_deadline(Some(Instant::now() + limits.body_timeout))
            .map_err(ReadError::Io)?;
        match head.content_length {
            Some(n) if !head.chunked => self.take(n),
            _ => self.read_chunked(limits.max_body),
        }
    }

    fn take(&mut self, n: usize) -> Result<Vec<u8>, ReadError> {
        while self.buf.len() < n {
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("unexpected end of body".into())),
                Ok(_) => {}
                Err(e) => return Err(io_to_read_error(e)),
            }
        }
        let rest = self.buf.split_off(n);
        Ok(std::mem::replace(&mut self.buf, rest))
    }

    fn take_line(&mut self) -> Result<String, ReadError> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.take(i + 2)?;
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            if self.buf.len() > 4096 {
                return Err(ReadError::Bad("chunk header too long".into()));
            }
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("unexpected end of chunked body".into())),
                Ok(_) => {}
                Err(e) => return Err(io_to_read_error(e)),
            }
        }
    }

    fn read_chunked(&mut self, max: usize) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.take_line()?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| ReadError::Bad("bad chunk size".into()))?;
            if size == 0 {
                while !self.take_line()?.is_empty() {}
                return Ok(body);
            }
            if body.len().saturating_add(size) > max {
                return Err(ReadError::BodyTooLarge);
            }
            body.extend(self.take(size)?);
            if self.take(2)? != b"\r\n" {
                return Err(ReadError::Bad("bad chunk terminator".into()));
            }
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

/// Parses a complete head from `buf`: Some((head, bytes used)), None if more is needed.
pub(super) fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<(Head, usize)>, ReadError> {
    let mut headers = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut r = httparse::Request::new(&mut headers);
    let n = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ReadError::HeadTooLarge),
        Err(e) => return Err(ReadError::Bad(format!("malformed HTTP request: {e}"))),
    };
    if n > limits.max_head {
        return Err(ReadError::HeadTooLarge);
    }
    let mut head = Head {
        method: r.method.unwrap_or("").to_string(),
        target: r.path.unwrap_or("").to_string(),
        http10: r.version == Some(0),
        headers: Vec::with_capacity(r.headers.len()),
        content_length: None,
        chunked: false,
    };
    for h in r.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| ReadError::Bad(format!("header {} is not UTF-8", h.name)))?
            .trim()
            .to_string();
        head.headers.push((h.name.to_ascii_lowercase(), value));
    }
    framing(&mut head)?;
    Ok(Some((head, n)))
}

/// Content-Length / Transfer-Encoding, refusing ambiguous framing (smuggling).
fn framing(head: &mut Head) -> Result<(), ReadError> {
    let bad = |m: &str| ReadError::Bad(m.to_string());
    for (name, value) in &head.headers {
        match name.as_str() {
            "content-length" => {
                let n: usize = value.parse().map_err(|_| bad("bad content-length"))?;
                if head.content_length.is_some_and(|old| old != n) {
                    return Err(bad("conflicting content-length"));
                }
                head.content_length = Some(n);
            }
            "transfer-encoding" if value.eq_ignore_ascii_case("chunked") => head.chunked = true,
            "transfer-encoding" => return Err(bad("unsupported transfer-encoding")),
            _ => {}
        }
    }
    if head.chunked && head.content_length.is_some() {
        return Err(bad("both content-length and chunked"));
    }
    Ok(())
}
