//! The wire format: marshalling of messages and of the basic types and
//! variants they carry, and the reader of the byte stream from the bus.

use crate::{proto, Kind, Message, Result, Value};

/// Larger messages are refused (the spec allows 128 MiB; logind's are tiny).
const MAX_MESSAGE: usize = 1 << 20;

impl Message {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let mut body = Writer::default();
        for v in &self.body {
            body.value(v)?;
        }
        let sig: String = self.body.iter().map(Value::signature).collect();
        let mut w = Writer::default();
        w.buf
            .extend_from_slice(&[b'l', self.kind as u8, self.flags, 1]);
        w.u32(u32::try_from(body.buf.len()).map_err(|_| proto("body too large"))?);
        w.u32(self.serial);
        let len_at = w.buf.len();
        w.u32(0);
        let start = w.buf.len();
        let field = |w: &mut Writer, code: u8, v: Value| -> Result<()> {
            w.align(8);
            w.buf.push(code);
            w.value(&Value::Variant(Box::new(v)))
        };
        let strs = [
            (1, self.path.clone().map(Value::Path)),
            (2, self.interface.clone().map(Value::Str)),
            (3, self.member.clone().map(Value::Str)),
            (4, self.error_name.clone().map(Value::Str)),
            (5, self.reply_serial.map(Value::U32)),
            (6, self.destination.clone().map(Value::Str)),
            (7, self.sender.clone().map(Value::Str)),
            (8, (!sig.is_empty()).then(|| Value::Sig(sig.clone()))),
            (
                9,
                (!self.fds.is_empty()).then_some(Value::U32(self.fds.len() as u32)),
            ),
        ];
        for (code, v) in strs {
            if let Some(v) = v {
                field(&mut w, code, v)?;
            }
        }
        let fields_len = (w.buf.len() - start) as u32;
        w.buf[len_at..len_at + 4].copy_from_slice(&fields_len.to_le_bytes());
        w.align(8);
        w.buf.extend_from_slice(&body.buf);
        Ok(w.buf)
    }
}

/// Little-endian marshalling; offsets are relative to an 8-aligned start.
#[derive(Default)]
struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    fn align(&mut self, n: usize) {
        while !self.buf.len().is_multiple_of(n) {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn string(&mut self, s: &str) -> Result<()> {
        if s.contains('\0') {
            return Err(proto("string with NUL"));
        }
        self.u32(u32::try_from(s.len()).map_err(|_| proto("string too long"))?);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn sig(&mut self, s: &str) -> Result<()> {
        let n = u8::try_from(s.len()).map_err(|_| proto("signature too long"))?;
        self.buf.push(n);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(u32::from(*b)),
            Value::I32(i) => self.u32(*i as u32),
            Value::U32(u) | Value::Fd(u) => self.u32(*u),
            Value::I64(i) => {
                self.align(8);
                self.buf.extend_from_slice(&i.to_le_bytes());
            }
            Value::U64(u) => {
                self.align(8);
                self.buf.extend_from_slice(&u.to_le_bytes());
            }
            Value::Str(s) | Value::Path(s) => self.string(s)?,
            Value::Sig(s) => self.sig(s)?,
            Value::Variant(inner) => {
                self.sig(&inner.signature())?;
                self.value(inner)?;
            }
            Value::Array { elem, items } => {
                self.u32(0);
                let len_at = self.buf.len() - 4;
                // The length counts from the first element, after the
                // padding to its alignment, even when there is none.
                self.align(alignment(elem.as_bytes().first().copied()));
                let start = self.buf.len();
                for item in items {
                    if item.signature() != *elem {
                        return Err(proto(format!(
                            "array of {elem} holds a {}",
                            item.signature()
                        )));
                    }
                    self.value(item)?;
                }
                let len =
                    u32::try_from(self.buf.len() - start).map_err(|_| proto("array too long"))?;
                self.buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            }
            Value::Struct(fields) => {
                if fields.is_empty() {
                    return Err(proto("empty struct"));
                }
                self.align(8);
                for f in fields {
                    self.value(f)?;
                }
            }
        }
        Ok(())
    }
}

/// The alignment of a value whose signature starts with `code`.
fn alignment(code: Option<u8>) -> usize {
    match code {
        Some(b'x' | b't' | b'd' | b'(' | b'{') => 8,
        Some(b'b' | b'i' | b'u' | b'h' | b's' | b'o' | b'a') => 4,
        _ => 1,
    }
}

/// Nesting deeper than this is refused (the spec allows 64 of arrays and
/// 64 of structs; nothing we talk to comes near).
const MAX_DEPTH: u8 = 32;

/// The length of the single complete type at the start of `sig`.
fn complete_type_len(sig: &[u8], depth: u8) -> Result<usize> {
    if depth > MAX_DEPTH {
        return Err(proto("signature nested too deep"));
    }
    match sig.first() {
        None => Err(proto("signature ends inside a type")),
        Some(b'a') => Ok(1 + complete_type_len(&sig[1..], depth + 1)?),
        Some(&open @ (b'(' | b'{')) => {
            let close = if open == b'(' { b')' } else { b'}' };
            let mut at = 1;
            while sig.get(at) != Some(&close) {
                at += complete_type_len(&sig[at..], depth + 1)?;
            }
            if at == 1 {
                return Err(proto("empty struct in signature"));
            }
            Ok(at + 1)
        }
        Some(b'y' | b'b' | b'i' | b'u' | b'h' | b'x' | b't' | b's' | b'o' | b'g' | b'v') => Ok(1),
        Some(other) => Err(proto(format!(
            "unsupported type {:?} in signature",
            char::from(*other)
        ))),
    }
}

/// Splits a signature into its complete types.
fn split_signature(sig: &str) -> Result<Vec<&str>> {
    let mut out = Vec::new();
    let mut rest = sig;
    while !rest.is_empty() {
        let n = complete_type_len(rest.as_bytes(), 0)?;
        out.push(&rest[..n]);
        rest = &rest[n..];
    }
    Ok(out)
}

/// Unmarshalling of one message's bytes, either byte order.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
}

