//! A minimal WebSocket client, enough for /exec and /portForward.

use super::*;

pub(crate) struct Ws {
    s: Tls,
    buf: Vec<u8>,
}

/// Opens a WebSocket: Ok(Ws) after a 101, Err((status, head+body)) otherwise.
pub(crate) fn ws_open(
    port: u16,
    path: &str,
    token: Option<&str>,
    protocols: &str,
) -> Result<Ws, (u16, String)> {
    let mut s = tls_connect(port, kubelet_tls(None));
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: {protocols}\r\n"
    );
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.flush().unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut chunk).unwrap_or(0);
        assert!(
            n > 0,
            "connection closed during the WebSocket handshake: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if code != 101 {
        // Read what body there is (bounded).
        let _ = s.sock.set_read_timeout(Some(Duration::from_secs(2)));
        let mut rest = buf[end..].to_vec();
        let _ = s.read_to_end(&mut rest);
        return Err((code, format!("{head}{}", String::from_utf8_lossy(&rest))));
    }
    // RFC 6455's example key and its accept value.
    assert!(
        head.lines()
            .any(|l| l.split_once(':').is_some_and(|(k, v)| k
                .trim()
                .eq_ignore_ascii_case("sec-websocket-accept")
                && v.trim() == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")),
        "bad Sec-WebSocket-Accept in {head}"
    );
    Ok(Ws {
        s,
        buf: buf[end..].to_vec(),
    })
}

impl Ws {
    fn fill(&mut self, n: usize) -> bool {
        let mut chunk = [0u8; 8192];
        while self.buf.len() < n {
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
            }
        }
        true
    }

    /// The next server frame (opcode, payload); None at the end. Server
    /// frames are unmasked.
    fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        if !self.fill(2) {
            return None;
        }
        let (b0, b1) = (self.buf[0], self.buf[1]);
        assert_eq!(b1 & 0x80, 0, "server frames must not be masked");
        let (len, hl) = match b1 & 0x7f {
            126 => {
                self.fill(4);
                (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
            }
            127 => {
                self.fill(10);
                let mut l = [0u8; 8];
                l.copy_from_slice(&self.buf[2..10]);
                (u64::from_be_bytes(l) as usize, 10)
            }
            l => (l as usize, 2),
        };
        if !self.fill(hl + len) {
            return None;
        }
        let payload = self.buf[hl..hl + len].to_vec();
        self.buf.drain(..hl + len);
        Some((b0 & 0x0f, payload))
    }

    /// Sends a masked binary frame.
    pub(crate) fn send(&mut self, payload: &[u8]) {
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        let mut f = vec![0x82u8];
        match payload.len() {
            l if l < 126 => f.push(0x80 | l as u8),
            l if l < 65536 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(l as u16).to_be_bytes());
            }
            l => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(l as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.s.write_all(&f).unwrap();
        self.s.flush().unwrap();
    }

    /// Channel data frames until `done` says so or the stream ends; returns
    /// everything collected per channel.
    pub(crate) fn collect(
        &mut self,
        deadline: Instant,
        mut done: impl FnMut(&[Vec<u8>]) -> bool,
    ) -> Vec<Vec<u8>> {
        let mut chans = vec![Vec::new(); 5];
        while Instant::now() < deadline && !done(&chans) {
            match self.frame() {
                Some((0x1 | 0x2, p)) if !p.is_empty() => {
                    let c = p[0] as usize;
                    if c < chans.len() {
                        chans[c].extend_from_slice(&p[1..]);
                    }
                }
                Some((0x8, _)) | None => break,
                Some(_) => {}
            }
        }
        chans
    }
}
