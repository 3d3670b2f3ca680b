//! The calls the kubelet makes on a CSI driver's Node service (upstream
//! `csi_client.go`). Registration's `NodeGetInfo` blocks the plugin
//! manager's thread for at most [`GET_INFO_TIMEOUT`]; the volume calls are
//! futures on the plugins' completion-queue thread, so a hung driver holds
//! only the volumes that use it, each for at most [`CSI_TIMEOUT`].

use std::sync::Arc;
use std::time::Duration;

use grpcio::{CallOption, ChannelBuilder, Environment};

use crate::cri::csi::v1::csi;
use crate::cri::csi::v1::csi_grpc::NodeClient;

/// Upstream's csiTimeout: the deadline of stage, publish and their undoing.
pub const CSI_TIMEOUT: Duration = Duration::from_secs(120);
/// NodeGetInfo and NodeGetCapabilities at registration. Upstream allows
/// 2 min; here the plugin manager's one thread waits, so a hung driver
/// must not hold the other plugins' registrations that long.
pub const GET_INFO_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection to one driver's endpoint; cheap to clone.
#[derive(Clone)]
pub struct NodeConn {
    node: NodeClient,
}

/// The driver's node capabilities the kubelet acts on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeCaps {
    pub stage_unstage: bool,
    pub volume_stats: bool,
    pub expand: bool,
}

impl NodeConn {
    /// `endpoint` as the registration names it: a path, with or without
    /// `unix://`. Connecting happens at the first call, bounded by its
    /// deadline.
    pub fn dial(env: &Arc<Environment>, endpoint: &str) -> NodeConn {
        let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        let channel = ChannelBuilder::new(Arc::clone(env))
            .initial_reconnect_backoff(Duration::from_millis(100))
            .max_reconnect_backoff(Duration::from_secs(5))
            .connect(&format!("unix:{path}"));
        NodeConn {
            node: NodeClient::new(channel),
        }
    }

    /// Runs `f` on the completion-queue thread.
    pub fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(&self, f: F) {
        self.node.spawn(f);
    }

    pub fn get_info(&self) -> Result<csi::NodeGetInfoResponse, String> {
        let opt = CallOption::default().timeout(GET_INFO_TIMEOUT);
        self.node
            .node_get_info(&csi::NodeGetInfoRequest::new(), opt)
            .map_err(|e| format!("NodeGetInfo: {e}"))
    }

    pub fn capabilities(&self) -> Result<NodeCaps, String> {
        use csi::node_service_capability::rpc::Type;
        let opt = CallOption::default().timeout(GET_INFO_TIMEOUT);
        let resp = self
            .node
            .node_get_capabilities(&csi::NodeGetCapabilitiesRequest::new(), opt)
            .map_err(|e| format!("NodeGetCapabilities: {e}"))?;
        let mut caps = NodeCaps::default();
        for c in &resp.capabilities {
            match c.rpc().type_.enum_value() {
                Ok(Type::STAGE_UNSTAGE_VOLUME) => caps.stage_unstage = true,
                Ok(Type::GET_VOLUME_STATS) => caps.volume_stats = true,
                Ok(Type::EXPAND_VOLUME) => caps.expand = true,
                _ => {}
            }
        }
        Ok(caps)
    }

    pub async fn stage(&self, req: csi::NodeStageVolumeRequest) -> Result<(), String> {
        unary(
            "NodeStageVolume",
            self.node.node_stage_volume_async(&req, opt()),
        )
        .await
    }

    pub async fn publish(&self, req: csi::NodePublishVolumeRequest) -> Result<(), String> {
        unary(
            "NodePublishVolume",
            self.node.node_publish_volume_async(&req, opt()),
        )
        .await
    }

    pub async fn unpublish(&self, volume_id: String, target_path: String) -> Result<(), String> {
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id,
            target_path,
            ..Default::default()
        };
        let call = self.node.node_unpublish_volume_async(&req, opt());
        unary("NodeUnpublishVolume", call).await
    }

    pub async fn unstage(&self, volume_id: String, staging_path: String) -> Result<(), String> {
        let req = csi::NodeUnstageVolumeRequest {
            volume_id,
            staging_target_path: staging_path,
            ..Default::default()
        };
        let call = self.node.node_unstage_volume_async(&req, opt());
        unary("NodeUnstageVolume", call).await
    }

    /// NodeExpandVolume of a published volume to `bytes`.
    pub async fn expand(
        &self,
        volume_id: String,
        volume_path: String,
        staging_target_path: String,
        bytes: i64,
    ) -> Result<(), String> {
        let req = csi::NodeExpandVolumeRequest {
            volume_id,
            volume_path,
            staging_target_path,
            capacity_range: protobuf::MessageField::some(csi::CapacityRange {
                required_bytes: bytes,
                ..Default::default()
            }),
            ..Default::default()
        };
        unary(
            "NodeExpandVolume",
            self.node.node_expand_volume_async(&req, opt()),
        )
        .await
    }

    pub async fn volume_stats(
        &self,
        volume_id: String,
        volume_path: String,
    ) -> Result<csi::NodeGetVolumeStatsResponse, String> {
        let req = csi::NodeGetVolumeStatsRequest {
            volume_id,
            volume_path,
            ..Default::default()
        };
        let receiver = self
            .node
            .node_get_volume_stats_async(&req, opt())
            .map_err(|e| format!("NodeGetVolumeStats: {e}"))?;
        receiver
            .await
            .map_err(|e| format!("NodeGetVolumeStats: {e}"))
    }
}

fn opt() -> CallOption {
    CallOption::default().timeout(CSI_TIMEOUT)
}

/// The outcome of a unary call whose answer carries nothing the kubelet
/// reads, named by the call.
async fn unary<T: Unpin>(
    call: &'static str,
    started: grpcio::Result<grpcio::ClientUnaryReceiver<T>>,
) -> Result<(), String> {
    crate::util::grpc::answer(call, started).await.map(drop)
}

/// A mount capability for `fs_type` and the PV's first access mode
/// (upstream `csiMounter` sends the same).
pub fn mount_capability(
    fs_type: &str,
    mount_flags: Vec<String>,
    mode: &str,
) -> csi::VolumeCapability {
    use csi::volume_capability::{Access_type, MountVolume};
    capability(
        Access_type::Mount(MountVolume {
            fs_type: fs_type.to_string(),
            mount_flags,
            ..Default::default()
        }),
        mode,
    )
}

/// A raw block volume's capability (upstream csiBlockMapper).
pub fn block_capability(mode: &str) -> csi::VolumeCapability {
    use csi::volume_capability::{Access_type, BlockVolume};
    capability(Access_type::Block(BlockVolume::default()), mode)
}

fn capability(access: csi::volume_capability::Access_type, mode: &str) -> csi::VolumeCapability {
    use csi::volume_capability::access_mode::Mode;
    use csi::volume_capability::AccessMode;
    let mode = match mode {
        "ReadOnlyMany" => Mode::MULTI_NODE_READER_ONLY,
        "ReadWriteMany" => Mode::MULTI_NODE_MULTI_WRITER,
        _ => Mode::SINGLE_NODE_WRITER,
    };
    csi::VolumeCapability {
        access_type: Some(access),
        access_mode: protobuf::MessageField::some(AccessMode {
            mode: mode.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}
