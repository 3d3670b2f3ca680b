//! A small synchronous D-Bus client: what talking to logind needs and no
//! more (upstream uses godbus). Unix-socket transport, SASL EXTERNAL with
//! unix-fd passing, the wire format for basic types and variants, method
//! calls with a deadline, signals, and replies (so a test can stand in for
//! logind with the same code). Arrays and structs in bodies are not
//! supported: no message logind sends us has them.
//!
//! Self-contained (std, nix, libc only) so `tests/nodeshutdown.rs` can
//! include it for its fake logind.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The system bus when DBUS_SYSTEM_BUS_ADDRESS does not name one.
pub const DEFAULT_SYSTEM_BUS: &str = "unix:path=/var/run/dbus/system_bus_socket";
/// Larger messages are refused (the spec allows 128 MiB; logind's are tiny).
const MAX_MESSAGE: usize = 1 << 20;
/// At most this many fds in one read (dbus-daemon's default is 16 per message).
const MAX_FDS: usize = 16;

#[derive(Debug)]
pub enum Error {
    /// No bus at the address (the socket is missing or refuses).
    NoBus(String, io::Error),
    Io(&'static str, io::Error),
    Auth(String),
    Protocol(String),
    /// An error reply: its name and first string argument.
    Remote(String, String),
    Timeout(&'static str),
    Closed,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoBus(addr, e) => write!(f, "no D-Bus at {addr}: {e}"),
            Error::Io(what, e) => write!(f, "D-Bus {what}: {e}"),
            Error::Auth(s) => write!(f, "D-Bus authentication: {s}"),
            Error::Protocol(s) => write!(f, "D-Bus protocol: {s}"),
            Error::Remote(name, msg) => write!(f, "{name}: {msg}"),
            Error::Timeout(what) => write!(f, "D-Bus {what}: timed out"),
            Error::Closed => f.write_str("D-Bus connection closed"),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// A basic value, or a variant of one.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    Str(String),
    Path(String),
    Sig(String),
    /// An index into the message's fds.
    Fd(u32),
    Variant(Box<Value>),
}

impl Value {
    fn signature(&self) -> String {
        match self {
            Value::Byte(_) => "y".into(),
            Value::Bool(_) => "b".into(),
            Value::I32(_) => "i".into(),
            Value::U32(_) => "u".into(),
            Value::I64(_) => "x".into(),
            Value::U64(_) => "t".into(),
            Value::Str(_) => "s".into(),
            Value::Path(_) => "o".into(),
            Value::Sig(_) => "g".into(),
            Value::Fd(_) => "h".into(),
            Value::Variant(_) => "v".into(),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Path(s) | Value::Sig(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

/// One message. `fds` holds the descriptors it carries (to send, or received).
#[derive(Debug)]
pub struct Message {
    pub kind: Kind,
    pub flags: u8,
    pub serial: u32,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub reply_serial: Option<u32>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    pub body: Vec<Value>,
    pub fds: Vec<OwnedFd>,
}

impl Message {
    fn new(kind: Kind) -> Message {
        Message {
            kind,
            flags: 0,
            serial: 0,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            reply_serial: None,
            destination: None,
            sender: None,
            body: Vec::new(),
            fds: Vec::new(),
        }
    }

    pub fn method_call(
        dest: &str,
        path: &str,
        iface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Self {
        let mut m = Message::new(Kind::MethodCall);
        m.destination = Some(dest.into());
        m.path = Some(path.into());
        m.interface = Some(iface.into());
        m.member = Some(member.into());
        m.body = body;
        m
    }

    #[allow(dead_code)] // the fake logind of tests/nodeshutdown.rs
    pub fn signal(path: &str, iface: &str, member: &str, body: Vec<Value>) -> Self {
        let mut m = Message::new(Kind::Signal);
        m.path = Some(path.into());
        m.interface = Some(iface.into());
        m.member = Some(member.into());
        m.body = body;
        m
    }

    #[allow(dead_code)] // the fake logind of tests/nodeshutdown.rs
    pub fn method_return(to: &Message, body: Vec<Value>) -> Self {
        let mut m = Message::new(Kind::MethodReturn);
        m.reply_serial = Some(to.serial);
        m.destination = to.sender.clone();
        m.body = body;
        m
    }

    #[allow(dead_code)] // the fake logind of tests/nodeshutdown.rs
    pub fn error(to: &Message, name: &str, text: &str) -> Self {
        let mut m = Message::new(Kind::Error);
        m.reply_serial = Some(to.serial);
        m.destination = to.sender.clone();
        m.error_name = Some(name.into());
        m.body = vec![Value::Str(text.into())];
        m
    }

    /// Whether this is `iface.member` (a call or signal).
    pub fn is(&self, iface: &str, member: &str) -> bool {
        self.interface.as_deref() == Some(iface) && self.member.as_deref() == Some(member)
    }

    fn encode(&self) -> Result<Vec<u8>> {
        let mut body = Writer::default();
        for v in &self.body {
            body.value(v)?;
        }
        let sig: String = self.body.iter().map(Value::signature).collect();
        let mut w = Writer::default();
        w.buf
            .extend_from_slice(&[b'l', self.kind as u8, self.flags, 1]);
        w.u32(u32::try_from(body.buf.len()).map_err(|_| proto("body too large"))?);
        w.u32(self.serial);
        let len_at = w.buf.len();
        w.u32(0);
        let start = w.buf.len();
        let field = |w: &mut Writer, code: u8, v: Value| -> Result<()> {
            w.align(8);
            w.buf.push(code);
            w.value(&Value::Variant(Box::new(v)))
        };
        let strs = [
            (1, self.path.clone().map(Value::Path)),
            (2, self.interface.clone().map(Value::Str)),
            (3, self.member.clone().map(Value::Str)),
            (4, self.error_name.clone().map(Value::Str)),
            (5, self.reply_serial.map(Value::U32)),
            (6, self.destination.clone().map(Value::Str)),
            (7, self.sender.clone().map(Value::Str)),
            (8, (!sig.is_empty()).then(|| Value::Sig(sig.clone()))),
            (
                9,
                (!self.fds.is_empty()).then_some(Value::U32(self.fds.len() as u32)),
            ),
        ];
        for (code, v) in strs {
            if let Some(v) = v {
                field(&mut w, code, v)?;
            }
        }
        let fields_len = (w.buf.len() - start) as u32;
        w.buf[len_at..len_at + 4].copy_from_slice(&fields_len.to_le_bytes());
        w.align(8);
        w.buf.extend_from_slice(&body.buf);
        Ok(w.buf)
    }
}

fn proto(s: impl Into<String>) -> Error {
    Error::Protocol(s.into())
}

/// Little-endian marshalling; offsets are relative to an 8-aligned start.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn align(&mut self, n: usize) {
        while !self.buf.len().is_multiple_of(n) {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn string(&mut self, s: &str) -> Result<()> {
        if s.contains('\0') {
            return Err(proto("string with NUL"));
        }
        self.u32(u32::try_from(s.len()).map_err(|_| proto("string too long"))?);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn sig(&mut self, s: &str) -> Result<()> {
        let n = u8::try_from(s.len()).map_err(|_| proto("signature too long"))?;
        self.buf.push(n);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::I32(i) => self.u32(*i as u32),
            Value::U32(u) | Value::Fd(u) => self.u32(*u),
            Value::I64(i) => {
                self.align(8);
                self.buf.extend_from_slice(&i.to_le_bytes());
            }
            Value::U64(u) => {
                self.align(8);
                self.buf.extend_from_slice(&u.to_le_bytes());
            }
            Value::Str(s) | Value::Path(s) => self.string(s)?,
            Value::Sig(s) => self.sig(s)?,
            Value::Variant(inner) => {
                self.sig(&inner.signature())?;
                self.value(inner)?;
            }
        }
        Ok(())
    }
}

/// Unmarshalling of one message's bytes, either byte order.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl Reader<'_> {
    fn align(&mut self, n: usize) -> Result<()> {
        let to = self.pos.div_ceil(n) * n;
        if to > self.buf.len() {
            return Err(proto("truncated padding"));
        }
        self.pos = to;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| proto("truncated value"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        self.align(4)?;
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| proto("u32"))?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64> {
        self.align(8)?;
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| proto("u64"))?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn text(&mut self, len: usize) -> Result<String> {
        let s = self.take(len + 1)?;
        String::from_utf8(s[..len].to_vec()).map_err(|_| proto("string is not UTF-8"))
    }

    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        self.text(n)
    }

    fn sig(&mut self) -> Result<String> {
        let n = self.take(1)?[0] as usize;
        self.text(n)
    }

    /// One value of single complete type `t` (basic or variant).
    fn value(&mut self, t: u8, depth: u8) -> Result<Value> {
        Ok(match t {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => Value::Bool(self.u32()? != 0),
            b'i' => Value::I32(self.u32()? as i32),
            b'u' => Value::U32(self.u32()?),
            b'h' => Value::Fd(self.u32()?),
            b'x' => Value::I64(self.u64()? as i64),
            b't' => Value::U64(self.u64()?),
            b's' => Value::Str(self.string()?),
            b'o' => Value::Path(self.string()?),
            b'g' => Value::Sig(self.sig()?),
            b'v' if depth < 8 => {
                let sig = self.sig()?;
                let [inner] = sig.as_bytes() else {
                    return Err(proto(format!("unsupported variant type {sig:?}")));
                };
                Value::Variant(Box::new(self.value(*inner, depth + 1)?))
            }
            other => return Err(proto(format!("unsupported type {:?}", char::from(other)))),
        })
    }
}

/// Bytes in the fixed header, and the offset of the fields' length.
const FIXED_HEADER: usize = 16;

/// The whole length of the message starting `buf`, once 16 bytes are in.
fn message_len(buf: &[u8]) -> Result<Option<usize>> {
    if buf.len() < FIXED_HEADER {
        return Ok(None);
    }
    let big = match buf[0] {
        b'l' => false,
        b'B' => true,
        e => return Err(proto(format!("bad byte order {e:#x}"))),
    };
    let word = |at: usize| {
        let b = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
        (if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }) as usize
    };
    let (body, fields) = (word(4), word(12));
    let total = (FIXED_HEADER + fields).div_ceil(8) * 8 + body;
    if total > MAX_MESSAGE {
        return Err(proto(format!("message of {total} bytes")));
    }
    Ok(Some(total))
}

/// Decodes one whole message; its fds are attached by the caller.
fn decode(buf: &[u8]) -> Result<(Message, usize)> {
    let big = buf[0] == b'B';
    let kind = match buf[1] {
        1 => Kind::MethodCall,
        2 => Kind::MethodReturn,
        3 => Kind::Error,
        4 => Kind::Signal,
        k => return Err(proto(format!("unknown message type {k}"))),
    };
    let mut m = Message::new(kind);
    m.flags = buf[2];
    let mut r = Reader { buf, pos: 4, big };
    let body_len = r.u32()? as usize;
    m.serial = r.u32()?;
    let fields_end = r.u32()? as usize + FIXED_HEADER;
    let (mut sig, mut nfds) = (String::new(), 0usize);
    while r.pos < fields_end {
        r.align(8)?;
        let code = r.take(1)?[0];
        let Value::Variant(v) = r.value(b'v', 0)? else {
            return Err(proto("header field"));
        };
        match (code, *v) {
            (1, Value::Path(s)) => m.path = Some(s),
            (2, Value::Str(s)) => m.interface = Some(s),
            (3, Value::Str(s)) => m.member = Some(s),
            (4, Value::Str(s)) => m.error_name = Some(s),
            (5, Value::U32(u)) => m.reply_serial = Some(u),
            (6, Value::Str(s)) => m.destination = Some(s),
            (7, Value::Str(s)) => m.sender = Some(s),
            (8, Value::Sig(s)) => sig = s,
            (9, Value::U32(u)) => nfds = u as usize,
            _ => {} // unknown fields are ignored, as the spec asks
        }
    }
    r.align(8)?;
    let mut body = Reader {
        buf: r.take(body_len)?,
        pos: 0,
        big,
    };
    for t in sig.bytes() {
        m.body.push(body.value(t, 0)?);
    }
    Ok((m, nfds))
}

/// A connection to a bus.
pub struct Connection {
    stream: UnixStream,
    serial: u32,
    inbuf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
    /// Messages read while waiting for a reply.
    pending: VecDeque<Message>,
}

impl Connection {
    /// The system bus: DBUS_SYSTEM_BUS_ADDRESS, else the standard socket.
    pub fn system(timeout: Duration) -> Result<Connection> {
        let addr =
            std::env::var("DBUS_SYSTEM_BUS_ADDRESS").unwrap_or_else(|_| DEFAULT_SYSTEM_BUS.into());
        Connection::open(&addr, timeout)
    }

    /// Connects to `address` (`unix:path=...` or `unix:abstract=...`; the
    /// first usable of `;`-separated ones), authenticates, says Hello.
    pub fn open(address: &str, timeout: Duration) -> Result<Connection> {
        let stream = connect(address)?;
        let io = |what| move |e| Error::Io(what, e);
        stream
            .set_read_timeout(Some(timeout))
            .map_err(io("set timeout"))?;
        stream
            .set_write_timeout(Some(timeout))
            .map_err(io("set timeout"))?;
        let mut c = Connection {
            stream,
            serial: 0,
            inbuf: Vec::new(),
            fds: VecDeque::new(),
            pending: VecDeque::new(),
        };
        c.authenticate()?;
        let hello = Message::method_call(
            "org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "Hello",
            Vec::new(),
        );
        let reply = c.call(hello, timeout)?;
        if reply.body.first().and_then(Value::as_str).is_none() {
            return Err(proto("Hello returned no name"));
        }
        Ok(c)
    }

    fn authenticate(&mut self) -> Result<()> {
        let uid = nix::unistd::getuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        self.write_raw(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())?;
        let line = self.read_line()?;
        if !line.starts_with("OK ") {
            return Err(Error::Auth(format!("EXTERNAL refused: {line}")));
        }
        self.write_raw(b"NEGOTIATE_UNIX_FD\r\n")?;
        let line = self.read_line()?;
        if !line.starts_with("AGREE_UNIX_FD") {
            return Err(Error::Auth(format!("no fd passing: {line}")));
        }
        self.write_raw(b"BEGIN\r\n")
    }

    fn write_raw(&mut self, b: &[u8]) -> Result<()> {
        self.stream.write_all(b).map_err(|e| Error::Io("write", e))
    }

    /// One line of the auth exchange, read a byte at a time so nothing of
    /// the message stream after it is consumed.
    fn read_line(&mut self) -> Result<String> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            match self.stream.read(&mut b) {
                Ok(0) => return Err(Error::Closed),
                Ok(_) => line.push(b[0]),
                Err(e) => return Err(Error::Io("read", e)),
            }
            if line.len() > 512 {
                return Err(Error::Auth("line too long".into()));
            }
        }
        Ok(String::from_utf8_lossy(&line).trim_end().to_string())
    }

    /// Sends `m`, with its fds, under a new serial, which it returns.
    pub fn send(&mut self, mut m: Message) -> Result<u32> {
        self.serial = self.serial.wrapping_add(1).max(1);
        m.serial = self.serial;
        let bytes = m.encode()?;
        let fds: Vec<RawFd> = m.fds.iter().map(AsRawFd::as_raw_fd).collect();
        let mut sent = 0;
        while sent < bytes.len() {
            let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
            let cmsgs: &[_] = if sent == 0 && !fds.is_empty() {
                &cmsg
            } else {
                &[]
            };
            let n = nix::sys::socket::sendmsg::<()>(
                self.stream.as_raw_fd(),
                &[IoSlice::new(&bytes[sent..])],
                cmsgs,
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(|e| Error::Io("send", e.into()))?;
            sent += n;
        }
        Ok(m.serial)
    }

    /// Calls a method and waits up to `timeout` for its reply; an error
    /// reply is [`Error::Remote`]. Other messages are kept for [`recv`].
    pub fn call(&mut self, m: Message, timeout: Duration) -> Result<Message> {
        let serial = self.send(m)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout("method call"));
            }
            let Some(msg) = self.read_message(left)? else {
                continue;
            };
            if msg.reply_serial != Some(serial) {
                self.pending.push_back(msg);
                continue;
            }
            if msg.kind == Kind::Error {
                let text = msg.body.first().and_then(Value::as_str).unwrap_or("");
                let name = msg.error_name.clone().unwrap_or_default();
                return Err(Error::Remote(name, text.to_string()));
            }
            return Ok(msg);
        }
    }

    /// The next message, or None after `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Result<Option<Message>> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(Some(m));
        }
        self.read_message(timeout)
    }

    fn read_message(&mut self, timeout: Duration) -> Result<Option<Message>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(total) = message_len(&self.inbuf)? {
                if self.inbuf.len() >= total {
                    let (mut m, nfds) = decode(&self.inbuf[..total])?;
                    self.inbuf.drain(..total);
                    if nfds > self.fds.len() {
                        return Err(proto("message names fds that did not come"));
                    }
                    m.fds = self.fds.drain(..nfds).collect();
                    return Ok(Some(m));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.fill(left)?;
        }
    }

    /// One read into the buffer, with any fds it carries; Ok on timeout.
    fn fill(&mut self, timeout: Duration) -> Result<()> {
        let fd = self.stream.as_raw_fd();
        let mut pfd = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(&self.stream),
            nix::poll::PollFlags::POLLIN,
        )];
        let ms = u16::try_from(timeout.as_millis().max(1)).unwrap_or(u16::MAX);
        match nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(ms)) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(()),
            Err(e) => return Err(Error::Io("poll", e.into())),
        }
        let mut chunk = vec![0u8; 64 * 1024];
        let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
        let (n, received) = {
            let mut iov = [IoSliceMut::new(&mut chunk)];
            let msg = match nix::sys::socket::recvmsg::<()>(
                fd,
                &mut iov,
                Some(&mut cmsg),
                nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Ok(()),
                Err(e) => return Err(Error::Io("receive", e.into())),
            };
            let mut fds = Vec::new();
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let nix::sys::socket::ControlMessageOwned::ScmRights(list) = c {
                        fds.extend(list);
                    }
                }
            }
            (msg.bytes, fds)
        };
        for raw in received {
            // SAFETY: the kernel just installed this descriptor for us and
            // nothing else owns it.
            self.fds.push_back(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        if n == 0 {
            return Err(Error::Closed);
        }
        self.inbuf.extend_from_slice(&chunk[..n]);
        Ok(())
    }
}

