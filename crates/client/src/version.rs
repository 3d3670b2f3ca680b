//! The API server's release (client-go discovery's ServerVersion over
//! `GET /version`), and what the kubelet adapts to it. rkubelet speaks the
//! newest API it knows and steps down, per feature, for an older control
//! plane: every adaptation is a function of the release here, so the
//! README's compatibility table and this file say the same thing.

use std::fmt;
use std::sync::Mutex;

use rkubelet_util::lock;

use k8s_openapi::api::core::v1::PodStatus;
use serde::Deserialize;

use super::{ApiError, Client};

/// A control-plane minor release, `1.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    pub minor: u32,
}

/// The oldest and newest control planes rkubelet is held to.
pub const OLDEST: ServerVersion = ServerVersion { minor: 22 };
pub const NEWEST: ServerVersion = ServerVersion { minor: 34 };

/// Why `/version` gave no release; the kubelet then assumes [`NEWEST`].
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("GET /version: {0}")]
    Api(#[from] ApiError),
    #[error("/version: {0}")]
    Parse(String),
}

#[derive(Deserialize)]
struct Info {
    #[serde(default)]
    major: String,
    #[serde(default)]
    minor: String,
    #[serde(default, rename = "gitVersion")]
    git_version: String,
}

/// The leading digits of `s` ("27+" on some distributions is 27).
fn leading_number(s: &str) -> Option<u32> {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

impl ServerVersion {
    /// Reads `/version`'s body: `major`/`minor`, else `gitVersion`
    /// (`v1.22.3-eks-…`), as managed offerings fill one or the other.
    pub fn parse(body: &[u8]) -> Result<ServerVersion, VersionError> {
        let info: Info =
            serde_json::from_slice(body).map_err(|e| VersionError::Parse(e.to_string()))?;
        let from_fields = leading_number(&info.major).zip(leading_number(&info.minor));
        let from_git = || {
            let v = info.git_version.strip_prefix('v')?;
            let mut parts = v.split('.');
            Some((
                leading_number(parts.next()?)?,
                leading_number(parts.next()?)?,
            ))
        };
        match from_fields.or_else(from_git) {
            Some((1, minor)) => Ok(ServerVersion { minor }),
            Some((major, minor)) => Err(VersionError::Parse(format!(
                "unsupported major version {major}.{minor}"
            ))),
            None => Err(VersionError::Parse(format!(
                "no version in major={:?} minor={:?} gitVersion={:?}",
                info.major, info.minor, info.git_version
            ))),
        }
    }

    /// The server's release; any failure is the caller's to log.
    pub fn fetch(client: &Client) -> Result<ServerVersion, VersionError> {
        let body = client.get_raw("/version")?;
        ServerVersion::parse(&body)
    }

    fn at_least(self, minor: u32) -> bool {
        self.minor >= minor
    }

    /// The usages of the kubelet's client CSR. The csrapproving controller
    /// of v1.22 auto-approves exactly {digital signature, key encipherment,
    /// client auth}, what that release's kubelet sent; from v1.25 it also
    /// accepts the set without key encipherment, which is all an ECDSA key
    /// can do (upstream `kubeletClientRequiredUsagesNoRSA`).
    pub fn client_csr_usages(self) -> &'static [&'static str] {
        if self.accepts_ecdsa_usages() {
            &["digital signature", "client auth"]
        } else {
            &["digital signature", "key encipherment", "client auth"]
        }
    }

    /// The usages of the serving CSR, on the same rule.
    pub fn serving_csr_usages(self) -> &'static [&'static str] {
        if self.accepts_ecdsa_usages() {
            &["digital signature", "server auth"]
        } else {
            &["digital signature", "key encipherment", "server auth"]
        }
    }

    fn accepts_ecdsa_usages(self) -> bool {
        self.at_least(ECDSA_USAGES_ACCEPTED)
    }

    /// `status.hostIPs` (KEP-2681): in the API from v1.28, behind the
    /// PodHostIPs gate, on by default from v1.29; the server drops it
    /// before that.
    pub fn has_host_ips(self) -> bool {
        self.at_least(29)
    }

    /// `containerStatuses[].volumeMounts` (KEP-3857, RecursiveReadOnlyMounts):
    /// in the API from v1.30, its gate on by default from v1.31.
    pub fn has_container_volume_mounts(self) -> bool {
        self.at_least(31)
    }

    /// The `PodReadyToStartContainers` condition (KEP-3085): its gate is
    /// on by default from v1.29; before, that release's kubelet sent none.
    pub fn has_ready_to_start_condition(self) -> bool {
        self.at_least(29)
    }

    /// A terminal Failed pod's Ready and ContainersReady carry the reason
    /// `PodFailed` and no message (kubelet status/generate.go, from v1.25,
    /// kubernetes#110256). v1.22's kubelet says `ContainersNotReady` with
    /// the unready containers (captures).
    pub fn has_pod_failed_reason(self) -> bool {
        self.at_least(25)
    }

    /// Init container statuses carry `started` (set by the prober since
    /// the sidecar work, v1.28; unset by v1.22's kubelet, set by v1.32's).
    pub fn has_init_container_started(self) -> bool {
        self.at_least(28)
    }

    /// A rejected pod's message begins `Pod was rejected: ` (from v1.26,
    /// kubernetes#112644), where v1.22's begins `Pod ` (captures).
    pub fn has_rejected_prefix(self) -> bool {
        self.at_least(26)
    }

    /// The `Created` event says `Created container: c` (captures of
    /// v1.32 and v1.34); v1.22's kubelet said `Created container c`. The
    /// releases between were not captured: the change is taken at v1.32.
    pub fn has_created_colon(self) -> bool {
        self.at_least(32)
    }

    /// Whether events of this reason are worded differently by some
    /// release (so the release must be known to send one).
    pub fn event_wording_varies(reason: &str) -> bool {
        reason == "Created"
    }

    /// An event message as this release's kubelet worded it. rkubelet
    /// words its events as the newest release does.
    pub fn adapt_event_message(self, reason: &str, message: &str) -> Option<String> {
        if reason == "Created" && !self.has_created_colon() {
            let name = message.strip_prefix(CREATED_CONTAINER_PREFIX)?;
            return Some(format!("Created container {name}"));
        }
        None
    }

    /// Leaves out of a pod status what this release does not store, and
    /// says what it says the way that release's kubelet said it, so a
    /// status PATCH carries what the server keeps, as that release's
    /// kubelet sent it.
    pub fn adapt_pod_status(self, status: &mut PodStatus) {
        self.prune_pod_status(status);
        if !self.has_ready_to_start_condition() {
            if let Some(conditions) = status.conditions.as_mut() {
                conditions.retain(|c| c.type_ != READY_TO_START_CONTAINERS);
            }
        }
        if !self.has_pod_failed_reason() {
            failed_as_containers_not_ready(status);
        }
        if !self.has_init_container_started() {
            for c in status.init_container_statuses.iter_mut().flatten() {
                c.started = None;
            }
        }
        if !self.has_resize_conditions() {
            resize_conditions_as_field(status, self.at_least(27));
        }
        if !self.has_rejected_prefix() {
            if let Some(m) = status.message.as_mut() {
                if let Some(rest) = m.strip_prefix(REJECTED_PREFIX) {
                    *m = format!("Pod {rest}");
                }
            }
        }
    }

    /// An in-place resize is reported by the PodResizePending and
    /// PodResizeInProgress conditions from v1.33 (KEP-1287's beta); v1.27
    /// to v1.32 had `status.resize` instead.
    pub fn has_resize_conditions(self) -> bool {
        self.at_least(33)
    }

    /// Container statuses carry `resources` and `allocatedResources`
    /// (InPlacePodVerticalScaling: API from v1.27, on by default from
    /// v1.33; the v1.34 server refuses a resize without them).
    pub fn has_container_resources(self) -> bool {
        self.at_least(33)
    }

    /// Leaves out of a pod status what this release does not store.
    fn prune_pod_status(self, status: &mut PodStatus) {
        if !self.has_host_ips() {
            status.host_ips = None;
        }
        if !self.has_container_resources() {
            let all = [
                &mut status.init_container_statuses,
                &mut status.container_statuses,
            ];
            for c in all.into_iter().flatten().flatten() {
                c.resources = None;
                c.allocated_resources = None;
            }
        }
        if !self.has_container_volume_mounts() {
            let all = [
                &mut status.init_container_statuses,
                &mut status.container_statuses,
                &mut status.ephemeral_container_statuses,
            ];
            for c in all.into_iter().flatten().flatten() {
                c.volume_mounts = None;
            }
        }
    }

    /// What differs from the newest control plane, for the start-up log.
    pub fn adaptations(self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.accepts_ecdsa_usages() {
            out.push("certificate requests add the usage \"key encipherment\"");
        }
        if !self.has_host_ips() {
            out.push("pod status.hostIPs is not sent");
        }
        if !self.has_container_volume_mounts() {
            out.push("container status volumeMounts are not sent");
        }
        if !self.has_container_resources() {
            out.push("container statuses leave out resources and allocatedResources");
        }
        if !self.has_ready_to_start_condition() {
            out.push("no PodReadyToStartContainers condition");
        }
        if !self.has_pod_failed_reason() {
            out.push("a failed pod's Ready says ContainersNotReady");
        }
        if !self.has_init_container_started() {
            out.push("init container statuses leave started unset");
        }
        if !self.has_rejected_prefix() {
            out.push("rejection messages begin \"Pod \"");
        }
        out
    }

    /// Logs once which release the server is and what the kubelet adapts.
    pub fn log_adaptations(self) {
        if self < OLDEST {
            log::warn!("API server {self} is older than the oldest supported, {OLDEST}");
        }
        let what = self.adaptations();
        if what.is_empty() {
            log::info!("API server {self}: no adaptation needed");
        } else {
            log::info!("API server {self}: {}", what.join("; "));
        }
    }
}

