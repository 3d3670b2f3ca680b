//! /metrics, /metrics/resource and /stats/summary, with a checker of the
//! Prometheus text format.

use super::*;

/// The sum of the samples of `name` whose labels include all of `labels`
/// (each `key="value"`).
fn sample_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let matches = (rest.is_empty() || rest.starts_with('{'))
                && labels.iter().all(|want| rest.contains(want));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Checks the Prometheus text exposition format; returns the sample names.
fn parse_prometheus(text: &str) -> Vec<String> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut names = vec![];
    for (i, line) in text.lines().enumerate() {
        let ctx = || format!("line {}: {line:?}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let parts: Vec<&str> = c.trim_start().splitn(3, ' ').collect();
            match parts.first() {
                Some(&"HELP") => assert!(parts.len() >= 2 && valid_name(parts[1]), "{}", ctx()),
                Some(&"TYPE") => {
                    assert!(parts.len() == 3 && valid_name(parts[1]), "{}", ctx());
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"]
                            .contains(&parts[2].trim()),
                        "{}",
                        ctx()
                    );
                }
                _ => {}
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value: {}", ctx()));
        let name = &line[..name_end];
        assert!(valid_name(name), "bad metric name: {}", ctx());
        let mut rest = &line[name_end..];
        if rest.starts_with('{') {
            // labels: name="value" pairs, values with \\ \" \n escapes
            let b = rest.as_bytes();
            let (mut j, mut in_q, mut esc) = (1, false, false);
            while j < b.len() {
                let ch = b[j];
                if in_q {
                    if esc {
                        esc = false;
                    } else if ch == b'\\' {
                        esc = true;
                    } else if ch == b'"' {
                        in_q = false;
                    }
                } else if ch == b'"' {
                    in_q = true;
                } else if ch == b'}' {
                    break;
                }
                j += 1;
            }
            assert!(j < b.len(), "unterminated labels: {}", ctx());
            let labels = &rest[1..j];
            for pair in split_labels(labels) {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("bad label {pair:?}: {}", ctx()));
                assert!(
                    valid_name(k.trim()) && !k.contains(':'),
                    "bad label name {k:?}: {}",
                    ctx()
                );
                assert!(
                    v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                    "bad label value {v:?}: {}",
                    ctx()
                );
            }
            rest = &rest[j + 1..];
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert!(
            fields.len() == 1 || fields.len() == 2,
            "want `value [timestamp]`: {}",
            ctx()
        );
        let v = fields[0];
        assert!(
            v.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&v),
            "bad value {v:?}: {}",
            ctx()
        );
        if let Some(ts) = fields.get(1) {
            assert!(ts.parse::<i64>().is_ok(), "bad timestamp: {}", ctx());
        }
        names.push(name.to_string());
    }
    names
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut in_q, mut esc) = (vec![], 0, false, false);
    for (i, ch) in s.char_indices() {
        if in_q {
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                in_q = false;
            }
        } else if ch == '"' {
            in_q = true;
        } else if ch == ',' {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

/// c + d. /metrics, /metrics/resource and /stats/summary.
#[test]
fn metrics_and_stats_summary() {
    let mut node = Node::start("kapi-metrics", 43, false);
    let created = node.create_pod(api_pod("statpod", SLEEPER));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    node.wait_running("statpod");
    let k = node.kubelet_admin();

    // c. /metrics: Prometheus text with the kubelet's own metrics.
    let text = eventually(secs(30), "kubelet_running_pods in /metrics", || {
        let (c, t) = k.get("/metrics");
        (c == 200 && t.contains("kubelet_running_pods")).then_some(t)
    });
    let names = parse_prometheus(&text);
    for want in ["kubelet_running_pods", "kubelet_node_name"] {
        assert!(
            names.iter().any(|n| n == want),
            "/metrics lacks {want}:\n{text}"
        );
    }
    let node_name_line = text
        .lines()
        .find(|l| l.starts_with("kubelet_node_name{"))
        .unwrap_or("");
    assert!(
        node_name_line.contains(&format!("node=\"{NODE}\"")),
        "kubelet_node_name: {node_name_line:?}"
    );
    // Each recording site is wired: the pod's start, its sandbox and
    // container starts, the CRI calls, PLEG, this very request and the API
    // client's requests all show up as samples with values.
    for (name, labels) in [
        ("kubelet_pod_start_duration_seconds_count", &[][..]),
        ("kubelet_started_pods_total", &[][..]),
        (
            "kubelet_started_containers_total",
            &["container_type=\"container\""][..],
        ),
        (
            "kubelet_runtime_operations_total",
            &["operation_type=\"run_pod_sandbox\""][..],
        ),
        ("kubelet_pleg_relist_duration_seconds_count", &[][..]),
        (
            "kubelet_http_requests_total",
            &[
                "path=\"metrics\"",
                "server_type=\"readwrite\"",
                "method=\"GET\"",
            ][..],
        ),
        ("rest_client_requests_total", &["code=\"200\""][..]),
    ] {
        let v = sample_sum(&text, name, labels);
        assert!(v >= 1.0, "{name}{labels:?} = {v}, want >= 1:\n{text}");
    }
    let resp = k.request("GET", "/metrics").call().unwrap();
    let ct = resp.header("Content-Type").unwrap_or("").to_string();
    assert!(ct.starts_with("text/plain"), "/metrics Content-Type {ct:?}");

    let text = eventually(secs(30), "cpu usage in /metrics/resource", || {
        let (c, t) = k.get("/metrics/resource");
        (c == 200
            && (t.contains("container_cpu_usage_seconds_total")
                || t.contains("node_cpu_usage_seconds_total")))
        .then_some(t)
    });
    parse_prometheus(&text);

    // d. /stats/summary in upstream's schema (what metrics-server reads).
    let mut last = Value::Null;
    let got = poll(secs(45), || {
        let (c, t) = k.get("/stats/summary");
        if c != 200 {
            last = Value::String(format!("{c}: {t}"));
            return None;
        }
        let v: Value = serde_json::from_str(&t).ok()?;
        last = v.clone();
        let pod = v["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == "statpod")?
            .clone();
        (pod["containers"].as_array().is_some_and(|c| !c.is_empty())
            && v["node"]["cpu"]["usageCoreNanoSeconds"].is_u64())
        .then_some((v, pod))
    });
    let (summary, pod) = got.unwrap_or_else(|| {
        panic!(
            "/stats/summary never listed statpod with containers and node cpu; last:\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        )
    });
    let n = &summary["node"];
    assert_eq!(n["nodeName"], NODE, "{n}");
    assert!(
        n["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .is_some_and(|x| x > 0),
        "{n}"
    );
    assert!(
        n["memory"]["workingSetBytes"]
            .as_u64()
            .is_some_and(|x| x > 0),
        "{n}"
    );
    assert!(n["cpu"]["time"].is_string(), "node.cpu.time: {n}");
    assert_eq!(pod["podRef"]["namespace"], "default", "{pod}");
    assert_eq!(pod["podRef"]["uid"], uid.as_str(), "{pod}");
    let cnames: Vec<&str> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(cnames, vec!["c"], "{pod}");
    // only_cpu_and_memory=true (metrics-server's query) answers too.
    let (c, t) = k.get("/stats/summary?only_cpu_and_memory=true");
    assert_eq!(c, 200, "{t}");
    let v: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["node"]["nodeName"], NODE);
    node.env.assert_kubelet_alive();
}
