//! Certificate rotation (client-go `util/certificate/certificate_manager.go`,
//! as upstream's `pkg/kubelet/certificate` sets it up for the client and the
//! serving certificate): at a jittered 70–90 % of the current certificate's
//! lifetime, a new key and a new CSR, created with the API client, whose
//! connections present the current client certificate (no bootstrap token).
//! The issued pair is written to the file store
//! (`kubelet-{client,server}-<stamp>.pem` and the `-current.pem` symlink)
//! and swapped into the [`CertSlot`] every new connection or handshake
//! reads; the old pair serves until then. A denied, failed or unanswered
//! CSR is logged, posted as a node event and asked again after a back-off
//! (2 s doubling to 32 s, upstream's); nothing else waits for it.
//!
//! The client manager also does the TLS bootstrap in the background when it
//! starts with an empty slot (upstream's bootstrap with `rotateCertificates`):
//! its CSRs then go out with the bootstrap kubeconfig's credentials
//! ([`Deps::bootstrap`]), and the API client refuses to send anything until
//! the first certificate is in (`client::NO_CERT_YET`).
//!
//! Every manager is a state machine stepped by one thread,
//! `certificate-manager`: no call blocks longer than one API request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::csr::{self, Outcome};
use super::store::{FileStore, PAIR_NAME, SERVER_PAIR_NAME};
use super::{x509, CertError};
use crate::client::tls::{parse_certs, parse_key, CertSlot, ClientIdentity};
use crate::client::version::ServerVersion;
use crate::client::{paths, Client};
use crate::events::{EventRecorder, EventType};
use crate::types::unix_now;
use crate::util::backoff::Exponential;

/// certificatesv1.KubeletServingSignerName.
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// client-go's certificateWaitTimeout: a CSR not issued by then is given up.
const CSR_WAIT: Duration = Duration::from_secs(15 * 60);
/// How often a pending CSR is read: soon after it is created (a controller
/// that approves at once is answered at once), then every 2 s.
const CSR_POLL_FIRST: Duration = Duration::from_millis(250);
const CSR_POLL: Duration = Duration::from_secs(2);
/// client-go's rotation back-off: 2 s doubling, then every 32 s.
const BACKOFF_START: Duration = Duration::from_secs(2);
const BACKOFF_MAX: Duration = Duration::from_secs(32);
/// A serving certificate waits for the node's addresses this long at a time.
const NO_ADDRESSES_RETRY: Duration = Duration::from_secs(5);
/// How often the serving certificate's SANs are compared with the node's
/// addresses (upstream checks its template every second).
const TEMPLATE_CHECK: Duration = Duration::from_secs(10);
/// The node event of a rotation that did not happen (rkubelet's own reason:
/// upstream only logs).
pub const ROTATION_FAILED: &str = "CertificateRotationFailed";

/// Which certificate a manager keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The client certificate the API connections present.
    Client,
    /// The certificate 10250 serves (`serverTLSBootstrap`).
    Serving,
}

impl Kind {
    fn signer(self) -> &'static str {
        match self {
            Kind::Client => csr::KUBELET_CLIENT_SIGNER,
            Kind::Serving => KUBELET_SERVING_SIGNER,
        }
    }

    /// The usages `server`'s approver and signer accept for an ECDSA key.
    fn usages(self, server: ServerVersion) -> &'static [&'static str] {
        match self {
            Kind::Client => server.client_csr_usages(),
            Kind::Serving => server.serving_csr_usages(),
        }
    }

    fn pair(self) -> &'static str {
        match self {
            Kind::Client => PAIR_NAME,
            Kind::Serving => SERVER_PAIR_NAME,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Client => "client",
            Kind::Serving => "serving",
        }
    }
}

/// What a manager needs from the rest of the kubelet.
pub struct Deps {
    /// Creates and reads the CSRs.
    pub client: Client,
    /// Creates and reads them instead while the slot is empty: the
    /// bootstrap kubeconfig's credentials (upstream's newClientsetFn picks
    /// certConfig when there is no current certificate).
    pub bootstrap: Option<Client>,
    pub recorder: Arc<dyn EventRecorder>,
    /// The pair in use, swapped on rotation.
    pub slot: Arc<CertSlot>,
    /// The serving certificate's SANs (the node's hostname and addresses);
    /// empty means "not known yet".
    pub sans: Box<dyn Fn() -> Vec<String> + Send>,
    /// Runs after a new pair is in the slot (the client closes its
    /// connections so they reconnect with it).
    pub on_rotated: Box<dyn Fn() + Send>,
}

