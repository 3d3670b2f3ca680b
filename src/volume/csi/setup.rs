//! Set-up of a CSI volume (upstream `csiAttacher.MountDevice` and
//! `csiMountMgr.SetUpAt`): attachment, the volume context, secrets, then
//! `NodeStageVolume` and `NodePublishVolume` as one operation on the
//! completion-queue thread; and tear-down's operation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{CSIVolumeSource, Pod};
use rkubelet_util::lock;
use serde_json::{json, Value};

use super::block::{self, Layout};
use super::client::{block_capability, mount_capability};
use super::driver::{DriverSpec, FsGroupPolicy};
use super::voldata::{LifecycleMode, VolData};
use super::{
    attachment_name, inline_volume_handle, not_registered, unique_volume_name, CsiPlugin, Driver,
    Mount, Op, OpKind, OpState, Work,
};
use crate::client::paths;
use crate::cri::csi::v1::csi;
use crate::podutil::PodExt;
use crate::volume::{MountedVolume, PluginKind, SetUpContext, VolumeError};

/// A secret by namespace and name.
pub type SecretRef = (String, String);

/// A CSI volume as a pod's inline volume or a PersistentVolume names it.
#[derive(Debug, Clone, PartialEq)]
pub struct CsiVolume {
    pub driver: String,
    pub handle: String,
    /// The PV's name, or the pod's volume name for an inline volume.
    pub spec_name: String,
    pub mode: LifecycleMode,
    pub read_only: bool,
    pub fs_type: String,
    pub attributes: HashMap<String, String>,
    pub stage_secret: Option<SecretRef>,
    pub publish_secret: Option<SecretRef>,
    /// The PV's first access mode; empty for an inline volume.
    pub access_mode: String,
    pub mount_flags: Vec<String>,
    /// `(namespace, name)` of the claim that named the PV.
    pub claim: Option<(String, String)>,
    /// The PV's `capacity.storage`, in bytes and as written.
    pub capacity: Option<(i64, String)>,
    /// The PV is larger than its claim's status says: `NodeExpandVolume`
    /// after publishing, then the claim's status (upstream's resize at
    /// mount).
    pub expand: bool,
    /// A raw block device (the PV's `volumeMode: Block`), for the pod's
    /// `volumeDevices`.
    pub block: bool,
}

impl CsiVolume {
    /// An inline `csi` volume of `pod`.
    pub fn inline(pod: &Pod, name: &str, src: &CSIVolumeSource) -> CsiVolume {
        CsiVolume {
            driver: src.driver.clone(),
            handle: inline_volume_handle(pod.uid(), name),
            spec_name: name.to_string(),
            mode: LifecycleMode::Ephemeral,
            read_only: src.read_only.unwrap_or(false),
            fs_type: src.fs_type.clone().unwrap_or_default(),
            attributes: src
                .volume_attributes
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            stage_secret: None,
            publish_secret: src
                .node_publish_secret_ref
                .as_ref()
                .map(|r| (pod.namespace().to_string(), r.name.clone())),
            access_mode: String::new(),
            mount_flags: Vec::new(),
            claim: None,
            capacity: None,
            expand: false,
            block: false,
        }
    }

    /// A PersistentVolume whose source is `csi`, as the API sends it;
    /// `claim_read_only` is the pod's `readOnly` for the claim.
    pub fn persistent(pv: &Value, claim_read_only: bool) -> Result<CsiVolume, String> {
        let csi = &pv["spec"]["csi"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let driver = text(&csi["driver"]);
        let handle = text(&csi["volumeHandle"]);
        if driver.is_empty() || handle.is_empty() {
            return Err("spec.csi: driver and volumeHandle are required".into());
        }
        let secret = |v: &Value| {
            v["name"].as_str().map(|n| {
                (
                    v["namespace"].as_str().unwrap_or_default().to_string(),
                    n.to_string(),
                )
            })
        };
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        Ok(CsiVolume {
            driver,
            handle,
            spec_name: text(&pv["metadata"]["name"]),
            mode: LifecycleMode::Persistent,
            read_only: claim_read_only || csi["readOnly"].as_bool() == Some(true),
            fs_type: text(&csi["fsType"]),
            attributes: csi["volumeAttributes"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), text(v)))
                .collect(),
            stage_secret: secret(&csi["nodeStageSecretRef"]),
            publish_secret: secret(&csi["nodePublishSecretRef"]),
            access_mode: strings(&pv["spec"]["accessModes"])
                .into_iter()
                .next()
                .unwrap_or_default(),
            mount_flags: strings(&pv["spec"]["mountOptions"]),
            claim: None,
            capacity: pv["spec"]["capacity"]["storage"].as_str().and_then(|q| {
                let bytes = crate::util::quantity::parse_quantity_value(q).ok()?;
                Some((i64::try_from(bytes).ok()?, q.to_string()))
            }),
            expand: false,
            block: pv["spec"]["volumeMode"] == "Block",
        })
    }
}

