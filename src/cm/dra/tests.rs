//! The DRA manager against a driver served over real gRPC on a unix
//! socket (the messages of `protos/dra/v1`, under either service name) and
//! an HTTP server answering the claim reads: preparing once per claim,
//! the CDI devices per request, the checkpoint across a restart, and the
//! claim given back when the last pod using it goes.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use grpcio::{Environment, RpcStatus, ServiceBuilder};
use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{json, Value};
use tempfile::TempDir;

use super::claims::{self, ResourceClaim};
use super::plugin::{self, Service};
use super::state;
use super::*;
use crate::client::testing::{client, Reply, TestServer};
use crate::pluginmanager::PluginHandler;
use crate::util::grpc::{reply, serve_unix};
use crate::util::testing::eventually;

const DRIVER: &str = "gpu.example.com";

fn pod(name: &str, uid: &str, claim: Value, status: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu", "request": "one"}]}}],
            "resourceClaims": [claim],
        },
        "status": status,
    }))
    .expect("pod")
}

fn shared_pod(name: &str, uid: &str) -> Pod {
    pod(
        name,
        uid,
        json!({"name": "gpu", "resourceClaimName": "shared"}),
        json!({}),
    )
}

fn claim(name: &str, uid: &str, reserved: &[(&str, &str)]) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "one", "driver": DRIVER, "pool": "pool-a", "device": "dev-0"}]}},
            "reservedFor": reserved.iter()
                .map(|(n, u)| json!({"resource": "pods", "name": n, "uid": u}))
                .collect::<Vec<_>>(),
        },
    })
}

/// The API server: `/version` at `minor`, and `claims` by path.
fn api(minor: u32, claims: Vec<(String, Value)>) -> TestServer {
    TestServer::start(move |r| {
        if r.path_only() == "/version" {
            return Reply::json(200, &json!({"major": "1", "minor": minor.to_string()}));
        }
        match claims.iter().find(|(p, _)| p == r.path_only()) {
            Some((_, c)) => Reply::json(200, c),
            None => Reply::status(404, "NotFound", "resourceclaims.resource.k8s.io not found"),
        }
    })
}

/// A driver serving `service`: every claim gets one device for request
/// `one`, CDI ID `example.com/gpu=<claim>`, unless `fail` names it.
struct Driver {
    calls: Arc<Mutex<Vec<String>>>,
    fail: Arc<Mutex<Option<String>>>,
    _server: grpcio::Server,
}

impl Driver {
    fn serve(env: &Arc<Environment>, socket: &Path, service: Service) -> Driver {
        let calls: Arc<Mutex<Vec<String>>> = Arc::default();
        let fail: Arc<Mutex<Option<String>>> = Arc::default();
        let (prepare, unprepare) = match service {
            Service::V1 => (&plugin::V1_PREPARE, &plugin::V1_UNPREPARE),
            Service::V1beta1 => (&plugin::V1BETA1_PREPARE, &plugin::V1BETA1_UNPREPARE),
        };
        let (c1, c2, f) = (calls.clone(), calls.clone(), fail.clone());
        let svc = ServiceBuilder::new()
            .add_unary_handler(
                prepare,
                move |ctx, req: api::NodePrepareResourcesRequest, sink| {
                    let mut resp = api::NodePrepareResourcesResponse::default();
                    for c in &req.claims {
                        c1.lock()
                            .unwrap()
                            .push(format!("prepare {} {}", c.name, c.uid));
                        let mut r = api::NodePrepareResourceResponse::default();
                        match f.lock().unwrap().clone() {
                            Some(e) => r.error = e,
                            None => {
                                r.devices = vec![api::Device {
                                    request_names: vec!["one".into()],
                                    pool_name: "pool-a".into(),
                                    device_name: "dev-0".into(),
                                    cdi_device_ids: vec![format!("example.com/gpu={}", c.name)],
                                    ..Default::default()
                                }]
                            }
                        }
                        resp.claims.insert(c.uid.clone(), r);
                    }
                    reply(ctx, sink, Ok::<_, RpcStatus>(resp));
                },
            )
            .add_unary_handler(
                unprepare,
                move |ctx, req: api::NodeUnprepareResourcesRequest, sink| {
                    let mut resp = api::NodeUnprepareResourcesResponse::default();
                    for c in &req.claims {
                        c2.lock()
                            .unwrap()
                            .push(format!("unprepare {} {}", c.name, c.uid));
                        resp.claims.insert(c.uid.clone(), Default::default());
                    }
                    reply(ctx, sink, Ok::<_, RpcStatus>(resp));
                },
            )
            .build();
        let server = serve_unix(env, socket, svc).expect("serve the driver");
        Driver {
            calls,
            fail,
            _server: server,
        }
    }

