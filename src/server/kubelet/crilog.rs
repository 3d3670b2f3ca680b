//! Reading CRI container log files (upstream pkg/kubelet/kuberuntime/logs).
//! Each line: `<RFC3339Nano time> <stdout|stderr> <P|F>[:tags] <message>`;
//! `P` marks a partial line continued by the next. Tail, since, timestamps,
//! byte limit and stream selection apply as upstream's ReadLogs does; follow
//! polls the file, reopens it after rotation, and ends when the container
//! stops, the client goes away, or nothing arrives for the idle timeout.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;

/// Which streams to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Streams {
    All,
    Stdout,
    Stderr,
}

/// The PodLogOptions that shape the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogOptions {
    pub follow: bool,
    pub timestamps: bool,
    /// Lines from the end; None for all.
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// Skip lines before this time (nanoseconds since the epoch).
    pub since_nanos: Option<i128>,
    pub streams: Streams,
}

/// Follow mode's view of the world.
pub(crate) trait FollowControl {
    /// The client left or the server is stopping.
    fn cancelled(&self) -> bool;
    /// The container still writes to this file.
    fn running(&mut self) -> bool;
}

/// Timings of follow mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FollowTiming {
    pub poll: Duration,
    pub idle_timeout: Duration,
}

#[derive(Debug, PartialEq, Eq)]
struct Line<'a> {
    timestamp: &'a str,
    nanos: i128,
    stdout: bool,
    /// The message; full lines keep their trailing newline.
    message: &'a [u8],
}

/// The fuzz targets' way in (fuzz/): one CRI log line.
#[cfg(feature = "fuzzing")]
pub fn fuzz_line(line: &[u8]) {
    if let Ok(l) = parse_line(line) {
        let _ = format_timestamp(l.timestamp);
    }
}

/// Parses one CRI log line (with its newline, if any).
fn parse_line(line: &[u8]) -> Result<Line<'_>, String> {
    let mut fields = line.splitn(4, |b| *b == b' ');
    let ts = fields.next().ok_or("timestamp is not found")?;
    let stream = fields.next().ok_or("stream type is not found")?;
    let tag = fields.next().ok_or("log tag is not found")?;
    let mut message = fields.next().ok_or("log tag is not found")?;
    let timestamp = std::str::from_utf8(ts).map_err(|_| "timestamp is not UTF-8")?;
    let nanos = timestamp
        .parse::<Timestamp>()
        .map_err(|e| format!("unexpected timestamp {timestamp:?}: {e}"))?
        .as_nanosecond();
    let stdout = match stream {
        b"stdout" => true,
        b"stderr" => false,
        other => {
            return Err(format!(
                "unexpected stream type {:?}",
                String::from_utf8_lossy(other)
            ))
        }
    };
    let partial = tag.split(|b| *b == b':').next() == Some(b"P");
    if partial {
        message = message.strip_suffix(b"\n").unwrap_or(message);
    }
    Ok(Line {
        timestamp,
        nanos,
        stdout,
        message,
    })
}

/// Go's RFC3339Nano output of a parsed time: the fraction without trailing zeros.
fn format_timestamp(ts: &str) -> String {
    let Some(dot) = ts.find('.') else {
        return ts.to_string();
    };
    let digits = ts[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    let end = dot + 1 + digits;
    let fraction = ts[dot + 1..end].trim_end_matches('0');
    let sep = if fraction.is_empty() { "" } else { "." };
    format!("{}{sep}{fraction}{}", &ts[..dot], &ts[end..])
}

/// The offset where the last `n` lines start (upstream tail.FindTailLineStartIndex).
fn tail_start(f: &mut File, n: u64) -> io::Result<u64> {
    const BLOCK: u64 = 4096;
    let size = f.seek(SeekFrom::End(0))?;
    let (mut left, mut count) = (size, 0u64);
    let mut block = Vec::new();
    while left > 0 && count <= n {
        let start = left.saturating_sub(BLOCK);
        block = vec![0u8; usize::try_from(left - start).unwrap_or(0)];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut block)?;
        count += block.iter().filter(|b| **b == b'\n').count() as u64;
        left = start;
    }
    let mut offset = left;
    let mut rest = &block[..];
    while count > n {
        let Some(i) = rest.iter().position(|b| *b == b'\n') else {
            break;
        };
        rest = &rest[i + 1..];
        offset += i as u64 + 1;
        count -= 1;
    }
    Ok(offset)
}

