//! Service environment variables (upstream `pkg/kubelet/envvars` and
//! `getServiceEnvVarMap`): what lets a container find the API server and,
//! with enableServiceLinks, the services of its namespace.

use crate::volumemanager::host::ObjectGetter;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Deserialize;
use std::collections::BTreeMap;

/// What the kubelet keeps of a Service: the fields upstream's
/// getServiceEnvVarMap reads, and no others. Decoded as this view rather
/// than as k8s-openapi's Service, so that each watched service costs a few
/// strings of memory (a cluster may have thousands, with their status and
/// managedFields) and the binary carries no decoder for the rest.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Service {
    #[serde(default)]
    pub metadata: ServiceMeta,
    #[serde(default)]
    pub spec: Option<ServiceSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServiceMeta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServiceSpec {
    #[serde(default, rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    #[serde(default)]
    pub ports: Option<Vec<ServicePort>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServicePort {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub port: i32,
    #[serde(default)]
    pub protocol: Option<String>,
}

/// The master service whose variables every pod gets.
const MASTER_SERVICE: (&str, &str) = ("default", "kubernetes");

/// The variables for a pod in `namespace`: its namespace's services when
/// `service_links`, and always the `kubernetes` service of `default`.
/// Later services in sorted order do not override earlier ones' names.
pub fn service_env(
    services: &[Service],
    namespace: &str,
    service_links: bool,
) -> Vec<(String, String)> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for svc in services.iter().filter(|s| has_cluster_ip(s)) {
        let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
        let name = svc.metadata.name.as_deref().unwrap_or("");
        let is_master = (ns, name) == MASTER_SERVICE;
        if (service_links && ns == namespace) || is_master {
            // The pod's own namespace wins a name clash with the master.
            if ns == namespace || !chosen.contains_key(name) {
                chosen.insert(name.to_string(), svc);
            }
        }
    }
    chosen.values().flat_map(|s| from_service(s)).collect()
}

fn has_cluster_ip(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|sp| sp.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// Docker-links style variables for one service (upstream FromServices).
fn from_service(s: &Service) -> Vec<(String, String)> {
    let Some(spec) = s.spec.as_ref() else {
        return vec![];
    };
    let Some(ip) = spec.cluster_ip.as_deref() else {
        return vec![];
    };
    let prefix = env_name(s.metadata.name.as_deref().unwrap_or(""));
    let ports = spec.ports.as_deref().unwrap_or(&[]);
    let Some(first) = ports.first() else {
        return vec![];
    };
    let mut out = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_string()),
        (format!("{prefix}_SERVICE_PORT"), first.port.to_string()),
    ];
    for p in ports {
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((
                format!("{prefix}_SERVICE_PORT_{}", env_name(name)),
                p.port.to_string(),
            ));
        }
    }
    let proto = |p: &ServicePort| p.protocol.clone().unwrap_or_else(|| "TCP".into());
    let url = |p: &ServicePort| {
        format!(
            "{}://{}",
            proto(p).to_lowercase(),
            join_host_port(ip, p.port)
        )
    };
    out.push((format!("{prefix}_PORT"), url(first)));
    for p in ports {
        let base = format!("{prefix}_PORT_{}_{}", p.port, proto(p).to_uppercase());
        out.push((base.clone(), url(p)));
        out.push((format!("{base}_PROTO"), proto(p).to_lowercase()));
        out.push((format!("{base}_PORT"), p.port.to_string()));
        out.push((format!("{base}_ADDR"), ip.to_string()));
    }
    out
}

fn env_name(s: &str) -> String {
    s.to_uppercase().replace('-', "_")
}

fn join_host_port(ip: &str, port: i32) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// Container environments backed by the API: services from the services
/// reflector, ConfigMaps and Secrets from their managers (upstream's
/// configMapManager/secretManager serve env and volumes alike).
pub struct ApiEnvSource {
    services: std::sync::Arc<std::sync::RwLock<Vec<Service>>>,
    config_maps: ObjectGetter<ConfigMap>,
    secrets: ObjectGetter<Secret>,
}