/// Everything one set-up operation sends, made before it starts.
struct Prepared {
    driver: Driver,
    stage: Option<csi::NodeStageVolumeRequest>,
    publish: csi::NodePublishVolumeRequest,
    /// Applied to the published files when the driver's policy says so.
    fs_group: Option<i64>,
    republish: bool,
    /// Bytes to expand to after publishing.
    expand: Option<i64>,
    /// A block volume's paths: the pod's link is made once published.
    link: Option<Layout>,
}

impl CsiPlugin {
    /// Sets up (or checks) one CSI volume of a pod. `Pending` while its
    /// operation runs; the volume manager is woken when it ends.
    pub fn set_up(
        self: &Arc<Self>,
        ctx: &SetUpContext<'_>,
        name: &str,
        vol: &CsiVolume,
    ) -> Result<MountedVolume, VolumeError> {
        let layout = if vol.block {
            self.block_layout(ctx.pod_dir, &vol.spec_name)
        } else {
            self.filesystem_layout(
                &ctx.volume_dir(PluginKind::Csi, &vol.spec_name),
                &vol.spec_name,
            )
        };
        let target = layout.key.clone();
        let mounted = MountedVolume {
            kind: PluginKind::Csi,
            host_path: target.clone(),
            read_only: vol.read_only,
            block: vol.block,
        };
        let unique = unique_volume_name(&vol.driver, &vol.handle);
        if vol.mode.is_persistent() {
            self.want_in_use(ctx.pod.uid(), &unique);
        }
        match self.mount_state(&target) {
            Some(OpState::Running) => return Err(VolumeError::Pending),
            Some(OpState::Failed(e)) => {
                lock(&self.ops).retain(|o| o.target != target);
                return Err(VolumeError::Failed(e));
            }
            Some(OpState::Published { republish: false }) => {
                // (the claim just read predates a status update made now)
                if !self.finish_resize(&target, vol)? {
                    self.expand_in_use(&target, vol);
                }
                return Ok(mounted);
            }
            Some(OpState::Published { republish: true }) => {
                // upstream requiresRepublish: NodePublishVolume again at each
                // remount; the volume stays in use meanwhile.
                let prepared = self.prepare(ctx, vol, &layout)?;
                self.spawn_set_up(prepared, target, false);
                return Ok(mounted);
            }
            _ => {}
        }
        let prepared = self.prepare(ctx, vol, &layout)?;
        // (upstream does not expand a read-only volume)
        let expandable =
            vol.claim.is_some() && !vol.block && !vol.read_only && prepared.driver.caps.expand;
        let mut ops = lock(&self.ops);
        ops.retain(|o| o.target != target);
        ops.push(Op {
            target: target.clone(),
            handle: vol.handle.clone(),
            driver: vol.driver.clone(),
            state: OpState::Running,
            in_use: vol.mode.is_persistent().then_some(unique),
            work: Work::Mount(Mount {
                volume: name.to_string(),
                pod_uid: ctx.pod.uid().to_string(),
                claim: vol.claim.clone(),
                read_only: vol.read_only,
                resized: false,
                expandable,
                checked: Instant::now(),
                expanding: false,
            }),
        });
        drop(ops);
        self.spawn_set_up(prepared, target, true);
        Err(VolumeError::Pending)
    }

    /// The claim's status after `NodeExpandVolume`: the PV's capacity, and
    /// no FileSystemResizePending condition (upstream MarkFSResizeFinished,
    /// a strategic merge patch). Runs on the volume manager's thread.
    /// Whether the claim was updated.
    fn finish_resize(&self, target: &Path, vol: &CsiVolume) -> Result<bool, VolumeError> {
        let pending = self.with_mount(target, |m| m.resized) == Some(true);
        let (Some((ns, claim)), Some((_, quantity)), true) = (&vol.claim, &vol.capacity, pending)
        else {
            return Ok(false);
        };
        let patch = json!({"status": {
            "capacity": {"storage": quantity},
            "conditions": [{"type": "FileSystemResizePending", "$patch": "delete"}],
        }});
        let path = format!("{}/status", paths::persistent_volume_claim(ns, claim));
        self.client
            .patch::<Value>(&path, crate::client::PatchType::StrategicMerge, &patch)
            .map_err(|e| {
                VolumeError::Failed(format!(
                    "update the status of claim {ns}/{claim} after expanding: {e}"
                ))
            })?;
        self.with_mount(target, |m| m.resized = false);
        log::info!(
            "volume {} of claim {ns}/{claim} expanded to {quantity}",
            vol.handle
        );
        Ok(true)
    }

