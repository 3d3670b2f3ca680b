//! Authentication (token, x509, none) and authorization (SubjectAccessReviews).

use super::*;

/// a. Authentication (token, x509, none) and authorization (SubjectAccessReviews).
#[test]
fn authn_and_authz() {
    let mut node = Node::start("kapi-auth", 41, false);
    node.create_pod(api_pod("authpod", SLEEPER));
    node.wait_running("authpod");
    let admin = node.kubelet_admin();

    // No credentials: 401.
    let (c, body) = node.kubelet(None).get("/pods");
    assert_eq!(c, 401, "/pods without credentials: {body}");
    let (c, _) = node.kubelet(Some("not-a-token")).get("/pods");
    assert_eq!(c, 401, "/pods with an unknown token");

    // Admin token: the PodList.
    let list = admin.json("GET", "/pods", None, 200);
    assert_eq!(list["kind"], "PodList", "{list}");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(names.contains(&"authpod"), "pods: {names:?}");

    // A user the authorizer denies: 403 naming the user.
    let denied = node.token_for("mallory");
    node.api.json(
        "POST",
        "/__double/authz",
        Some(&json!({"deny": ["mallory"]})),
        200,
    );
    let (c, body) = node.kubelet(Some(&denied)).get("/pods");
    assert_eq!(c, 403, "denied user on /pods: {body}");
    assert!(
        body.contains("Forbidden") && body.contains("user=mallory"),
        "403 body should name the user: {body}"
    );
    // A user that is allowed, with an issued token.
    let alice = node.token_for("alice");
    assert_eq!(node.kubelet(Some(&alice)).get("/pods").0, 200);

    // x509: the admin client certificate signed by the cluster CA.
    let x509 = Http::new(
        format!("https://127.0.0.1:{}", node.port),
        Some(kubelet_tls(Some((
            &node.double.dir.join("admin.crt"),
            &node.double.dir.join("admin.key"),
        )))),
        None,
    );
    let list = x509.json("GET", "/pods", None, 200);
    assert_eq!(list["kind"], "PodList");

    // The SubjectAccessReviews name the node and the right subresource.
    node.api
        .json("DELETE", "/__double/authz/reviews", None, 200);
    let fresh = node.token_for("auditor");
    let k = node.kubelet(Some(&fresh));
    let mut codes = vec![];
    for path in ["/pods", "/stats/summary", "/metrics", "/logs/"] {
        codes.push((path, k.get(path).0));
    }
    let sars = node.sars();
    let summary: Vec<String> = sars
        .iter()
        .map(|s| {
            format!(
                "{} {} {}/{} name={}",
                s["user"], s["verb"], s["resource"], s["subresource"], s["name"]
            )
        })
        .collect();
    let subs_for_user: Vec<&str> = sars
        .iter()
        .filter(|s| s["user"] == "auditor")
        .map(|s| {
            assert_eq!(s["resource"], "nodes", "{s}");
            assert_eq!(s["name"], NODE, "{s}");
            assert_eq!(s["verb"], "get", "{s}");
            s["subresource"].as_str().unwrap_or("")
        })
        .collect();
    assert!(
        subs_for_user.contains(&"pods") || subs_for_user.contains(&"proxy"),
        "/pods: want subresource pods or proxy; reviews: {summary:#?}"
    );
    for want in ["stats", "metrics", "log"] {
        assert!(
            subs_for_user.contains(&want),
            "want a review with subresource {want}; requests {codes:?}; reviews: {summary:#?}"
        );
    }
    assert!(codes.iter().take(3).all(|(_, c)| *c == 200), "{codes:?}");
    node.env.assert_kubelet_alive();
}
