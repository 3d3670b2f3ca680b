//! The read-only port: plain HTTP, no auth, no debugging handlers.

use super::*;

/// g. The read-only port: plain HTTP, no auth, no debugging handlers.
#[test]
fn read_only_port() {
    let mut node = Node::start("kapi-ro", 46, true);
    node.create_pod(api_pod("ropod", SLEEPER));
    node.wait_running("ropod");
    let ro = Http::new(format!("http://127.0.0.1:{}", node.ro_port), None, None);
    let (c, t) = ro.get("/healthz");
    assert_eq!((c, t.trim()), (200, "ok"));
    let list = ro.json("GET", "/pods", None, 200);
    assert_eq!(list["kind"], "PodList");
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "ropod"),
        "{list}"
    );
    // Not served there: upstream's read-only server installs the
    // "debugging disabled" handlers (405 "Debug endpoints are disabled.").
    for path in [
        "/containerLogs/default/ropod/c",
        "/exec/default/ropod/c?command=true",
        "/logs/",
    ] {
        let (c, t) = ro.get(path);
        assert!(
            c == 405 && t.contains("Debug endpoints are disabled"),
            "{path} on the read-only port: {c} {t:?}"
        );
    }
    // Unknown paths are 404.
    assert_eq!(ro.get("/no/such/path").0, 404);
    // No SubjectAccessReview for read-only requests.
    assert!(node.sars().is_empty(), "{:?}", node.sars());
    // The secure port still wants credentials.
    assert_eq!(node.kubelet(None).get("/pods").0, 401);
    node.env.assert_kubelet_alive();
}
