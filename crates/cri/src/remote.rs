//! A blocking CRI client over a gRPC unix socket. Every call carries a
//! deadline: a runtime that hangs costs us a bounded wait, never a thread.
//! Container stops alone are async (`stop_container_async`): a grace
//! period must cost its own pod, not a shared worker.

use std::sync::Arc;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, EnvBuilder, Environment, RpcStatusCode};

use crate::api;
use crate::api_grpc::{ImageServiceClient, RuntimeServiceClient};
use crate::listing::{self, RawListing};

/// Upstream's maxMsgSize for CRI responses (16 MiB).
const MAX_MSG_SIZE: i32 = 16 * 1024 * 1024;
/// Deadline for the cheap calls PLEG and the sync loop make every second;
/// shorter than runtimeRequestTimeout so a wedged runtime shows up quickly.
const FAST_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Image pulls may legitimately take longer than runtimeRequestTimeout.
const PULL_TIMEOUT_FLOOR: Duration = Duration::from_secs(600);
/// gRPC completion-queue threads: one is plenty for a blocking client.
const GRPC_CQ_THREADS: usize = 1;

/// A failed CRI call, naming the method and the gRPC status.
#[derive(Debug, Clone, thiserror::Error)]
#[error("CRI {method} failed: {}{message}", .code.map(|c| format!("{c:?}: ")).unwrap_or_default())]
pub struct CriError {
    pub method: &'static str,
    pub code: Option<RpcStatusCode>,
    pub message: String,
}

/// A runtime or image service endpoint the client cannot dial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("CRI endpoint {0:?}: only unix:// endpoints are supported")]
    Scheme(String),
    #[error("CRI endpoint {0:?}: the socket path must be absolute")]
    Relative(String),
}

/// Told of every CRI call the client makes: upstream's operation_type (the
/// snake_case method: `list_containers`, `pull_image`, ...), how long it
/// took and whether it succeeded. The kubelet records its
/// `kubelet_runtime_operations_*` metrics from it. Called on the caller's
/// thread, or on gRPC's completion-queue thread for async calls: keep it
/// short.
pub trait Observer: Send + Sync {
    fn runtime_op(&self, op: &str, took: Duration, ok: bool);
}

/// Records nothing (tools and tests that keep no metrics).
impl Observer for () {
    fn runtime_op(&self, _op: &str, _took: Duration, _ok: bool) {}
}

impl CriError {
    fn from_grpc(method: &'static str, err: grpcio::Error) -> Self {
        match err {
            grpcio::Error::RpcFailure(status) => CriError {
                method,
                code: Some(status.code()),
                message: status.message().to_string(),
            },
            other => CriError {
                method,
                code: None,
                message: other.to_string(),
            },
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code == Some(RpcStatusCode::NOT_FOUND)
    }

    /// The error as grpc-go prints a status error, which is how upstream's
    /// event and status messages show a CRI failure: `rpc error: code =
    /// Unknown desc = ...`. An error that carries no status is its message.
    pub fn status_text(&self) -> String {
        match self.code {
            Some(_) => format!(
                "rpc error: code = {} desc = {}",
                self.code_name(),
                self.message
            ),
            None => self.message.clone(),
        }
    }

    /// The status code as Go's codes.Code spells it ("NotFound"); errors
    /// that carry no status are "Unknown", as grpc-go's status.FromError.
    pub fn code_name(&self) -> &'static str {
        const NAMES: [&str; 17] = [
            "OK",
            "Canceled",
            "Unknown",
            "InvalidArgument",
            "DeadlineExceeded",
            "NotFound",
            "AlreadyExists",
            "PermissionDenied",
            "ResourceExhausted",
            "FailedPrecondition",
            "Aborted",
            "OutOfRange",
            "Unimplemented",
            "Internal",
            "Unavailable",
            "DataLoss",
            "Unauthenticated",
        ];
        self.code
            .and_then(|c| usize::try_from(i32::from(c)).ok())
            .and_then(|i| NAMES.get(i).copied())
            .unwrap_or("Unknown")
    }
}

pub type Result<T> = std::result::Result<T, CriError>;

