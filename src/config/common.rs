//! Decoding, defaulting and validation shared by the file and http sources
//! (upstream pkg/kubelet/config/common.go plus the API server's v1 defaulting
//! and the parts of ValidatePodCreate that matter for static pods).

use crate::podutil::PodExt;
use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, DownwardAPIVolumeFile, EmptyDirVolumeSource, EnvVar, HTTPGetAction,
    LifecycleHandler, Pod, PodSpec, Probe, Toleration, Volume,
};
use md5::{Digest, Md5};
use serde::Deserialize;
use serde_json::Value;

use super::ManifestError;

use crate::types::{
    CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, FILE_SOURCE, HTTP_SOURCE, NAMESPACE_DEFAULT,
};

/// Largest manifest (file or HTTP body) the kubelet reads, as upstream.
pub const MAX_CONFIG_LENGTH: usize = 10 << 20;

const DEFAULT_TERMINATION_GRACE_PERIOD: i64 = 30;
const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
const TERMINATION_MESSAGE_PATH_DEFAULT: &str = "/dev/termination-log";
/// 0644, the default mode of secret, configMap, downwardAPI and projected volumes.
const VOLUME_DEFAULT_MODE: i32 = 0o644;
const SERVICE_ACCOUNT_TOKEN_DEFAULT_EXPIRATION: i64 = 3600;

/// Where a static pod manifest came from; it is part of the pod's UID.
#[derive(Clone, Copy, Debug)]
pub enum ManifestOrigin<'a> {
    /// A file under staticPodPath.
    File(&'a str),
    /// The staticPodURL.
    Url(&'a str),
}

impl ManifestOrigin<'_> {
    fn source_name(&self) -> &'static str {
        match self {
            ManifestOrigin::File(_) => FILE_SOURCE,
            ManifestOrigin::Url(_) => HTTP_SOURCE,
        }
    }
}

/// Makes a static pod's name unique among nodes by appending the node name.
pub fn generate_pod_name(name: &str, node_name: &str) -> String {
    format!("{}-{}", name, node_name.to_lowercase())
}

/// Parses one manifest holding a single Pod and returns it defaulted and validated.
pub fn decode_single_pod(
    data: &[u8],
    origin: ManifestOrigin,
    node_name: &str,
) -> Result<Pod, ManifestError> {
    let value = parse_document(data)?;
    check_type_meta(&value, &["Pod"])?;
    finish_pod(value, origin, node_name)
}

/// Parses a Pod, a PodList or a v1 List of Pods (the http source accepts all three).
/// Like upstream, one invalid pod in a list rejects the whole list.
pub fn decode_pods(
    data: &[u8],
    origin: ManifestOrigin,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let value = parse_document(data)?;
    match check_type_meta(&value, &["Pod", "PodList", "List"])?.as_str() {
        "Pod" => Ok(vec![finish_pod(value, origin, node_name)?]),
        _ => decode_list_items(value, origin, node_name),
    }
}

fn decode_list_items(
    value: Value,
    origin: ManifestOrigin,
    node_name: &str,
) -> Result<Vec<Pod>, ManifestError> {
    let items = match value {
        Value::Object(mut obj) => obj.remove("items").unwrap_or(Value::Null),
        _ => Value::Null,
    };
    let items = match items {
        Value::Array(items) => items,
        Value::Null => Vec::new(),
        _ => return Err(ManifestError::ItemsNotList),
    };
    let mut pods = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let pod = check_list_item(&item)
            .and_then(|()| finish_pod(item, origin, node_name))
            .map_err(|e| e.at(format!("items[{i}]")))?;
        pods.push(pod);
    }
    Ok(pods)
}

/// List items may omit their type; when they carry one it must be a v1 Pod.
fn check_list_item(item: &Value) -> Result<(), ManifestError> {
    let kind = item.get("kind").and_then(Value::as_str);
    let api_version = item.get("apiVersion").and_then(Value::as_str);
    if kind.is_some_and(|k| k != "Pod") || api_version.is_some_and(|v| v != "v1") {
        return Err(ManifestError::NotV1Pod {
            kind: kind.unwrap_or("").to_string(),
            api_version: api_version.unwrap_or("").to_string(),
        });
    }
    Ok(())
}