/// Writes parsed lines as upstream's logWriter does.
struct LogWriter<'a> {
    out: &'a mut dyn Write,
    opts: &'a LogOptions,
    remain: u64,
    /// The previous message ended a line (so this one gets a timestamp).
    at_line_start: bool,
}

enum Written {
    More,
    LimitReached,
}

impl LogWriter<'_> {
    fn write(&mut self, line: &Line<'_>) -> io::Result<Written> {
        let new_line = self.at_line_start;
        self.at_line_start = line.message.last().is_none_or(|b| *b == b'\n');
        if self
            .opts
            .since_nanos
            .is_some_and(|since| line.nanos < since)
        {
            return Ok(Written::More);
        }
        let wanted = match self.opts.streams {
            Streams::All => true,
            Streams::Stdout => line.stdout,
            Streams::Stderr => !line.stdout,
        };
        if !wanted {
            return Ok(Written::More);
        }
        let mut text = Vec::with_capacity(line.message.len() + 36);
        if self.opts.timestamps && new_line {
            text.extend_from_slice(format_timestamp(line.timestamp).as_bytes());
            text.push(b' ');
        }
        text.extend_from_slice(line.message);
        let n = usize::try_from(self.remain)
            .unwrap_or(usize::MAX)
            .min(text.len());
        self.out.write_all(&text[..n])?;
        self.remain -= n as u64;
        Ok(if self.remain == 0 {
            Written::LimitReached
        } else {
            Written::More
        })
    }
}

/// An open log file and how far it has been read.
struct Source {
    reader: BufReader<File>,
    pos: u64,
}

impl Source {
    fn open(path: &Path, start: u64) -> io::Result<Source> {
        let mut f = File::open(path)?;
        f.seek(SeekFrom::Start(start))?;
        Ok(Source {
            reader: BufReader::new(f),
            pos: start,
        })
    }

    /// Appends bytes up to and including the next newline; the count read.
    fn read_line(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let n = self.reader.read_until(b'\n', buf)?;
        self.pos += n as u64;
        Ok(n)
    }

    fn grew(&self) -> bool {
        self.reader
            .get_ref()
            .metadata()
            .is_ok_and(|m| m.len() > self.pos)
    }

    /// The path now names a different file (rotated).
    fn replaced(&self, path: &Path) -> bool {
        let Ok(open) = self.reader.get_ref().metadata() else {
            return false;
        };
        std::fs::metadata(path).is_ok_and(|m| m.ino() != open.ino() || m.dev() != open.dev())
    }
}

/// What follow mode found after waiting at the end of the file.
enum Wake {
    Data,
    Rotated,
    /// The container stopped: read what is left, then end.
    Stopped,
    End,
}

fn wait_for_data(src: &Source, path: &Path, ctl: &mut dyn FollowControl, t: &FollowTiming) -> Wake {
    let since = Instant::now();
    loop {
        if ctl.cancelled() {
            return Wake::End;
        }
        if src.grew() {
            return Wake::Data;
        }
        if src.replaced(path) {
            return Wake::Rotated;
        }
        if !ctl.running() {
            return Wake::Stopped;
        }
        if since.elapsed() >= t.idle_timeout {
            return Wake::End;
        }
        std::thread::sleep(t.poll);
    }
}

