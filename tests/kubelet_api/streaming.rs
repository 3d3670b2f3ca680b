//! /exec and /portForward over WebSocket.

use super::*;

/// e. /exec over WebSocket (v4.channel.k8s.io).
#[test]
fn exec_websocket() {
    let mut node = Node::start("kapi-exec", 44, false);
    node.create_pod(api_pod("execpod", SLEEPER));
    node.wait_running("execpod");
    let path = "/exec/default/execpod/c?command=echo&command=hi&output=1&error=1";

    // Without credentials: 401, no upgrade.
    match ws_open(node.port, path, None, "v4.channel.k8s.io") {
        Ok(_) => panic!("exec without credentials was upgraded"),
        Err((c, t)) => assert_eq!(c, 401, "{t}"),
    }

    let token = node.admin_token.clone();
    let mut ws = ws_open(node.port, path, Some(&token), "v4.channel.k8s.io")
        .unwrap_or_else(|(c, t)| panic!("exec upgrade: {c}: {t}"));
    let chans = ws.collect(Instant::now() + secs(20), |c| !c[3].is_empty());
    let stdout = String::from_utf8_lossy(&chans[1]).into_owned();
    let status = String::from_utf8_lossy(&chans[3]).into_owned();
    assert!(
        stdout.contains("hi"),
        "stdout channel: {stdout:?}; status: {status:?}"
    );
    let st: Value = serde_json::from_str(&status)
        .unwrap_or_else(|e| panic!("status channel is not JSON ({e}): {status:?}"));
    assert_eq!(st["status"], "Success", "{st}");

    // A failing command: the status carries the exit code.
    let path = "/exec/default/execpod/c?command=sh&command=-c&command=exit%203&output=1&error=1";
    let mut ws = ws_open(node.port, path, Some(&token), "v4.channel.k8s.io")
        .unwrap_or_else(|(c, t)| panic!("exec upgrade: {c}: {t}"));
    let chans = ws.collect(Instant::now() + secs(20), |c| !c[3].is_empty());
    let st: Value = serde_json::from_slice(&chans[3]).unwrap_or(Value::Null);
    assert_eq!(st["status"], "Failure", "{st}");
    assert_eq!(st["reason"], "NonZeroExitCode", "{st}");
    node.env.assert_kubelet_alive();
}

/// f. /portForward over WebSocket to a busybox httpd.
#[test]
fn port_forward_websocket() {
    let mut node = Node::start("kapi-pf", 45, false);
    node.create_pod(api_pod(
        "web",
        "mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www",
    ));
    node.wait_running("web");
    let token = node.admin_token.clone();
    let path = "/portForward/default/web?port=8080";
    let mut ws = ws_open(node.port, path, Some(&token), "v4.channel.k8s.io")
        .unwrap_or_else(|(c, t)| panic!("portForward upgrade: {c}: {t}"));
    // Each channel (0 data, 1 error) first carries the port, little-endian.
    let chans = ws.collect(Instant::now() + secs(10), |c| {
        c[0].len() >= 2 && c[1].len() >= 2
    });
    assert_eq!(
        &chans[0][..2],
        &8080u16.to_le_bytes(),
        "data channel port prefix"
    );
    let mut req = vec![0u8];
    req.extend_from_slice(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    ws.send(&req);
    let chans = ws.collect(Instant::now() + secs(15), |c| {
        String::from_utf8_lossy(&c[0]).contains("hello-from-httpd")
    });
    let data = String::from_utf8_lossy(&chans[0]).into_owned();
    assert!(
        data.starts_with("HTTP/1.") && data.contains("hello-from-httpd"),
        "port-forwarded answer: {data:?}; error channel: {:?}",
        String::from_utf8_lossy(&chans[1])
    );
    node.env.assert_kubelet_alive();
}
