//! Connection handling: keep-alive, upgrade hand-over, the slowloris
//! deadline, malformed requests and bodies, the connection bound.

use super::*;

#[test]
fn keep_alive_and_upgrade_take_over() {
    let echo = handler(|req, resp| {
        assert!(req.is_upgrade());
        let mut up =
            resp.switch_protocols(&[("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")])?;
        let mut got = up.buffered.clone();
        while got.len() < 5 {
            let mut b = [0u8; 16];
            let n = up.stream.read(&mut b)?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&b[..n]);
        }
        up.stream.write_all(&got)?;
        up.stream.flush()
    });
    let f = start_with(Setup {
        extra: vec![("/exec/".into(), echo)],
        ..Setup::default()
    });
    let mut s = tls_stream(f.started.secure, client_config(&f, &ADMIN));
    // Two requests on one connection.
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s).body, "ok");
    }
    s.write_all(b"POST /exec/default/web/app HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nhel").unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
    s.write_all(b"lo").unwrap();
    let mut echoed = [0u8; 5];
    s.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"hello");
}

fn small_limits() -> Limits {
    Limits {
        max_connections: 4,
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    }
}

#[test]
fn slowloris_is_cut_off_without_blocking_others() {
    let f = start_with(Setup {
        read_only: true,
        limits: small_limits(),
        ..Setup::default()
    });
    let ro = f.started.read_only.unwrap();
    let slow = std::thread::spawn(move || {
        let mut s = TcpStream::connect(ro).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t0 = Instant::now();
        let req = b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        s.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        for b in req.iter() {
            let mut peek = [0u8; 1];
            if s.write_all(&[*b]).is_err() || s.peek(&mut peek).is_ok() {
                break; // answered or closed
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        s.set_nonblocking(false).unwrap();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out).into_owned();
        (t0.elapsed(), out)
    });
    // A TLS client that never finishes its handshake is cut off too.
    let mut idle_tls = TcpStream::connect(f.started.secure).unwrap();
    idle_tls
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    assert_eq!(get(&f, "/healthz", ADMIN).body, "ok");
    assert_eq!(
        plain(ro, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n").body,
        "ok"
    );
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "others are served meanwhile"
    );
    let (took, out) = slow.join().unwrap();
    assert!(out.starts_with("HTTP/1.1 408"), "{out:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let mut b = [0u8; 1];
    assert_eq!(
        idle_tls.read(&mut b).unwrap_or(0),
        0,
        "handshake deadline closes the socket"
    );
}

#[test]
fn bad_requests_and_bodies() {
    let f = start_with(Setup {
        read_only: true,
        ..Setup::default()
    });
    let ro = f.started.read_only.unwrap();
    assert_eq!(plain(ro, b"\x16\x03garbage\r\n\r\n").status, 400);
    assert_eq!(plain(ro, b"GET /pods?a=%G1 HTTP/1.1\r\n\r\n").status, 400);
    assert_eq!(plain(ro, b"GET http//x HTTP/1.1\r\n\r\n").status, 400);
    let big = b"POST /pods HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n";
    assert_eq!(plain(ro, big).status, 413);
    let mut chunked = b"POST /pods HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..18 {
        chunked.extend_from_slice(b"10000\r\n");
        chunked.extend_from_slice(&[b'a'; 0x10000]);
        chunked.extend_from_slice(b"\r\n");
    }
    assert_eq!(plain(ro, &chunked).status, 413);
    let mut huge_head = b"GET /pods HTTP/1.1\r\nX-Big: ".to_vec();
    huge_head.extend(std::iter::repeat_n(b'a', 100 << 10));
    huge_head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(plain(ro, &huge_head).status, 431);
    // A small body is fine (GET-only routes still answer 405 to POST).
    let r = plain(ro, b"POST /pods HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
    assert_eq!(r.status, 405);
    // TLS garbage fails the handshake and closes.
    let mut s = TcpStream::connect(f.started.secure).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(!out.starts_with(b"HTTP/1.1 200"));
}

#[test]
fn connections_are_bounded() {
    let f = start_with(Setup {
        read_only: true,
        limits: Limits {
            header_timeout: Duration::from_secs(2),
            ..small_limits()
        },
        ..Setup::default()
    });
    let ro = f.started.read_only.unwrap();
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(ro).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let r = plain(ro, b"GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 503);
    assert!(t0.elapsed() < Duration::from_secs(1));
    drop(idle);
    let t0 = Instant::now();
    loop {
        let r = plain(ro, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
        if r.status == 200 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "slots come back");
        std::thread::sleep(Duration::from_millis(100));
    }
}
