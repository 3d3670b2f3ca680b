//! HTTP/1.1 framing over any Read + Write stream (a rustls StreamOwned in the
//! server): request parsing with httparse, Content-Length and chunked request
//! bodies, plain responses and chunked streaming responses.

use crate::util::percent_decode;
use std::io::{self, Read, Write};

/// The real apiserver rejects bodies over 3 MiB (maxRequestBodyBytes).
pub const MAX_BODY: usize = 3 * 1024 * 1024;
const MAX_HEAD: usize = 1024 * 1024;

#[derive(Debug, Default, Clone)]
pub struct Request {
    pub method: String,
    /// The raw request target (path + query), as sent.
    pub target: String,
    /// The percent-decoded path without the query.
    pub path: String,
    pub query: Vec<(String, String)>,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub http10: bool,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn q(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub fn wants_close(&self) -> bool {
        match self.header("connection") {
            Some(v) if v.eq_ignore_ascii_case("close") => true,
            Some(v) if v.eq_ignore_ascii_case("keep-alive") => false,
            _ => self.http10,
        }
    }
    pub fn user_agent(&self) -> &str {
        self.header("user-agent").unwrap_or("")
    }
}

#[derive(Debug)]
pub enum ReadError {
    /// Clean end of the connection (or idle timeout) before a request started.
    Closed,
    Io(io::Error),
    /// Malformed request: answer 400 and close.
    Bad(String),
    /// Body over MAX_BODY: answer 413 and close.
    TooLarge,
}

/// A buffered HTTP connection.
pub struct Conn<S: Read + Write> {
    pub stream: S,
    buf: Vec<u8>,
}

impl<S: Read + Write> Conn<S> {
    pub fn new(stream: S) -> Self {
        Conn {
            stream,
            buf: Vec::with_capacity(8192),
        }
    }