/// Copies the log at `path` to `out` under `opts`.
pub(crate) fn copy_logs(
    path: &Path,
    opts: &LogOptions,
    out: &mut dyn Write,
    ctl: &mut dyn FollowControl,
    timing: &FollowTiming,
) -> io::Result<()> {
    let start = match opts.tail_lines {
        Some(n) => tail_start(&mut File::open(path)?, n)?,
        None => 0,
    };
    let mut src = Source::open(path, start)?;
    let mut writer = LogWriter {
        out,
        opts,
        remain: opts.limit_bytes.unwrap_or(u64::MAX),
        at_line_start: true,
    };
    // Without follow, tail also caps the number of lines written.
    let mut budget = opts.tail_lines.filter(|_| !opts.follow);
    let mut stopping = false;
    let mut line = Vec::new();
    loop {
        if budget == Some(0) {
            return Ok(());
        }
        src.read_line(&mut line)?;
        if line.last() != Some(&b'\n') {
            // End of file, maybe mid-line.
            if !opts.follow {
                if !line.is_empty() {
                    emit(&mut writer, &line, &mut budget)?;
                }
                return Ok(());
            }
            if stopping {
                return Ok(());
            }
            writer.out.flush()?;
            match wait_for_data(&src, path, ctl, timing) {
                Wake::Data => {}
                Wake::Stopped => stopping = true,
                Wake::Rotated => {
                    // The old file is complete: drain it, then continue in the new one.
                    while src.read_line(&mut line)? > 0 {}
                    if !emit_complete(&mut writer, &line, &mut budget)? {
                        return Ok(());
                    }
                    line.clear();
                    src = Source::open(path, 0)?;
                }
                Wake::End => return Ok(()),
            }
            continue;
        }
        if !emit(&mut writer, &line, &mut budget)? {
            return Ok(());
        }
        line.clear();
    }
}

/// Writes one raw line; false once the byte limit is reached.
fn emit(w: &mut LogWriter<'_>, raw: &[u8], budget: &mut Option<u64>) -> io::Result<bool> {
    let parsed = match parse_line(raw) {
        Ok(l) => l,
        Err(e) => {
            log::debug!("skipping unparsable log line: {e}");
            return Ok(true);
        }
    };
    let more = matches!(w.write(&parsed)?, Written::More);
    if let Some(b) = budget.as_mut() {
        *b = b.saturating_sub(1);
    }
    Ok(more)
}

