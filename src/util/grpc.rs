//! The kubelet's own gRPC servers (device plugin registration, pod
//! resources): one way to serve a service on a unix socket, and to answer
//! a unary call from its handler, which runs on the completion-queue
//! thread and must not block. And, for the plugins it calls (device
//! plugins, CSI and DRA drivers), the answer of a unary call it started.

use std::path::Path;
use std::sync::Arc;

use grpcio::{
    Environment, RpcContext, RpcStatus, Server, ServerBuilder, ServerCredentials, Service,
    UnarySink,
};

/// Calls a server has waiting for requests at once (each holds its call
/// structures in memory): its callers are few and its answers quick, and
/// another slot is posted as each call is taken.
const REQUEST_SLOTS: usize = 2;
/// The longest path a unix socket can be bound at (sun_path, less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Serves `service` on the unix socket `socket` until the returned server
/// is dropped; the error is why not, for the caller to name the socket.
pub fn serve_unix(
    env: &Arc<Environment>,
    socket: &Path,
    service: Service,
) -> Result<Server, String> {
    let path = socket.to_str().ok_or("the path is not UTF-8")?;
    // sun_path holds 108 bytes with its NUL; gRPC would only say BindFail.
    if path.len() > MAX_SOCKET_PATH {
        return Err(format!(
            "the path is {} bytes long and a unix socket's may be at most {MAX_SOCKET_PATH}: use a shorter --root-dir",
            path.len()
        ));
    }
    let mut server = ServerBuilder::new(Arc::clone(env))
        .register_service(service)
        .requests_slot_per_cq(REQUEST_SLOTS)
        .build()
        .map_err(|e| e.to_string())?;
    server
        .add_listening_port(format!("unix:{path}"), ServerCredentials::insecure())
        .map_err(|e| e.to_string())?;
    server.start();
    Ok(server)
}

/// Answers a unary call with `result`; the answer is sent on the
/// completion queue, so the handler returns at once.
pub fn reply<T: Send + 'static>(
    ctx: RpcContext<'_>,
    sink: UnarySink<T>,
    result: Result<T, RpcStatus>,
) {
    ctx.spawn(async move {
        let sent = match result {
            Ok(resp) => sink.success(resp).await,
            Err(status) => sink.fail(status).await,
        };
        if let Err(e) = sent {
            log::debug!("gRPC server: answering: {e}");
        }
    });
}

/// The answer of a unary call started with `started` (its `*_async`
/// form), awaited on the completion-queue thread; either failure is named
/// by the call (`Allocate: ...`).
pub async fn answer<T: Unpin>(
    call: &'static str,
    started: grpcio::Result<grpcio::ClientUnaryReceiver<T>>,
) -> Result<T, String> {
    let receiver = started.map_err(|e| format!("{call}: {e}"))?;
    receiver.await.map_err(|e| format!("{call}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root dir too long for a unix socket is said in those words, not
    /// as gRPC's bare BindFail.
    #[test]
    fn a_socket_path_too_long_is_named() {
        let env = Arc::new(grpcio::EnvBuilder::new().cq_count(1).build());
        let long = Path::new("/tmp").join("d".repeat(120)).join("kubelet.sock");
        match serve_unix(&env, &long, grpcio::ServiceBuilder::new().build()) {
            Ok(_) => panic!("a {}-byte socket path was bound", long.as_os_str().len()),
            Err(err) => assert!(
                err.contains("bytes long") && err.contains("at most 107"),
                "{err}"
            ),
        }
    }
}
