//! Whether the container runtime answered and is ready (upstream
//! `runtime.go` runtimeState), from the runtime-status thread's checks.

use rkubelet_util::lock;

use super::*;
use crate::cri::CriError;

use crate::container::{RuntimeFeatures, RuntimeHandler};
use crate::cri::api;

/// One CRI Status answer, and CRI Version's when it was asked too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStatus {
    /// The runtime's `(name, version)`.
    pub version: Option<(String, String)>,
    pub conditions: Vec<RuntimeCondition>,
    /// In the runtime's order (upstream toKubeRuntimeStatus).
    pub handlers: Vec<RuntimeHandler>,
    pub features: Option<RuntimeFeatures>,
}

impl RuntimeStatus {
    /// The kubelet's view of a CRI Status answer (upstream
    /// toKubeRuntimeStatus): a handler without features supports none.
    pub fn from_cri(version: Option<(String, String)>, s: &api::StatusResponse) -> Self {
        RuntimeStatus {
            version,
            conditions: s
                .status
                .iter()
                .flat_map(|st| st.conditions.iter())
                .map(|c| RuntimeCondition {
                    type_: c.type_.clone(),
                    status: c.status,
                    message: c.message.clone(),
                })
                .collect(),
            handlers: s
                .runtime_handlers
                .iter()
                .map(crate::kuberuntime::helpers::to_runtime_handler)
                .collect(),
            features: s.features.as_ref().map(|f| RuntimeFeatures {
                supplemental_groups_policy: f.supplemental_groups_policy,
            }),
        }
    }
}

#[derive(Default)]
pub(super) struct RuntimeStateInner {
    last_base_sync: Option<Instant>,
    runtime_error: Option<String>,
    network_error: Option<String>,
    runtime_name: String,
    runtime_version: String,
    /// Status checks since CRI Version was last asked; None before the
    /// first answer and after a failed check.
    checks_since_version: Option<u32>,
    /// As of the last answer that said the runtime is ready (upstream
    /// sets them only then).
    handlers: Vec<RuntimeHandler>,
    features: Option<RuntimeFeatures>,
}

/// CRI Version is asked on every this many status checks (every 10 s, as
/// upstream's node status asks it; upstream's status check asks only
/// Status), and on the first check after a failed one.
const VERSION_EVERY_CHECKS: u32 = 2;

/// A CRI runtime condition (RuntimeReady, NetworkReady, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeCondition {
    pub type_: String,
    pub status: bool,
    pub message: String,
}

impl RuntimeStatus {
    /// Why the condition is not true; None when it is.
    fn not_true(&self, type_: &str) -> Option<String> {
        match self.conditions.iter().find(|c| c.type_ == type_) {
            Some(c) if c.status => None,
            Some(c) => Some(c.message.clone()),
            None => Some(format!("{type_} condition missing")),
        }
    }
}

/// Told when the runtime goes down or comes back.
pub type OnRuntimeChange = Box<dyn Fn() + Send + Sync>;

/// Whether the runtime answered and is ready (upstream runtimeState).
#[derive(Default)]
pub struct RuntimeState {
    inner: Mutex<RuntimeStateInner>,
    on_change: Option<OnRuntimeChange>,
}

impl RuntimeState {
    /// `on_change` is told when the runtime goes down or comes back (node
    /// status, so the Ready condition follows at once).
    pub fn new(on_change: Option<OnRuntimeChange>) -> Self {
        RuntimeState {
            inner: Mutex::default(),
            on_change,
        }
    }

    /// What keeps pods from being synced; empty when the runtime is fine.
    pub fn runtime_errors(&self) -> Vec<String> {
        let st = lock(&self.inner);
        let mut errs = Vec::new();
        match st.last_base_sync {
            None => {
                errs.push("container runtime status check may not have completed yet".to_string())
            }
            Some(t) if t.elapsed() > RUNTIME_SYNC_THRESHOLD => {
                errs.push("container runtime is down".to_string())
            }
            Some(_) => {}
        }
        errs.extend(st.runtime_error.clone());
        errs
    }

    /// Whether a status check has completed, whatever it found.
    pub fn checked(&self) -> bool {
        let st = lock(&self.inner);
        st.last_base_sync.is_some() || st.runtime_error.is_some()
    }

    pub fn network_error(&self) -> Option<String> {
        lock(&self.inner).network_error.clone()
    }

    /// Whether the next check asks CRI Version too.
    pub fn version_due(&self) -> bool {
        let st = lock(&self.inner);
        st.runtime_error.is_some()
            || st
                .checks_since_version
                .is_none_or(|n| n >= VERSION_EVERY_CHECKS)
    }

    /// `(name, version)` from CRI Version, once the runtime answered.
    pub fn runtime_version(&self) -> Option<(String, String)> {
        let st = lock(&self.inner);
        (!st.runtime_name.is_empty()).then(|| (st.runtime_name.clone(), st.runtime_version.clone()))
    }

    /// The runtime's handlers and what each supports (upstream
    /// runtimeState.runtimeHandlers); empty before the runtime was ready.
    pub fn runtime_handlers(&self) -> Vec<RuntimeHandler> {
        lock(&self.inner).handlers.clone()
    }

    /// upstream runtimeState.runtimeFeatures.
    pub fn runtime_features(&self) -> Option<RuntimeFeatures> {
        lock(&self.inner).features
    }

    pub fn runtime_name(&self) -> String {
        let name = lock(&self.inner).runtime_name.clone();
        if name.is_empty() {
            "containerd".into()
        } else {
            name
        }
    }

