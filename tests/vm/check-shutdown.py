#!/usr/bin/env python3
"""What the API server double stored while the VM shut down (its state log,
DIR/state.jsonl, on the payload disk): the graceful node shutdown of
tests/vm/guest/cases.sh (case_graceful_shutdown). Prints TAP-like lines as
the guest does, "ok - ROW/DRIVER/TEST" or "not ok - ...: why".

usage: check-shutdown.py ROW DRIVER DOUBLE_DIR
"""
import json
import sys

REASON = "Terminated"
MESSAGE = "Pod was terminated in response to imminent node shutdown."


def main():
    row, driver, ddir = sys.argv[1:4]
    name = lambda test: f"{row}/{driver}/{test}"  # noqa: E731
    # Every stored version of each pod, in revision order.
    versions = {"low": [], "high": []}
    events = []
    try:
        with open(f"{ddir}/state.jsonl") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line cut by the power-off
                obj = rec.get("obj")
                if rec.get("key") == "pods" and rec.get("name") in versions and obj:
                    versions[rec["name"]].append((rec["rv"], obj))
                if rec.get("key") == "events" and obj:
                    events.append(obj)
    except OSError as e:
        print(f"not ok - {name('shutdown-state-log')}: {e}")
        return 1
    failed = 0

    def check(test, cond, why):
        nonlocal failed
        if cond:
            print(f"ok - {name(test)}")
        else:
            failed += 1
            print(f"not ok - {name(test)}: {why}")

    # The revision at which each pod was first stored Failed by the shutdown.
    failed_at = {}
    for pod, vs in versions.items():
        last = vs[-1][1] if vs else {}
        st = last.get("status", {})
        check(
            f"shutdown-{pod}-status",
            st.get("phase") == "Failed" and st.get("reason") == REASON and st.get("message") == MESSAGE,
            f"last stored status: phase {st.get('phase')!r} reason {st.get('reason')!r} message {st.get('message')!r}",
        )
        for rv, obj in vs:
            if obj.get("status", {}).get("reason") == REASON:
                failed_at[pod] = rv
                break
    check(
        "shutdown-low-priority-first",
        "low" in failed_at and "high" in failed_at and failed_at["low"] < failed_at["high"],
        f"revisions at which each was stored Failed: {failed_at}",
    )
    shutdown_events = [e for e in events if e.get("reason") == "Shutdown"]
    check(
        "shutdown-node-event",
        bool(shutdown_events),
        f"no Shutdown event among {len(events)} events",
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
