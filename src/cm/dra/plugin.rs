//! The DRA drivers registered on this node (upstream `cm/dra/plugin`):
//! the plugin manager's handler of type "DRAPlugin", and the calls made to
//! a driver, each a future with upstream's 45 s deadline on the plugins'
//! completion-queue thread.
//!
//! A driver names the gRPC services it serves in its registration's
//! versions ("v1.DRAPlugin", "v1beta1.DRAPlugin"); the newest one both
//! sides speak is used. The two have the same messages, so one set of
//! generated messages serves both under their own method names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::util::grpc::answer;
use grpcio::{CallOption, ChannelBuilder, Environment, Marshaller, Method, MethodType};
use rkubelet_util::lock;

use crate::cri::dra::v1::api;
use crate::pluginmanager::{PluginHandler, PluginManagerError};

/// upstream defaultClientCallTimeout: half the kubelet's retry period.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(45);

/// The services rkubelet speaks, newest first (upstream's v1.34 list).
const SERVICES: [Service; 2] = [Service::V1, Service::V1beta1];

/// A DRA gRPC service version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    V1,
    V1beta1,
}

impl Service {
    /// The name drivers register it by (upstream DRAPluginService).
    pub fn name(self) -> &'static str {
        match self {
            Service::V1 => "v1.DRAPlugin",
            Service::V1beta1 => "v1beta1.DRAPlugin",
        }
    }

    fn prepare(
        self,
    ) -> &'static Method<api::NodePrepareResourcesRequest, api::NodePrepareResourcesResponse> {
        match self {
            Service::V1 => &V1_PREPARE,
            Service::V1beta1 => &V1BETA1_PREPARE,
        }
    }

    fn unprepare(
        self,
    ) -> &'static Method<api::NodeUnprepareResourcesRequest, api::NodeUnprepareResourcesResponse>
    {
        match self {
            Service::V1 => &V1_UNPREPARE,
            Service::V1beta1 => &V1BETA1_UNPREPARE,
        }
    }
}

macro_rules! unary {
    ($name:expr) => {
        Method {
            ty: MethodType::Unary,
            name: $name,
            req_mar: Marshaller {
                ser: grpcio::pb_ser,
                de: grpcio::pb_de,
            },
            resp_mar: Marshaller {
                ser: grpcio::pb_ser,
                de: grpcio::pb_de,
            },
        }
    };
}

pub(super) const V1_PREPARE: Method<
    api::NodePrepareResourcesRequest,
    api::NodePrepareResourcesResponse,
> = unary!("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources");
pub(super) const V1_UNPREPARE: Method<
    api::NodeUnprepareResourcesRequest,
    api::NodeUnprepareResourcesResponse,
> = unary!("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources");
pub(super) const V1BETA1_PREPARE: Method<
    api::NodePrepareResourcesRequest,
    api::NodePrepareResourcesResponse,
> = unary!("/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources");
pub(super) const V1BETA1_UNPREPARE: Method<
    api::NodeUnprepareResourcesRequest,
    api::NodeUnprepareResourcesResponse,
> = unary!("/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources");

/// The newest service in `versions` that rkubelet speaks (upstream
/// validateSupportedServices).
pub(super) fn choose_service(versions: &[String]) -> Result<Service, String> {
    if versions.is_empty() {
        return Err("empty list of supported gRPC services (aka supported versions)".into());
    }
    SERVICES
        .into_iter()
        .find(|s| versions.iter().any(|v| v == s.name()))
        .ok_or_else(|| {
            format!(
                "none of the supported gRPC services {versions:?} is one this kubelet speaks ({}, {})",
                Service::V1.name(),
                Service::V1beta1.name()
            )
        })
}

/// One registered driver: its endpoint and the service chosen for it.
pub(crate) struct Plugin {
    pub driver: String,
    pub endpoint: String,
    pub service: Service,
    client: grpcio::Client,
}

impl Plugin {
    fn dial(env: &Arc<Environment>, driver: &str, endpoint: &str, service: Service) -> Plugin {
        let channel = ChannelBuilder::new(Arc::clone(env))
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(5))
            .connect(&format!("unix:{endpoint}"));
        Plugin {
            driver: driver.to_string(),
            endpoint: endpoint.to_string(),
            service,
            client: grpcio::Client::new(channel),
        }
    }

    /// Runs `f` on the completion-queue thread.
    pub fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.client.spawn(f);
    }

    pub async fn prepare(
        &self,
        claims: Vec<api::Claim>,
    ) -> Result<api::NodePrepareResourcesResponse, String> {
        let req = api::NodePrepareResourcesRequest {
            claims,
            ..Default::default()
        };
        let opt = CallOption::default().timeout(CALL_TIMEOUT);
        let call = self
            .client
            .unary_call_async(self.service.prepare(), &req, opt);
        answer("NodePrepareResources", call).await
    }

    pub async fn unprepare(
        &self,
        claims: Vec<api::Claim>,
    ) -> Result<api::NodeUnprepareResourcesResponse, String> {
        let req = api::NodeUnprepareResourcesRequest {
            claims,
            ..Default::default()
        };
        let opt = CallOption::default().timeout(CALL_TIMEOUT);
        let call = self
            .client
            .unary_call_async(self.service.unprepare(), &req, opt);
        answer("NodeUnprepareResources", call).await
    }
}

/// The registered drivers by name.
#[derive(Default)]
pub(crate) struct Store {
    plugins: Mutex<HashMap<String, Arc<Plugin>>>,
}

impl Store {
    /// The driver's plugin (upstream's "not found" words).
    pub fn get(&self, driver: &str) -> Result<Arc<Plugin>, String> {
        lock(&self.plugins).get(driver).cloned().ok_or_else(|| {
            format!("plugin name {driver} not found in the list of registered DRA plugins")
        })
    }
}

/// The plugin manager's handler of "DRAPlugin" (upstream
/// RegistrationHandler); runs on the plugin-manager thread.
pub struct RegistrationHandler {
    pub(super) env: Arc<Environment>,
    pub(super) store: Arc<Store>,
    pub(super) wiper: Arc<super::SliceWiper>,
}

impl PluginHandler for RegistrationHandler {
    fn validate_plugin(
        &self,
        name: &str,
        _: &str,
        versions: &[String],
        _: bool,
    ) -> Result<(), PluginManagerError> {
        choose_service(versions).map(drop).map_err(|e| {
            PluginManagerError::Handler(format!("invalid versions of plugin {name}: {e}"))
        })
    }

    fn register_plugin(
        &self,
        name: &str,
        endpoint: &str,
        versions: &[String],
    ) -> Result<(), PluginManagerError> {
        let service = choose_service(versions).map_err(|e| {
            PluginManagerError::Handler(format!("version check of plugin {name} failed: {e}"))
        })?;
        let plugin = Plugin::dial(&self.env, name, endpoint, service);
        log::info!(
            "DRA plugin {name} registered at {endpoint}, speaking {}",
            service.name()
        );
        lock(&self.store.plugins).insert(name.to_string(), Arc::new(plugin));
        self.wiper.driver_back(name);
        Ok(())
    }

    /// A newer registration of the same driver may have replaced this one.
    fn deregister_plugin(&self, name: &str, endpoint: &str) {
        let mut plugins = lock(&self.store.plugins);
        if plugins.get(name).is_some_and(|p| p.endpoint == endpoint) {
            plugins.remove(name);
            log::info!("DRA plugin {name} deregistered: its socket at {endpoint} went");
            self.wiper.driver_gone(name);
        }
    }
}
