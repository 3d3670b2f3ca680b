//! Upstream `pkg/kubelet/secret`: the Secret manager behind secret volumes,
//! env vars and image pull secrets, with the
//! `configMapAndSecretChangeDetectionStrategy` picking how objects are kept
//! fresh (see [`crate::util::manager`]). Referenced names follow upstream
//! `podutil.VisitPodSecretNames`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, Pod, Secret};

use crate::client::multiwatch::MultiWatch;
use crate::client::Client;
use crate::util::manager::{self, Kind, KindSpec, ObjectManager, OnChange, Strategy};

pub const KIND: Kind = Kind {
    kind: "Secret",
    resource: "secrets",
    singular: "secret",
};

pub type SecretManager = ObjectManager<Secret>;

/// The manager for `strategy`. Watch uses `watches` (shared with the
/// ConfigMap manager: one thread for both) and calls `on_change` when a
/// watched Secret changes; Cache keeps objects for `ttl`.
pub fn new_manager(
    strategy: Strategy,
    client: &Client,
    watches: &Arc<MultiWatch>,
    ttl: Duration,
    on_change: Option<OnChange>,
) -> Arc<SecretManager> {
    manager::new_manager(
        strategy,
        client,
        watches,
        ttl,
        on_change,
        KindSpec {
            kind: KIND,
            referenced: referenced_secret_names,
            is_immutable,
        },
    )
}

fn is_immutable(s: &Secret) -> bool {
    s.immutable == Some(true)
}

/// Upstream `podutil.VisitPodSecretNames`: image pull secrets, env and
/// envFrom of init, regular and ephemeral containers, and volumes.
pub fn referenced_secret_names(pod: &Pod) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut add = |n: &str| {
        if !n.is_empty() {
            names.insert(n.to_string());
        }
    };
    let Some(spec) = pod.spec.as_ref() else {
        return names;
    };
    for r in spec.image_pull_secrets.iter().flatten() {
        add(&r.name);
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for c in containers {
        env_names(c.env.as_deref(), c.env_from.as_deref(), &mut add);
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        env_names(c.env.as_deref(), c.env_from.as_deref(), &mut add);
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(s) = &v.azure_file {
            add(&s.secret_name);
        }
        let refs = [
            v.cephfs.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.cinder.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.flex_volume.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.rbd.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.scale_io.as_ref().map(|s| &s.secret_ref),
            v.iscsi.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()),
            v.csi
                .as_ref()
                .and_then(|s| s.node_publish_secret_ref.as_ref()),
        ];
        for r in refs.into_iter().flatten() {
            add(&r.name);
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.as_deref()) {
            add(name);
        }
        let sources = v.projected.as_ref().and_then(|p| p.sources.as_ref());
        for s in sources.into_iter().flatten() {
            if let Some(s) = &s.secret {
                add(&s.name);
            }
        }
    }
    names
}

fn env_names(
    env: Option<&[EnvVar]>,
    env_from: Option<&[EnvFromSource]>,
    add: &mut impl FnMut(&str),
) {
    for e in env_from.into_iter().flatten() {
        if let Some(r) = &e.secret_ref {
            add(&r.name);
        }
    }
    for e in env.into_iter().flatten() {
        if let Some(r) = e
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
        {
            add(&r.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visits_every_secret_reference() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-envfrom"}}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-key", "key": "k"}}},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "not-a-secret", "key": "k"}}}
                ]}],
                "ephemeralContainers": [{"name": "e", "envFrom": [{"secretRef": {"name": "eph"}}]}],
                "volumes": [
                    {"name": "v1", "secret": {"secretName": "vol"}},
                    {"name": "v2", "projected": {"sources": [{"secret": {"name": "proj"}}, {"configMap": {"name": "cm"}}]}},
                    {"name": "v3", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                    {"name": "v4", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "rbd"}}},
                    {"name": "v5", "configMap": {"name": "cm2"}}
                ]
            }
        }))
        .expect("pod");
        let got: Vec<_> = referenced_secret_names(&pod).into_iter().collect();
        assert_eq!(
            got,
            [
                "csi",
                "env-key",
                "eph",
                "init-envfrom",
                "proj",
                "pull",
                "rbd",
                "vol"
            ]
        );
    }
}
