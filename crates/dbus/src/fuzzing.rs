//! What the fuzz target in fuzz/ calls (feature `fuzzing`): the reader of
//! the bytes that come from the bus. A panic, a hang or unbounded memory
//! is a finding; an error is the expected answer to bad input.

use crate::wire::next_message;
use crate::Message;

/// `data` as the stream a connection reads after authentication: every
/// message [`crate::Connection`] would take off it, until the first error
/// or an incomplete tail. Each message decoded must survive a round trip
/// through the encoder (when it can be encoded: the reader accepts strings
/// with a NUL, which we never send).
pub fn read(data: &[u8]) {
    let mut inbuf = data.to_vec();
    while let Ok(Some((m, _nfds))) = next_message(&mut inbuf) {
        let Ok(bytes) = m.encode() else {
            continue;
        };
        let mut again = bytes.clone();
        match next_message(&mut again) {
            Ok(Some((back, _))) => {
                assert!(again.is_empty(), "{} bytes left over", again.len());
                assert_same(&m, &back);
            }
            other => panic!("{m:?} encodes to {bytes:?}, read back as {other:?}"),
        }
    }
}

fn assert_same(a: &Message, b: &Message) {
    assert_eq!(
        (a.kind, a.flags, a.serial, a.reply_serial),
        (b.kind, b.flags, b.serial, b.reply_serial)
    );
    assert_eq!(
        (&a.path, &a.interface, &a.member),
        (&b.path, &b.interface, &b.member)
    );
    assert_eq!(
        (&a.error_name, &a.destination, &a.sender),
        (&b.error_name, &b.destination, &b.sender)
    );
    assert_eq!(a.body, b.body);
}