/// How an async container stop went: the preStop exec hook's reply (when
/// one ran) and how long it took, and StopContainer's result.
pub struct AsyncStop {
    pub hook: Option<Result<api::ExecSyncResponse>>,
    pub hook_took: Duration,
    pub stopped: Result<()>,
}

/// The runtime service and the image service (the same endpoint unless
/// `imageServiceEndpoint` names another).
pub struct RemoteRuntime {
    runtime: RuntimeServiceClient,
    /// The runtime's channel for calls whose answers stay undecoded
    /// ([`crate::listing`]).
    raw: grpcio::Client,
    image: ImageServiceClient,
    /// runtimeRequestTimeout: the deadline of every mutating call.
    timeout: Duration,
    observer: Arc<dyn Observer>,
    env: Arc<Environment>,
}

impl RemoteRuntime {
    /// Builds the channels; does not connect (gRPC connects lazily and
    /// reconnects with its own backoff, so a dead runtime at start is fine).
    /// One channel serves both services when the endpoints are equal.
    /// `observer` is told of every call.
    pub fn with_image_endpoint(
        runtime_endpoint: &str,
        image_endpoint: &str,
        timeout: Duration,
        observer: Arc<dyn Observer>,
    ) -> std::result::Result<Self, EndpointError> {
        let runtime_target = grpc_target(runtime_endpoint)?;
        let image_target = grpc_target(image_endpoint)?;
        crate::core_plugins::link();
        let env = Arc::new(
            EnvBuilder::new()
                .cq_count(GRPC_CQ_THREADS)
                .name_prefix("grpc-cq")
                .build(),
        );
        let connect = |target: &str| {
            ChannelBuilder::new(Arc::clone(&env))
                .max_receive_message_len(MAX_MSG_SIZE)
                .max_send_message_len(MAX_MSG_SIZE)
                .initial_reconnect_backoff(Duration::from_millis(100))
                .max_reconnect_backoff(Duration::from_secs(5))
                // A local socket needs no bandwidth probe (a PING with
                // each read, and its timer), and CRI calls have no retry
                // policy: without the two, gRPC's timer threads wake half
                // as often on an idle node.
                .http2_bdp_probe(false)
                .enable_retry(false)
                .connect(target)
        };
        let runtime = connect(&runtime_target);
        let image = if image_target == runtime_target {
            runtime.clone()
        } else {
            connect(&image_target)
        };
        Ok(RemoteRuntime {
            raw: grpcio::Client::new(runtime.clone()),
            runtime: RuntimeServiceClient::new(runtime),
            image: ImageServiceClient::new(image),
            timeout,
            observer,
            env,
        })
    }

    /// Runs one CRI call and tells the observer of it.
    fn timed<T>(&self, op: &str, call: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let result = call();
        self.observer
            .runtime_op(op, started.elapsed(), result.is_ok());
        result
    }

    /// runtimeRequestTimeout: the deadline of mutating calls.
    pub fn request_timeout(&self) -> Duration {
        self.timeout
    }

    fn opt(&self, timeout: Duration) -> CallOption {
        CallOption::default().timeout(timeout)
    }

    /// The gRPC environment the runtime's channels poll on. The device
    /// plugins, the plugin manager, the pod resources server and the CSI
    /// drivers share it: gRPC's C core has one epoll set for all
    /// environments, so a second environment's completion-queue thread
    /// only takes turns reading the runtime's socket, a context switch per
    /// CRI call. (The gRPC probes still make their own, on first use.)
    pub fn grpc_env(&self) -> &Arc<Environment> {
        &self.env
    }

    fn slow(&self) -> CallOption {
        self.opt(self.timeout)
    }

    fn fast(&self) -> CallOption {
        self.opt(FAST_CALL_TIMEOUT.min(self.timeout))
    }

    /// CRI RuntimeConfig: the runtime's cgroup driver (containerd 2.0 and
    /// CRI-O 1.28 on; older runtimes answer UNIMPLEMENTED).
    pub fn runtime_config(&self) -> Result<api::RuntimeConfigResponse> {
        self.timed("runtime_config", || {
            self.runtime
                .runtime_config(&api::RuntimeConfigRequest::default(), self.fast())
                .map_err(|e| CriError::from_grpc("RuntimeConfig", e))
        })
    }

