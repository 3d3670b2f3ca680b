#!/usr/bin/env python3
"""A tiny admin client of the API server double for the bench scripts
(python3 standard library only): `api.py COMMAND ARGS...` with WORK (the
bench's work dir, holding the double's api/) and URL in the environment.
Importable: soak.py uses call() and ready()."""
import http.client, json, os, socket, ssl, struct, sys, time

work = os.environ["WORK"]
url = os.environ["URL"]
host, port = url.split("//")[1].split(":")
ctx = ssl.create_default_context(cafile=f"{work}/api/ca.crt")
token = open(f"{work}/api/admin-token").read().strip()
headers = {"Authorization": "Bearer " + token, "User-Agent": "rk-bench/1"}
conn = None

def call(method, path, body=None):
    global conn
    for attempt in range(3):
        try:
            if conn is None:
                conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
            h = dict(headers)
            data = None
            if body is not None:
                data = json.dumps(body)
                h["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            text = r.read()
            return r.status, (json.loads(text) if text else None)
        except (OSError, http.client.HTTPException):
            conn = None
            if attempt == 2:
                raise

def ready(p):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in p.get("status", {}).get("conditions", []))

class PodWatch:
    """A watch of the pods a LIST with `selector` returns, from that list's
    resourceVersion, on a connection of its own (as `kubectl wait` does):
    the bench learns of each change as the server makes it, without
    re-reading all the pods every few milliseconds on the cores it
    measures. Opened before the bench's own writes, so no change is missed."""

    def __init__(self, selector, limit):
        path = "/api/v1/namespaces/default/pods?labelSelector=" + selector
        code, lst = call("GET", path)
        if code != 200:
            sys.exit(f"list pods: {code} {lst}")
        self.pods = {p["metadata"]["name"]: p for p in lst["items"]}
        rv = lst["metadata"]["resourceVersion"]
        self.conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=limit)
        self.conn.request("GET", f"{path}&watch=true&resourceVersion={rv}&timeoutSeconds={int(limit) + 5}",
                          headers=headers)
        self.resp = self.conn.getresponse()
        if self.resp.status != 200:
            sys.exit(f"watch pods: {self.resp.status} {self.resp.read()[:200]}")

    def until(self, done, t0, limit, what):
        """Applies events to `pods` until done(pods) holds; exits when
        `limit` seconds from t0 pass first."""
        while not done(self.pods):
            if time.monotonic() - t0 > limit:
                sys.exit(f"{what} after {limit} s")
            try:
                line = self.resp.readline()
            except OSError as e:
                sys.exit(f"{what}: watch failed: {e}")
            if not line:
                sys.exit(f"{what}: the watch ended")
            ev = json.loads(line)
            if ev["type"] == "ERROR":
                sys.exit(f"{what}: watch error {ev['object']}")
            name = ev["object"]["metadata"]["name"]
            if ev["type"] == "DELETED":
                self.pods.pop(name, None)
            elif ev["type"] in ("ADDED", "MODIFIED"):
                self.pods[name] = ev["object"]
        self.conn.close()


def csi_claims(n):
    """The CSIDriver, and per pod a CSI PV and a claim bound to it."""
    call("POST", "/apis/storage.k8s.io/v1/csidrivers",
         {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "csi.example.com"},
          "spec": {"attachRequired": False}})
    for i in range(1, n + 1):
        code, body = call("POST", "/api/v1/persistentvolumes",
                          {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"bench-csi-pv-{i}"},
                           "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                    "csi": {"driver": "csi.example.com", "volumeHandle": f"bench-vol-{i}"}}})
        if code != 201:
            sys.exit(f"create PV {i}: {code} {body}")
        code, body = call("POST", "/api/v1/namespaces/default/persistentvolumeclaims",
                          {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": f"bench-csi-{i}"},
                           "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": f"bench-csi-pv-{i}",
                                    "resources": {"requests": {"storage": "1Gi"}}}})
        if code != 201:
            sys.exit(f"create claim {i}: {code} {body}")
        call("PATCH", f"/api/v1/namespaces/default/persistentvolumeclaims/bench-csi-{i}/status",
             {"status": {"phase": "Bound"}})