/// Reads YAML or JSON into a generic document. Like upstream's yaml.ToJSON,
/// only the first YAML document of a stream is used.
fn parse_document(data: &[u8]) -> Result<Value, ManifestError> {
    if data.len() > MAX_CONFIG_LENGTH {
        return Err(ManifestError::TooLarge);
    }
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        return non_null(value);
    }
    let value = match serde_norway::Deserializer::from_slice(data).next() {
        Some(doc) => Value::deserialize(doc).map_err(|e| ManifestError::Parse(e.to_string()))?,
        None => Value::Null,
    };
    non_null(value)
}

fn non_null(value: Value) -> Result<Value, ManifestError> {
    if value.is_null() {
        return Err(ManifestError::Parse("empty document".into()));
    }
    Ok(value)
}

/// Checks apiVersion/kind the way the API decoder does, and returns the kind.
fn check_type_meta(value: &Value, allowed_kinds: &[&str]) -> Result<String, ManifestError> {
    if !value.is_object() {
        return Err(ManifestError::Parse("not an object".into()));
    }
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind.is_empty() {
        return Err(ManifestError::Parse("Object 'Kind' is missing".into()));
    }
    if api_version.is_empty() {
        return Err(ManifestError::Parse(
            "Object 'apiVersion' is missing".into(),
        ));
    }
    if api_version != "v1" {
        return Err(ManifestError::UnknownVersion {
            kind: kind.to_string(),
            api_version: api_version.to_string(),
        });
    }
    if !allowed_kinds.contains(&kind) {
        return Err(ManifestError::WrongKind {
            kind: kind.to_string(),
            expected: allowed_kinds.join(" or "),
        });
    }
    Ok(kind.to_string())
}

/// Typed decode, API defaulting, kubelet defaulting and validation of one pod.
fn finish_pod(value: Value, origin: ManifestOrigin, node_name: &str) -> Result<Pod, ManifestError> {
    let mut pod: Pod =
        serde_json::from_value(value).map_err(|e| ManifestError::Parse(e.to_string()))?;
    if pod.name().is_empty() {
        return Err(ManifestError::NoName);
    }
    set_object_defaults(&mut pod);
    apply_defaults(&mut pod, origin, node_name)?;
    validate_pod(&pod)?;
    validate_static_pod(&pod)?;
    Ok(pod)
}

/// The kubelet's own defaulting of a static pod (upstream applyDefaults).
/// Runs after `set_object_defaults` so, as upstream, the UID hashes the
/// API-defaulted pod: a manifest spelling out a default gets the same UID.
pub fn apply_defaults(
    pod: &mut Pod,
    origin: ManifestOrigin,
    node_name: &str,
) -> Result<(), ManifestError> {
    if pod.metadata.uid.as_deref().unwrap_or("").is_empty() {
        pod.metadata.uid = Some(static_pod_uid(pod, origin, node_name)?);
    }
    pod.metadata.name = Some(generate_pod_name(pod.name(), node_name));
    if pod.namespace().is_empty() {
        pod.metadata.namespace = Some(NAMESPACE_DEFAULT.to_string());
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_HASH_ANNOTATION.to_string(), uid);
    // The merger sets this too; setting it here keeps a decoded pod self-describing.
    annotations.insert(
        CONFIG_SOURCE_ANNOTATION.to_string(),
        origin.source_name().to_string(),
    );
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    spec.node_name = Some(node_name.to_string());
    if matches!(origin, ManifestOrigin::File(_)) {
        // Static pods must not be evicted for node problems (NoExecute taints).
        add_or_update_toleration(spec, no_execute_toleration());
    }
    pod.status.get_or_insert_with(Default::default).phase = Some("Pending".to_string());
    Ok(())
}