enum State {
    /// Rotate at `due`.
    Idle { due: Instant },
    /// A CSR is out for `key_pem`.
    Waiting {
        name: String,
        uid: String,
        key_pem: String,
        since: Instant,
        poll: Instant,
    },
}

/// Keeps one certificate fresh.
pub struct Manager {
    kind: Kind,
    node: String,
    store: FileStore,
    deps: Deps,
    state: State,
    backoff: Exponential,
    /// When the serving certificate's SANs are next compared with the node's.
    template_check: Instant,
    /// The slot holds a certificate from the signer (not the self-signed one).
    signed: bool,
}

/// nextRotationDeadline: notBefore + a uniformly jittered 70–90 % of the
/// lifetime (`jitter` in [0, 1)), in Unix seconds.
pub fn rotation_deadline(not_before: i64, not_after: i64, jitter: f64) -> i64 {
    let total = (not_after - not_before).max(0) as f64;
    not_before + (total * (0.7 + 0.2 * jitter.clamp(0.0, 1.0))) as i64
}

/// The Instant a Unix time falls on (now when it is past).
fn instant_at(unix: i64) -> Instant {
    let ahead = u64::try_from(unix - unix_now()).unwrap_or(0);
    Instant::now() + Duration::from_secs(ahead)
}

/// The validity of the leaf in `slot`, when it holds one that parses.
fn slot_validity(slot: &CertSlot) -> Option<(i64, i64)> {
    let leaf = slot.leaf()?;
    Some(x509::Certificate::from_der(&leaf).ok()?.validity())
}

impl Manager {
    /// A manager for `kind`; `signed` says whether the slot already holds a
    /// certificate from the signer (the client's, or a stored serving pair)
    /// whose lifetime schedules the first rotation. Otherwise (the
    /// self-signed serving certificate) a CSR goes out at once.
    pub fn new(
        kind: Kind,
        node: &str,
        cert_dir: &std::path::Path,
        deps: Deps,
        signed: bool,
    ) -> Manager {
        let due = match signed.then(|| slot_validity(&deps.slot)).flatten() {
            Some((nb, na)) => instant_at(rotation_deadline(
                nb,
                na,
                crate::client::flowcontrol::random_unit(),
            )),
            None => Instant::now(),
        };
        let m = Manager {
            kind,
            node: node.to_string(),
            store: FileStore::with_pair(cert_dir, kind.pair()),
            deps,
            state: State::Idle { due },
            backoff: Exponential::new(BACKOFF_START, BACKOFF_MAX),
            template_check: Instant::now() + TEMPLATE_CHECK,
            signed,
        };
        m.log_schedule(due);
        m
    }

    /// The client for CSRs: the bootstrap credentials until there is a
    /// certificate, then the certificate itself.
    fn csr_client(&self) -> &Client {
        match &self.deps.bootstrap {
            Some(boot) if !self.deps.slot.is_set() => boot,
            _ => &self.deps.client,
        }
    }

    /// True while the client certificate is still being bootstrapped.
    fn bootstrapping(&self) -> bool {
        self.kind == Kind::Client && !self.deps.slot.is_set()
    }

    /// "client certificate rotation", or "client certificate bootstrap"
    /// while there is none yet.
    fn action(&self) -> String {
        match self.bootstrapping() {
            true => "client certificate bootstrap".to_string(),
            false => format!("{} certificate rotation", self.kind.what()),
        }
    }

    fn log_schedule(&self, due: Instant) {
        if self.bootstrapping() {
            log::info!("client certificate bootstrap: no client certificate yet, requesting one");
            return;
        }
        let left = due.saturating_duration_since(Instant::now());
        log::info!(
            "{} certificate rotation in {}s",
            self.kind.what(),
            left.as_secs()
        );
    }

    /// When [`Manager::step`] wants to run next.
    pub fn due(&self) -> Instant {
        match &self.state {
            State::Idle { due } if self.kind == Kind::Serving => (*due).min(self.template_check),
            State::Idle { due } => *due,
            State::Waiting { poll, .. } => *poll,
        }
    }