    pub fn version(&self) -> Result<api::VersionResponse> {
        self.timed("version", || {
            let req = api::VersionRequest {
                version: "v1".into(),
                ..Default::default()
            };
            self.runtime
                .version(&req, self.fast())
                .map_err(|e| CriError::from_grpc("Version", e))
        })
    }

    pub fn status(&self) -> Result<api::StatusResponse> {
        self.timed("status", || {
            self.runtime
                .status(&api::StatusRequest::default(), self.fast())
                .map_err(|e| CriError::from_grpc("Status", e))
        })
    }

    /// `runtime_handler` is the RuntimeClass's handler; "" is the default.
    pub fn run_pod_sandbox(
        &self,
        config: api::PodSandboxConfig,
        runtime_handler: &str,
    ) -> Result<String> {
        self.timed("run_pod_sandbox", || {
            let req = api::RunPodSandboxRequest {
                config: Some(config).into(),
                runtime_handler: runtime_handler.to_string(),
                ..Default::default()
            };
            self.runtime
                .run_pod_sandbox(&req, self.slow())
                .map(|r| r.pod_sandbox_id)
                .map_err(|e| CriError::from_grpc("RunPodSandbox", e))
        })
    }

    pub fn stop_pod_sandbox(&self, id: &str) -> Result<()> {
        self.timed("stop_pod_sandbox", || {
            let req = api::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .stop_pod_sandbox(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("StopPodSandbox", e))
        })
    }

    /// StopPodSandbox without holding the caller (the CNI teardown can
    /// take a while); `done` runs on gRPC's completion-queue thread.
    pub fn stop_pod_sandbox_async(&self, id: &str, done: impl FnOnce(Result<()>) + Send + 'static) {
        let req = api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let observer = Arc::clone(&self.observer);
        match self.runtime.stop_pod_sandbox_async(&req, self.slow()) {
            Ok(rx) => self.runtime.spawn(async move {
                let r = rx.await.map(drop);
                observer.runtime_op("stop_pod_sandbox", started.elapsed(), r.is_ok());
                done(r.map_err(|e| CriError::from_grpc("StopPodSandbox", e)));
            }),
            Err(e) => done(Err(CriError::from_grpc("StopPodSandbox", e))),
        }
    }

    pub fn remove_pod_sandbox(&self, id: &str) -> Result<()> {
        self.timed("remove_pod_sandbox", || {
            let req = api::RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .remove_pod_sandbox(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("RemovePodSandbox", e))
        })
    }

    pub fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus> {
        self.timed("pod_sandbox_status", || {
            let req = api::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .pod_sandbox_status(&req, self.fast())
                .map(|mut r| r.status.take().unwrap_or_default())
                .map_err(|e| CriError::from_grpc("PodSandboxStatus", e))
        })
    }

    pub fn list_pod_sandbox(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>> {
        self.timed("list_pod_sandbox", || {
            let req = api::ListPodSandboxRequest {
                filter: filter.into(),
                ..Default::default()
            };
            self.runtime
                .list_pod_sandbox(&req, self.fast())
                .map(|r| r.items)
                .map_err(|e| CriError::from_grpc("ListPodSandbox", e))
        })
    }

    /// Every sandbox and every container, undecoded (PLEG's relist, every
    /// second; the caller decodes what changed). Both calls are in flight
    /// at once: one round trip and one wake-up of the caller, not two.
    /// Each call keeps its own deadline and metric.
    pub fn list_pod_sandbox_and_containers_raw(&self) -> Result<(RawListing, RawListing)> {
        let started = std::time::Instant::now();
        let sandboxes = self.raw.unary_call_async(
            &listing::LIST_POD_SANDBOX,
            &api::ListPodSandboxRequest::default(),
            self.fast(),
        );
        let containers = self.raw.unary_call_async(
            &listing::LIST_CONTAINERS,
            &api::ListContainersRequest::default(),
            self.fast(),
        );
        let observer = &self.observer;
        let (sandboxes, containers) = futures_executor::block_on(async {
            let s = match sandboxes {
                Ok(rx) => rx.await,
                Err(e) => Err(e),
            };
            observer.runtime_op("list_pod_sandbox", started.elapsed(), s.is_ok());
            let c = match containers {
                Ok(rx) => rx.await,
                Err(e) => Err(e),
            };
            observer.runtime_op("list_containers", started.elapsed(), c.is_ok());
            (s, c)
        });
        let sandboxes = sandboxes.map_err(|e| CriError::from_grpc("ListPodSandbox", e))?;
        let containers = containers.map_err(|e| CriError::from_grpc("ListContainers", e))?;
        Ok((sandboxes, containers))
    }

    pub fn create_container(
        &self,
        sandbox_id: &str,
        config: api::ContainerConfig,
        sandbox_config: api::PodSandboxConfig,
    ) -> Result<String> {
        self.timed("create_container", || {
            let req = api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                config: Some(config).into(),
                sandbox_config: Some(sandbox_config).into(),
                ..Default::default()
            };
            self.runtime
                .create_container(&req, self.slow())
                .map(|r| r.container_id)
                .map_err(|e| CriError::from_grpc("CreateContainer", e))
        })
    }

