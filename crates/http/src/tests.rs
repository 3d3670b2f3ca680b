use crate::conn::{parse_head, ReadError};
use crate::request::{percent_decode, split_target};
use crate::{Limits, Request};

fn limits() -> Limits {
    Limits::default()
}

#[test]
fn parses_head_and_framing() {
    let raw = b"GET /containerLogs/ns/p/c?tailLines=2&x=a%20b+c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
    let (head, n) = parse_head(raw, &limits()).unwrap().unwrap();
    assert_eq!(&raw[n..], b"abc");
    assert_eq!(head.content_length, Some(3));
    let req: Request = Request::from_head(head, vec![], None).unwrap();
    assert_eq!(req.path(), "/containerLogs/ns/p/c");
    assert_eq!(req.query("tailLines"), Some("2"));
    assert_eq!(req.query("x"), Some("a b c"));
    assert_eq!(req.header("HOST"), Some("h"));
}

#[test]
fn rejects_ambiguous_or_bad_requests() {
    let both = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert!(matches!(
        parse_head(both, &limits()),
        Err(ReadError::Bad(_))
    ));
    let garbage = b"\x00\x01\x02 garbage\r\n\r\n";
    assert!(matches!(
        parse_head(garbage, &limits()),
        Err(ReadError::Bad(_))
    ));
    assert!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n", &limits())
        .unwrap()
        .is_none());
    assert!(split_target("/a%zz").is_err());
    assert!(split_target("/a?b=%ff").is_err());
    assert!(split_target("*").is_err());
    assert_eq!(percent_decode("/a%2Fb", false).unwrap(), "/a/b");
}

mod server {
    use std::io::{self, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use crate::{Limits, Request, ResponseWriter, Server, Service, Settings};

    /// Answers with the method, the path and the user it set.
    struct Echo;

    impl Service for Echo {
        type Peer = &'static str;
        type User = String;

        fn connected(&self, client_cert: Option<&[u8]>) -> &'static str {
            assert!(client_cert.is_none(), "plain HTTP has no certificate");
            "anonymous"
        }

        fn serve(
            &self,
            peer: &&'static str,
            req: &mut Request<String>,
            resp: &mut ResponseWriter<'_>,
        ) -> io::Result<()> {
            if req.path() == "/fail" {
                return Err(io::Error::other("boom"));
            }
            req.set_user(peer.to_string());
            let text = format!("{} {} {}", req.method(), req.path(), req.user().unwrap());
            resp.send_text(200, &text)
        }
    }

    fn start(max_connections: usize) -> (std::net::SocketAddr, rkubelet_util::shutdown::Trigger) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let settings = Settings {
            name: "echo",
            conn_thread: "echo-conn",
            reject_thread: "echo-reject",
            tls: None,
            limits: Limits {
                max_connections,
                ..Limits::default()
            },
        };
        let (trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
        Server::new(settings, Echo).spawn(l, shutdown).unwrap();
        (addr, trigger)
    }

    /// Reads one Content-Length response: (head, body).
    fn response(s: &mut TcpStream) -> (String, String) {
        let mut buf = Vec::new();
        let mut b = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).unwrap();
            buf.push(b[0]);
        }
        let head = String::from_utf8(buf).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).unwrap();
        (head, String::from_utf8(body).unwrap())
    }

    #[test]
    fn serves_keep_alive_and_turns_errors_into_500() {
        let (addr, _stop) = start(4);
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // Two requests on one connection.
        for (path, want) in [("/a", "GET /a anonymous"), ("/b%20c", "GET /b c anonymous")] {
            let (head, body) = response_to(&mut s, path);
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            assert_eq!(body, want);
        }
        let (head, body) = response_to(&mut s, "/fail");
        assert!(head.starts_with("HTTP/1.1 500 "), "{head}");
        assert!(head.contains("Connection: close\r\n"), "{head}");
        assert_eq!(body, "Internal Server Error: boom\n");
    }

    fn response_to(s: &mut TcpStream, path: &str) -> (String, String) {
        write!(s, "GET {path} HTTP/1.1\r\n\r\n").unwrap();
        response(s)
    }

    #[test]
    fn over_the_bound_gets_503() {
        let (addr, _stop) = start(1);
        let mut first = TcpStream::connect(addr).unwrap();
        first
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        assert_eq!(response_to(&mut first, "/x").0[..12], *"HTTP/1.1 200");
        let mut second = TcpStream::connect(addr).unwrap();
        second
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (head, body) = response_to(&mut second, "/x");
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert_eq!(body, "too many open connections\n");
    }

    #[test]
    fn stops_accepting_when_shutdown_closes() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let settings = Settings {
            name: "echo-stop",
            conn_thread: "echo-conn",
            reject_thread: "echo-reject",
            tls: None,
            limits: Limits::default(),
        };
        let (trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
        let handle = Server::new(settings, Echo).spawn(l, shutdown).unwrap();
        assert_eq!(handle.thread().name(), Some("echo-stop"));
        // Well inside the acceptor's idle wait: the descriptor wakes it.
        std::thread::sleep(Duration::from_millis(100));
        let start = Instant::now();
        drop(trigger);
        handle.join().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "stopped {:?} after shutdown",
            start.elapsed()
        );
    }
}
