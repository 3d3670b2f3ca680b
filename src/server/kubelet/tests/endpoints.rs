//! Which paths are served where: PUT /debug/flags/v, and the debugging
//! handlers switched off and the unauthenticated read-only port.

use super::*;

#[test]
fn debug_flags_v_sets_the_log_verbosity() {
    let f = start_with(Setup::default());
    let put = |body: &str| {
        let mut s = tls_stream(f.started.secure, client_config(&f, &ADMIN));
        let head = request_text(
            "PUT",
            "/debug/flags/v",
            &ADMIN,
            &format!("Content-Length: {}\r\n", body.len()),
        );
        s.write_all(format!("{head}{body}").as_bytes()).unwrap();
        read_response(&mut s)
    };
    let r = put("4");
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "successfully set klog.logging.verbosity to 4\n")
    );
    assert_eq!(log::max_level(), log::LevelFilter::Debug);
    assert_eq!(put("loud").status, 400);
    assert_eq!(get(&f, "/debug/flags/v", ADMIN).status, 405);
    assert_eq!(put("2").status, 200);
    assert_eq!(log::max_level(), log::LevelFilter::Info);
}

#[test]
fn debugging_disabled_and_read_only_port() {
    let stats = handler(|_, resp| resp.send_text(200, "stats"));
    let exec = handler(|_, resp| resp.send_text(200, "exec"));
    let f = start_with(Setup {
        debugging: false,
        read_only: true,
        extra: vec![("/stats/".into(), stats), ("/exec/".into(), exec)],
        ..Setup::default()
    });
    let r = get(&f, "/containerLogs/default/web/app", ADMIN);
    assert_eq!(
        (r.status, r.body.as_str()),
        (405, "Debug endpoints are disabled.")
    );
    assert_eq!(get(&f, "/exec/default/web/app", ADMIN).status, 405);
    assert_eq!(get(&f, "/configz", ADMIN).status, 404);
    assert_eq!(get(&f, "/stats/summary", ADMIN).body, "stats");

    let ro = f.started.read_only.unwrap();
    let r = plain(ro, b"GET /pods HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200, "no authentication on the read-only port");
    assert!(r.body.contains("PodList"));
    assert_eq!(plain(ro, b"GET /healthz HTTP/1.1\r\n\r\n").body, "ok");
    assert_eq!(
        plain(ro, b"GET /stats/summary HTTP/1.0\r\n\r\n").body,
        "stats"
    );
    assert_eq!(plain(ro, b"GET /configz HTTP/1.0\r\n\r\n").status, 404);
    assert_eq!(plain(ro, b"GET /exec/a/b/c HTTP/1.0\r\n\r\n").status, 405);
    assert_eq!(plain(ro, b"GET /runningpods/ HTTP/1.0\r\n\r\n").status, 405);
}