    pub fn start_container(&self, id: &str) -> Result<()> {
        self.timed("start_container", || {
            let req = api::StartContainerRequest {
                container_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .start_container(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("StartContainer", e))
        })
    }

    /// ExecSync without holding the caller: `done` gets the reply on
    /// gRPC's completion-queue thread (keep it short). For exec postStart
    /// hooks, which may run for minutes.
    pub fn exec_sync_async(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
        done: impl FnOnce(Result<api::ExecSyncResponse>) + Send + 'static,
    ) {
        let req = api::ExecSyncRequest {
            container_id: id.to_string(),
            cmd,
            timeout: timeout.as_secs() as i64,
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let opt = self.opt(self.timeout + timeout);
        let observer = Arc::clone(&self.observer);
        match self.runtime.exec_sync_async(&req, opt) {
            Ok(rx) => self.runtime.spawn(async move {
                let r = rx.await;
                observer.runtime_op("exec_sync", started.elapsed(), r.is_ok());
                done(r.map_err(|e| CriError::from_grpc("ExecSync", e)));
            }),
            Err(e) => done(Err(CriError::from_grpc("ExecSync", e))),
        }
    }

    /// Stops a container without holding the caller (upstream runs each
    /// stop in its own goroutine): an exec preStop hook first, when given,
    /// bounded by `grace`; then StopContainer with what is left of the
    /// grace period, at least `min_grace`. Both calls are async and complete
    /// on gRPC's completion-queue thread, so any number of stops overlap on
    /// a fixed thread count. `done` runs on that thread: keep it short.
    pub fn stop_container_async(
        &self,
        id: &str,
        pre_stop: Option<Vec<String>>,
        grace: Duration,
        min_grace: Duration,
        done: impl FnOnce(AsyncStop) + Send + 'static,
    ) {
        let client = self.runtime.clone();
        let timeout = self.timeout;
        let observer = Arc::clone(&self.observer);
        let id = id.to_string();
        let fut = async move {
            let started = std::time::Instant::now();
            let mut hook = None;
            if let Some(cmd) = pre_stop {
                let req = api::ExecSyncRequest {
                    container_id: id.clone(),
                    cmd,
                    timeout: grace.as_secs() as i64,
                    ..Default::default()
                };
                let opt = CallOption::default().timeout(timeout + grace);
                let r = match client.exec_sync_async(&req, opt) {
                    Ok(rx) => rx.await,
                    Err(e) => Err(e),
                };
                observer.runtime_op("exec_sync", started.elapsed(), r.is_ok());
                hook = Some(r.map_err(|e| CriError::from_grpc("ExecSync", e)));
            }
            let left = grace.saturating_sub(started.elapsed()).max(min_grace);
            let req = api::StopContainerRequest {
                container_id: id,
                timeout: left.as_secs() as i64,
                ..Default::default()
            };
            let stop_started = std::time::Instant::now();
            let opt = CallOption::default().timeout(timeout + left);
            let r = match client.stop_container_async(&req, opt) {
                Ok(rx) => rx.await.map(drop),
                Err(e) => Err(e),
            };
            observer.runtime_op("stop_container", stop_started.elapsed(), r.is_ok());
            done(AsyncStop {
                hook,
                hook_took: started.elapsed().saturating_sub(stop_started.elapsed()),
                stopped: r.map_err(|e| CriError::from_grpc("StopContainer", e)),
            });
        };
        self.runtime.spawn(fut);
    }

    pub fn remove_container(&self, id: &str) -> Result<()> {
        self.timed("remove_container", || {
            let req = api::RemoveContainerRequest {
                container_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .remove_container(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("RemoveContainer", e))
        })
    }

    /// Changes a running container's cgroup settings in place (upstream
    /// UpdateContainerResources); the CPU manager moves containers between
    /// CPU sets with it.
    pub fn update_container_resources(
        &self,
        id: &str,
        resources: api::LinuxContainerResources,
    ) -> Result<()> {
        self.timed("update_container_resources", || {
            let req = api::UpdateContainerResourcesRequest {
                container_id: id.to_string(),
                linux: Some(resources).into(),
                ..Default::default()
            };
            self.runtime
                .update_container_resources(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("UpdateContainerResources", e))
        })
    }

    pub fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>> {
        self.timed("list_containers", || {
            let req = api::ListContainersRequest {
                filter: filter.into(),
                ..Default::default()
            };
            self.runtime
                .list_containers(&req, self.fast())
                .map(|r| r.containers)
                .map_err(|e| CriError::from_grpc("ListContainers", e))
        })
    }

    pub fn container_status(&self, id: &str) -> Result<api::ContainerStatus> {
        self.timed("container_status", || {
            let req = api::ContainerStatusRequest {
                container_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .container_status(&req, self.fast())
                .map(|mut r| r.status.take().unwrap_or_default())
                .map_err(|e| CriError::from_grpc("ContainerStatus", e))
        })
    }

    /// Runs `cmd` in a container and collects its output. `timeout` is the
    /// command's own limit; the call deadline adds the request timeout so the
    /// runtime has time to clean up, as upstream does.
    pub fn exec_sync(
        &self,
        id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<api::ExecSyncResponse> {
        self.timed("exec_sync", || {
            let req = api::ExecSyncRequest {
                container_id: id.to_string(),
                cmd,
                timeout: timeout.as_secs() as i64,
                ..Default::default()
            };
            self.runtime
                .exec_sync(&req, self.opt(self.timeout + timeout))
                .map_err(|e| CriError::from_grpc("ExecSync", e))
        })
    }

    pub fn image_status(&self, image: &str) -> Result<Option<api::Image>> {
        self.timed("image_status", || {
            let req = api::ImageStatusRequest {
                image: Some(image_spec(image)).into(),
                ..Default::default()
            };
            self.image
                .image_status(&req, self.fast())
                .map(|mut r| r.image.take())
                .map_err(|e| CriError::from_grpc("ImageStatus", e))
        })
    }

    /// Pulls `image` and returns the image reference the runtime resolved.
    /// `auth` carries registry credentials: never log the request.
    pub fn pull_image(
        &self,
        image: &str,
        auth: Option<api::AuthConfig>,
        sandbox_config: Option<api::PodSandboxConfig>,
    ) -> Result<String> {
        self.timed("pull_image", || {
            let req = api::PullImageRequest {
                image: Some(image_spec(image)).into(),
                auth: auth.into(),
                sandbox_config: sandbox_config.into(),
                ..Default::default()
            };
            self.image
                .pull_image(&req, self.opt(self.timeout.max(PULL_TIMEOUT_FLOOR)))
                .map(|r| r.image_ref)
                .map_err(|e| CriError::from_grpc("PullImage", e))
        })
    }

    pub fn list_images(&self) -> Result<Vec<api::Image>> {
        self.timed("list_images", || {
            self.image
                .list_images(&api::ListImagesRequest::default(), self.fast())
                .map(|r| r.images)
                .map_err(|e| CriError::from_grpc("ListImages", e))
        })
    }

    pub fn remove_image(&self, image: &str) -> Result<()> {
        self.timed("remove_image", || {
            let req = api::RemoveImageRequest {
                image: Some(image_spec(image)).into(),
                ..Default::default()
            };
            self.image
                .remove_image(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("RemoveImage", e))
        })
    }

    /// Prepares a streaming exec and returns the runtime's stream-server URL
    /// (the kubelet then proxies the client's upgraded connection there).
    pub fn exec(&self, req: api::ExecRequest) -> Result<String> {
        self.timed("exec", || {
            self.runtime
                .exec(&req, self.slow())
                .map(|r| r.url)
                .map_err(|e| CriError::from_grpc("Exec", e))
        })
    }

    /// Prepares a streaming attach; returns the stream-server URL.
    pub fn attach(&self, req: api::AttachRequest) -> Result<String> {
        self.timed("attach", || {
            self.runtime
                .attach(&req, self.slow())
                .map(|r| r.url)
                .map_err(|e| CriError::from_grpc("Attach", e))
        })
    }

    /// Prepares a port forward into a sandbox; returns the stream-server URL.
    pub fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String> {
        self.timed("port_forward", || {
            let req = api::PortForwardRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                port: ports,
                ..Default::default()
            };
            self.runtime
                .port_forward(&req, self.slow())
                .map(|r| r.url)
                .map_err(|e| CriError::from_grpc("PortForward", e))
        })
    }

    pub fn list_container_stats(
        &self,
        filter: Option<api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>> {
        self.timed("list_container_stats", || {
            let req = api::ListContainerStatsRequest {
                filter: filter.into(),
                ..Default::default()
            };
            self.runtime
                .list_container_stats(&req, self.slow())
                .map(|r| r.stats)
                .map_err(|e| CriError::from_grpc("ListContainerStats", e))
        })
    }

    pub fn list_pod_sandbox_stats(
        &self,
        filter: Option<api::PodSandboxStatsFilter>,
    ) -> Result<Vec<api::PodSandboxStats>> {
        self.timed("list_pod_sandbox_stats", || {
            let req = api::ListPodSandboxStatsRequest {
                filter: filter.into(),
                ..Default::default()
            };
            self.runtime
                .list_pod_sandbox_stats(&req, self.slow())
                .map(|r| r.stats)
                .map_err(|e| CriError::from_grpc("ListPodSandboxStats", e))
        })
    }

    /// The image (and, when split, container) filesystems' usage.
    pub fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse> {
        self.timed("image_fs_info", || {
            self.image
                .image_fs_info(&api::ImageFsInfoRequest::default(), self.fast())
                .map_err(|e| CriError::from_grpc("ImageFsInfo", e))
        })
    }

    /// Asks the runtime to reopen a container's log file (after rotation).
    pub fn reopen_container_log(&self, id: &str) -> Result<()> {
        self.timed("reopen_container_log", || {
            let req = api::ReopenContainerLogRequest {
                container_id: id.to_string(),
                ..Default::default()
            };
            self.runtime
                .reopen_container_log(&req, self.slow())
                .map(drop)
                .map_err(|e| CriError::from_grpc("ReopenContainerLog", e))
        })
    }
}

fn image_spec(image: &str) -> api::ImageSpec {
    api::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// `unix:///run/containerd/containerd.sock` or a bare absolute path (which
/// upstream still accepts) -> the gRPC target `unix:/path`.
fn grpc_target(endpoint: &str) -> std::result::Result<String, EndpointError> {
    let path = if let Some(rest) = endpoint.strip_prefix("unix://") {
        rest
    } else if endpoint.starts_with('/') {
        log::warn!("CRI endpoint {endpoint:?} has no scheme; assuming unix://");
        endpoint
    } else {
        return Err(EndpointError::Scheme(endpoint.to_string()));
    };
    if !path.starts_with('/') {
        return Err(EndpointError::Relative(endpoint.to_string()));
    }
    Ok(format!("unix:{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_to_target() {
        assert_eq!(
            grpc_target("unix:///run/containerd/containerd.sock").unwrap(),
            "unix:/run/containerd/containerd.sock"
        );
        assert_eq!(
            grpc_target("/run/crio/crio.sock").unwrap(),
            "unix:/run/crio/crio.sock"
        );
        assert!(grpc_target("tcp://1.2.3.4:5").is_err());
        assert!(grpc_target("unix://relative.sock").is_err());
    }
}