    /// The stream and the bytes read past the last request (an upgraded
    /// connection's first bytes).
    pub fn into_parts(self) -> (S, Vec<u8>) {
        (self.stream, self.buf)
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 16384];
        let n = self.stream.read(&mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    fn take(&mut self, n: usize) -> Result<Vec<u8>, ReadError> {
        while self.buf.len() < n {
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("unexpected end of body".into())),
                Ok(_) => {}
                Err(e) => return Err(ReadError::Io(e)),
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
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    /// Reads one request. `Err(Closed)` when the peer closed between requests.
    pub fn read_request(&mut self) -> Result<Request, ReadError> {
        let (mut req, consumed, content_length, chunked) = loop {
            if !self.buf.is_empty() {
                let mut headers = [httparse::EMPTY_HEADER; 96];
                let mut r = httparse::Request::new(&mut headers);
                match r.parse(&self.buf) {
                    Ok(httparse::Status::Complete(n)) => {
                        let mut req = Request {
                            method: r.method.unwrap_or("").to_string(),
                            target: r.path.unwrap_or("/").to_string(),
                            http10: r.version == Some(0),
                            ..Default::default()
                        };
                        let (mut cl, mut chunked) = (None, false);
                        for h in r.headers.iter() {
                            let name = h.name.to_ascii_lowercase();
                            let val = String::from_utf8_lossy(h.value).trim().to_string();
                            if name == "content-length" {
                                cl =
                                    Some(val.parse::<usize>().map_err(|_| {
                                        ReadError::Bad("bad content-length".into())
                                    })?);
                            } else if name == "transfer-encoding"
                                && val.to_ascii_lowercase().contains("chunked")
                            {
                                chunked = true;
                            }
                            req.headers.push((name, val));
                        }
                        break (req, n, cl, chunked);
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(e) => return Err(ReadError::Bad(format!("malformed HTTP request: {}", e))),
                }
                if self.buf.len() > MAX_HEAD {
                    return Err(ReadError::Bad("request headers too large".into()));
                }
            }
            match self.fill() {
                Ok(0) if self.buf.is_empty() => return Err(ReadError::Closed),
                Ok(0) => return Err(ReadError::Bad("connection closed mid-request".into())),
                Ok(_) => {}
                Err(e) if self.buf.is_empty() => {
                    return match e.kind() {
                        io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::ConnectionReset => Err(ReadError::Closed),
                        _ => Err(ReadError::Io(e)),
                    }
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
        };
        self.take(consumed)?;

        if req
            .header("expect")
            .map(|v| v.eq_ignore_ascii_case("100-continue"))
            .unwrap_or(false)
        {
            self.stream
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(ReadError::Io)?;
            self.stream.flush().map_err(ReadError::Io)?;
        }
        if chunked {
            let mut body = Vec::new();
            loop {
                let line = self.take_line()?;
                let size_s = line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(size_s, 16)
                    .map_err(|_| ReadError::Bad("bad chunk size".into()))?;
                if size == 0 {
                    // trailers until the empty line
                    while !self.take_line()?.is_empty() {}
                    break;
                }
                if body.len() + size > MAX_BODY {
                    return Err(ReadError::TooLarge);
                }
                body.extend(self.take(size)?);
                self.take(2)?;
            }
            req.body = body;
        } else if let Some(n) = content_length {
            if n > MAX_BODY {
                return Err(ReadError::TooLarge);
            }
            req.body = self.take(n)?;
        }

        let (p, q) = match req.target.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (req.target.clone(), String::new()),
        };
        // Absolute-form targets (proxies) are reduced to their path.
        let p = match p
            .strip_prefix("https://")
            .or_else(|| p.strip_prefix("http://"))
        {
            Some(rest) => rest
                .find('/')
                .map(|i| rest[i..].to_string())
                .unwrap_or_else(|| "/".into()),
            None => p,
        };
        req.path = percent_decode(&p, false);
        req.query = q
            .split('&')
            .filter(|s| !s.is_empty())
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (percent_decode(k, true), percent_decode(v, true)),
                None => (percent_decode(kv, true), String::new()),
            })
            .collect();
        Ok(req)
    }
}

pub fn reason_phrase(code: u16) -> &'static str {
    match code {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "Request Entity Too Large",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Unknown",
    }
}

/// Writes a complete response with Content-Length.
pub fn write_response<W: Write>(
    w: &mut W,
    code: u16,
    headers: &[(String, String)],
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", code, reason_phrase(code));
    for (k, v) in headers {
        head.push_str(&format!("{}: {}\r\n", k, v));
    }
    head.push_str(&format!("Date: {}\r\n", http_date()));
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    if close {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Starts a chunked response (a watch stream).
pub fn write_chunked_head<W: Write>(
    w: &mut W,
    code: u16,
    headers: &[(String, String)],
) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", code, reason_phrase(code));
    for (k, v) in headers {
        head.push_str(&format!("{}: {}\r\n", k, v));
    }
    head.push_str(&format!(
        "Date: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        http_date()
    ));
    w.write_all(head.as_bytes())?;
    w.flush()
}

pub fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    w.flush()
}

pub fn end_chunks<W: Write>(w: &mut W) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

fn http_date() -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let now = crate::util::unix_now();
    let t = crate::util::rfc3339(now); // YYYY-MM-DDTHH:MM:SSZ
    let (y, m, d) = (&t[0..4], t[5..7].parse::<usize>().unwrap_or(1), &t[8..10]);
    format!(
        "{}, {} {} {} {} GMT",
        DAYS[(now.div_euclid(86_400)).rem_euclid(7) as usize],
        d,
        MONTHS[(m.max(1) - 1) % 12],
        y,
        &t[11..19]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mock {
        input: io::Cursor<Vec<u8>>,
        out: Vec<u8>,
    }
    impl Read for Mock {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.input.read(b)
        }
    }
    impl Write for Mock {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.out.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn parses_pipelined_and_chunked() {
        let raw = b"GET /api/v1/pods?fieldSelector=spec.nodeName%3Dn1&watch=1 HTTP/1.1\r\nHost: x\r\n\r\nPOST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".to_vec();
        let mut c = Conn::new(Mock {
            input: io::Cursor::new(raw),
            out: vec![],
        });
        let r = c.read_request().unwrap();
        assert_eq!(r.path, "/api/v1/pods");
        assert_eq!(r.q("fieldSelector"), Some("spec.nodeName=n1"));
        assert_eq!(r.q("watch"), Some("1"));
        let r2 = c.read_request().unwrap();
        assert_eq!(r2.body, b"abcde");
        assert!(matches!(c.read_request(), Err(ReadError::Closed)));
    }

    #[test]
    fn garbage_is_bad_request() {
        let mut c = Conn::new(Mock {
            input: io::Cursor::new(b"\x00\x01garbage\r\n\r\n".to_vec()),
            out: vec![],
        });
        assert!(matches!(c.read_request(), Err(ReadError::Bad(_))));
        assert!(http_date().ends_with("GMT"));
    }
}
