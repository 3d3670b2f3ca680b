//! Whether the container runtime answered and is ready (upstream
//! `runtime.go` runtimeState), from the runtime-status thread's checks.

use super::*;

/// One CRI Version + Status answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeStatus {
    pub name: String,
    pub version: String,
    pub conditions: Vec<RuntimeCondition>,
}

/// A CRI runtime condition (RuntimeReady, NetworkReady, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeCondition {
    pub type_: String,
    pub status: bool,
    pub message: String,
}

impl RuntimeStatus {
    /// `Ok(())` when the condition is true, else why not.
    fn check(&self, type_: &str) -> Result<(), String> {
        match self.conditions.iter().find(|c| c.type_ == type_) {
            Some(c) if c.status => Ok(()),
            Some(c) => Err(c.message.clone()),
            None => Err(format!("{type_} condition missing")),
        }
    }
}

/// Whether the runtime answered and is ready (upstream runtimeState).
#[derive(Default)]
pub struct RuntimeState {
    inner: Mutex<RuntimeStateInner>,
}

impl RuntimeState {
    fn lock(&self) -> std::sync::MutexGuard<'_, RuntimeStateInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What keeps pods from being synced; empty when the runtime is fine.
    pub fn runtime_errors(&self) -> Vec<String> {
        let st = self.lock();
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

    pub fn network_error(&self) -> Option<String> {
        self.lock().network_error.clone()
    }

    /// `(name, version)` from CRI Version, once the runtime answered.
    pub fn runtime_version(&self) -> Option<(String, String)> {
        let st = self.lock();
        (!st.runtime_name.is_empty()).then(|| (st.runtime_name.clone(), st.runtime_version.clone()))
    }

    pub fn runtime_name(&self) -> String {
        let name = self.lock().runtime_name.clone();
        if name.is_empty() {
            "containerd".into()
        } else {
            name
        }
    }

    /// Records one CRI Status answer (upstream updateRuntimeUp).
    pub fn update(&self, result: Result<RuntimeStatus, String>) {
        let mut st = self.lock();
        match result {
            Err(e) => st.runtime_error = Some(format!("container runtime is down: {e}")),
            Ok(status) => {
                st.runtime_error = status
                    .check("RuntimeReady")
                    .err()
                    .map(|m| format!("container runtime not ready: {m}"));
                st.network_error = status
                    .check("NetworkReady")
                    .err()
                    .map(|m| format!("container runtime network not ready: {m}"));
                st.runtime_name = status.name;
                st.runtime_version = status.version;
                if st.runtime_error.is_none() {
                    st.last_base_sync = Some(Instant::now());
                }
            }
        }
    }
}