    /// upstream's template check: a serving certificate whose SANs are not
    /// the node's current addresses is rotated at once (when they are known).
    fn template_changed(&mut self) -> bool {
        if self.kind != Kind::Serving || !self.signed || Instant::now() < self.template_check {
            return false;
        }
        self.template_check = Instant::now() + TEMPLATE_CHECK;
        let want = (self.deps.sans)();
        let Some(have) = self.deps.slot.leaf().and_then(|c| {
            x509::Certificate::from_der(&c)
                .ok()?
                .subject_alt_names()
                .ok()
        }) else {
            return false;
        };
        let changed = !want.is_empty() && {
            let (mut a, mut b) = (want.clone(), have.clone());
            a.sort();
            b.sort();
            a != b
        };
        if changed {
            log::info!("serving certificate SANs {have:?} differ from the node's addresses {want:?}: rotating");
        }
        changed
    }

    /// Does whatever is due: sends a CSR, reads a pending one, installs an
    /// issued certificate, or schedules a retry.
    pub fn step(&mut self) {
        if Instant::now() < self.due() {
            return;
        }
        if let State::Idle { due } = self.state {
            // Woken for the template check only: rotate if it changed.
            if due > Instant::now() && !self.template_changed() {
                return;
            }
        }
        let state = std::mem::replace(
            &mut self.state,
            State::Idle {
                due: Instant::now(),
            },
        );
        self.state = match state {
            State::Idle { .. } => self.send_csr(),
            State::Waiting {
                name,
                uid,
                key_pem,
                since,
                ..
            } => self.check_csr(name, uid, key_pem, since),
        };
    }

    fn send_csr(&mut self) -> State {
        let sans = match self.kind {
            Kind::Client => Vec::new(),
            Kind::Serving => (self.deps.sans)(),
        };
        if self.kind == Kind::Serving && sans.is_empty() {
            log::debug!("serving certificate: the node's addresses are not known yet");
            return State::Idle {
                due: Instant::now() + NO_ADDRESSES_RETRY,
            };
        }
        let made = csr::generate_key().and_then(|key| {
            let pem = csr::make_csr_pem_with_sans(&key, &self.node, &sans)?;
            Ok((key.serialize_pem(), pem))
        });
        let (key_pem, pem) = match made {
            Ok(v) => v,
            Err(e) => return self.failed(&e.to_string()),
        };
        // Read per request: the control plane may have been upgraded since.
        let server = self.csr_client().server_version();
        let usages = self.kind.usages(server);
        let obj = csr::generated_csr_object(&pem, self.kind.signer(), usages);
        match csr::request_certificate(self.csr_client(), &obj) {
            Ok((name, uid)) => {
                log::info!(
                    "{}: created CSR {name} (signer {}); waiting for it to be approved and issued",
                    self.action(),
                    self.kind.signer()
                );
                State::Waiting {
                    name,
                    uid,
                    key_pem,
                    since: Instant::now(),
                    poll: Instant::now() + CSR_POLL_FIRST,
                }
            }
            Err(csr::CsrError::Api(e)) => self.failed(&format!("creating the CSR: {e}")),
            Err(csr::CsrError::Fatal(e)) => self.failed(&format!("creating the CSR: {e}")),
        }
    }

    fn check_csr(&mut self, name: String, uid: String, key_pem: String, since: Instant) -> State {
        let obj: Value = match self
            .csr_client()
            .get(&paths::certificate_signing_request(&name))
        {
            Ok(v) => v,
            Err(e) if e.is_not_found() => {
                return self.failed(&format!("CSR {name} was deleted before it was issued"))
            }
            Err(e) => {
                log::warn!("{}: reading CSR {name}: {e}", self.action());
                return self.still_waiting(name, uid, key_pem, since);
            }
        };
        match csr::outcome(&obj, &name, &uid) {
            Ok(Outcome::Issued(pem)) => match self.install(&pem, &key_pem) {
                Ok(due) => State::Idle { due },
                Err(e) => self.failed(&format!("CSR {name}: {e}")),
            },
            Ok(Outcome::Pending) => self.still_waiting(name, uid, key_pem, since),
            Err(e) => self.failed(&e.to_string()),
        }
    }

    fn still_waiting(
        &mut self,
        name: String,
        uid: String,
        key_pem: String,
        since: Instant,
    ) -> State {
        if since.elapsed() >= CSR_WAIT {
            return self.failed(&format!(
                "CSR {name} was not issued within {}s (is it approved?)",
                CSR_WAIT.as_secs()
            ));
        }
        // Doubling from CSR_POLL_FIRST: the time waited so far, within bounds.
        let every = since.elapsed().clamp(CSR_POLL_FIRST, CSR_POLL);
        State::Waiting {
            name,
            uid,
            key_pem,
            since,
            poll: Instant::now() + every,
        }
    }