/// Connects to the first usable unix address of a D-Bus address list.
fn connect(address: &str) -> Result<UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no unix address");
    for one in address.split(';') {
        let Some(params) = one.strip_prefix("unix:") else {
            continue;
        };
        for kv in params.split(',') {
            let addr = match kv.split_once('=') {
                Some(("path", p)) => std::os::unix::net::SocketAddr::from_pathname(unescape(p)),
                Some(("abstract", p)) => {
                    std::os::unix::net::SocketAddr::from_abstract_name(unescape(p).as_bytes())
                }
                _ => continue,
            };
            match addr.and_then(|a| UnixStream::connect_addr(&a)) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
    }
    Err(Error::NoBus(address.to_string(), last))
}

/// D-Bus addresses escape bytes as %XX.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_the_wire_format() {
        let mut m = Message::method_call(
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "Inhibit",
            vec![
                Value::Str("shutdown".into()),
                Value::Bool(true),
                Value::Variant(Box::new(Value::U64(30_000_000))),
                Value::Fd(0),
                Value::Byte(7),
            ],
        );
        m.serial = 9;
        let bytes = m.encode().unwrap();
        assert_eq!(message_len(&bytes).unwrap(), Some(bytes.len()));
        let (back, nfds) = decode(&bytes).unwrap();
        assert_eq!(nfds, 0);
        assert_eq!(back.serial, 9);
        assert_eq!(back.path.as_deref(), Some("/org/freedesktop/login1"));
        assert!(back.is("org.freedesktop.login1.Manager", "Inhibit"));
        assert_eq!(back.destination.as_deref(), Some("org.freedesktop.login1"));
        assert_eq!(back.body, m.body);
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let m = Message::signal("/a", "b.c", "D", vec![Value::Str("x".into())]);
        let bytes = m.encode().unwrap();
        for cut in 0..bytes.len() {
            let part = &bytes[..cut];
            if let Ok(Some(n)) = message_len(part) {
                if n <= part.len() {
                    let _ = decode(part);
                }
            }
        }
        let mut evil = bytes.clone();
        evil[12] = 0xff; // a huge fields length
        evil[13] = 0xff;
        evil[14] = 0xff;
        assert!(message_len(&evil).is_err());
        let mut odd = bytes;
        odd[0] = b'x';
        assert!(message_len(&odd).is_err());
    }

    #[test]
    fn addresses_are_parsed_and_unescaped() {
        assert_eq!(unescape("/run/a%20b"), "/run/a b");
        assert_eq!(unescape("/x%2"), "/x%2");
        match connect("tcp:host=x;unix:path=/nonexistent/bus") {
            Err(Error::NoBus(a, _)) => assert!(a.contains("/nonexistent/bus")),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
