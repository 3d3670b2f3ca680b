//! The client TLS bootstrap (upstream `pkg/kubelet/certificate/bootstrap`,
//! LoadClientCert): when `--kubeconfig` is missing, unreadable or holds an
//! expired client certificate, ask for one with the bootstrap kubeconfig's
//! credentials (a bootstrap token), through a
//! `kubernetes.io/kube-apiserver-client-kubelet` CSR, then write the pair to
//! `<cert-dir>/kubelet-client-<stamp>.pem` (+ `kubelet-client-current.pem`)
//! and a kubeconfig pointing at it with the bootstrap kubeconfig's server
//! and CA.
//!
//! With `rotateCertificates` (upstream LoadClientConfig, [`load_client_config`])
//! only the kubeconfig is written here; the CSR is the certificate
//! manager's, in the background, and the kubelet starts at once. Without it
//! ([`load_client_cert`]) the whole bootstrap runs on the main thread before
//! any module starts; every wait is bounded by [`BOOTSTRAP_TIMEOUT`] and
//! interrupted by shutdown.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use crossbeam_channel::Receiver;

use super::csr::{self, CsrError};
use super::store::{write_private, FileStore};
use super::{x509, CertError};
use crate::client::kubeconfig::{self, CurrentEntries};
use crate::client::tls::CertSlot;
use crate::client::Client;
use crate::types::unix_now;
use crate::util::backoff::Exponential;

/// Upstream waits up to an hour for the certificate.
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(3600);
/// Upstream's waitForServer: up to a minute for /healthz, then try anyway.
const SERVER_WAIT: Duration = Duration::from_secs(60);
/// Back-off between failed API attempts.
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The key waits here until a certificate is issued for it, so a restart
/// asks again under the same CSR name (upstream tmpPrivateKeyFile).
const TMP_PRIVATE_KEY_FILE: &str = "kubelet-client.key.tmp";

/// Where the bootstrap reads and writes.
pub struct Paths<'a> {
    pub kubeconfig: &'a Path,
    pub bootstrap_kubeconfig: &'a Path,
    pub cert_dir: &'a Path,
}

/// LoadClientCert: a no-op when the kubeconfig is still valid, else the
/// whole bootstrap. An error (bad bootstrap kubeconfig, CSR denied, timeout)
/// stops the kubelet, as upstream's does.
pub fn load_client_cert(p: &Paths, node: &str, shutdown: &Receiver<()>) -> Result<(), CertError> {
    if client_config_still_valid(p.kubeconfig, unix_now())? {
        log::info!(
            "kubeconfig {} exists and is valid, skipping the TLS bootstrap",
            p.kubeconfig.display()
        );
        return Ok(());
    }
    log::info!(
        "using bootstrap kubeconfig {} to request a client certificate for node {node}",
        p.bootstrap_kubeconfig.display()
    );
    let boot = load_bootstrap(p.bootstrap_kubeconfig)?;
    let client = bootstrap_client(p.bootstrap_kubeconfig)?;
    let store = FileStore::new(p.cert_dir);
    create_cert_dir(p.cert_dir)?;
    let tmp_key = p.cert_dir.join(TMP_PRIVATE_KEY_FILE);
    let key = load_or_generate_key(&store, &tmp_key)?;
    let deadline = Instant::now() + BOOTSTRAP_TIMEOUT;
    wait_for_server(&client, shutdown)?;
    let cert = request_node_certificate(&client, &key, node, deadline, shutdown)?;
    let file = store.update(&cert, &key.serialize_pem(), unix_now())?;
    log::info!("client certificate issued, written to {}", file.display());
    if let Err(e) = fs::remove_file(&tmp_key) {
        log::debug!("removing {}: {e}", tmp_key.display());
    }
    write_kubeconfig(p.kubeconfig, &boot, &store.current_path())
}

/// The kubelet's client configuration while the bootstrap runs in the
/// background (upstream LoadClientConfig, with `rotateCertificates`).
pub struct Background {
    /// The bootstrap kubeconfig's credentials, for the CSR (upstream's
    /// certConfig).
    pub bootstrap: Client,
    /// The bootstrap kubeconfig's server and CA without its credentials,
    /// presenting the client certificate of its `client_cert` slot: empty
    /// until the CSR is issued, unless the cert dir held a valid pair
    /// (upstream's userConfig behind the rotating transport).
    pub rest: crate::client::RestConfig,
}

