//! The servers startup brings up: healthz (with the kubelet's own health
//! checks), the kubelet API server on 10250 and the read-only port, and
//! the certificate managers whose serving certificate 10250 uses.

use super::*;
use std::thread::JoinHandle;

/// What node status reports about the kubelet's own health (the Ready
/// condition, runtime version, images), read fresh at every update; the
/// images listed every 30 s, as upstream's image cache.
pub(super) fn kubelet_health(
    kubelet: &Arc<Kubelet>,
) -> Box<dyn Fn() -> KubeletHealth + Send + Sync> {
    use crate::images::list_cache::{ImageListCache, IMAGE_LIST_PERIOD};
    let k = Arc::clone(kubelet);
    let image_list = ImageListCache::new(IMAGE_LIST_PERIOD);
    Box::new(move || {
        let images = image_list.get(|| {
            k.runtime().runtime().list_images().map(|list| {
                list.into_iter()
                    .map(|i| ImageInfo {
                        names: i.repo_tags.into_iter().chain(i.repo_digests).collect(),
                        size_bytes: i.size,
                    })
                    .collect()
            })
        });
        KubeletHealth {
            runtime_errors: k.runtime_state().runtime_errors(),
            network_error: k.runtime_state().network_error(),
            pleg_error: k
                .pleg()
                .healthy()
                .err()
                .map(|e| format!("PLEG is not healthy: {e}")),
            runtime_version: k.runtime_state().runtime_version(),
            runtime_handlers: k.runtime_state().runtime_handlers(),
            runtime_features: k.runtime_state().runtime_features(),
            images,
            memory_pressure: k.eviction().is_under_memory_pressure(),
            disk_pressure: k.eviction().is_under_disk_pressure(),
            pid_pressure: k.eviction().is_under_pid_pressure(),
            shutdown_error: k.node_shutdown().shutdown_status(),
            devices: k.device_manager().capacity(),
            volumes_in_use: k.volume_manager().volumes_in_use(),
        }
    })
}

/// The health checks /healthz runs, on the healthz port and on 10250.
pub(super) fn healthz_checks(
    config: &KubeletConfiguration,
    kubelet: &Arc<Kubelet>,
) -> Arc<Healthz> {
    let limit = (config.sync_frequency.0 * 2).max(MIN_SYNC_LOOP_HEALTH);
    let (k1, k2, k3) = (
        Arc::clone(kubelet),
        Arc::clone(kubelet),
        Arc::clone(kubelet),
    );
    let healthz = Healthz::new(vec![
        NamedCheck {
            name: "ping",
            check: Box::new(|| Ok(())),
        },
        NamedCheck {
            name: "log",
            check: Box::new(|| Ok(())),
        },
        NamedCheck {
            name: "syncloop",
            // A loop not yet entered is healthy, as upstream's
            // syncLoopHealthCheck has it: READY=1 and the watchdog's
            // first ping come just before the first iteration.
            check: Box::new(move || match k1.last_loop_iteration() {
                Some(t) if t.elapsed() > limit => Err("sync loop took longer than expected".into()),
                _ => Ok(()),
            }),
        },
        NamedCheck {
            name: "pleg",
            check: Box::new(move || k2.pleg().healthy()),
        },
        NamedCheck {
            name: "runtime",
            check: Box::new(move || {
                let errs = k3.runtime_state().runtime_errors();
                if errs.is_empty() {
                    Ok(())
                } else {
                    Err(errs.join("; "))
                }
            }),
        },
        NamedCheck {
            name: "modules",
            check: Box::new(modules_check),
        },
    ]);
    healthz
}

/// How long /healthz reports a module whose panic its supervisor contained.
const PANIC_REPORT_WINDOW: Duration = Duration::from_secs(60);

/// Fails for a minute after a module thread panicked (and was restarted by
/// its supervisor), naming it: the kubelet still works, but an operator
/// should look at the log.
fn modules_check() -> Result<(), String> {
    let recent = crate::metrics::modules_panicked_within(PANIC_REPORT_WINDOW);
    if recent.is_empty() {
        return Ok(());
    }
    Err(recent
        .iter()
        .map(|(m, n, ago)| {
            format!(
                "module {m} panicked ({n} in all, last {} s ago) and was restarted",
                ago.as_secs()
            )
        })
        .collect::<Vec<_>>()
        .join("; "))
}