def main():
    cmd = sys.argv[1]
    if cmd == "csi-driver-registered":
        # exit 0 when the node's CSINode lists driver NAME
        code, c = call("GET", "/apis/storage.k8s.io/v1/csinodes/" + sys.argv[2])
        names = [d.get("name") for d in (c.get("spec", {}).get("drivers") or [])] if code == 200 else []
        sys.exit(0 if sys.argv[3] in names else 1)
    if cmd == "node-ready":
        code, n = call("GET", "/api/v1/nodes/" + sys.argv[2])
        sys.exit(0 if code == 200 and ready(n) else 1)
    elif cmd == "node-allocatable":
        # exit 0 when the node's allocatable NAME is VALUE
        code, n = call("GET", "/api/v1/nodes/" + sys.argv[2])
        got = n.get("status", {}).get("allocatable", {}).get(sys.argv[3]) if code == 200 else None
        sys.exit(0 if got == sys.argv[4] else 1)
    elif cmd == "start-pods":
        # plain: no volumes at all (automountServiceAccountToken false), the
        # figure comparable with earlier runs; volumes: the admission's projected
        # token volume plus a configMap and a secret volume each; devices: plain,
        # each asking for one example.com/widget of tests/plugins/deviceplugin.py;
        # csi: plain, each with one claim bound to its own CSI PV of
        # tests/plugins/csidriver.py (csi.example.com, no attach).
        node, n, limit, kind = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
        def pod(i):
            spec = {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "sleep", "image": "docker.io/library/busybox:1.36",
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["sleep", "100000"]}]}
            if kind == "probed":
                # busybox httpd on :8080, readiness by tcpSocket every 10 s
                # (issue 53's steady pods: one probe each, no exec).
                spec["automountServiceAccountToken"] = False
                spec["containers"][0]["command"] = ["httpd", "-f", "-p", "8080", "-h", "/tmp"]
                spec["containers"][0]["readinessProbe"] = {
                    "tcpSocket": {"port": 8080}, "periodSeconds": 10}
            elif kind in ("plain", "ref", "devices", "csi"):
                spec["automountServiceAccountToken"] = False
                if kind == "devices":
                    spec["containers"][0]["resources"] = {"limits": {"example.com/widget": "1"}}
                if kind == "csi":
                    spec["volumes"] = [{"name": "data",
                                        "persistentVolumeClaim": {"claimName": f"bench-csi-{i}"}}]
                    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
            else:
                spec["volumes"] = [{"name": "cfg", "configMap": {"name": "bench-config"}},
                                   {"name": "sec", "secret": {"secretName": "bench-secret"}}]
                spec["containers"][0]["volumeMounts"] = [
                    {"name": "cfg", "mountPath": "/cfg"}, {"name": "sec", "mountPath": "/sec"}]
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"bench-{kind}-{i}", "namespace": "default",
                                 "labels": {"bench": kind}},
                    "spec": spec}
        if kind == "csi":
            csi_claims(n)
        if kind not in ("plain", "ref", "devices", "csi", "probed"):
            call("POST", "/api/v1/namespaces/default/configmaps",
                 {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench-config"},
                  "data": {"a": "1"}})
            call("POST", "/api/v1/namespaces/default/secrets",
                 {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bench-secret"},
                  "data": {"k": "dg=="}})
        pods = [pod(i) for i in range(1, n + 1)]
        watch = PodWatch("bench%3D" + kind, limit)
        t0 = time.monotonic()
        for p in pods:
            code, body = call("POST", "/api/v1/namespaces/default/pods", p)
            if code != 201:
                sys.exit(f"create {p['metadata']['name']}: {code} {body}")
        created = time.monotonic() - t0
        n_ready = lambda ps: sum(1 for p in ps.values() if ready(p))
        watch.until(lambda ps: n_ready(ps) >= n, t0, limit,
                    f"not all {n} pods Ready")
        print(f"{time.monotonic() - t0:.2f} {created:.2f}")
    elif cmd == "delete-pods":
        # DELETE every pod of a kind at once with the given grace (busybox sleep
        # as PID 1 ignores SIGTERM, so each one takes the whole grace period);
        # seconds until none is left in the API.
        kind, grace, limit = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
        watch = PodWatch("bench%3D" + kind, limit)
        names = list(watch.pods)
        t0 = time.monotonic()
        for n in names:
            code, body = call("DELETE", "/api/v1/namespaces/default/pods/" + n,
                              {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace})
            if code not in (200, 202):
                sys.exit(f"delete {n}: {code} {body}")
        watch.until(lambda ps: not ps, t0, limit, "pods still in the API")
        print(f"{time.monotonic() - t0:.2f} {len(names)}")
    elif cmd == "probe-floor":
        # The kernel's share of tcpSocket probes with no kubelet: ROUNDS
        # connects to :8080 of every Running pod of a kind, closed as
        # upstream's probe dialer closes them (SO_LINGER 1 s), back to back;
        # prints this process's CPU ms (schedstat) for all the rounds.
        kind, rounds = sys.argv[2], int(sys.argv[3])
        code, lst = call("GET", "/api/v1/namespaces/default/pods?labelSelector=bench%3D" + kind)
        ips = [p["status"]["podIP"] for p in lst["items"] if p.get("status", {}).get("podIP")]
        linger = struct.pack("ii", 1, 1)
        def cpu_ns():
            with open("/proc/thread-self/schedstat") as f:
                return int(f.read().split()[0])
        t0 = cpu_ns()
        failed = 0
        for _ in range(rounds):
            for ip in ips:
                try:
                    c = socket.create_connection((ip, 8080), timeout=1)
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    c.close()
                except OSError:
                    failed += 1
        print(f"{(cpu_ns() - t0) / 1e6:.1f} {len(ips)} {failed}")
    elif cmd == "stats-reset":
        call("POST", "/__double/stats/reset", {})
    elif cmd == "over-limits":
        # Requests the client limits the double replays (--client-qps and
        # --event-qps) could not have let through, since the last reset:
        # "0 (of N)" when within them.
        # An optional prefix keeps only those clients (the node's: the
        # bench's own admin client is no kubelet's).
        code, s = call("GET", "/__double/stats")
        limits = s.get("clientLimits", {})
        if len(sys.argv) > 2:
            limits = {k: v for k, v in limits.items() if k.startswith(sys.argv[2])}
        over = sum(v["overLimit"] for v in limits.values())
        seen = sum(v["requests"] for v in limits.values())
        detail = " ".join(f"{k.replace(' ', ':')}={v['overLimit']}/{v['requests']}"
                          for k, v in sorted(limits.items()))
        print(f"{over} (of {seen}; {detail})")
    elif cmd == "writes":
        # Status patches and event writes since the last reset (the bench
        # client makes neither: they are the node's).
        code, s = call("GET", "/__double/stats")
        by = s["byVerbResource"]
        status = sum(v for k, v in by.items() if k.startswith("patch ") and k.endswith("pods/status"))
        events = sum(v for k, v in by.items()
                     if k.split(" ")[0] in ("create", "patch") and k.endswith(" events"))
        print(f"{status} {events}")
    elif cmd == "stats":
        user, kind = sys.argv[2], sys.argv[3]
        code, s = call("GET", "/__double/stats")
        secs = s["elapsedSeconds"]
        per_min = lambda c: c * 60.0 / secs
        if kind == "total":
            print(f"{per_min(s['byUser'].get(user, 0)):.1f} (all clients {s['perMinute']:.1f}, over {secs:.0f} s)")
        else:
            print(" ".join(f"{k.replace(' ', ':')}={per_min(v):.1f}"
                           for k, v in sorted(s["byVerbResource"].items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
