//! The http source (--manifest-url) against a local server, and decoding
//! what it serves.

use super::*;

/// Serves `bodies` in turn (the last one repeatedly) on 127.0.0.1, answering
/// 403 unless the request carries `X-Token: secret`. Stops after `max` requests.
fn serve(bodies: Vec<(u16, String)>, max: usize) -> (String, JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/pods", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let handle = thread::spawn(move || {
        let mut seen_headers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut i = 0;
        while i < max && Instant::now() < deadline {
            let Ok((mut stream, _)) = listener.accept() else {
                thread::sleep(Duration::from_millis(10));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorized = false;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("x-token:") {
                    authorized = line.trim_end().ends_with("secret");
                    seen_headers.push(line.trim_end().to_string());
                }
            }
            let (status, body) = if authorized {
                bodies[i.min(bodies.len() - 1)].clone()
            } else {
                (403, String::new())
            };
            let response = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
            i += 1;
        }
        seen_headers
    });
    (url, handle)
}

fn start_http(url: &str, token: &str, period: Duration) -> (Running, Receiver<PodUpdate>) {
    let (tx, rx) = bounded(16);
    let (stop, shutdown) = bounded(1);
    let headers = vec![("X-Token".to_string(), token.to_string())];
    let handle = start_http_source(url, headers, NODE, period, tx, shutdown).unwrap();
    (Running { handle, stop }, rx)
}

const POD_LIST: &str = r#"{"apiVersion":"v1","kind":"PodList","items":[
  {"metadata":{"name":"one"},"spec":{"containers":[{"name":"c","image":"busybox"}]}},
  {"metadata":{"name":"two"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}"#;

#[test]
fn http_source_pod_then_list_with_header() {
    let bodies = vec![
        (200, GOOD.to_string()),
        (500, "oops".to_string()),
        (200, POD_LIST.to_string()),
    ];
    let (url, server) = serve(bodies, 4);
    let (running, rx) = start_http(&url, "secret", Duration::from_millis(150));

    let first = recv_within(&rx, Duration::from_secs(3));
    assert_eq!(
        (first.op, first.source.as_str()),
        (PodOperation::Set, HTTP_SOURCE)
    );
    assert_eq!(names(&first), vec!["web-node-1"]);
    let pod = &first.pods[0];
    assert_eq!(pod.annotation(CONFIG_SOURCE_ANNOTATION), Some("http"));
    assert!(
        spec(pod).tolerations.is_none(),
        "the NoExecute toleration is for file pods"
    );

    // The 500 in between sends nothing; the list arrives next.
    let second = recv_within(&rx, Duration::from_secs(3));
    assert_eq!(names(&second), vec!["one-node-1", "two-node-1"]);
    assert_ne!(second.pods[0].uid(), second.pods[1].uid());

    // The same body again is not re-sent.
    assert!(rx.recv_timeout(Duration::from_millis(400)).is_err());
    running.stop();
    let headers = server.join().unwrap();
    assert!(headers.iter().all(|h| h.ends_with("secret")), "{headers:?}");
}

#[test]
fn http_source_list_kind_and_empty_body() {
    let list = r#"{"apiVersion":"v1","kind":"List","items":[
      {"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}"#;
    let bodies = vec![(200, list.to_string()), (200, String::new())];
    let (url, server) = serve(bodies, 2);
    let (running, rx) = start_http(&url, "secret", Duration::from_millis(100));
    assert_eq!(
        names(&recv_within(&rx, Duration::from_secs(3))),
        vec!["x-node-1"]
    );
    assert!(
        recv_within(&rx, Duration::from_secs(3)).pods.is_empty(),
        "empty body means no pods"
    );
    running.stop();
    server.join().unwrap();
}

#[test]
fn http_source_failures_send_nothing() {
    // Wrong token: 403 every time. Then an invalid list (one bad pod).
    let (url, server) = serve(vec![(200, GOOD.to_string())], 2);
    let (running, rx) = start_http(&url, "wrong", Duration::from_millis(100));
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    running.stop();
    server.join().unwrap();

    let bad_list = POD_LIST.replace(r#""name":"two""#, r#""name":"Two!""#);
    let err = decode_pods(bad_list.as_bytes(), ManifestOrigin::Url("http://x"), NODE).unwrap_err();
    let message = format!("{err:#}");
    assert!(
        message.contains("items[1]") && message.contains("metadata.name"),
        "{message}"
    );
}

#[test]
fn decode_pods_accepts_single_pod_yaml() {
    let pods = decode_pods(GOOD.as_bytes(), ManifestOrigin::Url("http://x"), NODE).unwrap();
    assert_eq!(pods.len(), 1);
    let err = decode_pods(
        b"apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
        ManifestOrigin::Url("http://x"),
        NODE,
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("Service"));
}