impl Reader<'_> {
    fn align(&mut self, n: usize) -> Result<()> {
        let to = self.pos.div_ceil(n) * n;
        if to > self.buf.len() {
            return Err(proto("truncated padding"));
        }
        self.pos = to;
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| proto("truncated value"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        self.align(4)?;
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| proto("u32"))?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&mut self) -> Result<u64> {
        self.align(8)?;
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| proto("u64"))?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn text(&mut self, len: usize) -> Result<String> {
        let s = self.take(len + 1)?;
        String::from_utf8(s[..len].to_vec()).map_err(|_| proto("string is not UTF-8"))
    }

    fn string(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        self.text(n)
    }

    fn sig(&mut self) -> Result<String> {
        let n = self.take(1)?[0] as usize;
        self.text(n)
    }

    /// One value of the single complete type `sig`.
    fn value(&mut self, sig: &str, depth: u8) -> Result<Value> {
        if depth > MAX_DEPTH {
            return Err(proto("value nested too deep"));
        }
        let bytes = sig.as_bytes();
        let Some(&t) = bytes.first() else {
            return Err(proto("empty type"));
        };
        Ok(match t {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => Value::Bool(self.u32()? != 0),
            b'i' => Value::I32(self.u32()? as i32),
            b'u' => Value::U32(self.u32()?),
            b'h' => Value::Fd(self.u32()?),
            b'x' => Value::I64(self.u64()? as i64),
            b't' => Value::U64(self.u64()?),
            b's' => Value::Str(self.string()?),
            b'o' => Value::Path(self.string()?),
            b'g' => Value::Sig(self.sig()?),
            b'v' => {
                let inner = self.sig()?;
                let [one] = split_signature(&inner)?[..] else {
                    return Err(proto(format!(
                        "variant of {inner:?}: not one complete type"
                    )));
                };
                Value::Variant(Box::new(self.value(one, depth + 1)?))
            }
            b'a' => {
                let elem = &sig[1..];
                let len = self.u32()? as usize;
                self.align(alignment(elem.as_bytes().first().copied()))?;
                let end = self.pos.checked_add(len).filter(|&e| e <= self.buf.len());
                let end = end.ok_or_else(|| proto("array longer than its message"))?;
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.value(elem, depth + 1)?);
                }
                if self.pos != end {
                    return Err(proto("array element runs past the array"));
                }
                Value::Array {
                    elem: elem.to_string(),
                    items,
                }
            }
            b'(' | b'{' => {
                self.align(8)?;
                let inner = &sig[1..sig.len() - 1];
                let mut fields = Vec::new();
                for f in split_signature(inner)? {
                    fields.push(self.value(f, depth + 1)?);
                }
                Value::Struct(fields)
            }
            other => return Err(proto(format!("unsupported type {:?}", char::from(other)))),
        })
    }
}