    /// Upstream's expansion in use: the claim of a published volume was
    /// just read again; when the PV has grown past the claim's status,
    /// `NodeExpandVolume` on the mounted volume, then (at the next pass)
    /// the claim's status. The volume stays in use throughout.
    fn expand_in_use(self: &Arc<Self>, target: &Path, vol: &CsiVolume) {
        let start = self.with_mount(target, |m| {
            m.checked = Instant::now();
            let start = m.expandable && vol.expand && !m.expanding && !m.resized;
            m.expanding |= start;
            start
        });
        let (Some(true), Some((bytes, _))) = (start, vol.capacity.clone()) else {
            return;
        };
        let Some(driver) = self.driver(&vol.driver) else {
            self.with_mount(target, |m| m.expanding = false);
            return;
        };
        let staging = if driver.caps.stage_unstage {
            target_path(&self.global_dir(&vol.spec_name).join("globalmount"))
        } else {
            String::new()
        };
        let (me, conn, target) = (Arc::clone(self), driver.conn.clone(), target.to_path_buf());
        let handle = vol.handle.clone();
        driver.conn.spawn(async move {
            let result = conn
                .expand(handle.clone(), target_path(&target), staging, bytes)
                .await;
            if let Err(e) = &result {
                log::warn!(
                    "NodeExpandVolume of volume {handle} at {}: {e}",
                    target.display()
                );
            }
            me.with_mount(&target, |m| {
                m.expanding = false;
                m.resized = result.is_ok();
            });
            me.wake();
        });
    }

    fn mount_state(&self, target: &Path) -> Option<OpState> {
        self.with_op(target, OpKind::Mount, |o| o.state.clone())
    }

