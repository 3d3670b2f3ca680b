//! One device plugin as the device manager sees it (upstream
//! `devicemanager/endpoint.go`): a channel to its socket, the options it
//! registered with, and its calls, each with a deadline. Nothing here
//! blocks a thread: `ListAndWatch` and the calls made for pods complete on
//! the plugins' completion-queue thread.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::util::grpc::answer;
use futures_util::StreamExt;
use grpcio::{CallOption, ChannelBuilder, Environment};

use crate::cri::deviceplugin::v1beta1::api as pluginapi;
use crate::cri::deviceplugin::v1beta1::api_grpc::DevicePluginClient;

/// Deadline of `GetPreferredAllocation` and `Allocate`: upstream sets
/// none; long enough for a plugin that resets hardware.
pub(super) const ALLOCATE_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of `PreStartContainer` (upstream
/// KubeletPreStartContainerRPCTimeoutInSecs).
pub(super) const PRE_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest message accepted from a plugin (a device list of thousands).
const MAX_MSG_SIZE: i32 = 16 * 1024 * 1024;

pub(super) struct Endpoint {
    resource: String,
    socket: std::path::PathBuf,
    client: DevicePluginClient,
    options: pluginapi::DevicePluginOptions,
}

impl Endpoint {
    /// A channel to `socket`; connecting happens with the first call, so
    /// a plugin that is not there fails its `ListAndWatch` at once.
    pub fn dial(
        env: &Arc<Environment>,
        resource: &str,
        socket: &Path,
        options: pluginapi::DevicePluginOptions,
    ) -> Result<Endpoint, String> {
        let path = socket
            .to_str()
            .ok_or_else(|| format!("socket path {} is not UTF-8", socket.display()))?;
        let channel = ChannelBuilder::new(Arc::clone(env))
            .max_receive_message_len(MAX_MSG_SIZE)
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(5))
            .connect(&format!("unix:{path}"));
        Ok(Endpoint {
            resource: resource.to_string(),
            socket: socket.to_path_buf(),
            client: DevicePluginClient::new(channel),
            options,
        })
    }

    pub fn resource(&self) -> &str {
        &self.resource
    }

    pub fn options(&self) -> &pluginapi::DevicePluginOptions {
        &self.options
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The plugin's options, asked with a deadline (a plugin that came
    /// through the plugin watcher did not send them).
    pub fn ask_options(&mut self, timeout: Duration) -> Result<(), String> {
        let opt = CallOption::default().timeout(timeout);
        self.options = self
            .client
            .get_device_plugin_options(&pluginapi::Empty::new(), opt)
            .map_err(|e| format!("GetDevicePluginOptions: {e}"))?;
        Ok(())
    }

    /// Follows `ListAndWatch`: `on_update` gets each device list, then
    /// once the error or end that closes the stream.
    pub fn list_and_watch<F>(&self, mut on_update: F) -> Result<(), String>
    where
        F: FnMut(Result<Vec<pluginapi::Device>, String>) + Send + 'static,
    {
        let mut stream = self
            .client
            .list_and_watch(&pluginapi::Empty::new(), CallOption::default())
            .map_err(|e| format!("ListAndWatch: {e}"))?;
        self.client.spawn(async move {
            loop {
                match stream.next().await {
                    Some(Ok(resp)) => on_update(Ok(resp.devices)),
                    Some(Err(e)) => return on_update(Err(format!("ListAndWatch: {e}"))),
                    None => {
                        return on_update(Err("ListAndWatch: the plugin ended the stream".into()))
                    }
                }
            }
        });
        Ok(())
    }

    /// Runs `f` on the completion-queue thread.
    pub fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.client.spawn(f);
    }

    pub async fn preferred(
        &self,
        req: pluginapi::PreferredAllocationRequest,
    ) -> Result<pluginapi::PreferredAllocationResponse, String> {
        let opt = CallOption::default().timeout(ALLOCATE_TIMEOUT);
        let call = self.client.get_preferred_allocation_async(&req, opt);
        answer("GetPreferredAllocation", call).await
    }

    pub async fn allocate(
        &self,
        req: pluginapi::AllocateRequest,
    ) -> Result<pluginapi::AllocateResponse, String> {
        let opt = CallOption::default().timeout(ALLOCATE_TIMEOUT);
        answer("Allocate", self.client.allocate_async(&req, opt)).await
    }

    pub async fn pre_start(&self, ids: Vec<String>) -> Result<(), String> {
        let req = pluginapi::PreStartContainerRequest {
            devices_ids: ids,
            ..Default::default()
        };
        let opt = CallOption::default().timeout(PRE_START_TIMEOUT);
        let call = self.client.pre_start_container_async(&req, opt);
        answer("PreStartContainer", call).await.map(|_| ())
    }
}