pub(super) fn start_healthz(
    config: &KubeletConfiguration,
    healthz: &Arc<Healthz>,
    shutdown: &Shutdown,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    if config.healthz_port <= 0 {
        return Ok(None);
    }
    let addr: SocketAddr = format!("{}:{}", config.healthz_bind_address, config.healthz_port)
        .parse()
        .with_context(|| format!("healthzBindAddress {:?}", config.healthz_bind_address))?;
    Ok(healthz.serve(addr, shutdown.clone()).map(Some)?)
}

/// The kubelet API server (10250, TLS) and the read-only port, when
/// enableServer is on (upstream's default).
pub(super) fn start_kubelet_server(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    (kubelet, node, healthz): (&Arc<Kubelet>, &str, &Arc<Healthz>),
    client: Option<&Client>,
    serving_cert: Option<Arc<crate::client::tls::CertSlot>>,
    shutdown: &Shutdown,
) -> anyhow::Result<Vec<Worker>> {
    if !config.enable_server {
        return Ok(Vec::new());
    }
    let mut server_cfg = ServerConfig::from_kubelet_config(config, &flags.cert_dir)?;
    server_cfg.serving_cert = serving_cert;
    let host = Arc::new(ServerHost {
        kubelet: Arc::clone(kubelet),
        node_name: node.to_string(),
        config_json: serde_json::to_value(config).unwrap_or_default(),
    });
    let routes = server_host::routes(kubelet, config.streaming_connection_idle_timeout.0);
    log::info!(
        "starting the kubelet API server on {}:{}",
        config.address,
        config.port
    );
    kubelet_server::start(
        server_cfg,
        host,
        Arc::clone(healthz),
        client.cloned(),
        routes,
        shutdown.clone(),
    )
    .context("start the kubelet API server")
}

/// healthz, the certificate managers and, unless in runonce mode, the
/// kubelet API server. Pods run without the API server on 10250 (logs,
/// exec, metrics): failing to start it is reported, not fatal (upstream
/// exits).
pub(super) fn start_servers(
    flags: &KubeletFlags,
    config: &KubeletConfiguration,
    (kubelet, node): (&Arc<Kubelet>, &str),
    (client, bootstrap): (Option<&Client>, Option<Client>),
    recorder: &Arc<dyn EventRecorder>,
    stop: &Shutdown,
) -> anyhow::Result<Vec<Worker>> {
    let healthz = healthz_checks(config, kubelet);
    let mut threads: Vec<Worker> = start_healthz(config, &healthz, stop)?
        .map(|h| Worker::adopt(h, ShutdownStage::Servers))
        .into_iter()
        .collect();
    threads.extend(crate::watchdog::start(&healthz, &stop.channel)?);
    metrics::set_node_name(node);
    let certs = certificates::certificate_managers(
        flags,
        config,
        (client, bootstrap),
        recorder,
        node,
        kubelet.node(),
    );
    if !flags.runonce {
        threads.extend(
            start_kubelet_server(
                flags,
                config,
                (kubelet, node, &healthz),
                client,
                certs.serving_slot.clone(),
                stop,
            )
            .unwrap_or_else(|e| {
                log::error!("{e:#}; continuing without it");
                Vec::new()
            }),
        );
    }
    threads.extend(certificates::start(certs, &stop.channel)?);
    Ok(threads)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_contained_panic_is_reported_then_ages_out() {
        crate::metrics::module_panicked("test-module-healthz");
        let err = super::modules_check().unwrap_err();
        assert!(
            err.contains("module test-module-healthz panicked (1 in all"),
            "{err}"
        );
        let later = crate::metrics::modules_panicked_within(std::time::Duration::ZERO);
        assert!(later.is_empty(), "outside the window nothing is reported");
    }
}
