//! HTTP/1.1 chunked transfer decoding (RFC 9112 §7.1) and the newline
//! splitter of watch streams, both fed incrementally from non-blocking reads.

/// Longest chunk-size line (size, extensions) or trailer line accepted.
const MAX_SIZE_LINE: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading the hex size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// The CRLF after a chunk's data; how many of its bytes were seen.
    DataEnd(u8),
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
    Done,
}

#[derive(Debug)]
pub(crate) struct ChunkedDecoder {
    state: State,
    line: Vec<u8>,
}

impl ChunkedDecoder {
    pub(crate) fn new() -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size,
            line: Vec::new(),
        }
    }

    /// The terminating chunk and trailers have been read.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `input`, appending data to `out`; returns how many input bytes
    /// were used (fewer than given only once done).
    pub(crate) fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Done => return Ok(i),
                State::Size | State::Trailers => {
                    let b = input[i];
                    i += 1;
                    if b != b'\n' {
                        if self.line.len() >= MAX_SIZE_LINE {
                            return Err("chunk size line too long".to_string());
                        }
                        self.line.push(b);
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    self.state = match self.state {
                        State::Size => match parse_size(line)? {
                            0 => State::Trailers,
                            n => State::Data(n),
                        },
                        _ if line.is_empty() => State::Done,
                        s => s, // a trailer field: ignored
                    };
                }
                State::Data(left) => {
                    let n = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(input.len() - i);
                    out.extend_from_slice(&input[i..i + n]);
                    i += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd(0)
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd(seen) => {
                    let b = input[i];
                    i += 1;
                    self.state = match (seen, b) {
                        (0, b'\r') => State::DataEnd(1),
                        (_, b'\n') => State::Size,
                        _ => return Err("missing CRLF after chunk data".to_string()),
                    };
                }
            }
        }
        Ok(i)
    }
}

/// The hex size before any `;extension`.
fn parse_size(line: &[u8]) -> Result<u64, String> {
    let text = std::str::from_utf8(line).map_err(|_| "chunk size is not ASCII".to_string())?;
    let hex = text.split(';').next().unwrap_or("").trim();
    u64::from_str_radix(hex, 16).map_err(|_| format!("invalid chunk size {hex:?}"))
}

/// Splits a byte stream into '\n'-terminated lines, bounded in length.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
    max: usize,
}

impl LineSplitter {
    pub(crate) fn new(max: usize) -> LineSplitter {
        LineSplitter {
            buf: Vec::new(),
            max,
        }
    }

    /// Appends `data` and returns the complete lines (without '\n'); an
    /// error once an unterminated line exceeds the bound.
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        self.buf.extend_from_slice(data);
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            lines.push(self.buf[start..start + pos].to_vec());
            start += pos + 1;
        }
        self.buf.drain(..start);
        if self.buf.len() > self.max {
            return Err(format!("watch event longer than {} bytes", self.max));
        }
        Ok(lines)
    }

    /// Bytes of an unterminated last line (a cut-off stream when non-empty at EOF).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn pending(&self) -> &[u8] {
        &self.buf
    }
}

/// The fuzz targets' way in (fuzz/): `wire` as the body of a chunked watch
/// response, decoded in one piece, a byte at a time and in 7-byte pieces
/// (how reads split it must not matter), then split into lines as the
/// multiplexer does.
#[cfg(feature = "fuzzing")]
pub fn fuzz_watch_chunked(wire: &[u8]) {
    let whole = decode_in_pieces(wire, wire.len().max(1));
    assert_eq!(whole, decode_in_pieces(wire, 1), "a byte at a time");
    assert_eq!(whole, decode_in_pieces(wire, 7), "in 7-byte pieces");
    let (body, _, _) = whole;
    // A bound fuzz inputs reach (the multiplexer's is MAX_EVENT_LINE).
    let mut lines = LineSplitter::new(MAX_SIZE_LINE);
    let mut joined = Vec::new();
    for piece in body.chunks(7) {
        let Ok(got) = lines.push(piece) else {
            return;
        };
        for line in got {
            joined.extend_from_slice(&line);
            joined.push(b'\n');
        }
    }
    joined.extend_from_slice(lines.pending());
    assert_eq!(joined, body, "the lines and the tail are the body");
}

/// The body, the input used (None on error) and whether the decoder is done.
#[cfg(feature = "fuzzing")]
fn decode_in_pieces(wire: &[u8], size: usize) -> (Vec<u8>, Option<usize>, bool) {
    let mut d = ChunkedDecoder::new();
    let (mut out, mut used) = (Vec::new(), 0);
    for piece in wire.chunks(size) {
        match d.decode(piece, &mut out) {
            Ok(n) => used += n,
            Err(_) => return (out, None, d.is_done()),
        }
        if d.is_done() {
            break;
        }
    }
    (out, Some(used), d.is_done())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(pieces: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        for p in pieces {
            d.decode(p, &mut out).expect("decode");
        }
        (out, d.is_done())
    }

    #[test]
    fn decodes_across_arbitrary_splits() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-T: 1\r\n\r\n";
        for split in 0..wire.len() {
            let (a, b) = wire.split_at(split);
            let (out, done) = decode_all(&[a, b]);
            assert_eq!(out, b"hello, world", "split at {split}");
            assert!(done, "split at {split}");
        }
        let bytewise: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(decode_all(&bytewise), (b"hello, world".to_vec(), true));
    }

    #[test]
    fn stops_after_last_chunk() {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let used = d.decode(b"1\r\na\r\n0\r\n\r\nEXTRA", &mut out).expect("ok");
        assert_eq!(used, 11);
        assert_eq!(out, b"a");
    }

    #[test]
    fn rejects_garbage() {
        let mut out = Vec::new();
        assert!(ChunkedDecoder::new().decode(b"zz\r\n", &mut out).is_err());
        assert!(ChunkedDecoder::new().decode(b"1\r\naXY", &mut out).is_err());
        let long = vec![b'1'; MAX_SIZE_LINE + 1];
        assert!(ChunkedDecoder::new().decode(&long, &mut out).is_err());
    }

    #[test]
    fn splits_lines_with_bound() {
        let mut s = LineSplitter::new(8);
        assert_eq!(s.push(b"ab").expect("ok"), Vec::<Vec<u8>>::new());
        assert_eq!(
            s.push(b"c\n\nde").expect("ok"),
            vec![b"abc".to_vec(), Vec::new()]
        );
        assert_eq!(s.pending(), b"de");
        assert!(s.push(b"0123456789").is_err());
    }
}
