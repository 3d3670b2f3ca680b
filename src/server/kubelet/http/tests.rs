use super::conn::{parse_head, ReadError};
use super::request::{percent_decode, split_target};
use super::{Limits, Request};

fn limits() -> Limits {
    Limits::default()
}

#[test]
fn parses_head_and_framing() {
    let raw = b"GET /containerLogs/ns/p/c?tailLines=2&x=a%20b+c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
    let (head, n) = parse_head(raw, &limits()).unwrap().unwrap();
    assert_eq!(&raw[n..], b"abc");
    assert_eq!(head.content_length, Some(3));
    let req = Request::from_head(head, vec![], None).unwrap();
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
