//! /dev/kmsg, read as cadvisor's kmsgparser does (one record per read)
//! but non-blocking behind poll(2), so a read never outlasts its timeout
//! and the thread sees shutdown.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

const KMSG: &str = "/dev/kmsg";
/// The kernel's records are at most about 1 KiB of text plus dictionary;
/// kmsgparser reads with 8 KiB too.
const RECORD_BUF: usize = 8192;
/// Records taken per wake-up, so one read is bounded even under a flood.
const MAX_RECORDS_PER_READ: usize = 1024;

pub struct Kmsg {
    file: File,
}

impl Kmsg {
    /// Opens /dev/kmsg, placed after the last record so OOMs from before
    /// the start are not replayed (cadvisor SeekEnd).
    pub fn open_at_end() -> io::Result<Kmsg> {
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(KMSG)?;
        file.seek(SeekFrom::End(0))?;
        Ok(Kmsg { file })
    }

    /// The records that arrived, waiting at most `timeout` for the first.
    /// Records the kernel overwrote before we read them (EPIPE) are
    /// skipped, as kmsgparser does.
    pub fn read(&mut self, timeout: Duration) -> io::Result<Vec<String>> {
        let ms = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.file.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, ms) {
            Ok(0) => return Ok(Vec::new()),
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(Vec::new()),
            Err(e) => return Err(io::Error::from(e)),
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; RECORD_BUF];
        while out.len() < MAX_RECORDS_PER_READ {
            match self.file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
