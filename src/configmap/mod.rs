//! Upstream `pkg/kubelet/configmap`: the ConfigMap manager behind configMap
//! volumes and env vars, with the `configMapAndSecretChangeDetectionStrategy`
//! picking how objects are kept fresh (see [`crate::util::manager`]).
//! Referenced names follow upstream `podutil.VisitPodConfigmapNames`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, EnvFromSource, EnvVar, Pod};

use crate::client::multiwatch::MultiWatch;
use crate::client::Client;
use crate::util::manager::{self, Kind, KindSpec, ObjectManager, OnChange, Strategy};

pub const KIND: Kind = Kind {
    kind: "ConfigMap",
    resource: "configmaps",
    singular: "configmap",
};

pub type ConfigMapManager = ObjectManager<ConfigMap>;

/// The manager for `strategy`; see [`crate::secret::new_manager`].
pub fn new_manager(
    strategy: Strategy,
    client: &Client,
    watches: &Arc<MultiWatch>,
    ttl: Duration,
    on_change: Option<OnChange>,
) -> Arc<ConfigMapManager> {
    manager::new_manager(
        strategy,
        client,
        watches,
        ttl,
        on_change,
        KindSpec {
            kind: KIND,
            referenced: referenced_config_map_names,
            is_immutable,
        },
    )
}

fn is_immutable(c: &ConfigMap) -> bool {
    c.immutable == Some(true)
}

/// Upstream `podutil.VisitPodConfigmapNames`: env and envFrom of init,
/// regular and ephemeral containers, configMap and projected volumes.
pub fn referenced_config_map_names(pod: &Pod) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut add = |n: &str| {
        if !n.is_empty() {
            names.insert(n.to_string());
        }
    };
    let Some(spec) = pod.spec.as_ref() else {
        return names;
    };
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
        if let Some(c) = &v.config_map {
            add(&c.name);
        }
        let sources = v.projected.as_ref().and_then(|p| p.sources.as_ref());
        for s in sources.into_iter().flatten() {
            if let Some(c) = &s.config_map {
                add(&c.name);
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
        if let Some(r) = &e.config_map_ref {
            add(&r.name);
        }
    }
    for e in env.into_iter().flatten() {
        if let Some(r) = e
            .value_from
            .as_ref()
            .and_then(|v| v.config_map_key_ref.as_ref())
        {
            add(&r.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visits_every_config_map_reference() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "initContainers": [{"name": "i", "envFrom": [{"configMapRef": {"name": "init-envfrom"}}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "env-key", "key": "k"}}},
                    {"name": "B", "valueFrom": {"secretKeyRef": {"name": "not-a-cm", "key": "k"}}}
                ]}],
                "ephemeralContainers": [{"name": "e", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "eph", "key": "k"}}}]}],
                "volumes": [
                    {"name": "v1", "configMap": {"name": "vol"}},
                    {"name": "v2", "projected": {"sources": [{"configMap": {"name": "proj"}}, {"secret": {"name": "s"}}]}},
                    {"name": "v3", "secret": {"secretName": "s2"}}
                ]
            }
        }))
        .expect("pod");
        let got: Vec<_> = referenced_config_map_names(&pod).into_iter().collect();
        assert_eq!(got, ["env-key", "eph", "init-envfrom", "proj", "vol"]);
    }
}