    /// Tells the change callback that something else the Ready condition
    /// reads changed (the node shutting down).
    pub fn node_status_changed(&self) {
        if let Some(f) = &self.on_change {
            f();
        }
    }

    /// Records one CRI Status answer (upstream updateRuntimeUp), and tells
    /// the change callback when the runtime went down or came back.
    pub fn update(&self, result: Result<RuntimeStatus, CriError>) {
        let was_up = self.runtime_errors().is_empty();
        self.record(result);
        if was_up != self.runtime_errors().is_empty() {
            if let Some(f) = &self.on_change {
                f();
            }
        }
    }

    fn record(&self, result: Result<RuntimeStatus, CriError>) {
        let mut st = lock(&self.inner);
        match result {
            Err(e) => {
                st.runtime_error = Some(format!("container runtime is down: {e}"));
                st.checks_since_version = None;
            }
            Ok(status) => {
                st.runtime_error = status
                    .not_true("RuntimeReady")
                    .map(|m| format!("container runtime not ready: {m}"));
                st.network_error = status
                    .not_true("NetworkReady")
                    .map(|m| format!("container runtime network not ready: {m}"));
                st.checks_since_version = match status.version {
                    Some((name, version)) => {
                        st.runtime_name = name;
                        st.runtime_version = version;
                        Some(1)
                    }
                    None => st.checks_since_version.map(|n| n + 1),
                };
                if st.runtime_error.is_none() {
                    st.last_base_sync = Some(Instant::now());
                    st.handlers = status.handlers;
                    st.features = status.features;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn refused() -> Result<RuntimeStatus, CriError> {
        Err(CriError {
            method: "Status",
            code: None,
            message: "connection refused".into(),
        })
    }

    fn ready() -> Result<RuntimeStatus, CriError> {
        Ok(RuntimeStatus {
            version: Some(("containerd".into(), "1.7".into())),
            conditions: ["RuntimeReady", "NetworkReady"]
                .into_iter()
                .map(|t| RuntimeCondition {
                    type_: t.into(),
                    status: true,
                    message: String::new(),
                })
                .collect(),
            ..Default::default()
        })
    }

    /// CRI Status's handlers and features, as upstream converts them, are
    /// kept only from an answer that says the runtime is ready.
    #[test]
    fn handlers_and_features_come_from_a_ready_runtime() {
        let cri = api::StatusResponse {
            status: protobuf::MessageField::some(api::RuntimeStatus {
                conditions: vec![api::RuntimeCondition {
                    type_: "RuntimeReady".into(),
                    status: true,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            runtime_handlers: vec![
                api::RuntimeHandler {
                    name: String::new(),
                    features: protobuf::MessageField::some(api::RuntimeHandlerFeatures {
                        recursive_read_only_mounts: true,
                        user_namespaces: true,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                api::RuntimeHandler {
                    name: "kata".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let status = RuntimeStatus::from_cri(None, &cri);
        assert_eq!(
            status.handlers,
            [
                RuntimeHandler {
                    name: String::new(),
                    supports_recursive_read_only_mounts: true,
                    supports_user_namespaces: true,
                },
                RuntimeHandler {
                    name: "kata".into(),
                    ..Default::default()
                },
            ]
        );
        assert_eq!(status.features, None, "an old runtime sends no features");
        let state = RuntimeState::new(None);
        let mut not_ready = status.clone();
        not_ready.conditions[0].status = false;
        state.update(Ok(not_ready));
        assert!(state.runtime_handlers().is_empty(), "kept only once ready");
        state.update(Ok(status));
        assert_eq!(state.runtime_handlers().len(), 2);
        let with_features = api::StatusResponse {
            features: protobuf::MessageField::some(api::RuntimeFeatures {
                supplemental_groups_policy: true,
                ..Default::default()
            }),
            ..cri
        };
        state.update(Ok(RuntimeStatus::from_cri(None, &with_features)));
        assert_eq!(
            state.runtime_features(),
            Some(RuntimeFeatures {
                supplemental_groups_policy: true
            })
        );
    }

    /// The callback fires on each flip between up and down, never on a
    /// repeat of the same state.
    #[test]
    fn change_callback_fires_when_the_runtime_goes_down_or_comes_back() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = Arc::clone(&calls);
        let state = RuntimeState::new(Some(Box::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })));
        assert!(!state.runtime_errors().is_empty(), "no check yet: down");
        assert!(!state.checked());
        state.update(ready());
        assert!(state.checked());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "came up");
        state.update(ready());
        assert_eq!(calls.load(Ordering::SeqCst), 1, "still up");
        state.update(refused());
        assert_eq!(calls.load(Ordering::SeqCst), 2, "went down");
        assert!(state.runtime_errors()[0].contains("connection refused"));
        state.update(refused());
        assert_eq!(calls.load(Ordering::SeqCst), 2, "still down");
        state.update(ready());
        assert_eq!(calls.load(Ordering::SeqCst), 3, "back");
    }

    #[test]
    fn version_is_asked_every_other_check_and_after_a_failure() {
        let state = RuntimeState::new(None);
        assert!(state.version_due(), "nothing known yet");
        state.update(ready());
        assert_eq!(
            state.runtime_version(),
            Some(("containerd".into(), "1.7".into()))
        );
        assert!(!state.version_due(), "just asked");
        let status_only = || ready().map(|s| RuntimeStatus { version: None, ..s });
        state.update(status_only());
        assert!(state.version_due(), "two checks since");
        assert_eq!(
            state.runtime_version().map(|v| v.1),
            Some("1.7".into()),
            "kept"
        );
        state.update(ready());
        assert!(!state.version_due());
        state.update(refused());
        assert!(state.version_due(), "the runtime may have been replaced");
    }
}
