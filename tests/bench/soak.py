#!/usr/bin/env python3
"""The soak benchmark's driver (`make soak`, tests/bench/soak.sh): churns
pods through a running rkubelet and samples its process.

Every --every seconds the oldest two pods of a pool of --pool go and two new
ones come, each serving HTTP for its readiness and liveness probes and
logging a line every half second. Every --sample seconds one CSV row records
the rkubelet's RSS, threads, open fds and CPU time. At the end it prints the
least-squares slope of each figure over the run after --warmup seconds: a
kubelet that leaks shows a positive slope however noisy the figures are.

    soak.py --mode standalone --manifests DIR --pid PID --csv OUT ...
    soak.py --mode cluster --node NAME --pid PID --csv OUT ...   (WORK, URL set)
"""
import argparse
import csv
import os
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
FIELDS = ["elapsed_s", "rss_kb", "threads", "fds", "cpu_s", "pods"]
SCRIPT = ("trap 'exit 0' TERM; mkdir -p /www; echo ok >/www/ready.html; "
          "httpd -f -p 8080 -h /www & i=0; "
          "while true; do echo \"soak line $i\"; i=$((i+1)); sleep 0.5; done")


def container():
    return {
        "name": "web",
        "image": "docker.io/library/busybox:1.36",
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", SCRIPT],
        "startupProbe": {"exec": {"command": ["true"]}, "periodSeconds": 2,
                         "failureThreshold": 30},
        "readinessProbe": {"httpGet": {"path": "/ready.html", "port": 8080},
                           "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 5},
    }


class Standalone:
    """Pods as manifests in the static pod directory."""

    def __init__(self, manifests):
        self.dir = manifests

    def create(self, name):
        import json
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"terminationGracePeriodSeconds": 2, "containers": [container()]}}
        hidden = os.path.join(self.dir, "." + name + ".json")
        with open(hidden, "w") as f:
            json.dump(pod, f)
        os.rename(hidden, os.path.join(self.dir, name + ".json"))

    def delete(self, name):
        os.remove(os.path.join(self.dir, name + ".json"))


class Cluster:
    """Pods through the API server double."""

    def __init__(self, node):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import api
        self.api, self.node = api, node

    def create(self, name):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "default", "labels": {"bench": "soak"}},
               "spec": {"nodeName": self.node, "terminationGracePeriodSeconds": 2,
                        "containers": [container()]}}
        code, body = self.api.call("POST", "/api/v1/namespaces/default/pods", pod)
        if code != 201:
            raise RuntimeError(f"create {name}: {code} {body}")

    def delete(self, name):
        code, body = self.api.call("DELETE", "/api/v1/namespaces/default/pods/" + name,
                                   {"apiVersion": "v1", "kind": "DeleteOptions",
                                    "gracePeriodSeconds": 2})
        if code not in (200, 202, 404):
            raise RuntimeError(f"delete {name}: {code} {body}")


def sample(pid):
    """RSS (KiB), threads, open fds, CPU seconds of the process; None once gone."""
    try:
        status = open(f"/proc/{pid}/status").read()
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss = int(fields["VmRSS"].split()[0])
    threads = int(fields["Threads"])
    cpu = (int(stat[11]) + int(stat[12])) / CLK_TCK  # utime, stime
    return rss, threads, fds, cpu


def slope(xs, ys):
    """Least-squares slope of ys over xs."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["standalone", "cluster"], required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--secs", type=float, default=3600)
    ap.add_argument("--sample", type=float, default=60)
    ap.add_argument("--every", type=float, default=20)
    ap.add_argument("--pool", type=int, default=10)
    ap.add_argument("--warmup", type=float, default=300)
    ap.add_argument("--manifests")
    ap.add_argument("--node")
    a = ap.parse_args()
    pods = Standalone(a.manifests) if a.mode == "standalone" else Cluster(a.node)

    live, made = [], 0
    for _ in range(a.pool):
        made += 1
        pods.create(f"soak-{made}")
        live.append(f"soak-{made}")
    rows = []
    t0 = time.monotonic()
    next_sample, next_churn = t0, t0 + a.every
    with open(a.csv, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(FIELDS)
        while True:
            now = time.monotonic()
            if now - t0 > a.secs:
                break
            if now >= next_sample:
                s = sample(a.pid)
                if s is None:
                    sys.exit(f"soak ({a.mode}): rkubelet (pid {a.pid}) is gone after {now - t0:.0f} s")
                row = [round(now - t0, 1), *s, len(live)]
                rows.append(row)
                out.writerow(row)
                f.flush()
                next_sample += a.sample
            if now >= next_churn:
                for _ in range(2):
                    pods.delete(live.pop(0))
                    made += 1
                    pods.create(f"soak-{made}")
                    live.append(f"soak-{made}")
                next_churn += a.every
            time.sleep(max(0.0, min(next_sample, next_churn) - time.monotonic()))

    after = [r for r in rows if r[0] >= a.warmup] or rows
    xs = [r[0] / 3600 for r in after]
    print(f"soak_{a.mode}_pods_created {made} over {a.secs:.0f} s")
    for i, name, unit in [(1, "rss", "kb"), (2, "threads", ""), (3, "fds", "")]:
        ys = [r[i] for r in after]
        per_h = slope(xs, ys)
        print(f"soak_{a.mode}_{name}{'_' + unit if unit else ''}_slope_per_hour {per_h:.1f} "
              f"(first {ys[0]}, last {ys[-1]}, min {min(ys)}, max {max(ys)}; "
              f"{len(ys)} samples after {a.warmup:.0f} s)")
    cpu = [r[4] for r in rows]
    print(f"soak_{a.mode}_cpu_seconds {cpu[-1] - cpu[0]:.1f} over {rows[-1][0] - rows[0][0]:.0f} s")


if __name__ == "__main__":
    main()
