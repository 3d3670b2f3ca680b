//! logind over the system bus (upstream `nodeshutdown/systemd/inhibit_linux.go`):
//! the delay inhibitor lock, InhibitDelayMaxUSec and its override, and the
//! PrepareForShutdown signal.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use rkubelet_dbus::{Connection, Error, Kind, Message, Result, Value};

const LOGIND: &str = "org.freedesktop.login1";
const LOGIND_PATH: &str = "/org/freedesktop/login1";
const LOGIND_MANAGER: &str = "org.freedesktop.login1.Manager";
/// Every call to the bus is bounded by this.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's override of logind's InhibitDelayMaxSec.
const LOGIND_OVERRIDE_DIR: &str = "/etc/systemd/logind.conf.d";
const LOGIND_OVERRIDE_FILE: &str = "99-kubelet.conf";

/// A connection to logind.
pub struct Logind {
    conn: Connection,
}

/// Why logind cannot be used: absent (the feature is off) or failing.
#[derive(Debug)]
pub enum ConnectError {
    /// No system bus, or nobody owns org.freedesktop.login1 on it.
    Absent(String),
    Failed(Error),
}

impl Logind {
    /// Connects to the system bus and checks that logind is on it.
    pub fn connect() -> std::result::Result<Logind, ConnectError> {
        let mut conn = Connection::system(CALL_TIMEOUT).map_err(|e| match e {
            Error::NoBus(..) => ConnectError::Absent(e.to_string()),
            e => ConnectError::Failed(e),
        })?;
        let has = conn
            .call(
                Message::method_call(
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus",
                    "NameHasOwner",
                    vec![Value::Str(LOGIND.into())],
                ),
                CALL_TIMEOUT,
            )
            .map_err(ConnectError::Failed)?;
        if has.body.first() != Some(&Value::Bool(true)) {
            return Err(ConnectError::Absent(format!(
                "no {LOGIND} on the system bus"
            )));
        }
        Ok(Logind { conn })
    }

    /// logind's InhibitDelayMaxUSec (upstream CurrentInhibitDelay).
    pub fn inhibit_delay_max(&mut self) -> Result<Duration> {
        let reply = self.conn.call(
            Message::method_call(
                LOGIND,
                LOGIND_PATH,
                "org.freedesktop.DBus.Properties",
                "Get",
                vec![
                    Value::Str(LOGIND_MANAGER.into()),
                    Value::Str("InhibitDelayMaxUSec".into()),
                ],
            ),
            CALL_TIMEOUT,
        )?;
        match reply.body.first() {
            Some(Value::Variant(v)) => match **v {
                Value::U64(us) => Ok(Duration::from_micros(us)),
                ref other => Err(Error::Protocol(format!(
                    "InhibitDelayMaxUSec is {other:?}, not a uint64"
                ))),
            },
            other => Err(Error::Protocol(format!(
                "Get InhibitDelayMaxUSec returned {other:?}"
            ))),
        }
    }

    /// Takes a delay lock on shutdown; the lock lives as long as the fd.
    pub fn inhibit_shutdown(&mut self) -> Result<OwnedFd> {
        let mut reply = self.conn.call(
            Message::method_call(
                LOGIND,
                LOGIND_PATH,
                LOGIND_MANAGER,
                "Inhibit",
                vec![
                    Value::Str("shutdown".into()),
                    Value::Str("kubelet".into()),
                    Value::Str("Kubelet needs time to handle node shutdown".into()),
                    Value::Str("delay".into()),
                ],
            ),
            CALL_TIMEOUT,
        )?;
        let Some(Value::Fd(i)) = reply.body.first() else {
            return Err(Error::Protocol(format!(
                "Inhibit returned {:?}, not a unix fd",
                reply.body
            )));
        };
        let i = *i as usize;
        if i >= reply.fds.len() {
            return Err(Error::Protocol("Inhibit's fd did not come".into()));
        }
        Ok(reply.fds.swap_remove(i))
    }

    /// Subscribes to PrepareForShutdown (upstream MonitorShutdown).
    pub fn monitor_shutdown(&mut self) -> Result<()> {
        let rule = format!(
            "type='signal',sender='{LOGIND}',path='{LOGIND_PATH}',interface='{LOGIND_MANAGER}',member='PrepareForShutdown'"
        );
        self.conn.call(
            Message::method_call(
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "AddMatch",
                vec![Value::Str(rule)],
            ),
            CALL_TIMEOUT,
        )?;
        Ok(())
    }

    /// The next PrepareForShutdown argument, or None after `timeout`.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<bool>> {
        let Some(m) = self.conn.recv(timeout)? else {
            return Ok(None);
        };
        if m.kind == Kind::Signal && m.is(LOGIND_MANAGER, "PrepareForShutdown") {
            if let Some(Value::Bool(b)) = m.body.first() {
                return Ok(Some(*b));
            }
        }
        Ok(None)
    }

    /// Asks systemd to make logind re-read its configuration (SIGHUP, as
    /// upstream ReloadLogindConf).
    pub fn reload_logind_conf(&mut self) -> Result<()> {
        self.conn.call(
            Message::method_call(
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "KillUnit",
                vec![
                    Value::Str("systemd-logind.service".into()),
                    Value::Str("all".into()),
                    Value::I32(libc::SIGHUP),
                ],
            ),
            CALL_TIMEOUT,
        )?;
        Ok(())
    }
}

/// Writes upstream's logind drop-in raising InhibitDelayMaxSec to `period`.
pub fn override_inhibit_delay(period: Duration) -> std::io::Result<()> {
    write_override(Path::new(LOGIND_OVERRIDE_DIR), period)
}

fn write_override(dir: &Path, period: Duration) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let text = format!(
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={}\n",
        period.as_secs_f64().round()
    );
    std::fs::write(dir.join(LOGIND_OVERRIDE_FILE), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_override_is_upstreams_drop_in() {
        let dir = std::env::temp_dir().join(format!("logind-override-{}", std::process::id()));
        write_override(&dir, Duration::from_secs(30)).unwrap();
        let text = std::fs::read_to_string(dir.join("99-kubelet.conf")).unwrap();
        assert_eq!(
            text,
            "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