    fn calls(&self, prefix: &str) -> Vec<String> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.starts_with(prefix))
            .cloned()
            .collect()
    }
}

struct Setup {
    root: TempDir,
    env: Arc<Environment>,
    api: TestServer,
    woken: Arc<Mutex<Vec<String>>>,
}

impl Setup {
    fn new(minor: u32, claims: Vec<(String, Value)>) -> Setup {
        Setup {
            root: TempDir::with_prefix("rkubelet-dra-").unwrap(),
            env: Arc::new(Environment::new(1)),
            api: api(minor, claims),
            woken: Arc::default(),
        }
    }

    fn manager(&self) -> DraManager {
        let woken = self.woken.clone();
        DraManager::new(
            self.root.path(),
            DraManagerDeps {
                grpc_env: self.env.clone(),
                client: Some(client(&self.api.url)),
                on_prepared: Arc::new(move |uid| woken.lock().unwrap().push(uid.to_string())),
            },
        )
        .expect("manager")
    }

    fn driver(&self, m: &DraManager, versions: &[&str], service: Service) -> Driver {
        let driver = Driver::serve(&self.env, &self.socket(), service);
        self.register(m, versions);
        driver
    }

    fn socket(&self) -> std::path::PathBuf {
        self.root.path().join("drv.sock")
    }

    /// The plugin manager's calls for the driver on `socket()`.
    fn register(&self, m: &DraManager, versions: &[&str]) {
        let versions: Vec<String> = versions.iter().map(|v| v.to_string()).collect();
        let h = m.registration_handler();
        let socket = self.socket();
        let endpoint = socket.to_str().unwrap();
        h.validate_plugin(DRIVER, endpoint, &versions, false)
            .expect("valid");
        h.register_plugin(DRIVER, endpoint, &versions)
            .expect("registered");
    }

    /// Prepares `pod` to the end: waits for the drivers' answer.
    fn prepare(&self, m: &DraManager, pod: &Pod) -> Result<(), PrepareWait> {
        match m.prepare_resources(pod) {
            Err(PrepareWait::Pending) => {}
            done => return done,
        }
        let uid = pod.metadata.uid.clone().unwrap();
        eventually("the drivers' answer", || {
            self.woken.lock().unwrap().contains(&uid)
        });
        self.woken.lock().unwrap().retain(|u| u != &uid);
        m.prepare_resources(pod)
    }
}

fn shared_claim(path_version: &str, reserved: &[(&str, &str)]) -> (String, Value) {
    (
        claims::claim_path(path_version, "ns", "shared"),
        claim("shared", "claim-uid", reserved),
    )
}

fn c(pod: &Pod) -> &Container {
    &pod.spec.as_ref().unwrap().containers[0]
}

#[test]
fn a_shared_claim_is_prepared_once_kept_across_a_restart_and_given_back_by_the_last_pod() {
    let reserved = [("a", "uid-a"), ("b", "uid-b")];
    let s = Setup::new(34, vec![shared_claim("resource.k8s.io/v1", &reserved)]);
    let m = s.manager();
    let driver = s.driver(&m, &["v1.DRAPlugin", "v1beta1.DRAPlugin"], Service::V1);
    let (a, b) = (shared_pod("a", "uid-a"), shared_pod("b", "uid-b"));
    assert_eq!(s.prepare(&m, &a), Ok(()));
    assert_eq!(
        s.prepare(&m, &b),
        Ok(()),
        "prepared already: no second call"
    );
    assert_eq!(driver.calls("prepare"), ["prepare shared claim-uid"]);
    assert_eq!(
        m.cdi_devices(&a, c(&a)),
        Ok(vec!["example.com/gpu=shared".to_string()])
    );
    let claims = m.container_claims(&b, c(&b));
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].devices[0].0, DRIVER);
    assert_eq!(claims[0].devices[0].1.device_name, "dev-0");

    // A restart: the claims and their users come back from the checkpoint.
    drop(m);
    let m = s.manager();
    s.register(&m, &["v1.DRAPlugin"]);
    assert_eq!(
        m.cdi_devices(&b, c(&b)),
        Ok(vec!["example.com/gpu=shared".to_string()])
    );

    // b still uses it; once neither does, the driver undoes it.
    m.unprepare_inactive(|| Some(HashSet::from(["uid-b".to_string()])));
    m.unprepare_inactive(|| None);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(driver.calls("unprepare").is_empty());
    m.unprepare_inactive(|| Some(HashSet::new()));
    eventually("unprepared", || {
        state::load(&state::path(s.root.path())).unwrap().is_empty()
    });
    assert_eq!(driver.calls("unprepare"), ["unprepare shared claim-uid"]);
}