/// LoadClientConfig: None when `--kubeconfig` is valid (used as it is).
/// Otherwise `--kubeconfig` is written at once pointing at
/// `<cert-dir>/kubelet-client-current.pem`, as upstream does, and the
/// certificate manager bootstraps in the background with [`Background`],
/// so the kubelet starts without waiting for the CSR's approval.
pub fn load_client_config(p: &Paths) -> Result<Option<Background>, CertError> {
    if client_config_still_valid(p.kubeconfig, unix_now())? {
        log::info!(
            "kubeconfig {} exists and is valid, skipping the TLS bootstrap",
            p.kubeconfig.display()
        );
        return Ok(None);
    }
    let boot = load_bootstrap(p.bootstrap_kubeconfig)?;
    let bootstrap = bootstrap_client(p.bootstrap_kubeconfig)?;
    create_cert_dir(p.cert_dir)?;
    let store = FileStore::new(p.cert_dir);
    let slot = std::sync::Arc::new(CertSlot::default());
    match store.load_current_into(&slot, unix_now()) {
        Ok(()) => log::info!(
            "kubeconfig {} is not valid; using the stored client certificate {}",
            p.kubeconfig.display(),
            store.current_path().display()
        ),
        Err(e) => log::info!(
            "client certificate rotation is on: the TLS bootstrap runs in the background with bootstrap kubeconfig {} (no stored certificate: {e})",
            p.bootstrap_kubeconfig.display()
        ),
    }
    write_kubeconfig(p.kubeconfig, &boot, &store.current_path())?;
    let rest = kubeconfig::anonymous_with_cert_slot(p.bootstrap_kubeconfig, slot)
        .map_err(CertError::Kubeconfig)?;
    Ok(Some(Background { bootstrap, rest }))
}

/// The bootstrap kubeconfig's cluster, with an error naming the file.
fn load_bootstrap(path: &Path) -> Result<CurrentEntries, CertError> {
    kubeconfig::load_current(path).map_err(CertError::BootstrapKubeconfig)
}

/// The bootstrap kubeconfig's credentials as an API client.
fn bootstrap_client(path: &Path) -> Result<Client, CertError> {
    Client::new(
        kubeconfig::load(path).map_err(CertError::Kubeconfig)?,
        std::sync::Arc::new(crate::metrics::RestClientRequests),
    )
    .map_err(CertError::BootstrapClient)
}

fn create_cert_dir(dir: &Path) -> Result<(), CertError> {
    fs::create_dir_all(dir).map_err(CertError::io(format!(
        "create cert directory {}",
        dir.display()
    )))
}

