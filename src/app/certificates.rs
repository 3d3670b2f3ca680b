//! The certificate managers (upstream `kubelet.go`: the client certificate
//! manager with `rotateCertificates`, the serving one with
//! `serverTLSBootstrap`), stepped by one thread, `certificate-manager`.

use super::*;

use crate::certificate::manager::{self, Deps, Kind, Manager};
use crate::certificate::store::{FileStore, SERVER_PAIR_NAME};
use crate::client::tls::CertSlot;

/// The managers to run, and the slot 10250 serves from (serverTLSBootstrap).
pub(super) struct CertManagers {
    pub serving_slot: Option<Arc<CertSlot>>,
    managers: Vec<Manager>,
}

pub(super) fn certificate_managers(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    (client, bootstrap): (Option<&Client>, Option<Client>),
    recorder: &Arc<dyn EventRecorder>,
    node: &str,
    node_object: &Arc<RwLock<Option<Node>>>,
) -> CertManagers {
    let mut out = CertManagers {
        serving_slot: None,
        managers: Vec::new(),
    };
    let Some(client) = client else {
        for (on, field) in [
            (config.rotate_certificates, "rotateCertificates"),
            (config.server_tls_bootstrap, "serverTLSBootstrap"),
        ] {
            if on {
                log::warn!("{field} is set but there is no API server (--kubeconfig): ignored");
            }
        }
        return out;
    };
    if config.rotate_certificates {
        match client.client_cert() {
            Some(slot) => {
                let c = client.clone();
                let signed = slot.is_set();
                let deps = Deps {
                    client: client.clone(),
                    bootstrap,
                    recorder: Arc::clone(recorder),
                    slot: Arc::clone(slot),
                    sans: Box::new(Vec::new),
                    on_rotated: Box::new(move || {
                        let n = c.close_connections();
                        log::info!("closed the API connections ({n} watches) so they reconnect with the new client certificate");
                    }),
                };
                out.managers.push(Manager::new(
                    Kind::Client,
                    node,
                    &flags.cert_dir,
                    deps,
                    signed,
                ));
            }
            None => log::warn!(
                "rotateCertificates: the kubeconfig has no client certificate to rotate; ignored"
            ),
        }
    }
    if config.server_tls_bootstrap {
        if !config.tls_cert_file.is_empty() {
            log::warn!("serverTLSBootstrap: tlsCertFile is set and is served instead; ignored");
            return out;
        }
        let slot = Arc::new(CertSlot::default());
        let signed = load_stored_serving_pair(&flags.cert_dir, &slot);
        let node_object = Arc::clone(node_object);
        let deps = Deps {
            client: client.clone(),
            bootstrap: None,
            recorder: Arc::clone(recorder),
            slot: Arc::clone(&slot),
            sans: Box::new(move || serving_sans(&node_object)),
            on_rotated: Box::new(|| {}),
        };
        out.managers.push(Manager::new(
            Kind::Serving,
            node,
            &flags.cert_dir,
            deps,
            signed,
        ));
        out.serving_slot = Some(slot);
    }
    out
}

/// Puts `<cert-dir>/kubelet-server-current.pem` in `slot` when it loads and
/// has not expired; false (the self-signed pair serves, a CSR goes out) else.
fn load_stored_serving_pair(cert_dir: &std::path::Path, slot: &CertSlot) -> bool {
    let store = FileStore::with_pair(cert_dir, SERVER_PAIR_NAME);
    match store.load_current_into(slot, crate::types::unix_now()) {
        Ok(()) => true,
        Err(e) => {
            log::info!("serving certificate {e}; requesting a new one");
            false
        }
    }
}

/// upstream's serving template: DNS names from the node's Hostname,
/// InternalDNS and ExternalDNS addresses, IPs from InternalIP and ExternalIP.
fn serving_sans(node: &RwLock<Option<Node>>) -> Vec<String> {
    let guard = node.read().unwrap_or_else(|e| e.into_inner());
    let addrs = guard
        .as_ref()
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.addresses.as_ref());
    let mut sans: Vec<String> = Vec::new();
    for a in addrs.into_iter().flatten() {
        let usable = matches!(
            a.type_.as_str(),
            "Hostname" | "InternalDNS" | "ExternalDNS" | "InternalIP" | "ExternalIP"
        );
        if usable && !a.address.is_empty() && !sans.contains(&a.address) {
            sans.push(a.address.clone());
        }
    }
    sans
}

/// The `certificate-manager` thread, when there is a manager to run.
pub(super) fn start(
    certs: CertManagers,
    shutdown: &Receiver<()>,
) -> anyhow::Result<Option<Worker>> {
    let mut managers = certs.managers;
    if managers.is_empty() {
        return Ok(None);
    }
    worker::spawn_supervised(
        "certificate-manager",
        ShutdownStage::Status,
        shutdown.clone(),
        move |stop| manager::run(&mut managers, stop),
    )
    .map(Some)
    .context("spawn certificate-manager thread")
}