impl ApiEnvSource {
    pub fn new(
        services: std::sync::Arc<std::sync::RwLock<Vec<Service>>>,
        config_maps: ObjectGetter<ConfigMap>,
        secrets: ObjectGetter<Secret>,
    ) -> Self {
        ApiEnvSource {
            services,
            config_maps,
            secrets,
        }
    }
}

impl crate::kuberuntime::container::EnvSource for ApiEnvSource {
    fn service_env(&self, pod: &k8s_openapi::api::core::v1::Pod) -> Vec<(String, String)> {
        use crate::podutil::PodExt;
        let links = pod.spec_or_default().enable_service_links.unwrap_or(true);
        let services = self.services.read().unwrap_or_else(|e| e.into_inner());
        service_env(&services, pod.namespace(), links)
    }

    fn lookup(
        &self,
        kind: crate::kuberuntime::container::ApiObject,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, crate::volume::HostError> {
        use crate::kuberuntime::container::ApiObject;
        Ok(match kind {
            ApiObject::ConfigMap => {
                (self.config_maps)(namespace, name)?.map(|cm| cm.data.clone().unwrap_or_default())
            }
            ApiObject::Secret => (self.secrets)(namespace, name)?.map(|s| {
                s.data
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                    .collect()
            }),
        })
    }

    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<std::sync::Arc<Secret>>, crate::volume::HostError> {
        (self.secrets)(namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str, ip: &str, ports: &[(Option<&str>, i32)]) -> Service {
        let mut s = Service::default();
        s.metadata.namespace = Some(ns.into());
        s.metadata.name = Some(name.into());
        s.spec = Some(ServiceSpec {
            cluster_ip: Some(ip.into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| ServicePort {
                        name: n.map(str::to_string),
                        port: *p,
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
        s
    }

    /// The view reads a Service as the API server sends it: clusterIP's
    /// spelling, a port's protocol, and everything else ignored.
    #[test]
    fn a_service_from_the_api_decodes_into_the_view() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "app", "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"clusterIP": "10.96.0.9", "clusterIPs": ["10.96.0.9"], "type": "ClusterIP",
                     "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]},
            "status": {"loadBalancer": {}}
        });
        let svc: Service = serde_json::from_value(json).expect("decode");
        let env = service_env(&[svc], "app", true);
        assert_eq!(get(&env, "WEB_SERVICE_HOST"), Some("10.96.0.9"));
        assert_eq!(get(&env, "WEB_SERVICE_PORT_DNS"), Some("53"));
        assert_eq!(get(&env, "WEB_PORT"), Some("udp://10.96.0.9:53"));
        assert_eq!(get(&env, "WEB_PORT_53_UDP_PROTO"), Some("udp"));
    }

    fn get<'a>(env: &'a [(String, String)], k: &str) -> Option<&'a str> {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
    }

    #[test]
    fn master_service_always_and_namespace_services_with_links() {
        let all = vec![
            svc(
                "default",
                "kubernetes",
                "10.96.0.1",
                &[(Some("https"), 443)],
            ),
            svc("app", "my-db", "10.96.0.20", &[(None, 5432)]),
            svc("other", "x", "10.96.0.30", &[(None, 80)]),
            svc("app", "headless", "None", &[(None, 80)]),
        ];
        let env = service_env(&all, "app", true);
        assert_eq!(get(&env, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(get(&env, "KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get(&env, "KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));
        assert_eq!(get(&env, "KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get(&env, "KUBERNETES_PORT_443_TCP_ADDR"), Some("10.96.0.1"));
        assert_eq!(get(&env, "MY_DB_SERVICE_HOST"), Some("10.96.0.20"));
        assert_eq!(get(&env, "X_SERVICE_HOST"), None);
        assert_eq!(get(&env, "HEADLESS_SERVICE_HOST"), None);
        let no_links = service_env(&all, "app", false);
        assert_eq!(get(&no_links, "MY_DB_SERVICE_HOST"), None);
        assert_eq!(get(&no_links, "KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
    }
}