/// Bytes in the fixed header, and the offset of the fields' length.
const FIXED_HEADER: usize = 16;

/// The whole length of the message starting `buf`, once 16 bytes are in.
fn message_len(buf: &[u8]) -> Result<Option<usize>> {
    if buf.len() < FIXED_HEADER {
        return Ok(None);
    }
    let big = match buf[0] {
        b'l' => false,
        b'B' => true,
        e => return Err(proto(format!("bad byte order {e:#x}"))),
    };
    let word = |at: usize| {
        let b = [buf[at], buf[at + 1], buf[at + 2], buf[at + 3]];
        (if big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }) as usize
    };
    let (body, fields) = (word(4), word(12));
    let total = (FIXED_HEADER + fields).div_ceil(8) * 8 + body;
    if total > MAX_MESSAGE {
        return Err(proto(format!("message of {total} bytes")));
    }
    Ok(Some(total))
}

/// Decodes one whole message; its fds are attached by the caller.
fn decode(buf: &[u8]) -> Result<(Message, usize)> {
    let big = buf[0] == b'B';
    let kind = match buf[1] {
        1 => Kind::MethodCall,
        2 => Kind::MethodReturn,
        3 => Kind::Error,
        4 => Kind::Signal,
        k => return Err(proto(format!("unknown message type {k}"))),
    };
    let mut m = Message::new(kind);
    m.flags = buf[2];
    let mut r = Reader { buf, pos: 4, big };
    let body_len = r.u32()? as usize;
    m.serial = r.u32()?;
    let fields_end = r.u32()? as usize + FIXED_HEADER;
    let (mut sig, mut nfds) = (String::new(), 0usize);
    while r.pos < fields_end {
        r.align(8)?;
        let code = r.take(1)?[0];
        let Value::Variant(v) = r.value("v", 0)? else {
            return Err(proto("header field"));
        };
        match (code, *v) {
            (1, Value::Path(s)) => m.path = Some(s),
            (2, Value::Str(s)) => m.interface = Some(s),
            (3, Value::Str(s)) => m.member = Some(s),
            (4, Value::Str(s)) => m.error_name = Some(s),
            (5, Value::U32(u)) => m.reply_serial = Some(u),
            (6, Value::Str(s)) => m.destination = Some(s),
            (7, Value::Str(s)) => m.sender = Some(s),
            (8, Value::Sig(s)) => sig = s,
            (9, Value::U32(u)) => nfds = u as usize,
            _ => {} // unknown fields are ignored, as the spec asks
        }
    }
    r.align(8)?;
    let mut body = Reader {
        buf: r.take(body_len)?,
        pos: 0,
        big,
    };
    for t in split_signature(&sig)? {
        m.body.push(body.value(t, 0)?);
    }
    Ok((m, nfds))
}

