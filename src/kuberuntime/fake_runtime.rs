//! An in-memory container runtime for unit tests (upstream's
//! `cri/testing` fake runtime and image services, narrowed to our seams).
//!
//! The test edits the runtime's images, sandboxes and containers through
//! [`FakeRuntime::state`]; every call is recorded with its arguments for
//! assertions; an error can be queued per method ([`FakeRuntime::fail_next`])
//! and a delay set per method ([`FakeRuntime::set_delay`]). It serves the
//! image seam ([`ImageService`]), the runtime seam ([`RuntimeService`]) and
//! PLEG's [`PodSource`], each built from the same state, so a test that
//! starts a container sees it in every view.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use grpcio::RpcStatusCode;

use rkubelet_util::lock;

use crate::container::{
    ContainerState, ContainerStatus, PodSource, PodStatus, RuntimeContainer, RuntimePod,
    RuntimeSandbox, SandboxStatus,
};
use crate::cri::{api, CriError, ImageService, RuntimeService};
use crate::kuberuntime::labels;

/// A pod sandbox in the fake runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeSandbox {
    pub id: String,
    pub pod_uid: String,
    pub pod_name: String,
    pub namespace: String,
    pub ready: bool,
    pub created_at: SystemTime,
}

impl FakeSandbox {
    /// A ready sandbox for pod `uid` (named after it, in "default").
    pub fn ready(id: &str, uid: &str) -> Self {
        FakeSandbox {
            id: id.into(),
            pod_uid: uid.into(),
            pod_name: uid.into(),
            namespace: "default".into(),
            ready: true,
            created_at: UNIX_EPOCH + Duration::from_secs(1),
        }
    }
}

/// A container in the fake runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeContainer {
    pub id: String,
    pub pod_uid: String,
    pub name: String,
    /// The image as the spec names it.
    pub image: String,
    /// The image ID the runtime resolved it to (what image GC matches).
    pub image_ref: String,
    pub state: ContainerState,
    pub exit_code: i32,
    pub created_at: SystemTime,
    pub finished_at: Option<SystemTime>,
    /// What the runtime says of an exit (containerd: `Error`, `OOMKilled`).
    pub reason: String,
}

impl FakeContainer {
    /// A running container `name` of pod `uid`, from image `image_ref`.
    pub fn running(id: &str, uid: &str, name: &str, image_ref: &str) -> Self {
        FakeContainer {
            id: id.into(),
            pod_uid: uid.into(),
            name: name.into(),
            image: image_ref.into(),
            image_ref: image_ref.into(),
            state: ContainerState::Running,
            exit_code: 0,
            created_at: UNIX_EPOCH + Duration::from_secs(2),
            finished_at: None,
            reason: String::new(),
        }
    }
}

/// What the runtime holds; tests edit it directly.
#[derive(Debug, Default)]
pub struct FakeState {
    pub images: Vec<api::Image>,
    pub sandboxes: Vec<FakeSandbox>,
    pub containers: Vec<FakeContainer>,
    /// The mountpoint ImageFsInfo reports for the image filesystem.
    pub image_fs_mount: String,
    /// The size of images PullImage adds.
    pub pulled_image_size: u64,
}

impl FakeState {
    pub fn add_image(&mut self, id: &str, tag: &str, size: u64) {
        self.images.push(image(id, tag, size));
    }

    fn find_image(&self, name: &str) -> Option<&api::Image> {
        self.images.iter().find(|i| {
            i.id == name
                || i.repo_tags.iter().any(|t| t == name)
                || i.repo_digests.iter().any(|d| d == name)
        })
    }
}

/// An image with one tag.
pub fn image(id: &str, tag: &str, size: u64) -> api::Image {
    api::Image {
        id: id.into(),
        repo_tags: vec![tag.into()],
        size,
        ..Default::default()
    }
}

/// One recorded call: the CRI method name and its arguments, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: &'static str,
    pub args: Vec<String>,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.method, self.args.join(", "))
    }
}

