//! The service manager's readiness protocol (systemd's sd_notify(3), `Type=notify`): `READY=1`
//! once every listener is bound, `STOPPING=1` when a stop begins, `WATCHDOG=1` every half
//! `WatchdogSec` while the runtime schedules tasks, and a `STATUS=` line for `systemctl status`.
//! Written here rather than taken from a crate: one datagram per message on a Unix socket.

use std::ffi::OsString;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where the service manager listens.
#[derive(Debug)]
enum Target {
    Path(PathBuf),
    /// A Linux abstract socket (`NOTIFY_SOCKET` starting with `@`).
    Abstract(Vec<u8>),
}

#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    target: Target,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier the service manager asked for (`NOTIFY_SOCKET`, `WATCHDOG_USEC`,
    /// `WATCHDOG_PID`), if any. The variables are removed from the environment, so that no
    /// process the daemon starts (PULL sources, page renderers) speaks in its name: call it
    /// before any thread exists.
    pub fn from_env() -> Option<Arc<Notifier>> {
        let socket = std::env::var_os("NOTIFY_SOCKET");
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            std::env::remove_var(name);
        }
        let notifier = Notifier::new(socket?, usec.as_deref(), pid.as_deref());
        if let Err(e) = &notifier {
            eprintln!("NOTIFY_SOCKET is set but unusable: {e}; the service manager is not told");
        }
        notifier.ok().map(Arc::new)
    }

    fn new(socket: OsString, usec: Option<&str>, pid: Option<&str>) -> std::io::Result<Notifier> {
        let bytes = socket.as_bytes();
        let target = match bytes.first() {
            Some(b'@') => Target::Abstract(bytes[1..].to_vec()),
            Some(b'/') => Target::Path(PathBuf::from(socket)),
            _ => {
                return Err(std::io::Error::other(
                    "neither an absolute path nor an abstract name (@…)",
                ))
            }
        };
        // A watchdog meant for another process (the variables passed down to a child) is not ours.
        let ours = pid.is_none_or(|p| p.trim().parse::<u32>().ok() == Some(std::process::id()));
        let watchdog = usec
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0 && ours)
            .map(Duration::from_micros);
        Ok(Notifier {
            socket: UnixDatagram::unbound()?,
            target,
            watchdog,
        })
    }

    /// Sends `state` (newline-separated `KEY=value` assignments); a failure is logged, never
    /// fatal: the daemon serves whether or not its manager hears.
    pub fn send(&self, state: &str) {
        let sent = match &self.target {
            Target::Path(p) => self.socket.send_to(state.as_bytes(), p),
            Target::Abstract(name) => SocketAddr::from_abstract_name(name)
                .and_then(|a| self.socket.send_to_addr(state.as_bytes(), &a)),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, state, "cannot notify the service manager");
        }
    }

    /// Every listener is bound: the manager starts the units ordered after this one.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// A stop began (the manager then waits up to its `TimeoutStopSec`).
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping: newcomers refused, streams draining");
    }

    /// How often to ping the watchdog: half its period, as sd_watchdog_enabled(3) advises.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog.map(|w| w / 2)
    }
}

/// Pings the watchdog every half period for as long as the runtime runs (the task ends with
/// it; the pings go on through the bounded stop): a runtime that no longer schedules (every
/// worker blocked) stops the pings, and the manager restarts the daemon.
pub fn spawn_watchdog(notifier: &Arc<Notifier>) {
    let Some(every) = notifier.watchdog_every() else {
        return;
    };
    let notifier = notifier.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            notifier.send("WATCHDOG=1");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manager_hears_each_state_on_its_socket_and_a_watchdog_for_another_pid_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let manager = UnixDatagram::bind(&path).unwrap();
        manager
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let pid = std::process::id().to_string();
        let n = Notifier::new(path.clone().into(), Some("4000000"), Some(&pid)).unwrap();
        assert_eq!(n.watchdog_every(), Some(Duration::from_secs(2)));
        n.ready("serving");
        let mut buf = [0u8; 256];
        let got = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"READY=1\nSTATUS=serving");
        n.stopping();
        let got = manager.recv(&mut buf).unwrap();
        assert!(buf[..got].starts_with(b"STOPPING=1\n"));

        let other = Notifier::new(path.into(), Some("4000000"), Some("1")).unwrap();
        assert_eq!(other.watchdog_every(), None);
        let relative = Notifier::new("notify".into(), None, None);
        assert!(relative.is_err());

        // An abstract socket, as some managers use.
        let name = format!("livepack-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let manager = UnixDatagram::bind_addr(&addr).unwrap();
        manager
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let n = Notifier::new(format!("@{name}").into(), None, None).unwrap();
        n.send("WATCHDOG=1");
        let got = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..got], b"WATCHDOG=1");
    }
}
