//! TLS serving with given or self-signed certificates, x509, token and
//! anonymous authentication, webhook authorization with its caches, and
//! the server configuration derived from KubeletConfiguration.

use super::*;

#[test]
fn x509_and_anonymous_off() {
    let f = start_with(Setup::default());
    let r = get(&f, "/healthz", Who::Nobody);
    assert_eq!((r.status, r.body.as_str()), (401, "Unauthorized"));
    assert_eq!(
        get(&f, "/pods", Who::Token("whatever")).status,
        401,
        "no webhook: tokens ignored"
    );

    let r = get(&f, "/healthz", ADMIN);
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    let r = get(&f, "/pods", ADMIN);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let list: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    let running: Value = serde_json::from_str(&get(&f, "/runningpods/", ADMIN).body).unwrap();
    assert_eq!(running["items"].as_array().unwrap().len(), 2);
    let cfg: Value = serde_json::from_str(&get(&f, "/configz", ADMIN).body).unwrap();
    assert_eq!(cfg["kubeletconfig"]["port"], 10250);
    assert_eq!(get(&f, "/nope", ADMIN).status, 404);
    assert_eq!(
        get(&f, "/exec/default/web/app", ADMIN).status,
        404,
        "no streaming handler yet"
    );
    let r = https(&f, "POST", "/pods", ADMIN);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
    let r = get(&f, "/runningpods", ADMIN);
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/runningpods/"))
    );
}

#[test]
fn self_signed_certificate_is_generated_and_served() {
    let tmp = tempfile::TempDir::with_prefix("rkubelet-srv-selfsigned-").unwrap();
    let dir = tmp.path();
    let mut cfg = base_config(dir);
    cfg.anonymous = true;
    let host = Arc::new(FakeHost {
        logs: dir.join("pods"),
        running: AtomicBool::new(true),
        restarts: 0,
    });
    struct LocalHost(Arc<FakeHost>);
    impl KubeletHost for LocalHost {
        fn node_name(&self) -> String {
            "localhost".into()
        }
        fn pods(&self) -> Vec<Pod> {
            self.0.pods()
        }
        fn running_pods(&self) -> Vec<Pod> {
            self.0.running_pods()
        }
        fn config_json(&self) -> Value {
            self.0.config_json()
        }
        fn container_log(
            &self,
            ns: &str,
            p: &str,
            c: &str,
            prev: bool,
        ) -> Result<(PathBuf, bool), HostError> {
            self.0.container_log(ns, p, c, prev)
        }
    }
    let (_trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
    let started = spawn_servers(
        cfg,
        Arc::new(LocalHost(host)),
        healthz(),
        None,
        vec![],
        shutdown,
    )
    .unwrap();
    let crt = std::fs::read(dir.join("pki/kubelet.crt")).unwrap();
    assert!(dir.join("pki/kubelet.key").exists());
    let chain = crate::client::tls::parse_certs(&crt).unwrap();
    assert_eq!(chain.len(), 2, "serving cert + its CA");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[1].clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cc = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut s = tls_stream(started.secure, Arc::new(cc));
    s.write_all(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s);
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "ok"),
        "anonymous allowed"
    );
}

