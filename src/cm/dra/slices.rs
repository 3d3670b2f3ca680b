//! The ResourceSlices this node's drivers published, removed when no
//! driver stands behind them (upstream RegistrationHandler's
//! wipeResourceSlices): all of them once the Node exists after a start,
//! when no driver has registered yet, and a driver's own 30 s after it
//! deregistered, unless it came back. Otherwise the scheduler would
//! place pods on devices that no driver on the node can prepare.
//!
//! The calls run on the node-status thread after a status sync (the Node
//! exists then), so no thread is added and a slow server delays only the
//! next status update, never a pod.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;

use crate::client::version::ServerVersion;
use crate::client::{paths, Client};

/// upstream defaultWipingDelay: a driver restarting within it keeps its
/// slices.
pub const WIPING_DELAY: Duration = Duration::from_secs(30);

/// The pause before a failed wipe is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// Whose slices a wipe removes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    /// Every driver's, at start.
    AllDrivers,
    Driver(String),
}

#[derive(Debug)]
struct Wipe {
    scope: Scope,
    due: Instant,
}

/// The wipes not done yet.
#[derive(Debug)]
pub struct SliceWiper {
    pending: Mutex<Vec<Wipe>>,
}

impl SliceWiper {
    /// A wiper holding the start's wipe of every driver's slices.
    pub fn new() -> SliceWiper {
        SliceWiper {
            pending: Mutex::new(vec![Wipe {
                scope: Scope::AllDrivers,
                due: Instant::now(),
            }]),
        }
    }

    /// The driver's socket went: its slices go after [`WIPING_DELAY`].
    pub(super) fn driver_gone(&self, driver: &str) {
        let scope = Scope::Driver(driver.to_string());
        let mut pending = lock(&self.pending);
        pending.retain(|w| w.scope != scope);
        pending.push(Wipe {
            scope,
            due: Instant::now() + WIPING_DELAY,
        });
    }

    /// The driver registered (again): its slices are its own to keep.
    pub(super) fn driver_back(&self, driver: &str) {
        let scope = Scope::Driver(driver.to_string());
        lock(&self.pending).retain(|w| w.scope != scope);
    }

    /// Runs the wipes that are due; one that fails is tried again later.
    pub fn run_due(&self, client: &Client, node: &str) {
        let now = Instant::now();
        let due: Vec<Scope> = {
            let mut pending = lock(&self.pending);
            let (due, later) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|w| w.due <= now);
            *pending = later;
            due.into_iter().map(|w| w.scope).collect()
        };
        for scope in due {
            let Some(path) = wipe_path(client.server_version(), node, &scope) else {
                continue;
            };
            match client.delete(&path, &DeleteOptions::default()) {
                Ok(()) => log::info!("Deleted the ResourceSlices of {}", describe(&scope)),
                Err(e) => {
                    log::warn!(
                        "Deleting the ResourceSlices of {} failed, trying again in {}s: {e}",
                        describe(&scope),
                        RETRY.as_secs()
                    );
                    self.retry(scope, now + RETRY);
                }
            }
        }
    }

    /// Requeues a failed wipe unless a newer one for the same scope came
    /// (or its driver came back) meanwhile.
    fn retry(&self, scope: Scope, due: Instant) {
        let mut pending = lock(&self.pending);
        if !pending.iter().any(|w| w.scope == scope) {
            pending.push(Wipe { scope, due });
        }
    }

    #[cfg(test)]
    pub(super) fn pending(&self) -> Vec<(String, Instant)> {
        lock(&self.pending)
            .iter()
            .map(|w| (describe(&w.scope), w.due))
            .collect()
    }
}

impl Default for SliceWiper {
    fn default() -> Self {
        SliceWiper::new()
    }
}

/// The `deletecollection` of the scope's slices on this node, or None when
/// the server has no slices for this kubelet to wipe. The start's wipe
/// is made from v1.34, where DRA is on by default, as the kubelet of
/// that release does (the v1.32 capture has none: DRA was off there); a
/// driver's follows the claims' version.
fn wipe_path(server: ServerVersion, node: &str, scope: &Scope) -> Option<String> {
    let version = match scope {
        Scope::AllDrivers if server.minor < 34 => return None,
        _ => super::claims::api_version(server)?,
    };
    let selector = match scope {
        Scope::AllDrivers => format!("spec.nodeName={node}"),
        Scope::Driver(d) => format!("spec.nodeName={node},spec.driver={d}"),
    };
    Some(paths::with_query(
        &format!("/apis/{version}/resourceslices"),
        &[("fieldSelector", &selector)],
    ))
}

fn describe(scope: &Scope) -> String {
    match scope {
        Scope::AllDrivers => "all DRA drivers on this node".to_string(),
        Scope::Driver(d) => format!("DRA driver {d}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(minor: u32) -> ServerVersion {
        ServerVersion { minor }
    }

    #[test]
    fn the_start_wipe_is_made_from_v1_34_as_upstream_does() {
        assert_eq!(
            wipe_path(v(34), "n1", &Scope::AllDrivers).as_deref(),
            Some("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dn1")
        );
        assert_eq!(wipe_path(v(32), "n1", &Scope::AllDrivers), None);
        assert_eq!(
            wipe_path(v(33), "n1", &Scope::Driver("gpu.example.com".into())).as_deref(),
            Some(
                "/apis/resource.k8s.io/v1beta1/resourceslices?fieldSelector=\
                 spec.nodeName%3Dn1%2Cspec.driver%3Dgpu.example.com"
            )
        );
        assert_eq!(wipe_path(v(31), "n1", &Scope::Driver("d".into())), None);
    }

    #[test]
    fn a_driver_back_within_the_delay_keeps_its_slices() {
        let w = SliceWiper::new();
        w.driver_gone("a");
        w.driver_gone("b");
        w.driver_gone("a");
        w.driver_back("b");
        let pending = w.pending();
        let names: Vec<&str> = pending.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(names, ["all DRA drivers on this node", "DRA driver a"]);
        let (_, due) = pending[1];
        assert!(due >= Instant::now() + WIPING_DELAY - Duration::from_secs(1));
    }
}
