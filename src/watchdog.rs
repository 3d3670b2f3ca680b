//! The systemd watchdog (upstream `pkg/kubelet/watchdog`, feature
//! SystemdWatchdog, on by default since 1.32). With `WatchdogSec=` on the
//! unit, systemd passes `WATCHDOG_USEC`; every half of it, while healthz's
//! `ping`, `log` and `syncloop` checks pass (upstream's set), `WATCHDOG=1`
//! goes to the service manager. A sync loop that stalls stops the pings,
//! and systemd kills and restarts the unit.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::server::healthz::Healthz;
use crate::util::sd_notify;
use crate::util::worker::{self, ShutdownStage, Worker};

/// Upstream refuses a shorter watchdog timeout.
const MIN_TIMEOUT: Duration = Duration::from_secs(1);
/// The healthz checks the watchdog asks (upstream NewHealthChecker).
const CHECKS: &[&str] = &["ping", "log", "syncloop"];

#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error("WATCHDOG_USEC={0:?} is not a number of microseconds")]
    Invalid(String),
    #[error("configure watchdog: timeout too small: {0:?} (at least 1s)")]
    TooSmall(Duration),
    #[error("spawn the watchdog thread: {0}")]
    Spawn(std::io::Error),
}

/// The watchdog timeout systemd set for this process (sd_watchdog_enabled:
/// WATCHDOG_USEC, for us unless WATCHDOG_PID names another process).
pub fn timeout_from_env(
    usec: Option<&str>,
    pid: Option<&str>,
) -> Result<Option<Duration>, WatchdogError> {
    let Some(usec) = usec.filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    if let Some(pid) = pid.filter(|p| !p.is_empty()) {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return Ok(None);
        }
    }
    let micros: u64 = usec
        .parse()
        .map_err(|_| WatchdogError::Invalid(usec.to_string()))?;
    if micros == 0 {
        return Ok(None);
    }
    let timeout = Duration::from_micros(micros);
    if timeout <= MIN_TIMEOUT {
        return Err(WatchdogError::TooSmall(timeout));
    }
    Ok(Some(timeout))
}

/// Starts the `watchdog` thread when systemd asked for one.
pub fn start(
    healthz: &Arc<Healthz>,
    shutdown: &Receiver<()>,
) -> Result<Option<Worker>, WatchdogError> {
    let usec = std::env::var("WATCHDOG_USEC").ok();
    let pid = std::env::var("WATCHDOG_PID").ok();
    let Some(timeout) = timeout_from_env(usec.as_deref(), pid.as_deref())? else {
        log::info!("systemd watchdog is not enabled");
        return Ok(None);
    };
    let interval = timeout / 2;
    log::info!("systemd watchdog: WATCHDOG=1 every {interval:?} while healthy");
    let healthz = Arc::clone(healthz);
    worker::spawn_periodic(
        "watchdog",
        ShutdownStage::Servers,
        interval,
        Duration::ZERO,
        shutdown.clone(),
        move || match healthz.check(CHECKS) {
            Ok(()) => {
                if let Err(e) = sd_notify::notify(sd_notify::WATCHDOG) {
                    log::warn!("sd_notify {}: {e}", sd_notify::WATCHDOG);
                }
            }
            Err(e) => log::error!(
                "not notifying the watchdog this round: the kubelet is not healthy: {e}"
            ),
        },
    )
    .map(Some)
    .map_err(WatchdogError::Spawn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_systemds_for_this_process_only() {
        let me = std::process::id().to_string();
        assert_eq!(timeout_from_env(None, None).unwrap(), None);
        assert_eq!(
            timeout_from_env(Some("30000000"), None).unwrap(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            timeout_from_env(Some("30000000"), Some(&me)).unwrap(),
            Some(Duration::from_secs(30))
        );
        // Another process's watchdog (inherited environment) is not ours.
        assert_eq!(timeout_from_env(Some("30000000"), Some("1")).unwrap(), None);
        assert_eq!(timeout_from_env(Some("0"), None).unwrap(), None);
        assert!(matches!(
            timeout_from_env(Some("500000"), None),
            Err(WatchdogError::TooSmall(_))
        ));
        assert!(matches!(
            timeout_from_env(Some("30s"), None),
            Err(WatchdogError::Invalid(_))
        ));
    }
}