/// Takes the first message off the front of `inbuf` once it is all there:
/// the message and how many of the fds received with it it carries (the
/// caller attaches them). What [`crate::Connection`] runs on every read.
pub(crate) fn next_message(inbuf: &mut Vec<u8>) -> Result<Option<(Message, usize)>> {
    let Some(total) = message_len(inbuf)? else {
        return Ok(None);
    };
    if inbuf.len() < total {
        return Ok(None);
    }
    let decoded = decode(&inbuf[..total])?;
    inbuf.drain(..total);
    Ok(Some(decoded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_the_wire_format() {
        let mut m = Message::method_call(
            "org.freedesktop.login1",
            "/org/freedesktop/login1",
            "org.freedesktop.login1.Manager",
            "Inhibit",
            vec![
                Value::Str("shutdown".into()),
                Value::Bool(true),
                Value::Variant(Box::new(Value::U64(30_000_000))),
                Value::Fd(0),
                Value::Byte(7),
            ],
        );
        m.serial = 9;
        let bytes = m.encode().unwrap();
        assert_eq!(message_len(&bytes).unwrap(), Some(bytes.len()));
        let (back, nfds) = decode(&bytes).unwrap();
        assert_eq!(nfds, 0);
        assert_eq!(back.serial, 9);
        assert_eq!(back.path.as_deref(), Some("/org/freedesktop/login1"));
        assert!(back.is("org.freedesktop.login1.Manager", "Inhibit"));
        assert_eq!(back.destination.as_deref(), Some("org.freedesktop.login1"));
        assert_eq!(back.body, m.body);
    }

    #[test]
    fn arrays_and_structs_round_trip_as_systemd_takes_them() {
        // StartTransientUnit(s name, s mode, a(sv) properties, a(sa(sv)) aux)
        let prop = |k: &str, v: Value| Value::Struct(vec![Value::Str(k.into()), v.into_variant()]);
        let body = vec![
            Value::Str("kubepods.slice".into()),
            Value::Str("replace".into()),
            Value::Array {
                elem: "(sv)".into(),
                items: vec![
                    prop("Wants", Value::strings(["-.slice"])),
                    prop("MemoryMax", Value::U64(2_062_479_360)),
                    prop("DefaultDependencies", Value::Bool(false)),
                ],
            },
            Value::Array {
                elem: "(sa(sv))".into(),
                items: Vec::new(),
            },
        ];
        let mut m = Message::method_call("d", "/p", "i.f", "StartTransientUnit", body);
        m.serial = 3;
        let bytes = m.encode().unwrap();
        assert_eq!(message_len(&bytes).unwrap(), Some(bytes.len()));
        let (back, _) = decode(&bytes).unwrap();
        assert_eq!(back.body, m.body);
        assert_eq!(
            m.body.iter().map(Value::signature).collect::<String>(),
            "ssa(sv)a(sa(sv))"
        );
        // An array whose item is not of its element type is refused.
        let bad = Message::signal(
            "/p",
            "i.f",
            "X",
            vec![Value::Array {
                elem: "s".into(),
                items: vec![Value::U32(1)],
            }],
        );
        assert!(bad.encode().is_err());
    }

    #[test]
    fn an_array_length_past_its_message_is_an_error() {
        let m = Message::signal("/p", "i.f", "X", vec![Value::strings(["a", "b"])]);
        let mut bytes = m.encode().unwrap();
        let body_len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
        let body_at = bytes.len() - body_len;
        bytes[body_at..body_at + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert!(decode(&bytes).is_err());
        for sig in ["a", "(", "()", "(s", "aa", "d"] {
            assert!(split_signature(sig).is_err(), "{sig:?} accepted");
        }
        assert_eq!(
            split_signature("sa{sv}(ub)").unwrap(),
            ["s", "a{sv}", "(ub)"]
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let m = Message::signal("/a", "b.c", "D", vec![Value::Str("x".into())]);
        let bytes = m.encode().unwrap();
        for cut in 0..bytes.len() {
            let part = &bytes[..cut];
            if let Ok(Some(n)) = message_len(part) {
                if n <= part.len() {
                    let _ = decode(part);
                }
            }
        }
        let mut evil = bytes.clone();
        evil[12] = 0xff; // a huge fields length
        evil[13] = 0xff;
        evil[14] = 0xff;
        assert!(message_len(&evil).is_err());
        let mut odd = bytes;
        odd[0] = b'x';
        assert!(message_len(&odd).is_err());
    }

    #[test]
    fn the_stream_gives_whole_messages_and_keeps_a_partial_one() {
        let mut stream = Vec::new();
        for (serial, member) in [(1, "A"), (2, "B"), (3, "C")] {
            let mut m = Message::signal("/p", "i.f", member, vec![Value::U32(serial)]);
            m.serial = serial;
            stream.extend(m.encode().unwrap());
        }
        let cut = stream.len() - 3;
        let mut inbuf = stream[..cut].to_vec();
        for member in ["A", "B"] {
            let (m, nfds) = next_message(&mut inbuf).unwrap().unwrap();
            assert!(m.is("i.f", member));
            assert_eq!(nfds, 0);
        }
        assert!(next_message(&mut inbuf).unwrap().is_none());
        inbuf.extend_from_slice(&stream[cut..]);
        let (m, _) = next_message(&mut inbuf).unwrap().unwrap();
        assert_eq!((m.serial, m.body), (3, vec![Value::U32(3)]));
        assert!(inbuf.is_empty());
    }
}
