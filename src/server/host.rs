//! What the kubelet API server needs from the kubelet (upstream's
//! HostInterface), and the routes other modules serve through it: stats,
//! streaming (exec/attach/portForward) and /metrics.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::container::ContainerState;
use crate::cri::RemoteRuntime;
use crate::kubelet::Kubelet;
use crate::metrics;
use crate::podutil::PodExt;
use crate::server::kubelet::{handler, Handler, HostError, KubeletHost, RawStream};
use crate::server::streaming::{
    ClientStream, Reply, StreamRequest, StreamingConfig, StreamingServer,
};

pub struct ServerHost {
    pub kubelet: Arc<Kubelet>,
    pub node_name: String,
    pub config_json: serde_json::Value,
}

impl KubeletHost for ServerHost {
    fn node_name(&self) -> String {
        self.node_name.clone()
    }

    fn pods(&self) -> Vec<Pod> {
        let k = &self.kubelet;
        k.pod_manager()
            .pods()
            .into_iter()
            .map(|p| {
                let mut p = Pod::clone(&p);
                if let Some(st) = k.status_manager().get(p.uid()) {
                    p.status = Some(st);
                }
                p
            })
            .collect()
    }

    fn running_pods(&self) -> Vec<Pod> {
        self.kubelet
            .pleg()
            .running_pods()
            .iter()
            .filter(|rp| rp.is_running())
            .map(|rp| {
                let mut p = Pod::default();
                p.metadata.name = Some(rp.name.clone());
                p.metadata.namespace = Some(rp.namespace.clone());
                p.metadata.uid = Some(rp.uid.clone());
                p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                    containers: rp
                        .containers
                        .iter()
                        .filter(|c| c.state == ContainerState::Running)
                        .map(|c| k8s_openapi::api::core::v1::Container {
                            name: c.name.clone(),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                });
                p
            })
            .collect()
    }

    fn config_json(&self) -> serde_json::Value {
        self.config_json.clone()
    }

    fn container_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<(PathBuf, bool), HostError> {
        let full = crate::container::pod_full_name(pod, namespace);
        let p = self
            .kubelet
            .pod_manager()
            .get_by_full_name(&full)
            .ok_or_else(|| HostError::NotFound(format!("pod {namespace}/{pod} not found")))?;
        // Init, regular and ephemeral containers alike (kubectl logs of a
        // `kubectl debug` container).
        if !crate::podutil::has_container_named(&p, container) {
            return Err(HostError::NotFound(format!(
                "container {container:?} is not valid for pod {pod}"
            )));
        }
        let (status, _) = self.kubelet.cache().get(p.uid());
        let newest = status.find_container(container).ok_or_else(|| {
            HostError::Invalid(format!(
                "container {container:?} in pod {pod:?} is waiting to start"
            ))
        })?;
        // Upstream reads LastTerminationState: while an exited container
        // waits to be restarted, that is the newest instance itself (its
        // predecessors were removed on ContainerDied).
        let spec = crate::podutil::find_container(&p, container);
        let exited_awaiting_restart = newest.state == ContainerState::Exited
            && spec.is_some_and(|c| {
                crate::kuberuntime::actions::should_container_be_restarted(c, &p, &status)
            });
        let (restart, running) = if previous && exited_awaiting_restart {
            (newest.restart_count, false)
        } else if previous {
            let prev = newest.restart_count.checked_sub(1).ok_or_else(|| {
                HostError::Invalid(format!(
                    "previous terminated container {container:?} in pod {pod:?} not found"
                ))
            })?;
            (prev, false)
        } else {
            (
                newest.restart_count,
                newest.state == ContainerState::Running,
            )
        };
        let path = crate::server::kubelet::container_log_path(
            &self.kubelet.settings().pod_logs_dir,
            namespace,
            pod,
            p.uid(),
            container,
            restart,
        );
        Ok((path, running))
    }
}

/// /stats/summary, /metrics/resource, /metrics, /exec, /attach,
/// /portForward, served through the API server's router.
pub fn routes(kubelet: &Arc<Kubelet>, idle_timeout: Duration) -> Vec<(String, Arc<dyn Handler>)> {
    let runtime: Arc<RemoteRuntime> = Arc::clone(kubelet.runtime().runtime());
    let stats = Arc::clone(kubelet.stats_provider());
    let stats_handler = handler(move |req, resp| {
        let query = req.target().split_once('?').map_or("", |x| x.1).to_string();
        match stats.handle(req.method(), req.path(), &query) {
            Some(r) => resp.send(r.status, r.content_type, r.body.as_bytes()),
            None => resp.send_text(404, "404 page not found\n"),
        }
    });
    let metrics_handler = handler(|_req, resp| {
        resp.send(
            200,
            metrics::TEXT_CONTENT_TYPE,
            metrics::render().as_bytes(),
        )
    });

    let pods = Arc::clone(kubelet.pod_manager());
    let lookup = move |ns: &str, name: &str| {
        pods.get_by_full_name(&crate::container::pod_full_name(name, ns))
            .map(|p| Pod::clone(&p))
    };
    let streaming = StreamingServer::new(
        Arc::new(lookup),
        runtime,
        StreamingConfig {
            idle_timeout,
            ..Default::default()
        },
    );
    let stream_handler = handler(move |req, resp| {
        let query = req.target().split_once('?').map_or("", |x| x.1).to_string();
        let sreq = StreamRequest {
            method: req.method(),
            path: req.path(),
            query: &query,
            headers: req.headers(),
            remote_addr: req.peer_addr(),
        };
        match streaming.handle(&sreq) {
            Some(Reply::Respond {
                status,
                content_type,
                headers,
                body,
            }) => {
                for (k, v) in &headers {
                    resp.set_header(k, v);
                }
                resp.send(status, &content_type, &body)
            }
            Some(Reply::Upgrade(up)) => {
                let upgraded = resp.take_stream()?;
                let client: Box<dyn ClientStream> = match upgraded.stream {
                    RawStream::Plain(t) => Box::new(t),
                    RawStream::Tls(s) => s,
                };
                up.run(client, &upgraded.buffered);
                Ok(())
            }
            None => resp.send_text(404, "404 page not found\n"),
        }
    });
    vec![
        ("/stats/summary".into(), Arc::clone(&stats_handler)),
        ("/metrics/resource".into(), Arc::clone(&stats_handler)),
        ("/metrics/cadvisor".into(), stats_handler),
        ("/metrics".into(), metrics_handler),
        ("/exec/".into(), Arc::clone(&stream_handler)),
        ("/attach/".into(), Arc::clone(&stream_handler)),
        ("/portForward/".into(), stream_handler),
    ]
}