/// Hex MD5 over a canonical serialization of the pod followed by its origin,
/// in upstream's order (DeepHashObject first, then "host:"/"file:" or "url:").
/// k8s-openapi serializes fields in a fixed order and maps are BTreeMaps, so the
/// bytes are stable across restarts.
pub fn static_pod_uid(
    pod: &Pod,
    origin: ManifestOrigin,
    node_name: &str,
) -> Result<String, ManifestError> {
    let mut hasher = Md5::new();
    hasher.update(serde_json::to_vec(pod).map_err(ManifestError::Hash)?);
    match origin {
        ManifestOrigin::File(path) => {
            hasher.update(format!("host:{node_name}"));
            hasher.update(format!("file:{path}"));
        }
        ManifestOrigin::Url(url) => hasher.update(format!("url:{url}")),
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn no_execute_toleration() -> Toleration {
    Toleration {
        operator: Some("Exists".to_string()),
        effect: Some("NoExecute".to_string()),
        ..Default::default()
    }
}

/// Replaces a toleration with the same key/operator/value/effect, else appends
/// (upstream AddOrUpdateTolerationInPod).
fn add_or_update_toleration(spec: &mut PodSpec, toleration: Toleration) {
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    let same = |t: &Toleration| {
        let s = |o: &Option<String>| o.clone().unwrap_or_default();
        s(&t.key) == s(&toleration.key)
            && s(&t.operator) == s(&toleration.operator)
            && s(&t.value) == s(&toleration.value)
            && s(&t.effect) == s(&toleration.effect)
    };
    match tolerations.iter_mut().find(|t| same(t)) {
        Some(existing) => *existing = toleration,
        None => tolerations.push(toleration),
    }
}

/// The pull policy the API server defaults to: Always for `:latest` or an
/// untagged, undigested reference (implicitly latest), else IfNotPresent.
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((name, digest)) => (name, Some(digest)),
        None => (image, None),
    };
    // A ':' before the last '/' is a registry port, not a tag.
    let last_component = name.rsplit('/').next().unwrap_or(name);
    let tag = last_component.rsplit_once(':').map(|(_, tag)| tag);
    match (tag, digest) {
        (Some("latest"), _) | (None, None) => "Always",
        _ => "IfNotPresent",
    }
}

/// The API server's v1 defaulting of a pod (pkg/apis/core/v1/defaults.go and
/// the generated declarative defaults) that the kubelet relies on.
pub fn set_object_defaults(pod: &mut Pod) {
    let spec = pod.spec.get_or_insert_with(PodSpec::default);
    default_pod_spec(spec);
    let host_network = spec.host_network.unwrap_or(false);
    for c in spec.init_containers.iter_mut().flatten() {
        default_container(c, host_network);
    }
    for c in spec.containers.iter_mut() {
        default_container(c, host_network);
    }
    for v in spec.volumes.iter_mut().flatten() {
        default_volume(v);
    }
}

fn default_pod_spec(spec: &mut PodSpec) {
    set_if_none(&mut spec.dns_policy, "ClusterFirst");
    set_if_none(&mut spec.restart_policy, "Always");
    set_if_none(&mut spec.scheduler_name, DEFAULT_SCHEDULER_NAME);
    spec.security_context.get_or_insert_with(Default::default);
    spec.termination_grace_period_seconds
        .get_or_insert(DEFAULT_TERMINATION_GRACE_PERIOD);
    spec.enable_service_links.get_or_insert(true);
}

fn set_if_none(field: &mut Option<String>, value: &str) {
    if field.as_deref().unwrap_or("").is_empty() {
        *field = Some(value.to_string());
    }
}

fn default_container(c: &mut Container, host_network: bool) {
    if c.image_pull_policy.as_deref().unwrap_or("").is_empty() {
        let policy = default_pull_policy(c.image.as_deref().unwrap_or(""));
        c.image_pull_policy = Some(policy.to_string());
    }
    set_if_none(
        &mut c.termination_message_path,
        TERMINATION_MESSAGE_PATH_DEFAULT,
    );
    set_if_none(&mut c.termination_message_policy, "File");
    for port in c.ports.iter_mut().flatten() {
        default_port(port, host_network);
    }
    default_requests_to_limits(c);
    for probe in [
        &mut c.liveness_probe,
        &mut c.readiness_probe,
        &mut c.startup_probe,
    ]
    .into_iter()
    .flatten()
    {
        default_probe(probe);
    }
    if let Some(lifecycle) = &mut c.lifecycle {
        for handler in [&mut lifecycle.post_start, &mut lifecycle.pre_stop]
            .into_iter()
            .flatten()
        {
            default_lifecycle_handler(handler);
        }
    }
    for env in c.env.iter_mut().flatten() {
        default_env_var(env);
    }
}

fn default_port(port: &mut ContainerPort, host_network: bool) {
    set_if_none(&mut port.protocol, "TCP");
    // With host networking every container port is also a host port.
    if host_network && port.host_port.unwrap_or(0) == 0 {
        port.host_port = Some(port.container_port);
    }
}

