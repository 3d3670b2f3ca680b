//! Shutdown as a channel and as a descriptor.
//!
//! Most module threads wait in a `select!` that includes the shutdown
//! channel. A few wait in poll(2) on a descriptor of their own: the HTTP
//! acceptors, the plugin watcher's inotify, /dev/kmsg. Without shutdown
//! in the same poll, their timeout was also how late they saw a stop, so
//! it had to be short and they woke every second or less for nothing.
//! [`ShutdownFd`] goes into that poll instead: it turns readable (EOF)
//! when shutdown comes, and the timeout can be long.

use std::io::{self, PipeReader, PipeWriter};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

/// Closes the shutdown channel and then the descriptor, when dropped.
/// The order is what [`ShutdownFd`]'s readers rely on: when the
/// descriptor is readable, the channel is already closed.
pub struct Trigger {
    channel: Option<Sender<()>>,
    pipe: Option<PipeWriter>,
}

impl Drop for Trigger {
    fn drop(&mut self) {
        drop(self.channel.take());
        drop(self.pipe.take());
    }
}

/// The read end of the shutdown pipe: nothing is ever written, so it is
/// readable only once the [`Trigger`] is gone.
#[derive(Clone)]
pub struct ShutdownFd(Arc<PipeReader>);

impl AsFd for ShutdownFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// One shutdown, both ways: what a thread that polls its own descriptor
/// is given.
#[derive(Clone)]
pub struct Shutdown {
    /// Closed at shutdown; what every module's `select!` watches.
    pub channel: Receiver<()>,
    /// Readable once `channel` is closed.
    pub fd: ShutdownFd,
}

impl Shutdown {
    /// Whether shutdown came (the channel closed, or got a message).
    pub fn came(&self) -> bool {
        !matches!(self.channel.try_recv(), Err(TryRecvError::Empty))
    }
}

/// A shutdown and what fires it.
pub fn channel() -> io::Result<(Trigger, Shutdown)> {
    // Both ends are close-on-exec (std's pipe).
    let (read, write) = io::pipe()?;
    let (tx, rx) = crossbeam_channel::bounded(0);
    let trigger = Trigger {
        channel: Some(tx),
        pipe: Some(write),
    };
    let fd = ShutdownFd(Arc::new(read));
    Ok((trigger, Shutdown { channel: rx, fd }))
}

/// What ended a [`wait_readable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// One of the descriptors is readable (or hung up, or in error:
    /// whatever a read would report at once).
    Ready,
    /// Shutdown came.
    Shutdown,
    /// The timeout passed, or a signal interrupted the wait.
    Timeout,
}

/// Waits up to `timeout` for one of `fds` to be readable, or for
/// shutdown. Shutdown wins when both are ready.
pub fn wait_readable(
    fds: &[BorrowedFd<'_>],
    shutdown: &ShutdownFd,
    timeout: Duration,
) -> io::Result<Wake> {
    let mut set: Vec<libc::pollfd> = fds
        .iter()
        .chain(std::iter::once(&shutdown.as_fd()))
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    let nfds = libc::nfds_t::try_from(set.len()).unwrap_or(libc::nfds_t::MAX);
    // SAFETY: `set` holds `fds.len() + 1` initialised pollfds for descriptors that
    // the borrows keep open for the whole call.
    let n = unsafe { libc::poll(set.as_mut_ptr(), nfds, ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(Wake::Timeout),
            _ => Err(e),
        };
    }
    if n == 0 {
        return Ok(Wake::Timeout);
    }
    if set.last().is_some_and(|p| p.revents != 0) {
        return Ok(Wake::Shutdown);
    }
    Ok(Wake::Ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[test]
    fn dropping_the_trigger_closes_the_channel_before_the_descriptor_wakes() {
        let (trigger, shutdown) = channel().expect("pipe");
        let (_keep, other) = io::pipe().expect("pipe");
        let waiter = std::thread::spawn(move || {
            let wake = wait_readable(&[other.as_fd()], &shutdown.fd, Duration::from_secs(30));
            (
                wake.expect("poll"),
                shutdown.channel.try_recv(),
                shutdown.came(),
            )
        });
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        drop(trigger);
        let (wake, channel, came) = waiter.join().expect("waiter");
        assert_eq!(wake, Wake::Shutdown);
        assert_eq!(channel, Err(TryRecvError::Disconnected));
        assert!(came);
        assert!(start.elapsed() < Duration::from_secs(5), "woke late");
    }

    #[test]
    fn a_readable_descriptor_ends_the_wait_and_a_quiet_one_times_out() {
        let (_trigger, Shutdown { fd, .. }) = channel().expect("pipe");
        let (quiet, _quiet_w) = io::pipe().expect("pipe");
        let (busy, mut busy_w) = io::pipe().expect("pipe");
        assert_eq!(
            wait_readable(&[quiet.as_fd()], &fd, Duration::from_millis(20)).expect("poll"),
            Wake::Timeout
        );
        busy_w.write_all(b"x").expect("write");
        assert_eq!(
            wait_readable(&[quiet.as_fd(), busy.as_fd()], &fd, Duration::from_secs(5))
                .expect("poll"),
            Wake::Ready
        );
    }

    #[test]
    fn every_clone_sees_the_shutdown() {
        let (trigger, shutdown) = channel().expect("pipe");
        let copies = [shutdown.clone(), shutdown.clone()];
        drop(shutdown);
        assert!(!copies[0].came());
        drop(trigger);
        for copy in &copies {
            assert_eq!(
                wait_readable(&[], &copy.fd, Duration::from_secs(5)).expect("poll"),
                Wake::Shutdown
            );
            assert!(copy.came());
        }
    }
}