/// Injected errors and delays, and how many calls run at once.
#[derive(Default)]
struct Faults {
    errors: HashMap<&'static str, VecDeque<CriError>>,
    delays: HashMap<&'static str, Duration>,
    in_flight: HashMap<&'static str, usize>,
    max_in_flight: HashMap<&'static str, usize>,
}

#[derive(Default)]
pub struct FakeRuntime {
    state: Mutex<FakeState>,
    calls: Mutex<Vec<Call>>,
    faults: Mutex<Faults>,
    /// GetPods' last answer, given back while nothing changes, as the
    /// runtime manager's listing memo does.
    listed: Mutex<Option<Arc<Vec<RuntimePod>>>>,
}

/// An error as the runtime would return it, without a gRPC status.
pub fn cri_error(method: &'static str, message: &str) -> CriError {
    CriError {
        method,
        code: None,
        message: message.into(),
    }
}

/// A NotFound error, which callers treat as "already gone".
pub fn not_found(method: &'static str) -> CriError {
    CriError {
        method,
        code: Some(RpcStatusCode::NOT_FOUND),
        message: "not found".into(),
    }
}

impl FakeRuntime {
    pub fn new() -> Self {
        Self::default()
    }

    /// The runtime's contents, to read or edit.
    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        lock(&self.state)
    }

    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    /// The arguments of each call to `method`, in order.
    pub fn calls_to(&self, method: &str) -> Vec<Vec<String>> {
        lock(&self.calls)
            .iter()
            .filter(|c| c.method == method)
            .map(|c| c.args.clone())
            .collect()
    }

    pub fn clear_calls(&self) {
        lock(&self.calls).clear();
    }

    /// The next call to `method` fails with `err`; queued errors are
    /// returned one per call, in order.
    pub fn fail_next(&self, method: &'static str, err: CriError) {
        let mut f = lock(&self.faults);
        f.errors.entry(method).or_default().push_back(err);
    }

    /// Every later call to `method` sleeps `delay` first (a slow runtime).
    pub fn set_delay(&self, method: &'static str, delay: Duration) {
        lock(&self.faults).delays.insert(method, delay);
    }

    /// The most calls to `method` that ran at the same time.
    pub fn max_concurrent(&self, method: &str) -> usize {
        lock(&self.faults)
            .max_in_flight
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    /// Records a call, applies its delay, and returns its injected error.
    /// The delay is slept without any lock held, so concurrent calls
    /// overlap as they would against a real runtime.
    fn enter(&self, method: &'static str, args: &[&str]) -> Result<(), CriError> {
        lock(&self.calls).push(Call {
            method,
            args: args.iter().map(|a| a.to_string()).collect(),
        });
        let delay = {
            let mut f = lock(&self.faults);
            let n = f.in_flight.entry(method).or_default();
            *n += 1;
            let n = *n;
            let max = f.max_in_flight.entry(method).or_default();
            *max = (*max).max(n);
            f.delays.get(method).copied()
        };
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        let mut f = lock(&self.faults);
        if let Some(n) = f.in_flight.get_mut(method) {
            *n = n.saturating_sub(1);
        }
        match f.errors.get_mut(method).and_then(VecDeque::pop_front) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl ImageService for FakeRuntime {
    fn image_status(&self, image: &str) -> Result<Option<api::Image>, CriError> {
        self.enter("ImageStatus", &[image])?;
        Ok(self.state().find_image(image).cloned())
    }

    fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        _sandbox: Option<api::PodSandboxConfig>,
    ) -> Result<String, CriError> {
        // Only whether credentials came: never record secrets.
        let who = if auth.is_some() { "auth" } else { "anonymous" };
        self.enter("PullImage", &[image, who])?;
        let mut st = self.state();
        if let Some(found) = st.find_image(image) {
            return Ok(found.id.clone());
        }
        let id = format!("sha256:{image}");
        let size = st.pulled_image_size;
        st.add_image(&id, image, size);
        Ok(id)
    }

    fn list_images(&self) -> Result<Vec<api::Image>, CriError> {
        self.enter("ListImages", &[])?;
        Ok(self.state().images.clone())
    }

    /// Idempotent, as the CRI asks: removing an absent image succeeds.
    fn remove_image(&self, image: &str) -> Result<(), CriError> {
        self.enter("RemoveImage", &[image])?;
        let mut st = self.state();
        let id = st.find_image(image).map(|i| i.id.clone());
        st.images.retain(|i| Some(&i.id) != id.as_ref());
        Ok(())
    }

    fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, CriError> {
        self.enter("ImageFsInfo", &[])?;
        let mountpoint = self.state().image_fs_mount.clone();
        Ok(api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                fs_id: Some(api::FilesystemIdentifier {
                    mountpoint,
                    ..Default::default()
                })
                .into(),
                ..Default::default()
            }],
            ..Default::default()
        })
    }
}

