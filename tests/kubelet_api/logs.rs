//! /containerLogs: tailLines, timestamps, follow, previous.

use super::*;

const COUNTER: &str =
    "trap 'exit 0' TERM INT; i=0; while true; do i=$((i+1)); echo \"line $i\"; sleep 1; done";

fn line_numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            l.rsplit_once("line ")
                .and_then(|(_, n)| n.trim().parse().ok())
        })
        .collect()
}

/// An RFC 3339 timestamp as the kubelet writes it (`2006-01-02T15:04:05.999999999Z07:00`).
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    let zone = &s[19..];
    let zone = zone
        .strip_prefix('.')
        .map(|z| z.trim_start_matches(|c: char| c.is_ascii_digit()))
        .unwrap_or(zone);
    digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && (zone == "Z"
            || (zone.len() == 6
                && (zone.starts_with('+') || zone.starts_with('-'))
                && zone.as_bytes()[3] == b':'))
}

/// b. /containerLogs: tailLines, timestamps, follow, previous.
#[test]
fn container_logs() {
    let mut node = Node::start("kapi-logs", 42, false);
    node.create_pod(api_pod("counter", COUNTER));
    let mut crash = api_pod("crasher", "echo run; sleep 1; exit 1");
    crash["spec"]["restartPolicy"] = json!("Always");
    node.create_pod(crash);
    node.wait_running("counter");
    let k = node.kubelet_admin();
    let base = "/containerLogs/default/counter/c";

    // Wait for a few lines.
    let text = eventually(secs(20), "5 lines of logs", || {
        let (c, t) = k.get(base);
        (c == 200 && line_numbers(&t).len() >= 5).then_some(t)
    });
    assert!(
        line_numbers(&text).windows(2).all(|w| w[1] == w[0] + 1),
        "{text}"
    );

    // tailLines=3: the last three lines, consecutive.
    let (c, t) = k.get(&format!("{base}?tailLines=3"));
    assert_eq!(c, 200, "{t}");
    let nums = line_numbers(&t);
    assert_eq!(nums.len(), 3, "tailLines=3 gave: {t:?}");
    assert!(nums[0] + 1 == nums[1] && nums[1] + 1 == nums[2], "{t:?}");
    assert!(
        nums[2] >= line_numbers(&text).last().copied().unwrap(),
        "{t:?}"
    );

    // timestamps=true: each line starts with an RFC 3339 timestamp.
    let (c, t) = k.get(&format!("{base}?timestamps=true&tailLines=2"));
    assert_eq!(c, 200, "{t}");
    assert_eq!(t.lines().count(), 2, "{t:?}");
    for l in t.lines() {
        let (ts, rest) = l
            .split_once(' ')
            .unwrap_or_else(|| panic!("no timestamp: {l:?}"));
        assert!(is_rfc3339(ts), "not an RFC 3339 timestamp: {ts:?} in {l:?}");
        assert!(rest.starts_with("line "), "{l:?}");
    }

    // follow=true: a line written after the request arrives on the stream.
    let (_, t) = k.get(&format!("{base}?tailLines=1"));
    let last = line_numbers(&t).last().copied().unwrap_or(0);
    let started = Instant::now();
    let resp = k
        .request("GET", &format!("{base}?follow=true&tailLines=1"))
        .timeout(Duration::from_secs(15))
        .call()
        .expect("follow request");
    assert_eq!(resp.status(), 200);
    let mut newer = None;
    for l in BufReader::new(resp.into_reader()).lines() {
        let Ok(l) = l else { break };
        if let Some(n) = line_numbers(&l).first().copied().filter(|n| *n > last) {
            newer = Some(n);
            break;
        }
    }
    assert!(
        newer.is_some(),
        "follow=true: no line after 'line {last}' within {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < secs(10),
        "follow took {:?}",
        started.elapsed()
    );

    // previous=true: the last terminated instance's output.
    node.wait_pod("crasher", secs(60), |p| {
        p["status"]["containerStatuses"][0]["restartCount"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    });
    let (c, t) = k.get("/containerLogs/default/crasher/c?previous=true");
    assert_eq!(c, 200, "previous=true: {t}");
    assert!(t.contains("run"), "previous=true: {t:?}");
    // A container that never ran before has no previous instance.
    let (c, t) = k.get(&format!("{base}?previous=true"));
    assert!(
        c == 400 || c == 404 || c == 500,
        "previous=true of a first instance: {c} {t}"
    );
    // Unknown pod.
    let (c, _) = k.get("/containerLogs/default/nope/c");
    assert_eq!(c, 404);
    node.env.assert_kubelet_alive();
}