    /// Checks the issued pair, writes it, swaps it in; returns the next due time.
    fn install(&mut self, cert_pem: &str, key_pem: &str) -> Result<Instant, CertError> {
        let done = match self.bootstrapping() {
            true => "client certificate issued (TLS bootstrap done)".to_string(),
            false => format!("{} certificate rotated", self.kind.what()),
        };
        let certs = parse_certs(cert_pem.as_bytes()).map_err(|error| CertError::Pem {
            what: "issued certificate",
            error,
        })?;
        let leaf = certs.first().ok_or(CertError::NoIssuedCert)?;
        let (nb, na) = x509::Certificate::from_der(leaf)
            .map_err(CertError::Issued)?
            .validity();
        let key = parse_key(key_pem.as_bytes()).map_err(|error| CertError::Pem {
            what: "private key",
            error,
        })?;
        let file = self.store.update(cert_pem, key_pem, unix_now())?;
        self.deps
            .slot
            .set(ClientIdentity { certs, key })
            .map_err(CertError::KeyMismatch)?;
        (self.deps.on_rotated)();
        self.signed = true;
        self.backoff.reset();
        let due = instant_at(rotation_deadline(
            nb,
            na,
            crate::client::flowcontrol::random_unit(),
        ));
        log::info!(
            "{done}: {} (valid {}s more)",
            file.display(),
            na - unix_now()
        );
        self.log_schedule(due);
        Ok(due)
    }

    /// Logs and posts the failure; the next CSR goes out after the back-off.
    fn failed(&mut self, why: &str) -> State {
        let wait = self.backoff.next_delay();
        let msg = format!(
            "{} failed: {why}; retrying in {}s{}",
            self.action(),
            wait.as_secs(),
            self.expiry_note()
        );
        if self.bootstrapping() {
            log::error!("{msg}; meanwhile static pods run and node registration, status, lease and API pods wait for the certificate (this node event is sent only once a certificate is issued, within the event recorder's retries)");
        } else {
            log::error!("{msg}");
        }
        self.deps
            .recorder
            .node_event(EventType::Warning, ROTATION_FAILED, &msg);
        State::Idle {
            due: Instant::now() + wait,
        }
    }

    /// How long the pair in use stays valid, for the failure message.
    fn expiry_note(&self) -> String {
        match slot_validity(&self.deps.slot) {
            Some((_, na)) if na <= unix_now() => "; the certificate in use has EXPIRED".to_string(),
            Some((_, na)) => format!("; the certificate in use expires in {}s", na - unix_now()),
            None => String::new(),
        }
    }
}

/// The `certificate-manager` thread's loop: steps every manager when due,
/// sleeping in between (at most 1 s, so shutdown is seen at once anyway).
pub fn run(managers: &mut [Manager], shutdown: &crossbeam_channel::Receiver<()>) {
    loop {
        for m in managers.iter_mut() {
            m.step();
        }
        let next = managers
            .iter()
            .map(Manager::due)
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(60));
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1))
            .max(Duration::from_millis(10));
        crossbeam_channel::select! {
            recv(shutdown) -> _ => return,
            default(wait) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_70_to_90_percent_of_the_lifetime() {
        assert_eq!(rotation_deadline(1000, 2000, 0.0), 1700);
        assert_eq!(rotation_deadline(1000, 2000, 0.25), 1750);
        assert_eq!(rotation_deadline(1000, 2000, 0.999_999), 1899);
        // A certificate whose validity is inverted rotates at once.
        assert_eq!(rotation_deadline(2000, 1000, 0.5), 2000);
    }

    #[test]
    fn signers_and_usages_are_upstreams() {
        assert_eq!(
            Kind::Client.signer(),
            "kubernetes.io/kube-apiserver-client-kubelet"
        );
        let newest = crate::client::version::NEWEST;
        assert_eq!(
            Kind::Client.usages(newest),
            ["digital signature", "client auth"]
        );
        assert_eq!(Kind::Serving.signer(), "kubernetes.io/kubelet-serving");
        assert_eq!(
            Kind::Serving.usages(newest),
            ["digital signature", "server auth"]
        );
        let v1_22 = ServerVersion { minor: 22 };
        assert_eq!(
            Kind::Serving.usages(v1_22),
            ["digital signature", "key encipherment", "server auth"]
        );
        assert_eq!(Kind::Serving.pair(), "kubelet-server");
    }
}
