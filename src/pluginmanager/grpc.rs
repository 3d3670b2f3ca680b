//! The registration calls over gRPC (pluginregistration v1), each with
//! its deadline, on the plugins' gRPC environment.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, Environment};

use super::{PluginClient, PluginDialer, PluginInfo, PluginManagerError};
use crate::cri::pluginregistration::v1::api;
use crate::cri::pluginregistration::v1::api_grpc::RegistrationClient;

/// Dials plugin sockets on one gRPC environment (the device manager's, so
/// no completion-queue thread is added for the plugin manager).
pub(crate) struct GrpcDialer {
    env: Arc<Environment>,
}

impl GrpcDialer {
    pub fn new(env: Arc<Environment>) -> Self {
        GrpcDialer { env }
    }
}

struct GrpcClient {
    socket: String,
    client: RegistrationClient,
}

impl PluginDialer for GrpcDialer {
    /// Connecting happens with the first call, whose deadline bounds it: a
    /// socket nobody answers on, or that does not speak gRPC, fails GetInfo
    /// at its deadline.
    fn dial(
        &self,
        socket: &Path,
        _: Duration,
    ) -> Result<Box<dyn PluginClient>, PluginManagerError> {
        let path = socket.to_str().ok_or_else(|| PluginManagerError::Dial {
            socket: socket.to_path_buf(),
            message: "the path is not UTF-8".into(),
        })?;
        let channel = ChannelBuilder::new(Arc::clone(&self.env))
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(5))
            .connect(&format!("unix:{path}"));
        Ok(Box::new(GrpcClient {
            socket: path.to_string(),
            client: RegistrationClient::new(channel),
        }))
    }
}

impl GrpcClient {
    fn rpc_error(&self, call: &'static str, e: grpcio::Error) -> PluginManagerError {
        PluginManagerError::Rpc {
            call,
            socket: self.socket.clone().into(),
            message: e.to_string(),
        }
    }
}

impl PluginClient for GrpcClient {
    fn get_info(&self, timeout: Duration) -> Result<PluginInfo, PluginManagerError> {
        let opt = CallOption::default().timeout(timeout);
        let info = self
            .client
            .get_info(&api::InfoRequest::new(), opt)
            .map_err(|e| self.rpc_error("GetInfo", e))?;
        Ok(PluginInfo {
            plugin_type: info.type_,
            name: info.name,
            endpoint: info.endpoint,
            supported_versions: info.supported_versions,
        })
    }

    fn notify_registration_status(
        &self,
        registered: bool,
        error: &str,
        timeout: Duration,
    ) -> Result<(), PluginManagerError> {
        let req = api::RegistrationStatus {
            plugin_registered: registered,
            error: error.to_string(),
            ..Default::default()
        };
        let opt = CallOption::default().timeout(timeout);
        self.client
            .notify_registration_status(&req, opt)
            .map(|_| ())
            .map_err(|e| self.rpc_error("NotifyRegistrationStatus", e))
    }
}
