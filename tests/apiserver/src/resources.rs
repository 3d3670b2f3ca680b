//! The resource table: which kinds the double serves, where, and the schema
//! facts the generic machinery needs (scope, status subresource, strategic
//! merge list strategies, supported field selectors).

#[derive(Debug)]
pub struct ResourceDef {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Has a /status subresource (and so PUT/PATCH on the main resource ignore status).
    pub status: bool,
    pub short_names: &'static [&'static str],
    /// Extra subresources beyond status, for discovery.
    pub subresources: &'static [&'static str],
    /// Storage key shared by all versions of a resource (events.k8s.io events are
    /// kept apart from core events here; see README deviations).
    pub key: &'static str,
}

impl ResourceDef {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    /// `pods`, `leases.coordination.k8s.io`: what error messages name.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
    pub fn is(&self, group: &str, plural: &str) -> bool {
        self.group == group && self.plural == plural
    }
    pub fn singular(&self) -> String {
        self.kind.to_ascii_lowercase()
    }
}

macro_rules! res {
    ($g:expr, $v:expr, $p:expr, $k:expr, $ns:expr, $st:expr, $sn:expr, $sub:expr, $key:expr) => {
        ResourceDef {
            group: $g,
            version: $v,
            plural: $p,
            kind: $k,
            namespaced: $ns,
            status: $st,
            short_names: $sn,
            subresources: $sub,
            key: $key,
        }
    };
}

pub static RESOURCES: &[ResourceDef] = &[
    res!(
        "",
        "v1",
        "pods",
        "Pod",
        true,
        true,
        &["po"],
        &[
            "binding",
            "eviction",
            "log",
            "exec",
            "attach",
            "portforward",
            "proxy",
            "ephemeralcontainers",
            "resize"
        ],
        "pods"
    ),
    res!(
        "",
        "v1",
        "nodes",
        "Node",
        false,
        true,
        &["no"],
        &["proxy"],
        "nodes"
    ),
    res!(
        "",
        "v1",
        "namespaces",
        "Namespace",
        false,
        true,
        &["ns"],
        &["finalize"],
        "namespaces"
    ),
    res!(
        "",
        "v1",
        "services",
        "Service",
        true,
        true,
        &["svc"],
        &["proxy"],
        "services"
    ),
    res!(
        "",
        "v1",
        "endpoints",
        "Endpoints",
        true,
        false,
        &["ep"],
        &[],
        "endpoints"
    ),
    res!(
        "",
        "v1",
        "events",
        "Event",
        true,
        false,
        &["ev"],
        &[],
        "events"
    ),
    res!(
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        true,
        false,
        &["cm"],
        &[],
        "configmaps"
    ),
    res!(
        "",
        "v1",
        "secrets",
        "Secret",
        true,
        false,
        &[],
        &[],
        "secrets"
    ),
    res!(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        false,
        &["sa"],
        &["token"],
        "serviceaccounts"
    ),
    res!(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        true,
        &["pvc"],
        &[],
        "persistentvolumeclaims"
    ),
    res!(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        true,
        &["pv"],
        &[],
        "persistentvolumes"
    ),
    res!(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        false,
        &[],
        &[],
        "leases.coordination.k8s.io"
    ),
    res!(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        false,
        &["ev"],
        &[],
        "events.events.k8s.io"
    ),
    res!(
        "storage.k8s.io",
        "v1",
        "csinodes",
        "CSINode",
        false,
        false,
        &[],
        &[],
        "csinodes.storage.k8s.io"
    ),
    res!(
        "storage.k8s.io",
        "v1",
        "csidrivers",
        "CSIDriver",
        false,
        false,
        &[],
        &[],
        "csidrivers.storage.k8s.io"
    ),
    res!(
        "storage.k8s.io",
        "v1",
        "volumeattachments",
        "VolumeAttachment",
        false,
        true,
        &[],
        &[],
        "volumeattachments.storage.k8s.io"
    ),
    res!(
        "node.k8s.io",
        "v1",
        "runtimeclasses",
        "RuntimeClass",
        false,
        false,
        &[],
        &[],
        "runtimeclasses.node.k8s.io"
    ),
    res!(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        true,
        true,
        &[],
        &[],
        "resourceclaims.resource.k8s.io"
    ),
    res!(
        "resource.k8s.io",
        "v1beta1",
        "resourceclaims",
        "ResourceClaim",
        true,
        true,
        &[],
        &[],
        "resourceclaims.resource.k8s.io"
    ),
    res!(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "ResourceSlice",
        false,
        false,
        &[],
        &[],
        "resourceslices.resource.k8s.io"
    ),
    res!(
        "resource.k8s.io",
        "v1beta1",
        "resourceslices",
        "ResourceSlice",
        false,
        false,
        &[],
        &[],
        "resourceslices.resource.k8s.io"
    ),
    res!(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        false,
        true,
        &["csr"],
        &["approval"],
        "certificatesigningrequests.certificates.k8s.io"
    ),
];

pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceDef> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

pub fn by_key(key: &str) -> Option<&'static ResourceDef> {
    RESOURCES.iter().find(|r| r.key == key)
}

pub fn groups() -> Vec<&'static str> {
    let mut g: Vec<&'static str> = vec![];
    for r in RESOURCES {
        if !r.group.is_empty() && !g.contains(&r.group) {
            g.push(r.group);
        }
    }
    g
}

/// How strategic merge patch treats a list at a field path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ListStrategy {
    /// No patchStrategy: the patch's list replaces the original.
    Replace,
    /// patchStrategy=merge on a list of scalars: union.
    MergeScalars,
    /// patchStrategy=merge with patchMergeKey.
    MergeKey(&'static str),
}

/// The strategic-merge strategy of the list at `path` (dotted, with `[]` for
/// list elements, e.g. `spec.containers[].env`) in an object of `kind`.
/// Taken from the patchStrategy/patchMergeKey struct tags of k8s.io/api.
pub fn list_strategy(kind: &str, path: &str) -> ListStrategy {
    use ListStrategy::*;
    match path {
        "metadata.ownerReferences" => return MergeKey("uid"),
        "metadata.finalizers" => return MergeScalars,
        _ => {}
    }
    let container = |p: &str| -> Option<ListStrategy> {
        for c in [
            "spec.containers[].",
            "spec.initContainers[].",
            "spec.ephemeralContainers[].",
        ] {
            if let Some(rest) = p.strip_prefix(c) {
                return Some(match rest {
                    "ports" => MergeKey("containerPort"),
                    "env" => MergeKey("name"),
                    "volumeMounts" => MergeKey("mountPath"),
                    "volumeDevices" => MergeKey("devicePath"),
                    _ => Replace,
                });
            }
        }
        None
    };
    match kind {
        "Pod" => {
            if let Some(s) = container(path) {
                return s;
            }
            match path {
                "spec.containers" | "spec.initContainers" | "spec.ephemeralContainers" => {
                    MergeKey("name")
                }
                "spec.volumes"
                | "spec.imagePullSecrets"
                | "spec.schedulingGates"
                | "spec.resourceClaims" => MergeKey("name"),
                "spec.hostAliases" => MergeKey("ip"),
                "spec.topologySpreadConstraints" => MergeKey("topologyKey"),
                "status.conditions" => MergeKey("type"),
                "status.podIPs" | "status.hostIPs" => MergeKey("ip"),
                "status.resourceClaimStatuses" => MergeKey("name"),
                // containerStatuses, initContainerStatuses, ephemeralContainerStatuses,
                // tolerations, readinessGates: no patch strategy (atomic) upstream.
                _ => Replace,
            }
        }
        "Node" => match path {
            "spec.podCIDRs" => MergeScalars,
            "status.conditions" | "status.addresses" => MergeKey("type"),
            _ => Replace,
        },
        "Service" => match path {
            "spec.ports" => MergeKey("port"),
            "status.conditions" => MergeKey("type"),
            _ => Replace,
        },
        "Namespace" | "PersistentVolumeClaim" => match path {
            "status.conditions" => MergeKey("type"),
            _ => Replace,
        },
        "ServiceAccount" => match path {
            "secrets" => MergeKey("name"),
            _ => Replace,
        },
        "CSINode" => match path {
            "spec.drivers" => MergeKey("name"),
            _ => Replace,
        },
        _ => Replace,
    }
}

/// Field selector labels the real server accepts for a resource (besides
/// metadata.name and metadata.namespace, which every resource accepts).
pub fn field_labels(def: &ResourceDef) -> &'static [&'static str] {
    match (def.group, def.plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        // upstream's ResourceSlice field label conversion
        ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        _ => &[],
    }
}
