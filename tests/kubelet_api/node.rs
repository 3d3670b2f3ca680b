//! One test's world: the double, its admin client and the Env (containerd,
//! rkubelet, dirs), and the pod the tests bind to the node.

use super::*;

/// On failure: the reviews and errors in the double's audit log.
fn dump_double(d: &Double) {
    let audit = fs::read_to_string(d.dir.join("audit.log")).unwrap_or_default();
    let lines: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("review") || l.contains("\"code\":4") || l.contains("\"code\":5"))
        .collect();
    eprintln!(
        "===== the double's audit log: reviews and errors (last 30) =====\n{}",
        lines[lines.len().saturating_sub(30)..].join("\n")
    );
}

/// The double (dropped first: prints the reviews on failure), the admin
/// client of the double, and the Env (containerd, rkubelet, dirs).
pub(crate) struct Node {
    pub(crate) double: Double,
    pub(crate) api: Http,
    pub(crate) env: Env,
    pub(crate) admin_token: String,
    pub(crate) port: u16,
    pub(crate) ro_port: u16,
    cert_dir: PathBuf,
}

impl Node {
    pub(crate) fn start(name: &str, n: u32, read_only: bool) -> Node {
        assert!((41..=50).contains(&n), "kubelet_api tests use N in 41..=50");
        let env = Env::new(name, n);
        let double = Double::new(env.dir.join("api"), 21000 + n as u16).with_dump(dump_double);
        let admin_token = fs::read_to_string(double.dir.join("admin-token"))
            .unwrap()
            .trim()
            .to_string();
        let api = Http::new(
            format!("https://127.0.0.1:{}", 21000 + n),
            Some(double_tls(&double.dir)),
            Some(admin_token.clone()),
        );
        let (port, ro_port) = (22000 + n as u16, 23000 + n as u16);
        let cert_dir = env.dir.join("pki");
        let config = env.dir.join("kubelet-api-config.yaml");
        fs::write(
            &config,
            kubelet_config(
                &env,
                &format!(
                    "address: 127.0.0.1\n\
                     port: {port}\n\
                     readOnlyPort: {}\n\
                     authentication:\n\
                     \x20 anonymous:\n\
                     \x20   enabled: false\n\
                     \x20 webhook:\n\
                     \x20   enabled: true\n\
                     \x20 x509:\n\
                     \x20   clientCAFile: {}\n\
                     authorization:\n\
                     \x20 mode: Webhook\n",
                    if read_only { ro_port } else { 0 },
                    double.dir.join("ca.crt").display(),
                ),
            ),
        )
        .unwrap();
        let mut node = Node {
            double,
            api,
            env,
            admin_token,
            port,
            ro_port,
            cert_dir,
        };
        let cert_dir = node.cert_dir.display().to_string();
        let args =
            cluster_kubelet_args(&node.double, &node.env, &config, &["--cert-dir", &cert_dir]);
        node.env.start_kubelet_with_args(&args);
        node.env.wait_healthy(secs(30));
        // The API port answers (401 without credentials) once it is up.
        let k = node.kubelet(None);
        let up = poll(secs(20), || {
            node.env.assert_kubelet_alive();
            k.call("GET", "/healthz", None).ok()
        });
        assert!(up.is_some(), "the kubelet API port {port} never answered");
        node
    }

    /// A client of the kubelet's HTTPS port with this bearer token.
    pub(crate) fn kubelet(&self, token: Option<&str>) -> Http {
        Http::new(
            format!("https://127.0.0.1:{}", self.port),
            Some(kubelet_tls(None)),
            token.map(String::from),
        )
    }

    pub(crate) fn kubelet_admin(&self) -> Http {
        self.kubelet(Some(&self.admin_token.clone()))
    }

    /// A token for `user` issued by the double.
    pub(crate) fn token_for(&self, user: &str) -> String {
        let v = self.api.json(
            "POST",
            "/__double/tokens",
            Some(&json!({"user": user, "groups": ["testers"]})),
            200,
        );
        v["token"].as_str().unwrap().to_string()
    }

    pub(crate) fn sars(&self) -> Vec<Value> {
        let v = self.api.json("GET", "/__double/authz/reviews", None, 200);
        v["items"].as_array().cloned().unwrap_or_default()
    }

    pub(crate) fn create_pod(&self, pod: Value) -> Value {
        self.api
            .json("POST", "/api/v1/namespaces/default/pods", Some(&pod), 201)
    }

    fn pod(&self, name: &str) -> Option<Value> {
        match self.api.call(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{name}"),
            None,
        ) {
            Ok((200, t)) => serde_json::from_str(&t).ok(),
            _ => None,
        }
    }

    pub(crate) fn wait_pod(
        &mut self,
        name: &str,
        timeout: Duration,
        mut f: impl FnMut(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        let got = poll(timeout, || {
            self.env.assert_kubelet_alive();
            let p = self.pod(name)?;
            last = p.clone();
            f(&p).then_some(p)
        });
        got.unwrap_or_else(|| {
            panic!(
                "pod {name}: condition not met within {timeout:?}; last status:\n{}",
                serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
            )
        })
    }

    pub(crate) fn wait_running(&mut self, name: &str) -> Value {
        self.wait_pod(name, secs(60), |p| {
            p["status"]["phase"] == "Running"
                && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
        })
    }
}

/// A pod bound to the node, one busybox container "c" running `script`
/// (tests/common/cluster.rs's, without labels and with a 2 s grace period).
pub(crate) fn api_pod(name: &str, script: &str) -> Value {
    let mut pod = common::cluster::api_pod(name, script);
    pod["metadata"].as_object_mut().unwrap().remove("labels");
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    pod
}