#[test]
fn webhook_authn_and_authz_with_caching() {
    let api = FakeApi::start(alice_policy);
    let stats = handler(|req, resp| {
        let who = req.user().map(|u| u.name.clone()).unwrap_or_default();
        resp.send_json(200, &json!({"user": who}))
    });
    let f = start_with(Setup {
        anonymous: true,
        webhook_authn: true,
        authz: AuthzMode::Webhook,
        client: Some(api.client()),
        extra: vec![("/stats/summary".into(), stats)],
        ..Setup::default()
    });
    std::fs::write(f.dir.path().join("varlog/syslog"), "boot\n").unwrap();
    let alice = || Who::Token("good-token");

    // /pods: "pods" is denied, then "proxy" allowed.
    assert_eq!(get(&f, "/pods", alice()).status, 200);
    let sars = api.calls("subjectaccessreviews");
    let subs: Vec<&str> = sars
        .iter()
        .map(|s| {
            s["spec"]["resourceAttributes"]["subresource"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(subs, ["pods", "proxy"]);
    let attrs = &sars[1]["spec"]["resourceAttributes"];
    assert_eq!(attrs["verb"], "get");
    assert_eq!(attrs["resource"], "nodes");
    assert_eq!(attrs["name"], NODE);
    assert_eq!(attrs["version"], "v1");
    assert_eq!(sars[1]["spec"]["user"], "alice");
    assert_eq!(
        sars[1]["spec"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    assert_eq!(api.calls("tokenreviews").len(), 1);

    let r = get(&f, "/stats/summary", alice());
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"user":"alice"}"#));
    assert_eq!(get(&f, "/logs/", alice()).status, 200);
    let r = get(&f, "/metrics", alice());
    assert_eq!(r.status, 403);
    assert_eq!(
        r.body,
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[metrics])\n"
    );
    let subs: Vec<String> = api
        .calls("subjectaccessreviews")
        .iter()
        .map(|s| {
            s["spec"]["resourceAttributes"]["subresource"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(subs, ["pods", "proxy", "stats", "log", "metrics"]);

    // Cached: no new reviews of either kind.
    let before = api.server.requests().len();
    assert_eq!(get(&f, "/pods", alice()).status, 200);
    assert_eq!(get(&f, "/metrics", alice()).status, 403);
    assert_eq!(api.server.requests().len(), before);

    // POST maps to create; a bad token is 401 even with anonymous on;
    // no token at all is system:anonymous (denied by the policy).
    assert_eq!(
        https(&f, "POST", "/exec/default/web/app?command=ls", alice()).status,
        404
    );
    let last = api.calls("subjectaccessreviews").pop().unwrap();
    assert_eq!(last["spec"]["resourceAttributes"]["verb"], "create");
    assert_eq!(last["spec"]["resourceAttributes"]["subresource"], "proxy");
    assert_eq!(get(&f, "/pods", Who::Token("bad")).status, 401);
    let r = get(&f, "/healthz", Who::Nobody);
    assert_eq!(r.status, 403);
    assert!(r.body.contains("user=system:anonymous"), "{}", r.body);
    assert!(r.body.contains("[healthz proxy]"), "{}", r.body);
    // A client certificate needs no TokenReview.
    let tokens = api.calls("tokenreviews").len();
    assert_eq!(get(&f, "/pods", Who::Cert("alice", &[])).status, 200);
    assert_eq!(api.calls("tokenreviews").len(), tokens);
}

#[test]
fn config_from_kubelet_configuration() {
    let mut c = crate::kubeletconfig::KubeletConfiguration {
        read_only_port: 10255,
        ..Default::default()
    };
    c.authentication.x509.client_ca_file = "/etc/ca.crt".into();
    let s = ServerConfig::from_kubelet_config(&c, Path::new("/var/lib/kubelet/pki")).unwrap();
    assert_eq!(s.port, 10250);
    assert_eq!(s.read_only_port, Some(10255));
    assert_eq!(s.authz_mode, AuthzMode::Webhook);
    assert!(s.webhook_authn && !s.anonymous);
    assert_eq!(s.webhook_authn_ttl, Duration::from_secs(120));
    assert_eq!(s.authz_unauthorized_ttl, Duration::from_secs(30));
    assert_eq!(s.client_ca_file, Some(PathBuf::from("/etc/ca.crt")));
    assert_eq!(s.tls_cert_file, None);
    c.read_only_port = 0;
    assert_eq!(
        ServerConfig::from_kubelet_config(&c, Path::new("/x"))
            .unwrap()
            .read_only_port,
        None
    );
    // Webhook modes need an API client, as upstream requires.
    let tmp = tempfile::TempDir::with_prefix("rkubelet-srv-noclient-").unwrap();
    let dir = tmp.path();
    let mut cfg = base_config(dir);
    cfg.authz_mode = AuthzMode::Webhook;
    let host = Arc::new(FakeHost {
        logs: dir.to_path_buf(),
        running: AtomicBool::new(false),
        restarts: 0,
    });
    let (_trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
    assert!(spawn_servers(cfg, host, healthz(), None, vec![], shutdown).is_err());
}
