//! The connection: unix-socket transport, SASL EXTERNAL with unix-fd
//! passing, and the calls, signals and replies on it, each bounded by a
//! deadline.

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::wire::next_message;
use crate::{proto, Error, Kind, Message, Result, Value};

/// The system bus when DBUS_SYSTEM_BUS_ADDRESS does not name one.
pub const DEFAULT_SYSTEM_BUS: &str = "unix:path=/var/run/dbus/system_bus_socket";
/// At most this many fds in one read (dbus-daemon's default is 16 per message).
const MAX_FDS: usize = 16;

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
            if let Some((mut m, nfds)) = next_message(&mut self.inbuf)? {
                if nfds > self.fds.len() {
                    return Err(proto("message names fds that did not come"));
                }
                m.fds = self.fds.drain(..nfds).collect();
                return Ok(Some(m));
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
    fn addresses_are_parsed_and_unescaped() {
        assert_eq!(unescape("/run/a%20b"), "/run/a b");
        assert_eq!(unescape("/x%2"), "/x%2");
        match connect("tcp:host=x;unix:path=/nonexistent/bus") {
            Err(Error::NoBus(a, _)) => assert!(a.contains("/nonexistent/bus")),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }
}