#[test]
fn a_driver_speaking_only_v1beta1_is_called_so_on_a_v1_32_server() {
    let s = Setup::new(
        32,
        vec![shared_claim("resource.k8s.io/v1beta1", &[("a", "uid-a")])],
    );
    let m = s.manager();
    let driver = s.driver(&m, &["v1beta1.DRAPlugin"], Service::V1beta1);
    let a = shared_pod("a", "uid-a");
    assert_eq!(s.prepare(&m, &a), Ok(()));
    assert_eq!(driver.calls("prepare"), ["prepare shared claim-uid"]);
    let read = s.api.requests().iter().any(|r| {
        r.path_only() == "/apis/resource.k8s.io/v1beta1/namespaces/ns/resourceclaims/shared"
    });
    assert!(read, "{:?}", s.api.calls());
}

#[test]
fn a_failed_prepare_is_the_pods_error_once_then_tried_again() {
    let s = Setup::new(
        34,
        vec![shared_claim("resource.k8s.io/v1", &[("a", "uid-a")])],
    );
    let m = s.manager();
    let driver = s.driver(&m, &["v1.DRAPlugin"], Service::V1);
    *driver.fail.lock().unwrap() = Some("no GPU left".into());
    let a = shared_pod("a", "uid-a");
    assert_eq!(
        s.prepare(&m, &a),
        Err(PrepareWait::Failed(
            "NodePrepareResources failed for ResourceClaim shared: no GPU left".into()
        ))
    );
    *driver.fail.lock().unwrap() = None;
    assert_eq!(s.prepare(&m, &a), Ok(()));
    assert_eq!(driver.calls("prepare").len(), 2);
}

#[test]
fn claims_that_are_not_the_pods_fail_with_upstreams_words() {
    let theirs = (
        claims::claim_path("resource.k8s.io/v1", "ns", "theirs"),
        claim("theirs", "their-uid", &[("other", "uid-x")]),
    );
    let s = Setup::new(
        34,
        vec![
            shared_claim("resource.k8s.io/v1", &[("a", "uid-a")]),
            theirs,
        ],
    );
    let m = s.manager();
    let err = |r| match r {
        Err(PrepareWait::Failed(why)) => why,
        other => panic!("{other:?}"),
    };
    let a = shared_pod("a", "uid-a");
    assert_eq!(
        err(m.prepare_resources(&a)),
        format!("plugin name {DRIVER} not found in the list of registered DRA plugins")
    );
    let _driver = s.driver(&m, &["v1.DRAPlugin"], Service::V1);
    let other = pod(
        "a",
        "uid-a",
        json!({"name": "gpu", "resourceClaimName": "theirs"}),
        json!({}),
    );
    assert_eq!(
        err(m.prepare_resources(&other)),
        "pod a (uid-a) is not allowed to use ResourceClaim theirs (their-uid)"
    );
    let missing = pod(
        "a",
        "uid-a",
        json!({"name": "gpu", "resourceClaimName": "gone"}),
        json!({}),
    );
    assert_eq!(
        err(m.prepare_resources(&missing)),
        "fetch ResourceClaim gone: resourceclaims.resource.k8s.io not found"
    );
    let template = pod(
        "a",
        "uid-a",
        json!({"name": "gpu", "resourceClaimTemplateName": "t"}),
        json!({}),
    );
    assert_eq!(
        err(m.prepare_resources(&template)),
        "pod \"ns/a\": ResourceClaim not created yet"
    );
    // None of these left a claim to give back.
    assert!(state::load(&state::path(s.root.path())).unwrap().is_empty());
}

