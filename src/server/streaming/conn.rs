//! The client side of an upgraded connection, split into a read half and a
//! write half that two threads can use at once.
//!
//! Plain TCP splits with `try_clone`. A rustls server stream cannot be
//! cloned, so its halves share the `ServerConnection` behind a mutex: the
//! reader blocks on the raw socket *without* the lock and only takes it to
//! feed ciphertext in and take plaintext out; the writer takes it to encrypt
//! and send. TLS records are only ever written under the lock, so the two
//! threads never interleave partial records.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};

use rkubelet_util::lock;
use rustls::{ServerConnection, StreamOwned};

/// The two halves plus the socket underneath (for timeouts and shutdown).
pub struct Halves {
    pub reader: Box<dyn Read + Send>,
    pub writer: Box<dyn Write + Send>,
    pub socket: TcpStream,
}

/// A client connection handed over after the HTTP request was read.
pub trait ClientStream: Send {
    fn into_halves(self: Box<Self>) -> io::Result<Halves>;
}

impl ClientStream for TcpStream {
    fn into_halves(self: Box<Self>) -> io::Result<Halves> {
        let reader = self.try_clone()?;
        let socket = self.try_clone()?;
        Ok(Halves {
            reader: Box::new(reader),
            writer: Box::new(*self),
            socket,
        })
    }
}

impl ClientStream for StreamOwned<ServerConnection, TcpStream> {
    fn into_halves(self: Box<Self>) -> io::Result<Halves> {
        let StreamOwned { conn, sock } = *self;
        let conn = Arc::new(Mutex::new(conn));
        Ok(Halves {
            reader: Box::new(TlsReader {
                conn: Arc::clone(&conn),
                sock: sock.try_clone()?,
                buf: vec![0; 18 * 1024],
                start: 0,
                end: 0,
            }),
            writer: Box::new(TlsWriter {
                conn,
                sock: sock.try_clone()?,
            }),
            socket: sock,
        })
    }
}

fn flush_tls(conn: &mut ServerConnection, mut sock: &TcpStream) -> io::Result<()> {
    while conn.wants_write() {
        conn.write_tls(&mut sock)?;
    }
    Ok(())
}

struct TlsReader {
    conn: Arc<Mutex<ServerConnection>>,
    sock: TcpStream,
    /// Ciphertext read from the socket; `buf[start..end]` not yet fed to rustls.
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Read for TlsReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            {
                let mut c = lock(&self.conn);
                match c.reader().read(out) {
                    // Ok(0) is the peer's close_notify.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    // Feed only with the plaintext buffer drained, so rustls'
                    // received-plaintext limit is never hit.
                    let mut slice = &self.buf[self.start..self.end];
                    let n = c.read_tls(&mut slice)?;
                    self.start = if n == 0 { self.end } else { self.start + n };
                    let processed = c.process_new_packets();
                    // Alerts, key-update replies and the like.
                    let flushed = flush_tls(&mut c, &self.sock);
                    processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    flushed?;
                    continue;
                }
            }
            // Nothing buffered: wait for ciphertext without holding the lock.
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            self.start = 0;
            self.end = n;
        }
    }
}

struct TlsWriter {
    conn: Arc<Mutex<ServerConnection>>,
    sock: TcpStream,
}

impl Write for TlsWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut c = lock(&self.conn);
        let n = c.writer().write(data)?;
        flush_tls(&mut c, &self.sock)?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut c = lock(&self.conn);
        c.writer().flush()?;
        flush_tls(&mut c, &self.sock)
    }
}

impl Drop for TlsWriter {
    fn drop(&mut self) {
        // Best effort: tell the client the stream ended cleanly.
        let mut c = lock(&self.conn);
        c.send_close_notify();
        let _ = flush_tls(&mut c, &self.sock);
        let _ = self.sock.shutdown(Shutdown::Write);
    }
}