/// The release a [`Client`] last read, and the one it last logged.
#[derive(Default)]
pub struct VersionCache {
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    current: Option<ServerVersion>,
    logged: Option<ServerVersion>,
    failing: bool,
}

impl VersionCache {
    /// The cached release, else `/version` read now (logging what is
    /// adapted when the release differs from the one logged last). A
    /// failed read answers [`NEWEST`], uncached, and warns once per outage.
    pub fn get_or_fetch(&self, client: &Client) -> ServerVersion {
        if let Some(v) = lock(&self.state).current {
            return v;
        }
        let fetched = ServerVersion::fetch(client);
        let mut st = lock(&self.state);
        match fetched {
            Ok(v) => {
                st.current = Some(v);
                st.failing = false;
                if st.logged != Some(v) {
                    st.logged = Some(v);
                    v.log_adaptations();
                }
                v
            }
            Err(e) => {
                if !std::mem::replace(&mut st.failing, true) {
                    log::warn!("{e}; assuming the newest control plane, {NEWEST}");
                }
                NEWEST
            }
        }
    }

    /// Drops the cached release: the next call reads it again.
    pub fn forget(&self) {
        lock(&self.state).current = None;
    }
}

const READY_TO_START_CONTAINERS: &str = "PodReadyToStartContainers";
const REJECTED_PREFIX: &str = "Pod was rejected: ";
const CREATED_CONTAINER_PREFIX: &str = "Created container: ";