/// When limits are set but requests are not, requests default to the limits.
fn default_requests_to_limits(c: &mut Container) {
    let Some(resources) = &mut c.resources else {
        return;
    };
    let Some(limits) = &resources.limits else {
        return;
    };
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    for (name, quantity) in limits {
        requests
            .entry(name.clone())
            .or_insert_with(|| quantity.clone());
    }
}

fn default_probe(probe: &mut Probe) {
    for (field, default) in [
        (&mut probe.timeout_seconds, 1),
        (&mut probe.period_seconds, 10),
        (&mut probe.success_threshold, 1),
        (&mut probe.failure_threshold, 3),
    ] {
        if field.unwrap_or(0) == 0 {
            *field = Some(default);
        }
    }
    if let Some(http) = &mut probe.http_get {
        default_http_get(http);
    }
}

fn default_lifecycle_handler(handler: &mut LifecycleHandler) {
    if let Some(http) = &mut handler.http_get {
        default_http_get(http);
    }
}

fn default_http_get(http: &mut HTTPGetAction) {
    set_if_none(&mut http.path, "/");
    set_if_none(&mut http.scheme, "HTTP");
}

fn default_env_var(env: &mut EnvVar) {
    if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
        set_if_none(&mut field_ref.api_version, "v1");
    }
}

fn default_downward_items(items: &mut Option<Vec<DownwardAPIVolumeFile>>) {
    for item in items.iter_mut().flatten() {
        if let Some(field_ref) = &mut item.field_ref {
            set_if_none(&mut field_ref.api_version, "v1");
        }
    }
}

fn default_volume(v: &mut Volume) {
    if has_no_volume_source(v) {
        v.empty_dir = Some(EmptyDirVolumeSource::default());
    }
    if let Some(s) = &mut v.secret {
        s.default_mode.get_or_insert(VOLUME_DEFAULT_MODE);
    }
    if let Some(s) = &mut v.config_map {
        s.default_mode.get_or_insert(VOLUME_DEFAULT_MODE);
    }
    if let Some(s) = &mut v.downward_api {
        s.default_mode.get_or_insert(VOLUME_DEFAULT_MODE);
        default_downward_items(&mut s.items);
    }
    if let Some(s) = &mut v.host_path {
        s.type_.get_or_insert_with(String::new);
    }
    if let Some(s) = &mut v.image {
        if s.pull_policy.as_deref().unwrap_or("").is_empty() {
            let policy = default_pull_policy(s.reference.as_deref().unwrap_or(""));
            s.pull_policy = Some(policy.to_string());
        }
    }
    if let Some(s) = &mut v.projected {
        s.default_mode.get_or_insert(VOLUME_DEFAULT_MODE);
        for source in s.sources.iter_mut().flatten() {
            if let Some(token) = &mut source.service_account_token {
                token
                    .expiration_seconds
                    .get_or_insert(SERVICE_ACCOUNT_TOKEN_DEFAULT_EXPIRATION);
            }
            if let Some(d) = &mut source.downward_api {
                default_downward_items(&mut d.items);
            }
        }
    }
}

/// True when a volume names no source at all (it then defaults to emptyDir).
fn has_no_volume_source(v: &Volume) -> bool {
    crate::podutil::volume_source_fields(v).is_empty()
}

/// Collects field errors formatted like upstream's field.ErrorList.
#[derive(Default)]
struct FieldErrors(Vec<String>);

