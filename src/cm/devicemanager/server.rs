//! The `Registration` service on `kubelet.sock` (upstream
//! devicemanager's server): validates a plugin's request and hands it to
//! the manager thread. The handler runs on the plugins' completion-queue
//! thread and never blocks: a full queue refuses, and the plugin retries.

use std::path::Path;
use std::sync::Arc;

use grpcio::{Environment, RpcStatus, RpcStatusCode, Server, ServiceBuilder};

use super::{DeviceManagerError, Registrations, SUPPORTED_VERSIONS};
use crate::cri::deviceplugin::v1beta1::api as pluginapi;
use crate::cri::deviceplugin::v1beta1::api_grpc::METHOD_REGISTRATION_REGISTER;
use crate::nodestatus::setters::is_extended_resource_name;
use crate::util::grpc::{reply, serve_unix};

/// Serves `Registration` on `socket` until the returned server is dropped.
pub(super) fn serve(
    env: &Arc<Environment>,
    socket: &Path,
    registrations: Registrations,
) -> Result<Server, DeviceManagerError> {
    let fail = |message: String| DeviceManagerError::Serve {
        path: socket.to_path_buf(),
        message,
    };
    let service = ServiceBuilder::new()
        .add_unary_handler(&METHOD_REGISTRATION_REGISTER, move |ctx, req, sink| {
            let answer = register(&registrations, req).map(|()| pluginapi::Empty::new());
            reply(ctx, sink, answer);
        })
        .build();
    let server = serve_unix(env, socket, service).map_err(fail)?;
    log::info!("device plugin registration served on {}", socket.display());
    Ok(server)
}

/// Upstream's checks (Register and validateRegisterRequest): the version,
/// an extended resource name, an endpoint; then the manager's queue.
fn register(queue: &Registrations, r: pluginapi::RegisterRequest) -> Result<(), RpcStatus> {
    log::info!(
        "device plugin {} asks to register (version {}, endpoint {:?})",
        r.resource_name,
        r.version,
        r.endpoint
    );
    validate(&r).map_err(|msg| {
        log::warn!(
            "device plugin {}: registration refused: {msg}",
            r.resource_name
        );
        RpcStatus::with_message(RpcStatusCode::UNKNOWN, msg)
    })?;
    queue.try_send(r).map_err(|_| {
        RpcStatus::with_message(
            RpcStatusCode::RESOURCE_EXHAUSTED,
            "too many device plugins registering at once; try again".into(),
        )
    })
}

/// A plugin's resource must be an extended resource (upstream
/// errInvalidResourceName), however it registers.
pub(super) fn check_resource_name(name: &str) -> Result<(), String> {
    if is_extended_resource_name(name) {
        return Ok(());
    }
    Err(format!("the ResourceName {name:?} is invalid"))
}

pub(super) fn validate(r: &pluginapi::RegisterRequest) -> Result<(), String> {
    if !SUPPORTED_VERSIONS.contains(&r.version.as_str()) {
        return Err(format!(
            "requested API version {:?} is not supported by kubelet. Supported versions are {:?}",
            r.version, SUPPORTED_VERSIONS
        ));
    }
    check_resource_name(&r.resource_name)?;
    let endpoint = Path::new(&r.endpoint);
    if r.endpoint.is_empty() || endpoint.is_absolute() || endpoint.components().count() != 1 {
        return Err(format!(
            "the endpoint {:?} is not a socket name in the device plugin directory",
            r.endpoint
        ));
    }
    Ok(())
}
