//! Unmapping the executable's code and read-only data that has gone idle.
//!
//! A page fault in a file mapping maps not only its page but the ones
//! around it that are in the page cache ("fault-around", 64 KB by default),
//! and the start alone runs code all over an LTO'd binary: an idle static
//! rkubelet had every page of its 6.2 MB of code and 2.0 MB of rodata
//! mapped, 8.2 of its 9.6 MB RSS, most of it run once (flag parsing, TLS
//! set-up, the first sync of each module). Housekeeping drops these
//! mappings now and then (`madvise(MADV_DONTNEED)`); the pages stay in the
//! page cache, so what runs next faults them back in cheaply (a minor
//! fault per 64 KB), and the RSS follows the code that runs. Go's
//! scavenger does the same for a heap's idle spans.
//!
//! Only private mappings of the executable's own file that are not
//! writable and hold no private copies are dropped: for those, dropping
//! the mapping gives back exactly the file's bytes. A RELRO segment that
//! the loader wrote before sealing it has private copies and is left
//! alone, as are shared libraries. The mappings come from /proc/self/maps
//! and their pages' kinds from /proc/self/pagemap, for those mappings
//! only: smaps would walk the page tables of every mapping, each thread's
//! stack and each malloc arena included, to count what is not needed.

use std::ops::Range;
use std::time::Duration;

use super::Period;

/// Drops the executable's idle read-only mappings at most once a period.
pub struct IdleCodeTrimmer {
    /// None when /proc/self/exe could not be read (logged once).
    exe: Option<MappedFile>,
    period: Period,
}

impl IdleCodeTrimmer {
    /// The first trim comes one period after this.
    pub fn new(period: Duration) -> Self {
        let exe = MappedFile::of_self()
            .inspect_err(|e| log::info!("the executable's idle code stays mapped: {e}"))
            .ok();
        Self {
            exe,
            period: Period::new(period),
        }
    }

    /// Trims when a period has passed since the last trim (housekeeping
    /// calls this every 2 s).
    pub fn maybe_trim(&self) {
        let Some(exe) = &self.exe else {
            return;
        };
        if !self.period.due(false) {
            return;
        }
        match trim(exe) {
            Ok(bytes) => log::trace!("unmapped {bytes} bytes of the executable's idle code"),
            Err(e) => log::debug!("unmapping the executable's idle code: {e}"),
        }
    }
}

/// The file a mapping comes from, as /proc/PID/maps names it: by device
/// and inode, so a binary replaced on disk ("(deleted)") is still found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MappedFile {
    major: u32,
    minor: u32,
    inode: u64,
}

impl MappedFile {
    fn of_self() -> std::io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata("/proc/self/exe")?;
        Ok(Self {
            major: libc::major(meta.dev()),
            minor: libc::minor(meta.dev()),
            inode: meta.ino(),
        })
    }
}

/// Drops every trimmable mapping of `exe`; returns the bytes they span.
fn trim(exe: &MappedFile) -> std::io::Result<usize> {
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let pagemap = PageMap::of_self()?;
    let mut spanned = 0;
    for range in maps.lines().filter_map(|line| parse_header(line, exe)) {
        if pagemap.has_private_pages(&range)? {
            continue;
        }
        drop_mapping_pages(&range)?;
        spanned += range.len();
    }
    Ok(spanned)
}

/// /proc/self/pagemap: one 64-bit entry per virtual page.
struct PageMap {
    file: std::fs::File,
    page_size: usize,
}

impl PageMap {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    /// A page of a file, or shared anonymous memory (Linux 3.5 on).
    const FILE_OR_SHARED: u64 = 1 << 61;