impl FieldErrors {
    fn required(&mut self, path: &str) {
        self.0.push(format!("{path}: Required value"));
    }
    fn invalid(&mut self, path: &str, value: &str, detail: &str) {
        self.0
            .push(format!("{path}: Invalid value: {value:?}: {detail}"));
    }
    fn duplicate(&mut self, path: &str, value: &str) {
        self.0.push(format!("{path}: Duplicate value: {value:?}"));
    }
    fn not_found(&mut self, path: &str, value: &str) {
        self.0.push(format!("{path}: Not found: {value:?}"));
    }
    fn forbidden(&mut self, path: &str, detail: &str) {
        self.0.push(format!("{path}: Forbidden: {detail}"));
    }
    fn not_supported(&mut self, path: &str, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.0.push(format!(
            "{path}: Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ));
    }
    fn check_enum(&mut self, path: &str, value: Option<&str>, supported: &[&str]) {
        match value {
            None | Some("") => self.required(path),
            Some(v) if !supported.contains(&v) => self.not_supported(path, v, supported),
            Some(_) => {}
        }
    }
}

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// RFC 1123 label: at most 63 of [a-z0-9-], alphanumeric at both ends.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| alnum(c) || *c == b'-')
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
}

/// RFC 1123 subdomain: at most 253 characters of dot-separated labels.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// The checks of upstream ValidatePodCreate that a kubelet needs before it
/// can run a pod. Errors are reported together, each naming its field.
pub fn validate_pod(pod: &Pod) -> Result<(), ManifestError> {
    let mut errs = FieldErrors::default();
    validate_metadata(pod, &mut errs);
    match &pod.spec {
        Some(spec) => validate_spec(spec, &mut errs),
        None => errs.required("spec"),
    }
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(ManifestError::Invalid(errs.0))
    }
}

fn validate_metadata(pod: &Pod, errs: &mut FieldErrors) {
    let name = pod.name();
    if name.is_empty() {
        errs.required("metadata.name");
    } else if !is_dns1123_subdomain(name) {
        errs.invalid("metadata.name", name, DNS1123_SUBDOMAIN_MSG);
    }
    let namespace = pod.namespace();
    if namespace.is_empty() {
        errs.required("metadata.namespace");
    } else if !is_dns1123_label(namespace) {
        errs.invalid("metadata.namespace", namespace, DNS1123_LABEL_MSG);
    }
}

fn validate_spec(spec: &PodSpec, errs: &mut FieldErrors) {
    let volumes = validate_volumes(spec.volumes.as_deref().unwrap_or(&[]), errs);
    if spec.containers.is_empty() {
        errs.required("spec.containers");
    }
    let mut names = HashSet::new();
    let host_network = spec.host_network.unwrap_or(false);
    let ctx = ContainerContext {
        volumes: &volumes,
        host_network,
        own_users: spec.host_users == Some(false),
    };
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        validate_container(c, &path, &ctx, &mut names, errs);
        validate_init_restart_policy(c, &path, errs);
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        validate_container(c, &path, &ctx, &mut names, errs);
        if c.restart_policy.is_some() {
            errs.forbidden(
                &format!("{path}.restartPolicy"),
                "may not be set for non-init containers",
            );
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        errs.forbidden("spec.ephemeralContainers", "cannot be set on create");
    }
    validate_pod_policies(spec, errs);
}

fn validate_pod_policies(spec: &PodSpec, errs: &mut FieldErrors) {
    errs.check_enum(
        "spec.restartPolicy",
        spec.restart_policy.as_deref(),
        &["Always", "OnFailure", "Never"],
    );
    errs.check_enum(
        "spec.dnsPolicy",
        spec.dns_policy.as_deref(),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    if spec.dns_policy.as_deref() == Some("None") && spec.dns_config.is_none() {
        errs.required("spec.dnsConfig");
    }
    if let Some(secs) = spec.active_deadline_seconds {
        if secs <= 0 {
            errs.invalid(
                "spec.activeDeadlineSeconds",
                &secs.to_string(),
                "must be between 1 and 2147483647, inclusive",
            );
        }
    }
}

fn validate_volumes<'a>(volumes: &'a [Volume], errs: &mut FieldErrors) -> HashSet<&'a str> {
    let mut names = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}].name");
        if v.name.is_empty() {
            errs.required(&path);
        } else if !is_dns1123_label(&v.name) {
            errs.invalid(&path, &v.name, DNS1123_LABEL_MSG);
        } else if !names.insert(v.name.as_str()) {
            errs.duplicate(&path, &v.name);
        }
    }
    names
}

struct ContainerContext<'a> {
    volumes: &'a HashSet<&'a str>,
    host_network: bool,
    /// `hostUsers: false`: the pod has its own user namespace.
    own_users: bool,
}