impl RuntimeService for FakeRuntime {
    /// Honours the filter's ID and label selector (the pod UID label is
    /// the one callers use).
    fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        self.enter("ListContainers", &[])?;
        let filter = filter.unwrap_or_default();
        let st = self.state();
        let listed = st.containers.iter().map(to_cri_container);
        Ok(listed
            .filter(|c| filter.id.is_empty() || c.id == filter.id)
            .filter(|c| {
                let sel = &filter.label_selector;
                sel.iter().all(|(k, v)| c.labels.get(k) == Some(v))
            })
            .collect())
    }
}

fn to_cri_container(c: &FakeContainer) -> api::Container {
    let state = match c.state {
        ContainerState::Created => api::ContainerState::CONTAINER_CREATED,
        ContainerState::Running => api::ContainerState::CONTAINER_RUNNING,
        ContainerState::Exited => api::ContainerState::CONTAINER_EXITED,
        ContainerState::Unknown => api::ContainerState::CONTAINER_UNKNOWN,
    };
    api::Container {
        id: c.id.clone(),
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            ..Default::default()
        })
        .into(),
        image: Some(api::ImageSpec {
            image: c.image.clone(),
            ..Default::default()
        })
        .into(),
        image_ref: c.image_ref.clone(),
        state: state.into(),
        labels: HashMap::from([
            (labels::POD_UID_LABEL.to_string(), c.pod_uid.clone()),
            (labels::CONTAINER_NAME_LABEL.to_string(), c.name.clone()),
        ]),
        ..Default::default()
    }
}

impl PodSource for FakeRuntime {
    /// The pods as the runtime manager lists them: grouped by pod UID,
    /// newest sandbox and container first; the last snapshot again when
    /// nothing changed.
    fn get_pods(&self) -> Result<Arc<Vec<RuntimePod>>, CriError> {
        self.enter("GetPods", &[])?;
        let st = self.state();
        let mut pods: HashMap<String, RuntimePod> = HashMap::new();
        for sb in &st.sandboxes {
            let pod = pods
                .entry(sb.pod_uid.clone())
                .or_insert_with(|| RuntimePod {
                    uid: sb.pod_uid.clone(),
                    name: sb.pod_name.clone(),
                    namespace: sb.namespace.clone(),
                    ..Default::default()
                });
            pod.sandboxes.push(RuntimeSandbox {
                id: sb.id.clone(),
                ready: sb.ready,
                created_at: sb.created_at,
            });
        }
        for c in &st.containers {
            let pod = pods.entry(c.pod_uid.clone()).or_insert_with(|| RuntimePod {
                uid: c.pod_uid.clone(),
                ..Default::default()
            });
            pod.containers.push(RuntimeContainer {
                id: c.id.clone(),
                name: c.name.clone(),
                state: c.state,
                hash: String::new(),
                created_at: c.created_at,
                grace_seconds: None,
            });
        }
        let mut out: Vec<RuntimePod> = pods.into_values().collect();
        for p in &mut out {
            p.sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
            p.containers
                .sort_by_key(|c| std::cmp::Reverse(c.created_at));
        }
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        let mut listed = lock(&self.listed);
        match &*listed {
            Some(last) if **last == out => Ok(Arc::clone(last)),
            _ => Ok(Arc::clone(listed.insert(Arc::new(out)))),
        }
    }

