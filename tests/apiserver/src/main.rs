//! `apiserver-double --dir DIR [--port 0] [--node-name NAME ...]`

use apiserver_double::{start, Config};
use std::time::Duration;

const USAGE: &str = "usage: apiserver-double --dir DIR [--port N] [--bind ADDR] [--node-name NAME ...]
    [--bookmark-interval SECONDS] [--min-request-timeout SECONDS] [--watch-history N]
    [--anonymous-auth] [--node-restriction] [--node-authorizer] [--attach-controller] [--ephemeral] [--max-connections N] [--idle-timeout SECONDS]
    [--kubelet-client-certificate FILE --kubelet-client-key FILE] [--kubelet-certificate-authority FILE]
    [--emulate-version 1.22..1.34 (default 1.34)] [--feature-gates InPlacePodVerticalScaling=true,...]
    [--latency MS|real] [--client-qps Q --client-burst B] [--event-qps Q --event-burst B]";

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut cfg = Config::new("");
    let mut have_dir = false;
    let mut args = std::env::args().skip(1);
    let fail = |m: String| -> ! {
        eprintln!("apiserver-double: {}\n{}", m, USAGE);
        std::process::exit(2)
    };
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut val = |name: &str| -> String {
            inline
                .clone()
                .or_else(|| args.next())
                .unwrap_or_else(|| fail(format!("{} needs a value", name)))
        };
        let num = |s: String, name: &str| -> u64 {
            s.parse()
                .unwrap_or_else(|_| fail(format!("{}: not a number: {}", name, s)))
        };
        match flag.as_str() {
            "--dir" => {
                cfg.dir = val("--dir").into();
                have_dir = true;
            }
            "--port" => cfg.port = num(val("--port"), "--port") as u16,
            "--bind" => cfg.bind = val("--bind"),
            "--node-name" => cfg.node_names.push(val("--node-name")),
            "--bookmark-interval" => {
                let s = val("--bookmark-interval");
                let secs: f64 = s
                    .trim_end_matches('s')
                    .parse()
                    .unwrap_or_else(|_| fail(format!("bad --bookmark-interval {}", s)));
                cfg.bookmark_interval = Duration::from_millis((secs * 1000.0).max(10.0) as u64);
            }
            "--min-request-timeout" => {
                cfg.min_request_timeout = num(val("--min-request-timeout"), "--min-request-timeout")
            }
            "--watch-history" => {
                cfg.history = num(val("--watch-history"), "--watch-history") as usize
            }
            "--max-connections" => {
                cfg.max_conns = num(val("--max-connections"), "--max-connections") as usize
            }
            "--idle-timeout" => {
                cfg.idle_timeout = Duration::from_secs(num(val("--idle-timeout"), "--idle-timeout"))
            }
            "--anonymous-auth" => {
                cfg.anonymous_auth = inline.as_deref().map(|v| v != "false").unwrap_or(true)
            }
            "--node-restriction" => cfg.node_restriction = true,
            "--latency" => {
                let s = val("--latency");
                cfg.latency = apiserver_double::charges::Latency::parse(&s)
                    .unwrap_or_else(|| fail(format!("bad --latency {}", s)));
            }
            "--client-qps" | "--client-burst" | "--event-qps" | "--event-burst" => {
                let s = val(&flag);
                let n: f64 = s
                    .parse()
                    .ok()
                    .filter(|n: &f64| *n > 0.0)
                    .unwrap_or_else(|| fail(format!("{}: not a positive number: {}", flag, s)));
                let limits = &mut cfg.client_limits;
                let slot = match flag.starts_with("--event") {
                    true => &mut limits.events,
                    false => &mut limits.api,
                };
                let l = slot.get_or_insert(apiserver_double::charges::Limit { qps: n, burst: n });
                match flag.ends_with("qps") {
                    true => l.qps = n,
                    false => l.burst = n,
                }
            }
            "--node-authorizer" => cfg.node_authorizer = true,
            "--attach-controller" => cfg.attach_controller = true,
            "--kubelet-client-certificate" => {
                cfg.kubelet_client.client_certificate =
                    Some(val("--kubelet-client-certificate").into())
            }
            "--kubelet-client-key" => {
                cfg.kubelet_client.client_key = Some(val("--kubelet-client-key").into())
            }
            "--kubelet-certificate-authority" => {
                cfg.kubelet_client.certificate_authority =
                    Some(val("--kubelet-certificate-authority").into())
            }
            "--emulate-version" => {
                cfg.version = val("--emulate-version")
                    .parse()
                    .unwrap_or_else(|e| fail(format!("--emulate-version: {e}")))
            }
            "--feature-gates" => {
                let spec = val("--feature-gates");
                if let Err(e) = cfg.feature_gates.merge(&spec) {
                    fail(format!("--feature-gates: {e}"))
                }
            }
            "--ephemeral" => cfg.persist = false,
            "-h" | "--help" => {
                println!("{}", USAGE);
                return;
            }
            other => fail(format!("unknown argument {}", other)),
        }
    }
    if !have_dir {
        fail("--dir is required".into());
    }
    // Checked once the release is known: the flags come in any order.
    if let Err(e) = cfg.feature_gates.check(cfg.version) {
        fail(format!("--feature-gates: {e}"));
    }
    let handle = match start(cfg) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("apiserver-double: {}", e);
            std::process::exit(1);
        }
    };
    println!("LISTENING {}", handle.url);
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        std::thread::park();
    }
}