fn validate_container<'a>(
    c: &'a Container,
    path: &str,
    ctx: &ContainerContext,
    names: &mut HashSet<&'a str>,
    errs: &mut FieldErrors,
) {
    let name_path = format!("{path}.name");
    if c.name.is_empty() {
        errs.required(&name_path);
    } else if !is_dns1123_label(&c.name) {
        errs.invalid(&name_path, &c.name, DNS1123_LABEL_MSG);
    } else if !names.insert(c.name.as_str()) {
        errs.duplicate(&name_path, &c.name);
    }
    let image = c.image.as_deref().unwrap_or("");
    if image.is_empty() {
        errs.required(&format!("{path}.image"));
    } else if image.trim() != image {
        errs.invalid(
            &format!("{path}.image"),
            image,
            "must not have leading or trailing whitespace",
        );
    }
    errs.check_enum(
        &format!("{path}.imagePullPolicy"),
        c.image_pull_policy.as_deref(),
        &["Always", "IfNotPresent", "Never"],
    );
    errs.check_enum(
        &format!("{path}.terminationMessagePolicy"),
        c.termination_message_policy.as_deref(),
        &["File", "FallbackToLogsOnError"],
    );
    for (i, port) in c.ports.iter().flatten().enumerate() {
        validate_port(port, &format!("{path}.ports[{i}]"), ctx.host_network, errs);
    }
    for (i, mount) in c.volume_mounts.iter().flatten().enumerate() {
        let mount_path = format!("{path}.volumeMounts[{i}]");
        if !ctx.volumes.contains(mount.name.as_str()) {
            errs.not_found(&format!("{mount_path}.name"), &mount.name);
        }
        if mount.mount_path.is_empty() {
            errs.required(&format!("{mount_path}.mountPath"));
        }
        if mount.mount_propagation.as_deref() == Some("Bidirectional") && !privileged(c) {
            errs.forbidden(
                &format!("{mount_path}.mountPropagation"),
                "Bidirectional mount propagation is available only to privileged containers",
            );
        }
    }
    validate_isolation(c, path, ctx, errs);
}

fn privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

/// What the API server refuses before a pod reaches any kubelet, checked
/// here for static pods: an unmasked /proc only inside the pod's own user
/// namespace (ValidateSecurityContext's procMount rule).
fn validate_isolation(c: &Container, path: &str, ctx: &ContainerContext, errs: &mut FieldErrors) {
    let proc_mount = c
        .security_context
        .as_ref()
        .and_then(|s| s.proc_mount.as_deref());
    if proc_mount == Some("Unmasked") && !ctx.own_users {
        errs.invalid(
            &format!("{path}.securityContext.procMount"),
            "Unmasked",
            "`hostUsers` must be false to use `Unmasked`",
        );
    }
}

fn validate_init_restart_policy(c: &Container, path: &str, errs: &mut FieldErrors) {
    if let Some(policy) = c.restart_policy.as_deref() {
        if policy != "Always" {
            errs.not_supported(&format!("{path}.restartPolicy"), policy, &["Always"]);
        }
    }
}

fn validate_port(port: &ContainerPort, path: &str, host_network: bool, errs: &mut FieldErrors) {
    const RANGE: &str = "must be between 1 and 65535, inclusive";
    if !(1..=65535).contains(&port.container_port) {
        let v = port.container_port.to_string();
        errs.invalid(&format!("{path}.containerPort"), &v, RANGE);
    }
    let host_port = port.host_port.unwrap_or(0);
    if host_port != 0 && !(1..=65535).contains(&host_port) {
        errs.invalid(&format!("{path}.hostPort"), &host_port.to_string(), RANGE);
    }
    if host_network && host_port != port.container_port {
        errs.invalid(
            &format!("{path}.hostPort"),
            &host_port.to_string(),
            "must match `containerPort` when `hostNetwork` is true",
        );
    }
    errs.check_enum(
        &format!("{path}.protocol"),
        port.protocol.as_deref(),
        &["SCTP", "TCP", "UDP"],
    );
}

/// Static pods have no API objects to lean on (upstream rejects these before
/// the PreventStaticPodAPIReferences gate, and with it).
fn validate_static_pod(pod: &Pod) -> Result<(), ManifestError> {
    let Some(spec) = &pod.spec else {
        return Ok(());
    };
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ManifestError::StaticPodUses("ResourceClaims"));
    }
    let uses_trust_bundle = spec.volumes.iter().flatten().any(|v| {
        v.projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
            .any(|s| s.cluster_trust_bundle.is_some())
    });
    if uses_trust_bundle {
        return Err(ManifestError::StaticPodUses(
            "ClusterTrustBundle projected volume sources",
        ));
    }
    Ok(())
}
