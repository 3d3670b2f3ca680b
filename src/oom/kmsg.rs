//! /dev/kmsg, read as cadvisor's kmsgparser does (one record per read)
//! but non-blocking behind poll(2) with the shutdown descriptor, so a
//! read never outlasts its timeout and ends at once on shutdown.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use rkubelet_util::shutdown::{wait_readable, ShutdownFd, Wake};

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

    /// The records that arrived, waiting at most `timeout` for the first;
    /// none when `shutdown` came. Records the kernel overwrote before we
    /// read them (EPIPE) are skipped, as kmsgparser does.
    pub fn read(&mut self, timeout: Duration, shutdown: &ShutdownFd) -> io::Result<Vec<String>> {
        match wait_readable(&[self.file.as_fd()], shutdown, timeout)? {
            Wake::Ready => {}
            Wake::Shutdown | Wake::Timeout => return Ok(Vec::new()),
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
