//! What the kubelet reads of a `CSIDriver` object (storage.k8s.io/v1), with
//! upstream's defaults for a driver that has none: attach required, no pod
//! info, persistent volumes only, fsGroup applied to RWO volumes with an
//! fsType.

use serde_json::Value;

use super::voldata::LifecycleMode;

/// CSIDriver `fsGroupPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsGroupPolicy {
    ReadWriteOnceWithFsType,
    File,
    None,
}

/// One entry of `tokenRequests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    pub audience: String,
    pub expiration_seconds: i64,
}

/// The fields of a CSIDriver the node side honours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverSpec {
    pub attach_required: bool,
    pub pod_info_on_mount: bool,
    pub fs_group_policy: FsGroupPolicy,
    pub requires_republish: bool,
    pub token_requests: Vec<TokenRequest>,
    pub modes: Vec<LifecycleMode>,
}

impl Default for DriverSpec {
    /// No CSIDriver object (upstream's behaviour for an unknown driver).
    fn default() -> Self {
        DriverSpec {
            attach_required: true,
            pod_info_on_mount: false,
            fs_group_policy: FsGroupPolicy::ReadWriteOnceWithFsType,
            requires_republish: false,
            token_requests: Vec::new(),
            modes: vec![LifecycleMode::Persistent],
        }
    }
}

/// Upstream's default token lifetime when `expirationSeconds` is unset.
const DEFAULT_TOKEN_SECONDS: i64 = 3600;

impl DriverSpec {
    /// Reads a CSIDriver object as the API sends it. Unknown enum values
    /// are refused, naming the field.
    pub fn from_object(obj: &Value) -> Result<DriverSpec, String> {
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let flag = |k: &str| spec.get(k).and_then(Value::as_bool);
        let d = DriverSpec::default();
        let fs_group_policy = match spec.get("fsGroupPolicy").and_then(Value::as_str) {
            None | Some("ReadWriteOnceWithFSType") => FsGroupPolicy::ReadWriteOnceWithFsType,
            Some("File") => FsGroupPolicy::File,
            Some("None") => FsGroupPolicy::None,
            Some(other) => return Err(format!("spec.fsGroupPolicy: unknown value {other:?}")),
        };
        let modes = match spec.get("volumeLifecycleModes").and_then(Value::as_array) {
            None => d.modes,
            Some(list) => list
                .iter()
                .map(|m| match m.as_str() {
                    Some("Persistent") => Ok(LifecycleMode::Persistent),
                    Some("Ephemeral") => Ok(LifecycleMode::Ephemeral),
                    _ => Err(format!("spec.volumeLifecycleModes: unknown mode {m}")),
                })
                .collect::<Result<_, _>>()?,
        };
        let token_requests = spec
            .get("tokenRequests")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|t| TokenRequest {
                        audience: t
                            .get("audience")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .into(),
                        expiration_seconds: t
                            .get("expirationSeconds")
                            .and_then(Value::as_i64)
                            .unwrap_or(DEFAULT_TOKEN_SECONDS),
                    })
                    .collect()
            })
            .unwrap_or_default();
        if spec
            .get("seLinuxMount")
            .is_some_and(|v| v.as_bool() == Some(true))
        {
            log::warn!(
                "CSIDriver {}: spec.seLinuxMount is parsed but not honoured (volumes are \
                 mounted without an SELinux context; this node has no SELinux support)",
                obj.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            );
        }
        Ok(DriverSpec {
            attach_required: flag("attachRequired").unwrap_or(d.attach_required),
            pod_info_on_mount: flag("podInfoOnMount").unwrap_or(false),
            fs_group_policy,
            requires_republish: flag("requiresRepublish").unwrap_or(false),
            token_requests,
            modes,
        })
    }

    pub fn supports(&self, mode: LifecycleMode) -> bool {
        self.modes.contains(&mode)
    }
}
