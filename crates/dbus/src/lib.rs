//! A small synchronous D-Bus client: what talking to logind and to
//! systemd's manager needs and no more (upstream uses godbus). Unix-socket
//! transport, SASL EXTERNAL with unix-fd passing, the wire format for basic
//! types, variants, arrays and structs (systemd's unit properties are
//! `a(sv)`), method calls with a deadline, signals, and replies (so a test
//! can stand in for logind with the same code). Dict entries are read as
//! two-field structs; doubles are not supported: nothing we talk to sends
//! one.

mod conn;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
#[cfg(feature = "test-util")]
pub mod testing;
mod wire;

use std::io;
use std::os::fd::OwnedFd;

pub use conn::{Connection, DEFAULT_SYSTEM_BUS};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No bus at the address (the socket is missing or refuses).
    #[error("no D-Bus at {0}: {1}")]
    NoBus(String, io::Error),
    #[error("D-Bus {0}: {1}")]
    Io(&'static str, io::Error),
    #[error("D-Bus authentication: {0}")]
    Auth(String),
    #[error("D-Bus protocol: {0}")]
    Protocol(String),
    /// An error reply: its name and first string argument.
    #[error("{0}: {1}")]
    Remote(String, String),
    #[error("D-Bus {0}: timed out")]
    Timeout(&'static str),
    #[error("D-Bus connection closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, Error>;

fn proto(s: impl Into<String>) -> Error {
    Error::Protocol(s.into())
}

/// A basic value, or a variant of one.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    Str(String),
    Path(String),
    Sig(String),
    /// An index into the message's fds.
    Fd(u32),
    Variant(Box<Value>),
    /// An array of values of the complete type `elem` (a signature such
    /// as `"s"` or `"(sv)"`), kept even when the array is empty.
    Array {
        elem: String,
        items: Vec<Value>,
    },
    /// A struct; on reading, a dict entry too.
    Struct(Vec<Value>),
}

impl Value {
    fn signature(&self) -> String {
        match self {
            Value::Byte(_) => "y".into(),
            Value::Bool(_) => "b".into(),
            Value::I32(_) => "i".into(),
            Value::U32(_) => "u".into(),
            Value::I64(_) => "x".into(),
            Value::U64(_) => "t".into(),
            Value::Str(_) => "s".into(),
            Value::Path(_) => "o".into(),
            Value::Sig(_) => "g".into(),
            Value::Fd(_) => "h".into(),
            Value::Variant(_) => "v".into(),
            Value::Array { elem, .. } => format!("a{elem}"),
            Value::Struct(fields) => {
                let inner: String = fields.iter().map(Value::signature).collect();
                format!("({inner})")
            }
        }
    }

    /// An array of strings (`as`).
    pub fn strings<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> Value {
        Value::Array {
            elem: "s".into(),
            items: items.into_iter().map(|s| Value::Str(s.into())).collect(),
        }
    }

    /// This value in a variant.
    pub fn into_variant(self) -> Value {
        Value::Variant(Box::new(self))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Path(s) | Value::Sig(s) => Some(s),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

/// One message. `fds` holds the descriptors it carries (to send, or received).
#[derive(Debug)]
pub struct Message {
    pub kind: Kind,
    pub flags: u8,
    pub serial: u32,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub reply_serial: Option<u32>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    pub body: Vec<Value>,
    pub fds: Vec<OwnedFd>,
}

impl Message {
    fn new(kind: Kind) -> Message {
        Message {
            kind,
            flags: 0,
            serial: 0,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            reply_serial: None,
            destination: None,
            sender: None,
            body: Vec::new(),
            fds: Vec::new(),
        }
    }

    pub fn method_call(
        dest: &str,
        path: &str,
        iface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Self {
        let mut m = Message::new(Kind::MethodCall);
        m.destination = Some(dest.into());
        m.path = Some(path.into());
        m.interface = Some(iface.into());
        m.member = Some(member.into());
        m.body = body;
        m
    }

    pub fn signal(path: &str, iface: &str, member: &str, body: Vec<Value>) -> Self {
        let mut m = Message::new(Kind::Signal);
        m.path = Some(path.into());
        m.interface = Some(iface.into());
        m.member = Some(member.into());
        m.body = body;
        m
    }

    pub fn method_return(to: &Message, body: Vec<Value>) -> Self {
        let mut m = Message::new(Kind::MethodReturn);
        m.reply_serial = Some(to.serial);
        m.destination = to.sender.clone();
        m.body = body;
        m
    }

    pub fn error(to: &Message, name: &str, text: &str) -> Self {
        let mut m = Message::new(Kind::Error);
        m.reply_serial = Some(to.serial);
        m.destination = to.sender.clone();
        m.error_name = Some(name.into());
        m.body = vec![Value::Str(text.into())];
        m
    }

    /// Whether this is `iface.member` (a call or signal).
    pub fn is(&self, iface: &str, member: &str) -> bool {
        self.interface.as_deref() == Some(iface) && self.member.as_deref() == Some(member)
    }
}