    fn of_self() -> std::io::Result<Self> {
        // SAFETY: sysconf only reads a system value.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Ok(Self {
            file: std::fs::File::open("/proc/self/pagemap")?,
            page_size: usize::try_from(page_size).unwrap_or(4096),
        })
    }

    /// Whether any page of `range` is a private copy: resident and not
    /// the file's, or swapped out (only anonymous pages swap).
    fn has_private_pages(&self, range: &Range<usize>) -> std::io::Result<bool> {
        use std::os::unix::fs::FileExt;
        let mut entries = vec![0u8; range.len() / self.page_size * 8];
        let offset = (range.start / self.page_size * 8) as u64;
        self.file.read_exact_at(&mut entries, offset)?;
        Ok(entries.chunks_exact(8).any(|e| {
            let e = e.try_into().map_or(Self::SWAPPED, u64::from_ne_bytes);
            e & Self::SWAPPED != 0 || (e & Self::PRESENT != 0 && e & Self::FILE_OR_SHARED == 0)
        }))
    }
}

/// The range of a /proc/PID/maps line ("start-end perms offset dev inode
/// [path]") when it is a private, non-writable mapping of `file`.
fn parse_header(line: &str, file: &MappedFile) -> Option<Range<usize>> {
    let mut fields = line.split_whitespace();
    let (range, perms) = (fields.next()?, fields.next()?);
    let (dev, inode) = (fields.nth(1)?, fields.next()?);
    let (major, minor) = dev.split_once(':')?;
    let this = MappedFile {
        major: u32::from_str_radix(major, 16).ok()?,
        minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
    };
    let private_read_only =
        perms.starts_with('r') && perms.get(1..2) == Some("-") && perms.ends_with('p');
    if this != *file || !private_read_only {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    (start < end).then_some(start..end)
}

/// `madvise(MADV_DONTNEED)` over a whole mapping of the file: its page
/// table entries go; the next access maps the page cache's page again.
fn drop_mapping_pages(range: &Range<usize>) -> std::io::Result<()> {
    // SAFETY: the range is a whole private mapping of the executable that
    // is not writable and held no private copies when pagemap was read (it
    // cannot gain one since: a copy needs a write). Dropping its pages
    // leaves exactly the file's bytes behind them.
    let rc = unsafe {
        libc::madvise(
            range.start as *mut libc::c_void,
            range.len(),
            libc::MADV_DONTNEED,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXE: MappedFile = MappedFile {
        major: 0xfe,
        minor: 0,
        inode: 5398544,
    };

    #[test]
    fn only_private_read_only_mappings_of_the_executable_are_picked() {
        let maps = [
            "55d4c7a00000-55d4c7c00000 r--p 00000000 fe:00 5398544 /usr/bin/rkubelet",
            "55d4c7c00000-55d4c8400000 r-xp 00200000 fe:00 5398544 /usr/bin/rkubelet",
            "55d4c8440000-55d4c8450000 rw-p 00a40000 fe:00 5398544 /usr/bin/rkubelet",
            "55d4c8450000-55d4c8460000 rw-p 00000000 00:00 0",
            "7f0000000000-7f0000100000 r-xp 00000000 fe:00 1234 /usr/lib/libc.so.6",
            "7f0000200000-7f0000300000 r-xp 00000000 fe:01 5398544 /other/device",
            "7f0000400000-7f0000500000 r--s 00000000 fe:00 5398544 /usr/bin/rkubelet",
            "7f0000600000-7f0000700000 r-xp 00000000 fe:00 5398544 /usr/bin/rkubelet (deleted)",
        ];
        let picked: Vec<_> = maps.iter().filter_map(|l| parse_header(l, &EXE)).collect();
        assert_eq!(
            picked,
            vec![
                0x55d4c7a00000..0x55d4c7c00000,
                0x55d4c7c00000..0x55d4c8400000,
                0x7f0000600000..0x7f0000700000,
            ]
        );
    }

    #[test]
    fn garbage_is_skipped() {
        for line in ["nonsense", "zz-yy r-xp 0 fe:00 5398544 x", "", "-", ": :"] {
            assert_eq!(parse_header(line, &EXE), None, "{line:?}");
        }
    }

    #[test]
    fn a_written_page_of_a_private_file_mapping_is_a_private_copy() {
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("pagemap-probe-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 2 * 4096]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let _ = std::fs::remove_file(&path);
        let len = 2 * 4096;
        // SAFETY: a fresh private mapping, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let start = addr as usize;
        let pagemap = PageMap::of_self().expect("pagemap");
        // SAFETY: inside the mapping; read, then written.
        let first = unsafe { std::ptr::read_volatile(addr as *const u8) };
        let clean = pagemap.has_private_pages(&(start..start + len));
        // SAFETY: as above; the write makes the first page a private copy.
        unsafe { std::ptr::write_volatile(addr as *mut u8, first + 1) };
        let written = pagemap.has_private_pages(&(start..start + len));
        let second_page = pagemap.has_private_pages(&(start + 4096..start + len));
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, len) };
        assert_eq!(first, 7);
        assert!(
            !clean.expect("pagemap read"),
            "a page only read is the file's"
        );
        assert!(written.expect("pagemap read"), "the written page is a copy");
        assert!(
            !second_page.expect("pagemap read"),
            "the other page is untouched"
        );
    }

    /// Resident KB of this process's mapping that starts at `start`.
    fn rss_kb_of(start: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let head = format!("{start:x}-");
        smaps
            .lines()
            .skip_while(|l| !l.starts_with(&head))
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("mapping's Rss")
    }

    #[test]
    fn dropped_pages_leave_the_rss_and_come_back_with_the_files_bytes() {
        use std::os::fd::AsRawFd;
        // A copy of this test binary beside it: on the target directory's
        // disk and in the page cache, as the kubelet's executable is, but
        // not the file the test below trims while this one runs.
        // Its first 4 MB only: the malloc_trim test beside this one reads
        // the whole process's RSS, and a 25 MB buffer or mapping touched
        // here at the same time would hide what it gave back.
        use std::io::Read;
        const PROBE: usize = 4 << 20;
        let exe = std::env::current_exe().expect("exe");
        let path = exe.with_extension(format!("trim-probe-{}", std::process::id()));
        std::fs::copy(&exe, &path).expect("copy the test binary");
        let mut file = std::fs::File::open(&path).expect("open");
        let _ = std::fs::remove_file(&path);
        let mut bytes = vec![0u8; PROBE];
        file.read_exact(&mut bytes)
            .expect("test binary too small to probe");
        let len = bytes.len();
        // SAFETY: a fresh private read-only mapping, unmapped below.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(addr, libc::MAP_FAILED);
        let start = addr as usize;
        // SAFETY: inside the mapping, which stays until munmap below.
        let mapped = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
        let sum = |m: &[u8]| m.iter().step_by(4096).map(|&b| b as u64).sum::<u64>();
        let expected = sum(&bytes);
        assert_eq!(sum(mapped), expected);
        let touched = rss_kb_of(start);

        drop_mapping_pages(&(start..start + len)).expect("madvise");
        let dropped = rss_kb_of(start);
        let again = sum(mapped);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(addr, len) };

        assert!(
            touched >= (len as u64 / 1024) / 2,
            "only {touched} KB resident"
        );
        assert_eq!(dropped, 0, "{dropped} KB still mapped after the drop");
        assert_eq!(
            again, expected,
            "the bytes read back differ from the file's"
        );
    }

    #[test]
    fn the_running_executables_code_is_found_and_trimmed() {
        let exe = MappedFile::of_self().expect("/proc/self/exe");
        let spanned = trim(&exe).expect("trim");
        // Its code at least. No upper bound: std's backtrace symbolizer
        // maps this same file read-only to print a panicking test's
        // backtrace, and that mapping is trimmed too, rightly.
        assert!(spanned > 1 << 20, "trimmed only {spanned} bytes");
        assert_eq!(spanned % 4096, 0, "mappings are whole pages");
    }

    #[test]
    fn the_trimmer_waits_a_period_between_trims() {
        let trimmer = IdleCodeTrimmer::new(Duration::from_secs(3600));
        assert!(trimmer.exe.is_some());
        let before = *trimmer.period.last.lock().expect("lock");
        trimmer.maybe_trim();
        assert_eq!(
            *trimmer.period.last.lock().expect("lock"),
            before,
            "trimmed early"
        );
        let due = IdleCodeTrimmer::new(Duration::ZERO);
        let before = *due.period.last.lock().expect("lock");
        due.maybe_trim();
        assert!(
            *due.period.last.lock().expect("lock") > before,
            "a due trim did not run"
        );
    }
}
