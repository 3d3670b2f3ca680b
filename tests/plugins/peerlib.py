"""What the test peers share: loading generated message modules, gRPC
servers on unix sockets, and the self-tests' runner.

Import it after system_python.reexec_if_missing_grpc(): it imports grpc.
"""

import importlib.util
import json
import os
import signal
import subprocess
import shutil
import tempfile
import threading
import time
import traceback
from concurrent import futures

import grpc
from google.protobuf import json_format


def import_file(name, path):
    """A generated module, imported by file path under `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def to_dict(message):
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def remove_file(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def serve(path, handlers, workers):
    """A started gRPC server on unix socket `path` with `handlers`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)  # in case the whole directory went
    remove_file(path)  # a stale socket file from an earlier life would make bind fail
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    server.add_generic_rpc_handlers(tuple(handlers))
    if not server.add_insecure_port("unix://" + path):
        raise RuntimeError(f"cannot listen on {path}")
    server.start()
    return server


class EventLog:
    """JSON lines, flushed one by one so a test can read them while we run."""

    def __init__(self, path):
        self._file = open(path, "a", encoding="utf-8") if path else None
        self._lock = threading.Lock()

    def write(self, record):
        if self._file is None:
            return
        with self._lock:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()

    def rpc(self, name, request):
        self.write({"rpc": name, "request": to_dict(request)})


def write_control(path, data):
    """Atomic, so the peer never reads half a file (that case is tested on purpose)."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(data if isinstance(data, str) else json.dumps(data))
    os.replace(path + ".tmp", path)


def terminate(proc, what):
    """SIGTERM, then the exit status; a peer still running 10 s later is
    killed and the test fails."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise Failure(f"{what} did not exit within 10 s of SIGTERM") from None


class Failure(Exception):
    """A self-test's expectation that did not hold."""


class Skip(Exception):
    """A self-test that cannot run here (e.g. it needs root)."""


def run_tests(tests, prefix, stderr_name, cleanup):
    """Runs each test in a fresh short temporary directory (a unix socket
    path must fit in 108 bytes), reports every failure with the peer's
    stderr, and calls cleanup(base) after each. The exit status."""
    failed = skipped = 0
    for test in tests:
        base = tempfile.mkdtemp(prefix=prefix)
        start = time.monotonic()
        try:
            test(base)
            print(f"ok   {test.__name__} ({time.monotonic() - start:.1f}s)", flush=True)
        except Skip as e:
            skipped += 1
            print(f"skip {test.__name__}: {e}", flush=True)
        except Exception as e:  # noqa: BLE001 -- report every failure, then go on
            failed += 1
            print(f"FAIL {test.__name__}: {e}", flush=True)
            if not isinstance(e, Failure):
                traceback.print_exc()
            stderr = os.path.join(base, stderr_name)
            if os.path.exists(stderr):
                print(f"  {stderr_name}:\n" + open(stderr, encoding="utf-8").read(), flush=True)
        finally:
            cleanup(base)
            shutil.rmtree(base, ignore_errors=True)
    tail = f", {skipped} skipped" if skipped else ""
    print(f"{len(tests) - failed - skipped}/{len(tests)} passed{tail}", flush=True)
    return 1 if failed else 0