#[test]
fn claim_names_follow_the_pods_status_for_templates() {
    let none = pod(
        "a",
        "u",
        json!({"name": "gpu", "resourceClaimTemplateName": "t"}),
        json!({"resourceClaimStatuses": [{"name": "gpu"}]}),
    );
    let pc = &none
        .spec
        .as_ref()
        .unwrap()
        .resource_claims
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        claims::claim_name(&none, pc),
        Ok(None),
        "no claim was needed"
    );
    let made = pod(
        "a",
        "u",
        json!({"name": "gpu", "resourceClaimTemplateName": "t"}),
        json!({"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "a-gpu-x"}]}),
    );
    let pc = &made
        .spec
        .as_ref()
        .unwrap()
        .resource_claims
        .as_ref()
        .unwrap()[0];
    let named = claims::claim_name(&made, pc).unwrap().unwrap();
    assert_eq!(
        (named.name.as_str(), named.must_check_owner),
        ("a-gpu-x", true)
    );
    let mut claim: ResourceClaim =
        serde_json::from_value(claim("a-gpu-x", "cu", &[("a", "u")])).unwrap();
    assert_eq!(
        claim.check_owner(&made),
        Err("ResourceClaim a-gpu-x was not created for pod ns/a (pod is not owner)".into())
    );
    claim.metadata.owner_references =
        serde_json::from_value(json!([{"uid": "u", "controller": true}])).unwrap();
    assert_eq!(claim.check_owner(&made), Ok(()));
    claim.status.as_mut().unwrap().allocation = None;
    assert_eq!(
        claim.drivers(),
        Err("ResourceClaim a-gpu-x: not allocated".into())
    );
}

#[test]
fn services_are_chosen_newest_first() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        plugin::choose_service(&v(&["v1beta1.DRAPlugin", "v1.DRAPlugin"])),
        Ok(Service::V1)
    );
    assert_eq!(
        plugin::choose_service(&v(&["v1beta1.DRAPlugin"])),
        Ok(Service::V1beta1)
    );
    assert!(plugin::choose_service(&v(&[]))
        .unwrap_err()
        .starts_with("empty list"));
    assert!(plugin::choose_service(&v(&["v1alpha4.Node"])).is_err());
    assert_eq!(
        claims::api_version(crate::client::version::ServerVersion { minor: 31 }),
        None
    );
}

#[test]
fn the_checkpoint_is_upstreams_and_a_corrupt_one_is_refused() {
    let dir = TempDir::new().unwrap();
    let path = state::path(dir.path());
    let info = ClaimInfo {
        claim_uid: "cu".into(),
        claim_name: "shared".into(),
        namespace: "ns".into(),
        pod_uids: ["p1".to_string()].into(),
        driver_state: [(
            DRIVER.to_string(),
            state::DriverState {
                devices: Some(vec![Device {
                    pool_name: "pool-a".into(),
                    device_name: "dev-0".into(),
                    request_names: Some(vec!["one".into()]),
                    cdi_device_ids: Some(vec!["example.com/gpu=0".into()]),
                }]),
            },
        )]
        .into(),
        prepared: true,
    };
    state::store(&path, std::slice::from_ref(&info)).unwrap();
    let outer: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let data = outer["Data"].as_str().unwrap();
    assert_eq!(outer["Checksum"], json!(crc32fast::hash(data.as_bytes())));
    let data: Value = serde_json::from_str(data).unwrap();
    assert_eq!(data["kind"], "DRACheckpoint");
    assert_eq!(data["apiVersion"], "checkpoint.dra.kubelet.k8s.io/v1");
    assert_eq!(data["Entries"][0]["PodUIDs"], json!({"p1": {}}));
    assert_eq!(
        data["Entries"][0]["DriverState"][DRIVER]["Devices"][0]["CDIDeviceIDs"],
        json!(["example.com/gpu=0"])
    );
    let back = state::load(&path).unwrap();
    assert_eq!(back.len(), 1);
    assert!(
        !back[0].prepared,
        "prepared again before another sandbox uses it"
    );
    assert_eq!(back[0].cdi_devices("one"), ["example.com/gpu=0"]);
    assert!(back[0].cdi_devices("two").is_empty());

    let mut outer = outer;
    outer["Checksum"] = json!(1);
    std::fs::write(&path, outer.to_string()).unwrap();
    let e = state::load(&path).unwrap_err().to_string();
    assert!(e.contains("checkpoint is corrupted"), "{e}");
}