    /// The CSIDriver object of `name`; upstream's defaults when there is none.
    fn driver_spec(&self, name: &str) -> Result<Option<DriverSpec>, VolumeError> {
        match self.client.get::<Value>(&paths::csi_driver(name)) {
            Ok(obj) => DriverSpec::from_object(&obj)
                .map(Some)
                .map_err(|e| VolumeError::Invalid(format!("CSIDriver {name}: {e}"))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(VolumeError::Failed(format!("get CSIDriver {name}: {e}"))),
        }
    }

    /// Checks everything and builds the requests; writes `vol_data.json`.
    fn prepare(
        &self,
        ctx: &SetUpContext<'_>,
        vol: &CsiVolume,
        layout: &Layout,
    ) -> Result<Prepared, VolumeError> {
        let driver = self
            .driver(&vol.driver)
            .ok_or_else(|| VolumeError::NotFound(not_registered(&vol.driver)))?;
        let found = self.driver_spec(&vol.driver)?;
        let spec = found.clone().unwrap_or_default();
        if !spec.supports(vol.mode) {
            return Err(VolumeError::Invalid(match found {
                Some(_) => format!(
                    "volume mode {:?} not supported by driver {} (only supports {:?})",
                    vol.mode.as_str(),
                    vol.driver,
                    spec.modes.iter().map(|m| m.as_str()).collect::<Vec<_>>()
                ),
                None => format!(
                    "volume mode {:?} not supported by driver {} (no CSIDriver object)",
                    vol.mode.as_str(),
                    vol.driver
                ),
            }));
        }
        let attach = vol.mode.is_persistent() && spec.attach_required;
        let (attachment_id, publish_context) = if attach {
            self.attachment(vol)?
        } else {
            (String::new(), HashMap::new())
        };
        let volume_context = volume_context(ctx, vol, &spec)?;
        let cap = if vol.block {
            block_capability(&vol.access_mode)
        } else {
            mount_capability(&vol.fs_type, vol.mount_flags.clone(), &vol.access_mode)
        };
        let data = VolData {
            driver: vol.driver.clone(),
            volume_handle: vol.handle.clone(),
            spec_vol_id: vol.spec_name.clone(),
            node_name: self.node_name.clone(),
            attachment_id,
            mode: vol.mode,
        };
        let io = |what: &Path, e: std::io::Error| {
            VolumeError::Failed(format!("{}: {e}", what.display()))
        };
        let stages = vol.mode.is_persistent() && driver.caps.stage_unstage;
        // Staged once per volume, as upstream's device mount: a pod joining
        // a staged volume is only published.
        let stage = if stages && !self.staged(&vol.driver, &vol.handle)? {
            let global = &layout.global_data;
            data.save(global).map_err(|e| io(global, e))?;
            let staging = &layout.staging;
            std::fs::create_dir_all(staging).map_err(|e| io(staging, e))?;
            Some(csi::NodeStageVolumeRequest {
                volume_id: vol.handle.clone(),
                publish_context: publish_context.clone(),
                staging_target_path: target_path(staging),
                volume_capability: protobuf::MessageField::some(cap.clone()),
                secrets: secrets(ctx, vol.stage_secret.as_ref())?,
                volume_context: vol.attributes.clone(),
                ..Default::default()
            })
        } else {
            None
        };
        let dir = &layout.pod_data;
        data.save(dir).map_err(|e| io(dir, e))?;
        if let Some(parent) = layout.publish.parent().filter(|_| layout.block) {
            // the driver makes the device file; its directory is ours
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            // The pod's link before anything is staged: a pod that goes
            // before its device is published is still found and torn down.
            block::link_pod_device(layout).map_err(VolumeError::Failed)?;
        }
        let publish = csi::NodePublishVolumeRequest {
            volume_id: vol.handle.clone(),
            publish_context,
            staging_target_path: if stages {
                target_path(&layout.staging)
            } else {
                String::new()
            },
            target_path: target_path(&layout.publish),
            volume_capability: protobuf::MessageField::some(cap),
            readonly: vol.read_only,
            secrets: secrets(ctx, vol.publish_secret.as_ref())?,
            volume_context,
            ..Default::default()
        };
        Ok(Prepared {
            stage,
            publish,
            fs_group: ctx
                .fs_group()
                .filter(|_| !vol.block && applies_fs_group(&spec, vol)),
            republish: spec.requires_republish,
            expand: vol
                .capacity
                .as_ref()
                .map(|(bytes, _)| *bytes)
                .filter(|_| vol.expand && !vol.block && !vol.read_only && driver.caps.expand),
            link: layout.block.then(|| layout.clone()),
            driver,
        })
    }

    /// Whether another pod's set-up has staged the volume. `Pending` while
    /// another operation on it runs, and while a tear-down of it is not
    /// yet collected (it may have unstaged it): one operation per volume
    /// at a time, as upstream's.
    fn staged(&self, driver: &str, handle: &str) -> Result<bool, VolumeError> {
        let ops = lock(&self.ops);
        let mut same = ops
            .iter()
            .filter(|o| o.driver == driver && o.handle == handle);
        let busy = |o: &&Op| o.state == OpState::Running || o.kind() == OpKind::Unmount;
        if same.clone().any(|o| busy(&o)) {
            return Err(VolumeError::Pending);
        }
        Ok(same.any(|o| matches!(o.state, OpState::Published { .. })))
    }

    /// The attachment's ID and `attachmentMetadata` (the publish context)
    /// once the attach-detach controller has attached the volume here.
    pub(super) fn attachment(
        &self,
        vol: &CsiVolume,
    ) -> Result<(String, HashMap<String, String>), VolumeError> {
        let unique = unique_volume_name(&vol.driver, &vol.handle);
        if !self.reported_in_use(&unique) {
            return Err(VolumeError::NotFound(format!(
                "volume {unique:?} has not been added to the list of VolumesInUse in the node's volume status"
            )));
        }
        if !self.attached_per_node_status(&unique) {
            return Err(VolumeError::NotFound(format!(
                "volume {unique:?} is not yet attached according to node status (volumesAttached)"
            )));
        }
        let name = attachment_name(&vol.handle, &vol.driver, &self.node_name);
        let va: Value = match self.client.get(&paths::volume_attachment(&name)) {
            Ok(v) => v,
            // The node authorizer answers 403 for an attachment that does
            // not name this node yet, as for one that does not exist.
            Err(e) if e.is_not_found() || e.is_forbidden() => {
                return Err(VolumeError::NotFound(format!(
                    "volume {} is not attached yet: VolumeAttachment {name} does not exist",
                    vol.handle
                )))
            }
            Err(e) => {
                return Err(VolumeError::Failed(format!(
                    "get VolumeAttachment {name}: {e}"
                )))
            }
        };
        let status = &va["status"];
        if status["attached"].as_bool() != Some(true) {
            return Err(match status["attachError"]["message"].as_str() {
                Some(m) => {
                    VolumeError::Failed(format!("VolumeAttachment {name}: attach failed: {m}"))
                }
                None => VolumeError::NotFound(format!(
                    "volume {} is not attached yet: VolumeAttachment {name} is not attached",
                    vol.handle
                )),
            });
        }
        let metadata = status["attachmentMetadata"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        Ok((name, metadata))
    }

    fn spawn_set_up(self: &Arc<Self>, p: Prepared, target: PathBuf, record: bool) {
        let me = Arc::clone(self);
        let conn = p.driver.conn.clone();
        p.driver.conn.spawn(async move {
            let mut result = Ok(());
            let read_only = p.publish.readonly;
            let (volume_id, staging) = (
                p.publish.volume_id.clone(),
                p.publish.staging_target_path.clone(),
            );
            if let Some(req) = p.stage {
                result = conn.stage(req).await;
            }
            if result.is_ok() {
                result = conn.publish(p.publish).await;
            }
            if let (Ok(()), Some(layout)) = (&result, &p.link) {
                result = block::link_pod_device(layout);
            }
            if let (Ok(()), Some(bytes)) = (&result, p.expand) {
                result = conn
                    .expand(volume_id, target_path(&target), staging, bytes)
                    .await;
                if result.is_ok() {
                    me.with_mount(&target, |m| m.resized = true);
                }
            }
            if let (Ok(()), Some(gid)) = (&result, p.fs_group) {
                result = crate::volume::util::ownership::set_volume_ownership(
                    &target,
                    Some(gid),
                    read_only,
                )
                .map_err(|e| format!("applying fsGroup to {}: {e}", target.display()));
            }
            match (&result, record) {
                (_, true) => me.set_state(
                    &target,
                    OpKind::Mount,
                    match result {
                        Ok(()) => OpState::Published {
                            republish: p.republish,
                        },
                        Err(e) => OpState::Failed(e),
                    },
                ),
                (Err(e), false) => log::warn!("republish {}: {e}", target.display()),
                (Ok(()), false) => {}
            }
        });
    }
}

/// A path as the CSI requests carry it.
pub(super) fn target_path(target: &Path) -> String {
    target.to_string_lossy().into_owned()
}

/// Whether the driver's fsGroupPolicy asks the kubelet to apply fsGroup.
fn applies_fs_group(spec: &DriverSpec, vol: &CsiVolume) -> bool {
    match spec.fs_group_policy {
        FsGroupPolicy::None => false,
        FsGroupPolicy::File => true,
        FsGroupPolicy::ReadWriteOnceWithFsType => {
            !vol.fs_type.is_empty()
                && (vol.access_mode == "ReadWriteOnce" || !vol.mode.is_persistent())
        }
    }
}

/// The volume's attributes, plus the pod's identity when the driver asks
/// (`podInfoOnMount`) and service account tokens (`tokenRequests`).
fn volume_context(
    ctx: &SetUpContext<'_>,
    vol: &CsiVolume,
    spec: &DriverSpec,
) -> Result<HashMap<String, String>, VolumeError> {
    let mut out = vol.attributes.clone();
    let pod = ctx.pod;
    if spec.pod_info_on_mount {
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        for (k, v) in [
            ("pod.name", pod.name().to_string()),
            ("pod.namespace", pod.namespace().to_string()),
            ("pod.uid", pod.uid().to_string()),
            ("serviceAccount.name", sa),
            (
                "ephemeral",
                (vol.mode == LifecycleMode::Ephemeral).to_string(),
            ),
        ] {
            out.insert(format!("csi.storage.k8s.io/{k}"), v);
        }
    }
    if !spec.token_requests.is_empty() {
        let mut tokens = serde_json::Map::new();
        for t in &spec.token_requests {
            let token = ctx
                .host
                .service_account_token(pod, &t.audience, t.expiration_seconds)
                .map_err(|e| {
                    VolumeError::Failed(format!("token for audience {:?}: {e}", t.audience))
                })?;
            let expires = k8s_openapi::jiff::Timestamp::now()
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(
                    t.expiration_seconds,
                ))
                .map(|t| t.to_string())
                .unwrap_or_default();
            tokens.insert(
                t.audience.clone(),
                json!({"token": token, "expirationTimestamp": expires}),
            );
        }
        out.insert(
            "csi.storage.k8s.io/serviceAccount.tokens".into(),
            Value::Object(tokens).to_string(),
        );
    }
    Ok(out)
}

/// A secret's data as strings; none when there is no reference.
fn secrets(
    ctx: &SetUpContext<'_>,
    reference: Option<&SecretRef>,
) -> Result<HashMap<String, String>, VolumeError> {
    let Some((ns, name)) = reference else {
        return Ok(HashMap::new());
    };
    let secret = ctx
        .host
        .secret(ns, name)
        .map_err(|e| VolumeError::Failed(e.to_string()))?
        .ok_or_else(|| VolumeError::NotFound(format!("secret {ns}/{name} not found")))?;
    Ok(secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect())
}
