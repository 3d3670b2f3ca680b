//! Bad input on 10250: huge headers, unknown paths, a slowloris client.

use super::*;

/// h. Bad input: huge headers, unknown paths, a slowloris client.
#[test]
fn bad_input() {
    let mut node = Node::start("kapi-bad", 47, false);
    let k = node.kubelet_admin();

    // 100 KiB of headers: 431.
    let mut s = tls_connect(node.port, kubelet_tls(None));
    let mut req = format!(
        "GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n",
        node.admin_token
    );
    for i in 0..100 {
        req.push_str(&format!("X-Filler-{i}: {}\r\n", "a".repeat(1000)));
    }
    req.push_str("\r\n");
    let _ = s.write_all(req.as_bytes());
    let _ = s.flush();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let head = String::from_utf8_lossy(&got);
    assert!(
        head.starts_with("HTTP/1.1 431"),
        "100 KiB of headers: {:?}",
        &head[..head.len().min(200)]
    );

    // Unknown path (authorized): 404.
    let (c, _) = k.get("/no/such/path");
    assert_eq!(c, 404);

    // A slowloris: 1 header byte per second is cut off and does not block
    // a normal request meanwhile.
    let port = node.port;
    let slow = std::thread::spawn(move || {
        let mut s = tls_connect(port, kubelet_tls(None));
        let started = Instant::now();
        let msg = b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
        for b in msg.iter() {
            if s.write_all(&[*b]).and_then(|_| s.flush()).is_err() {
                return (true, started.elapsed());
            }
            // A closed connection shows as EOF/error on a short read.
            s.sock
                .set_read_timeout(Some(Duration::from_millis(1000)))
                .unwrap();
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(0) => return (true, started.elapsed()),
                Ok(_) => return (true, started.elapsed()),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return (true, started.elapsed()),
            }
            if started.elapsed() > secs(60) {
                break;
            }
        }
        (false, started.elapsed())
    });
    std::thread::sleep(secs(3));
    let t0 = Instant::now();
    let (c, _) = k.get("/pods");
    assert_eq!(c, 200);
    assert!(
        t0.elapsed() < secs(5),
        "a normal request took {:?} beside a slow client",
        t0.elapsed()
    );
    let (cut, after) = slow.join().unwrap();
    assert!(cut, "the slow client was never cut off ({after:?})");
    assert!(
        after < secs(45),
        "the slow client was cut off only after {after:?}"
    );
    eprintln!("[kapi-bad] slow client cut off after {after:?}");
    assert_eq!(k.get("/pods").0, 200);

    // Random bytes instead of a TLS handshake, from 16 clients at once,
    // each then waiting for the server to hang up.
    let port = node.port;
    let noisy: Vec<_> = (0..16u64)
        .map(|i| {
            std::thread::spawn(move || {
                let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
                tcp.set_read_timeout(Some(secs(20))).unwrap();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i;
                let bytes: Vec<u8> = (0..64 * 1024)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let _ = tcp.write_all(&bytes);
                // EOF or a reset: the server hung up; a timeout: it hung.
                match tcp.read_to_end(&mut Vec::new()) {
                    Ok(_) => true,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                }
            })
        })
        .collect();
    // A request head cut off by a half-close (the client shut its write
    // side), and an upgrade request followed at once by a half-close.
    let mut cut = tls_connect(port, kubelet_tls(None));
    let _ = cut.write_all(b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ");
    let _ = cut.flush();
    let _ = cut.sock.shutdown(std::net::Shutdown::Write);
    let mut upgrade = tls_connect(port, kubelet_tls(None));
    let _ = upgrade.write_all(
        format!(
            "GET /exec/default/none/c?command=true&stdout=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Authorization: Bearer {}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
            node.admin_token
        )
        .as_bytes(),
    );
    let _ = upgrade.flush();
    let _ = upgrade.sock.shutdown(std::net::Shutdown::Write);
    let t0 = Instant::now();
    assert_eq!(
        k.get("/pods").0,
        200,
        "beside random bytes and half-closed clients"
    );
    assert!(
        t0.elapsed() < secs(5),
        "a normal request took {:?} beside random bytes and half-closed clients",
        t0.elapsed()
    );
    for (i, h) in noisy.into_iter().enumerate() {
        assert!(
            h.join().unwrap(),
            "random-bytes client {i} was never hung up on"
        );
    }
    for (what, mut s) in [("cut-off head", cut), ("half-closed upgrade", upgrade)] {
        s.sock.set_read_timeout(Some(secs(20))).unwrap();
        let mut got = Vec::new();
        let r = s.read_to_end(&mut got);
        let timed_out = matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            || e.kind() == std::io::ErrorKind::TimedOut);
        assert!(
            !timed_out,
            "{what}: the server kept the connection open 20 s"
        );
        eprintln!(
            "[kapi-bad] {what}: {:?}",
            String::from_utf8_lossy(&got[..got.len().min(40)])
        );
    }
    assert_eq!(k.get("/pods").0, 200);
    node.env.assert_kubelet_alive();
}