    fn get_pod_status(&self, uid: &str, name: &str, ns: &str) -> Result<PodStatus, CriError> {
        self.enter("GetPodStatus", &[uid, name, ns])?;
        let st = self.state();
        let mut sandboxes: Vec<SandboxStatus> = st
            .sandboxes
            .iter()
            .filter(|s| s.pod_uid == uid)
            .map(to_sandbox_status)
            .collect();
        let mut containers: Vec<ContainerStatus> = st
            .containers
            .iter()
            .filter(|c| c.pod_uid == uid)
            .map(to_container_status)
            .collect();
        sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(PodStatus {
            uid: uid.into(),
            name: name.into(),
            namespace: ns.into(),
            sandboxes,
            containers,
        })
    }
}

fn to_sandbox_status(s: &FakeSandbox) -> SandboxStatus {
    SandboxStatus {
        id: s.id.clone(),
        ready: s.ready,
        attempt: 0,
        created_at: s.created_at,
        ip: None,
        additional_ips: Vec::new(),
        host_network: false,
    }
}

fn to_container_status(c: &FakeContainer) -> ContainerStatus {
    ContainerStatus {
        id: c.id.clone(),
        name: c.name.clone(),
        state: c.state,
        created_at: c.created_at,
        started_at: None,
        finished_at: c.finished_at,
        exit_code: c.exit_code,
        image: c.image.clone(),
        image_ref: c.image_ref.clone(),
        hash: String::new(),
        restart_count: 0,
        reason: c.reason.clone(),
        message: String::new(),
        user: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_calls_and_injects_errors_once() {
        let rt = FakeRuntime::new();
        rt.state().add_image("sha256:a", "a:1", 10);
        rt.fail_next("RemoveImage", cri_error("RemoveImage", "busy"));
        assert!(rt.remove_image("sha256:a").is_err());
        assert_eq!(rt.state().images.len(), 1, "a failed call changes nothing");
        rt.remove_image("a:1").unwrap();
        assert!(rt.state().images.is_empty());
        rt.remove_image("a:1").unwrap();
        assert_eq!(
            rt.calls_to("RemoveImage"),
            [vec!["sha256:a"], vec!["a:1"], vec!["a:1"]]
        );
    }

    #[test]
    fn pulls_add_images_and_never_record_credentials() {
        let rt = FakeRuntime::new();
        rt.state().pulled_image_size = 7;
        let auth = api::AuthConfig {
            password: "s3cret".into(),
            ..Default::default()
        };
        assert_eq!(
            rt.pull_image("b:1", Some(auth), None).unwrap(),
            "sha256:b:1"
        );
        let found = rt.image_status("b:1").unwrap().unwrap();
        assert_eq!((found.id.as_str(), found.size), ("sha256:b:1", 7));
        let shown: Vec<String> = rt.calls().iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["PullImage(b:1, auth)", "ImageStatus(b:1)"]);
    }

    #[test]
    fn one_state_serves_every_view() {
        let rt = FakeRuntime::new();
        rt.state().sandboxes.push(FakeSandbox::ready("s1", "pod-a"));
        let c = FakeContainer::running("c1", "pod-a", "app", "sha256:x");
        rt.state().containers.push(c);
        let listed = rt.list_containers(None).unwrap();
        assert_eq!(listed[0].image_ref, "sha256:x");
        let pods = rt.get_pods().unwrap();
        assert_eq!((pods.len(), pods[0].containers.len()), (1, 1));
        let status = rt.get_pod_status("pod-a", "pod-a", "default").unwrap();
        assert_eq!(status.sandboxes[0].id, "s1");
        assert_eq!(status.containers[0].state, ContainerState::Running);
        let other = api::ContainerFilter {
            label_selector: HashMap::from([(labels::POD_UID_LABEL.into(), "b".into())]),
            ..Default::default()
        };
        assert!(rt.list_containers(Some(other)).unwrap().is_empty());
    }
}