/// Before `PodFailed`, a failed pod's Ready and ContainersReady said which
/// containers were not ready (GenerateContainersReadyCondition of v1.22).
fn failed_as_containers_not_ready(status: &mut PodStatus) {
    let unready: Vec<&str> = status
        .container_statuses
        .iter()
        .flatten()
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let message = format!("containers with unready status: [{}]", unready.join(" "));
    for c in status.conditions.iter_mut().flatten() {
        let owned = c.type_ == "Ready" || c.type_ == "ContainersReady";
        if owned && c.reason.as_deref() == Some("PodFailed") {
            c.reason = Some("ContainersNotReady".into());
            c.message = Some(message.clone());
        }
    }
}

/// The first release whose approver and signers accept kubelet CSRs without
/// "key encipherment" (kubernetes#111061, for #109077): through v1.24 the
/// usages must be exactly the set with it.
const ECDSA_USAGES_ACCEPTED: u32 = 25;

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v1.{}", self.minor)
    }
}

/// The v1.27–v1.32 form of the resize conditions: `status.resize` is
/// `Infeasible` or `Deferred` for a pending resize, `InProgress` for one
/// under way (`has_field`); before v1.27 there is neither.
fn resize_conditions_as_field(status: &mut PodStatus, has_field: bool) {
    let Some(conditions) = status.conditions.as_mut() else {
        return;
    };
    let mut resize = None;
    conditions.retain(|c| match c.type_.as_str() {
        "PodResizePending" => {
            resize = c.reason.clone();
            false
        }
        "PodResizeInProgress" => {
            resize = resize.take().or_else(|| Some("InProgress".to_string()));
            false
        }
        _ => true,
    });
    if has_field {
        status.resize = resize;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ServerVersion, VersionError> {
        ServerVersion::parse(s.as_bytes())
    }

    #[test]
    fn reads_what_servers_send() {
        let real = r#"{"major":"1","minor":"22","gitVersion":"v1.22.3","gitCommit":"c92036820499fedefec0f847e2054d824aea6cd1","gitTreeState":"clean","buildDate":"2021-10-27T18:35:25Z","goVersion":"go1.16.9","compiler":"gc","platform":"linux/amd64"}"#;
        assert_eq!(parse(real).unwrap(), ServerVersion { minor: 22 });
        let gke = r#"{"major":"1","minor":"27+","gitVersion":"v1.27.3-gke.100"}"#;
        assert_eq!(parse(gke).unwrap(), ServerVersion { minor: 27 });
        let git_only = r#"{"gitVersion":"v1.30.1-eks-1234"}"#;
        assert_eq!(parse(git_only).unwrap(), ServerVersion { minor: 30 });
    }

    #[test]
    fn garbage_is_an_error_naming_it() {
        for bad in [
            "",
            "[]",
            "{}",
            r#"{"major":"2","minor":"0"}"#,
            r#"{"gitVersion":"dev"}"#,
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("/version"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn created_events_are_worded_as_the_release_did() {
        let v = |minor| ServerVersion { minor };
        let new = "Created container: c";
        assert_eq!(
            v(22).adapt_event_message("Created", new).as_deref(),
            Some("Created container c")
        );
        assert_eq!(v(32).adapt_event_message("Created", new), None);
        assert_eq!(v(34).adapt_event_message("Created", new), None);
        // Other reasons, and messages not in the newest wording, are kept.
        assert_eq!(
            v(22).adapt_event_message("Started", "Started container c"),
            None
        );
        assert_eq!(v(22).adapt_event_message("Created", "Created pod"), None);
    }

    #[test]
    fn csr_usages_follow_the_approver() {
        let v = |minor| ServerVersion { minor };
        assert_eq!(
            v(22).client_csr_usages(),
            ["digital signature", "key encipherment", "client auth"]
        );
        assert_eq!(
            v(24).serving_csr_usages(),
            ["digital signature", "key encipherment", "server auth"]
        );
        assert_eq!(
            v(25).client_csr_usages(),
            ["digital signature", "client auth"]
        );
        assert_eq!(
            NEWEST.serving_csr_usages(),
            ["digital signature", "server auth"]
        );
    }

    #[test]
    fn adaptations_are_listed_for_old_servers_only() {
        assert!(NEWEST.adaptations().is_empty());
        let old = ServerVersion { minor: 22 }.adaptations();
        assert_eq!(old.len(), 8, "{old:?}");
        assert_eq!(ServerVersion { minor: 29 }.adaptations().len(), 2);
        assert_eq!(ServerVersion { minor: 31 }.adaptations().len(), 1);
        assert!(ServerVersion { minor: 33 }.adaptations().is_empty());
    }

    #[test]
    fn old_servers_get_no_fields_they_drop() {
        use k8s_openapi::api::core::v1::{ContainerStatus, HostIP, VolumeMountStatus};
        let full = PodStatus {
            host_ips: Some(vec![HostIP {
                ip: "10.0.0.1".into(),
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                volume_mounts: Some(vec![VolumeMountStatus {
                    name: "v".into(),
                    mount_path: "/v".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let pruned = |minor| {
            let mut s = full.clone();
            ServerVersion { minor }.adapt_pod_status(&mut s);
            s
        };
        assert_eq!(pruned(34), full);
        let at_30 = pruned(30);
        assert!(at_30.host_ips.is_some());
        assert!(at_30.container_statuses.as_ref().unwrap()[0]
            .volume_mounts
            .is_none());
        let at_22 = pruned(22);
        assert!(at_22.host_ips.is_none());
        assert_eq!(at_22.container_statuses.unwrap()[0].name, "c");
    }

    #[test]
    fn old_servers_get_their_own_releases_statuses() {
        use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition};
        let cond = |t: &str, reason: Option<&str>| PodCondition {
            type_: t.into(),
            status: "False".into(),
            reason: reason.map(Into::into),
            ..Default::default()
        };
        let full = PodStatus {
            message: Some("Pod was rejected: Node didn't have enough resource: cpu".into()),
            conditions: Some(vec![
                cond("PodReadyToStartContainers", None),
                cond("Ready", Some("PodFailed")),
                cond("ContainersReady", Some("PodFailed")),
            ]),
            init_container_statuses: Some(vec![ContainerStatus {
                name: "i".into(),
                started: Some(false),
                ..Default::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "c".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let at = |minor| {
            let mut s = full.clone();
            ServerVersion { minor }.adapt_pod_status(&mut s);
            s
        };
        assert_eq!(at(32), full);
        let v22 = at(22);
        assert_eq!(
            v22.message.as_deref(),
            Some("Pod Node didn't have enough resource: cpu")
        );
        let conditions = v22.conditions.unwrap();
        assert_eq!(conditions.len(), 2);
        for c in conditions {
            assert_eq!(c.reason.as_deref(), Some("ContainersNotReady"));
            assert_eq!(
                c.message.as_deref(),
                Some("containers with unready status: [c]")
            );
        }
        assert_eq!(v22.init_container_statuses.unwrap()[0].started, None);
    }

    #[test]
    fn resize_conditions_become_status_resize_before_1_33() {
        use k8s_openapi::api::core::v1::PodCondition;
        let cond = |t: &str, reason: Option<&str>| PodCondition {
            type_: t.into(),
            status: "True".into(),
            reason: reason.map(str::to_string),
            ..Default::default()
        };
        let status = |conds: Vec<PodCondition>| PodStatus {
            conditions: Some(conds),
            ..Default::default()
        };
        let pending = status(vec![
            cond("PodResizePending", Some("Deferred")),
            cond("Ready", None),
        ]);
        let at = |minor: u32, s: &PodStatus| {
            let mut s = s.clone();
            parse(&format!(
                r#"{{"major":"1","minor":"{minor}","gitVersion":"v1.{minor}.0"}}"#
            ))
            .unwrap()
            .adapt_pod_status(&mut s);
            s
        };
        let v134 = at(34, &pending);
        assert_eq!(v134.resize, None);
        assert_eq!(v134.conditions.as_ref().unwrap().len(), 2);
        let v127 = at(27, &pending);
        assert_eq!(v127.resize.as_deref(), Some("Deferred"));
        assert_eq!(v127.conditions.as_ref().unwrap().len(), 1);
        let moving = status(vec![cond("PodResizeInProgress", None)]);
        assert_eq!(at(32, &moving).resize.as_deref(), Some("InProgress"));
        let v126 = at(26, &moving);
        assert_eq!((v126.resize, v126.conditions.unwrap().len()), (None, 0));
    }
}
