//! The client against a real dbus-daemon (a private one per test; Debian
//! package dbus): authentication and Hello, owning a name, a call whose
//! reply carries an fd, an error reply, a signal that arrives while a call
//! waits for its reply, and a call nobody answers.

use std::fs;
use std::io::Read;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rkubelet_dbus::testing::TestBus;
use rkubelet_dbus::{Connection, Error, Kind, Message, Value};
use tempfile::TempDir;

const SERVICE: &str = "org.example.Service";
const IFACE: &str = "org.example.Iface";
const TIMEOUT: Duration = Duration::from_secs(5);

/// A private bus in its own directory, removed after the bus is killed.
fn private_bus(name: &str) -> (TestBus, TempDir) {
    let dir = TempDir::with_prefix(format!("rkubelet-dbus-{name}-")).unwrap();
    let bus = TestBus::start(dir.path()).expect("run dbus-daemon (Debian package dbus)");
    (bus, dir)
}

fn bus_call(member: &str, body: Vec<Value>) -> Message {
    Message::method_call(
        "org.freedesktop.DBus",
        "/org/freedesktop/DBus",
        "org.freedesktop.DBus",
        member,
        body,
    )
}

/// Owns SERVICE and answers: Echo (its arguments back, with the read end
/// of a pipe holding "fd"), Fail (an error reply), Emit (a signal, then an
/// empty reply), Ignore (nothing). Ends when the bus goes.
fn service(address: &str) -> JoinHandle<()> {
    let mut conn = Connection::open(address, TIMEOUT).expect("the service connects");
    let reply = conn
        .call(
            bus_call(
                "RequestName",
                vec![Value::Str(SERVICE.into()), Value::U32(4)],
            ),
            TIMEOUT,
        )
        .expect("RequestName");
    assert_eq!(reply.body, vec![Value::U32(1)], "the service owns its name");
    std::thread::spawn(move || loop {
        let m = match conn.recv(Duration::from_millis(100)) {
            Ok(Some(m)) => m,
            Ok(None) => continue,
            Err(_) => return,
        };
        if m.kind != Kind::MethodCall {
            continue;
        }
        let reply = match m.member.as_deref() {
            Some("Echo") => {
                let (r, w) = nix::unistd::pipe().unwrap();
                nix::unistd::write(&w, b"fd").unwrap();
                let mut body = m.body.clone();
                body.push(Value::Fd(0));
                let mut reply = Message::method_return(&m, body);
                reply.fds.push(r);
                reply
            }
            Some("Fail") => Message::error(&m, "org.example.Error.Failed", "as asked"),
            Some("Emit") => {
                let signal =
                    Message::signal("/org/example", IFACE, "Happened", vec![Value::I64(-7)]);
                conn.send(signal).unwrap();
                Message::method_return(&m, Vec::new())
            }
            _ => continue,
        };
        let _ = conn.send(reply);
    })
}

fn call(member: &str, body: Vec<Value>) -> Message {
    Message::method_call(SERVICE, "/org/example", IFACE, member, body)
}

#[test]
fn calls_replies_errors_fds_and_signals_go_through_a_real_bus() {
    let (bus, _dir) = private_bus("calls");
    let _service = service(bus.address());
    let mut client = Connection::open(bus.address(), TIMEOUT).expect("the client connects");

    let args = vec![
        Value::Str("hello".into()),
        Value::Bool(true),
        Value::Variant(Box::new(Value::U64(30_000_000))),
        Value::Path("/a/b".into()),
        Value::Byte(9),
    ];
    let reply = client.call(call("Echo", args.clone()), TIMEOUT).unwrap();
    assert_eq!(reply.kind, Kind::MethodReturn);
    assert_eq!(reply.body[..args.len()], args[..]);
    assert_eq!(reply.body[args.len()], Value::Fd(0));
    let [fd] = <[_; 1]>::try_from(reply.fds).expect("one fd");
    let mut got = String::new();
    fs::File::from(fd).read_to_string(&mut got).unwrap();
    assert_eq!(got, "fd", "the pipe's read end came through");

    match client.call(call("Fail", Vec::new()), TIMEOUT) {
        Err(Error::Remote(name, text)) => {
            assert_eq!(
                (name.as_str(), text.as_str()),
                ("org.example.Error.Failed", "as asked")
            )
        }
        other => panic!("{:?}", other.map(|m| m.kind)),
    }

    let rule = format!("type='signal',interface='{IFACE}'");
    client
        .call(bus_call("AddMatch", vec![Value::Str(rule)]), TIMEOUT)
        .expect("AddMatch");
    // The signal comes before the reply: kept for recv.
    client.call(call("Emit", Vec::new()), TIMEOUT).unwrap();
    // (After the bus's own NameAcquired for our unique name.)
    let signal = std::iter::from_fn(|| client.recv(TIMEOUT).unwrap())
        .find(|m| m.interface.as_deref() == Some(IFACE))
        .expect("the signal");
    assert_eq!(signal.kind, Kind::Signal);
    assert!(signal.is(IFACE, "Happened"));
    assert_eq!(signal.body, vec![Value::I64(-7)]);

    let t0 = Instant::now();
    match client.call(call("Ignore", Vec::new()), Duration::from_millis(300)) {
        Err(Error::Timeout(_)) => {}
        other => panic!("{:?}", other.map(|m| m.kind)),
    }
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

#[test]
fn no_bus_at_the_address_is_told_apart() {
    let dir = std::env::temp_dir().join(format!("rkubelet-dbus-{}-none", std::process::id()));
    let addr = format!("unix:path={}", dir.join("bus").display());
    match Connection::open(&addr, TIMEOUT) {
        Err(Error::NoBus(a, _)) => assert_eq!(a, addr),
        other => panic!("{:?}", other.map(|_| ())),
    }
}