/// Writes the newline-terminated lines in `raw`, dropping a trailing fragment.
fn emit_complete(w: &mut LogWriter<'_>, raw: &[u8], budget: &mut Option<u64>) -> io::Result<bool> {
    for l in raw
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| l.ends_with(b"\n"))
    {
        if !emit(w, l, budget)? {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    pub(crate) const SAMPLE: &str = "\
2024-01-01T00:00:01.100000000Z stdout F one
2024-01-01T00:00:02.000000000Z stderr F two
2024-01-01T00:00:03.000000000Z stdout P thr
2024-01-01T00:00:03.500000000Z stdout F ee
2024-01-01T00:00:04.000000000Z stdout F four
";

    fn opts() -> LogOptions {
        LogOptions {
            follow: false,
            timestamps: false,
            tail_lines: None,
            limit_bytes: None,
            since_nanos: None,
            streams: Streams::All,
        }
    }

    struct Never;
    impl FollowControl for Never {
        fn cancelled(&self) -> bool {
            false
        }
        fn running(&mut self) -> bool {
            false
        }
    }

    fn file(name: &str, content: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("rkubelet-crilog-{}-{name}", std::process::id()));
        std::fs::write(&p, content).unwrap();
        p
    }

    fn timing() -> FollowTiming {
        FollowTiming {
            poll: Duration::from_millis(10),
            idle_timeout: Duration::from_secs(5),
        }
    }

    fn read(name: &str, content: &str, o: LogOptions) -> String {
        let p = file(name, content);
        let mut out = Vec::new();
        copy_logs(&p, &o, &mut out, &mut Never, &timing()).unwrap();
        let _ = std::fs::remove_file(p);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn parses_lines() {
        let l = parse_line(b"2024-01-01T00:00:03Z stdout P:x abc\n").unwrap();
        assert_eq!(l.message, b"abc");
        assert!(l.stdout);
        let f = parse_line(b"2024-01-01T00:00:03Z stderr F abc def\n").unwrap();
        assert_eq!(f.message, b"abc def\n");
        assert!(parse_line(b"garbage\n").is_err());
        assert!(parse_line(b"2024-01-01T00:00:03Z stdin F x\n").is_err());
        assert_eq!(
            format_timestamp("2024-01-01T00:00:01.100000000Z"),
            "2024-01-01T00:00:01.1Z"
        );
        assert_eq!(
            format_timestamp("2024-01-01T00:00:01.000Z"),
            "2024-01-01T00:00:01Z"
        );
        assert_eq!(
            format_timestamp("2024-01-01T00:00:01+02:00"),
            "2024-01-01T00:00:01+02:00"
        );
    }

    #[test]
    fn joins_partials_and_filters() {
        assert_eq!(read("all", SAMPLE, opts()), "one\ntwo\nthree\nfour\n");
        let ts = LogOptions {
            timestamps: true,
            ..opts()
        };
        let out = read("ts", SAMPLE, ts);
        assert!(out.starts_with("2024-01-01T00:00:01.1Z one\n"), "{out}");
        assert!(out.contains("2024-01-01T00:00:03Z three\n"), "{out}");
        let tail = LogOptions {
            tail_lines: Some(2),
            ..opts()
        };
        assert_eq!(read("tail", SAMPLE, tail), "ee\nfour\n");
        let tail0 = LogOptions {
            tail_lines: Some(0),
            ..opts()
        };
        assert_eq!(read("tail0", SAMPLE, tail0), "");
        let limit = LogOptions {
            limit_bytes: Some(6),
            ..opts()
        };
        assert_eq!(read("limit", SAMPLE, limit), "one\ntw");
        let since_ns = "2024-01-01T00:00:02Z"
            .parse::<Timestamp>()
            .unwrap()
            .as_nanosecond();
        let since = LogOptions {
            since_nanos: Some(since_ns),
            ..opts()
        };
        assert_eq!(read("since", SAMPLE, since), "two\nthree\nfour\n");
        let stderr = LogOptions {
            streams: Streams::Stderr,
            ..opts()
        };
        assert_eq!(read("stderr", SAMPLE, stderr), "two\n");
        assert_eq!(
            read(
                "garbage",
                "junk\n2024-01-01T00:00:01Z stdout F ok\n",
                opts()
            ),
            "ok\n"
        );
        assert_eq!(read("empty", "", opts()), "");
    }

    struct Flag(Arc<AtomicBool>);
    impl FollowControl for Flag {
        fn cancelled(&self) -> bool {
            false
        }
        fn running(&mut self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn follows_appends_and_rotation_until_stopped() {
        let p = file("follow", "2024-01-01T00:00:01Z stdout F a\n");
        let running = Arc::new(AtomicBool::new(true));
        let (p2, r2) = (p.clone(), running.clone());
        let writer = std::thread::spawn(move || {
            use std::io::Write as _;
            std::thread::sleep(Duration::from_millis(100));
            let mut f = std::fs::OpenOptions::new().append(true).open(&p2).unwrap();
            f.write_all(b"2024-01-01T00:00:02Z stdout F b").unwrap();
            std::thread::sleep(Duration::from_millis(100));
            f.write_all(b"1\n").unwrap();
            std::thread::sleep(Duration::from_millis(100));
            // Rotation: rename, then a new file at the path.
            let rotated = p2.with_extension("old");
            std::fs::rename(&p2, &rotated).unwrap();
            f.write_all(b"2024-01-01T00:00:03Z stdout F c\n").unwrap();
            std::fs::write(&p2, "2024-01-01T00:00:04Z stdout F d\n").unwrap();
            std::thread::sleep(Duration::from_millis(200));
            r2.store(false, Ordering::SeqCst);
            rotated
        });
        let mut out = Vec::new();
        let o = LogOptions {
            follow: true,
            ..opts()
        };
        copy_logs(&p, &o, &mut out, &mut Flag(running), &timing()).unwrap();
        let rotated = writer.join().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a\nb1\nc\nd\n");
        let _ = std::fs::remove_file(p);
        let _ = std::fs::remove_file(rotated);
    }
}