/// isClientConfigStillValid: false when the file is absent or its client
/// certificate cannot be read or has expired (each logged); an error only
/// when the file exists but cannot be examined at all.
pub fn client_config_still_valid(path: &Path, now: i64) -> Result<bool, CertError> {
    match fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(error) => {
            return Err(CertError::ExistingKubeconfig {
                path: path.to_owned(),
                error,
            })
        }
    }
    let certs = kubeconfig::load(path)
        .and_then(|_| kubeconfig::load_current(path))
        .map_err(CertError::Kubeconfig)
        .and_then(|c| c.client_cert.ok_or(CertError::NoClientCert))
        .and_then(|pem| {
            crate::client::tls::parse_certs(&pem).map_err(|error| CertError::Pem {
                what: "client certificate",
                error,
            })
        });
    let certs = match certs {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            log::warn!("kubeconfig {}: no client certificate", path.display());
            return Ok(false);
        }
        Err(e) => {
            log::warn!("unable to read existing kubeconfig {}: {e}", path.display());
            return Ok(false);
        }
    };
    for cert in &certs {
        match x509::Certificate::from_der(cert).map(|c| c.not_after()) {
            Ok(t) if t >= now => {}
            Ok(t) => {
                log::warn!(
                    "part of the existing client certificate in {} is expired (notAfter {t})",
                    path.display()
                );
                return Ok(false);
            }
            Err(e) => {
                log::warn!(
                    "part of the existing client certificate in {} is unreadable: {e}",
                    path.display()
                );
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The current pair's key if it parses, else the key left by an earlier
/// try, else a new one saved for the next try.
fn load_or_generate_key(store: &FileStore, tmp: &Path) -> Result<rcgen::KeyPair, CertError> {
    let parse = |pem: String| rcgen::KeyPair::from_pem(&pem).ok();
    if let Some(k) = store.current_key_pem(unix_now()).and_then(parse) {
        return Ok(k);
    }
    if let Some(k) = fs::read_to_string(tmp).ok().and_then(parse) {
        return Ok(k);
    }
    log::info!("no valid private key found, creating a new one");
    let key = csr::generate_key()?;
    write_private(tmp, &key.serialize_pem())?;
    Ok(key)
}

/// waitForServer: /healthz every 2 s for up to a minute; failing that, the
/// CSR request goes ahead (with its own back-off).
fn wait_for_server(client: &Client, shutdown: &Receiver<()>) -> Result<(), CertError> {
    let until = Instant::now() + SERVER_WAIT;
    while Instant::now() < until {
        match client.get_raw("/healthz") {
            Ok(_) => return Ok(()),
            Err(e) => log::info!("failed to connect to apiserver: {e}"),
        }
        csr::sleep_or_shutdown(Duration::from_secs(2), shutdown)?;
    }
    log::info!("timed out waiting to connect to apiserver; requesting anyway");
    Ok(())
}

/// requestNodeCertificate with retries: API failures back off (1 s doubling
/// to 30 s) until the deadline; Denied, Failed and shutdown end it.
fn request_node_certificate(
    client: &Client,
    key: &rcgen::KeyPair,
    node: &str,
    deadline: Instant,
    shutdown: &Receiver<()>,
) -> Result<String, CertError> {
    let pem = csr::make_csr_pem(key, node)?;
    let mut backoff = Exponential::new(BACKOFF_START, BACKOFF_MAX);
    loop {
        // The usages the server's approver takes, read per attempt: a
        // server that was down at the first one is known at a later one.
        let usages = client.server_version().client_csr_usages();
        let name = csr::digested_name(key, node, usages);
        let obj = csr::csr_object(&name, &pem, usages);
        let attempt = csr::request_certificate(client, &obj)
            .and_then(|(n, uid)| csr::wait_for_certificate(client, &n, &uid, deadline, shutdown));
        match attempt {
            Ok(pem) => return Ok(pem),
            Err(CsrError::Fatal(e)) => return Err(e),
            // Refused (invalid, unauthorized, forbidden): retrying will not help.
            Err(CsrError::Api(e)) if e.code().is_some_and(|c| c < 500 && c != 429) => {
                return Err(CertError::Refused { name, error: e });
            }
            Err(CsrError::Api(e)) => {
                let wait = backoff.next_delay();
                if Instant::now() + wait >= deadline {
                    return Err(CertError::GaveUp {
                        name,
                        after: BOOTSTRAP_TIMEOUT,
                        error: e,
                    });
                }
                log::warn!("CSR {name}: {e}; retrying in {wait:?}");
                csr::sleep_or_shutdown(wait, shutdown)?;
            }
        }
    }
}

/// writeKubeconfigFromBootstrapping: the bootstrap kubeconfig's server and
/// CA (its file if it named one, else its data), the pair file as both
/// client-certificate and client-key; written 0600 through a rename.
fn write_kubeconfig(path: &Path, boot: &CurrentEntries, pem: &Path) -> Result<(), CertError> {
    let text = kubeconfig_text(boot, pem);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(CertError::io(format!("create {}", dir.display())))?;
    }
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    write_private(&tmp, &text)?;
    fs::rename(&tmp, path).map_err(CertError::io(format!(
        "rename {} to {}",
        tmp.display(),
        path.display()
    )))?;
    log::info!("wrote kubeconfig {}", path.display());
    Ok(())
}

fn kubeconfig_text(boot: &CurrentEntries, pem: &Path) -> String {
    let ca = match (&boot.ca_file, &boot.ca_data) {
        (Some(f), _) => format!("    certificate-authority: {}\n", f.display()),
        (None, Some(d)) => format!(
            "    certificate-authority-data: {}\n",
            base64::engine::general_purpose::STANDARD.encode(d)
        ),
        (None, None) => String::new(),
    };
    let insecure = if boot.insecure {
        "    insecure-skip-tls-verify: true\n"
    } else {
        ""
    };
    let pem = pem.display();
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n{ca}{insecure}    server: {server}\n  name: default-cluster\n\
         contexts:\n- context:\n    cluster: default-cluster\n    namespace: default\n    user: default-auth\n  name: default-context\n\
         current-context: default-context\nkind: Config\npreferences: {{}}\n\
         users:\n- name: default-auth\n  user:\n    client-certificate: {pem}\n    client-key: {pem}\n",
        server = boot.server
    )
}

#[cfg(test)]
#[path = "bootstrap_tests.rs"]
mod tests;
