#!/usr/bin/env python3
"""A small device plugin that end-to-end tests use to drive rkubelet's device manager.

It follows the text of the device plugin API v1beta1
(protos/deviceplugin/v1beta1/api.proto) and, with --registry, of the plugin
registration API v1 (protos/pluginregistration/v1/api.proto): it does what
those files say a plugin does, not what some kubelet happens to accept. The
message modules are generated with protoc at start-up; the services are
written by hand (python3-grpc-tools is not needed).

Flags:
  --dir DIR                 device-plugins directory: DIR/kubelet.sock is the kubelet's,
                            DIR/<endpoint> the plugin's own socket (required)
  --resource NAME           extended resource name (example.com/widget)
  --endpoint NAME           socket name inside DIR (<resource basename>.sock)
  --devices N               number of devices, IDs <prefix>-0..N-1, all Healthy (2)
  --id-prefix P             device ID prefix (widget)
  --numa N                  give every device TopologyInfo with NUMA node N
  --control FILE            polled every 100 ms: {"unhealthy": [IDs], "devices": N}
  --log FILE                append one JSON line per RPC received / Register sent
  --mount-dir DIR           host side of the /widget mount (DIR/../widget-data)
  --pre-start-required      DevicePluginOptions.pre_start_required
  --preferred-allocation    DevicePluginOptions.get_preferred_allocation_available
  --registry DIR            do not call Register: serve pluginregistration.Registration
                            on DIR/<resource basename>-reg.sock for a plugin watcher
  --lie-type TYPE           with --registry: GetInfo reports TYPE, not "DevicePlugin"
Bad-input switches:
  --die-after-updates K     os._exit(3) after K ListAndWatch responses on one stream
  --allocate-short          one ContainerAllocateResponse fewer than requested
  --allocate-error CODE     Allocate fails with status CODE ("UNAVAILABLE", ...)
  --allocate-delay SECONDS  sleep before answering Allocate
  --preferred-short         GetPreferredAllocation returns allocation_size-1 IDs
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from system_python import reexec_if_missing_grpc  # noqa: E402

reexec_if_missing_grpc()
import grpc  # noqa: E402
import peerlib  # noqa: E402
from peerlib import EventLog, import_file, remove_file, to_dict  # noqa: E402

PROTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "protos")
DP_PROTO = "deviceplugin/v1beta1/api.proto"
REG_PROTO = "pluginregistration/v1/api.proto"
API_VERSION = "v1beta1"
CALL_DEADLINE = 5.0     # seconds, on every outgoing call
REGISTER_RETRY = 0.5    # seconds between Register attempts
WATCH_TICK = 0.1        # supervisor poll of kubelet.sock and our own socket (at most 200 ms)
CONTROL_TICK = 0.1      # control file poll


def say(message):
    print(f"deviceplugin[{os.getpid()}] {time.strftime('%H:%M:%S')}: {message}", file=sys.stderr, flush=True)


# --- protos -------------------------------------------------------------------

def load_protos(protos_dir=PROTOS):
    """Generate both message modules with protoc; return (v1beta1, pluginregistration).

    Both files are called api.proto, so they are imported by file path under
    distinct module names rather than through sys.path (where the package name
    "deviceplugin" would also collide with this script).
    """
    with tempfile.TemporaryDirectory(prefix="deviceplugin-pb-") as out:
        subprocess.run(["protoc", f"--python_out={out}", f"-I{protos_dir}", DP_PROTO, REG_PROTO], check=True)
        dp = import_file("v1beta1_api_pb2", os.path.join(out, DP_PROTO.replace(".proto", "_pb2.py")))
        reg = import_file("pluginregistration_api_pb2", os.path.join(out, REG_PROTO.replace(".proto", "_pb2.py")))
    return dp, reg


def unary(fn, request_cls, response_cls):
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=request_cls.FromString, response_serializer=response_cls.SerializeToString)


# --- event log (--log) --------------------------------------------------------

# --- devices and the control file ---------------------------------------------

class Devices:
    """The device list. ListAndWatch streams wait on the version number for changes."""

    def __init__(self, prefix, count):
        self._prefix = prefix
        self._cond = threading.Condition()
        self._list = self._build(count, frozenset())
        self._version = 0

    def _build(self, count, unhealthy):
        ids = [f"{self._prefix}-{i}" for i in range(count)]
        return tuple((i, "Unhealthy" if i in unhealthy else "Healthy") for i in ids)

    def set_state(self, count, unhealthy):
        """Apply a count and an unhealthy set; True if the list (IDs or health) changed."""
        new = self._build(count, unhealthy)
        with self._cond:
            if new == self._list:
                return False
            self._list, self._version = new, self._version + 1
            self._cond.notify_all()
            return True

    def snapshot(self):
        with self._cond:
            return self._version, self._list

    def wait_change(self, version, timeout):
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout)
            return self._version, self._list


def read_control(path, default_count):
    """(count, unhealthy IDs) from the control file. Raises OSError or ValueError."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    unhealthy = data.get("unhealthy", [])
    if not isinstance(unhealthy, list) or not all(isinstance(i, str) for i in unhealthy):
        raise ValueError('"unhealthy" is not a list of strings')
    # The file states the whole desired state, so an absent "devices" means --devices.
    count = data.get("devices", default_count)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError('"devices" is not a non-negative integer')
    return count, frozenset(unhealthy)


class ControlPoller:
    """Applies the control file to Devices; a missing or bad file changes nothing."""

    def __init__(self, path, devices, default_count):
        self.path, self.devices, self.default_count = path, devices, default_count
        self._last_error = None

    def poll_once(self):
        try:
            count, unhealthy = read_control(self.path, self.default_count)
        except (OSError, ValueError) as e:
            error = f"control file {self.path}: {e}; keeping the device list"
            if error != self._last_error:  # once per distinct error, not every 100 ms
                say(error)
            self._last_error = error
            return
        self._last_error = None
        if self.devices.set_state(count, unhealthy):
            say(f"devices now {self.devices.snapshot()[1]}")

    def run(self, stop):
        while not stop.wait(CONTROL_TICK):
            self.poll_once()


# --- the DevicePlugin service -------------------------------------------------

def pick_preferred(available, must_include, size):
    """must_include first, then the other available IDs in descending order, up to size.

    Descending, so that a test can tell the kubelet used the preference: it
    differs from the ascending order a kubelet would pick on its own.
    """
    chosen = list(dict.fromkeys(must_include))
    for device in sorted(set(available), reverse=True):
        if len(chosen) >= size:
            break
        if device not in chosen:
            chosen.append(device)
    return chosen


def env_name(device_id):
    return "WIDGET_" + "".join(c if c.isalnum() else "_" for c in device_id.upper())


class DevicePluginService:
    """v1beta1.DevicePlugin; one instance per server life, `stopping` ends its streams."""

    def __init__(self, cfg, pb, devices, events, stopping):
        self.cfg, self.pb, self.devices, self.events, self.stopping = cfg, pb, devices, events, stopping

    def handler(self):
        pb = self.pb
        return grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
            "GetDevicePluginOptions": unary(self.get_options, pb.Empty, pb.DevicePluginOptions),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.list_and_watch, request_deserializer=pb.Empty.FromString,
                response_serializer=pb.ListAndWatchResponse.SerializeToString),
            "GetPreferredAllocation": unary(self.preferred, pb.PreferredAllocationRequest,
                                            pb.PreferredAllocationResponse),
            "Allocate": unary(self.allocate, pb.AllocateRequest, pb.AllocateResponse),
            "PreStartContainer": unary(self.pre_start, pb.PreStartContainerRequest, pb.PreStartContainerResponse),
        })

    def get_options(self, request, context):
        self.events.rpc("GetDevicePluginOptions", request)
        return plugin_options(self.cfg, self.pb)

    def _list_response(self, device_list):
        out = []
        for device_id, health in device_list:
            device = self.pb.Device(ID=device_id, health=health)
            if self.cfg.numa is not None:  # no --numa: leave topology unset, not empty
                device.topology.nodes.add(ID=self.cfg.numa)
            out.append(device)
        return self.pb.ListAndWatchResponse(devices=out)

    def list_and_watch(self, request, context):
        self.events.rpc("ListAndWatch", request)
        version, device_list = self.devices.snapshot()
        sent = 0
        while device_list is not None:
            response = self._list_response(device_list)
            self.events.write({"rpc": "ListAndWatchSent", "response": to_dict(response)})
            yield response
            # grpc resumes this generator only once the message is written.
            sent += 1
            if self.cfg.die_after_updates and sent >= self.cfg.die_after_updates:
                self._die(sent)
            version, device_list = self._next_change(version, context)

    def _next_change(self, version, context):
        """Wait for a new device list; (version, None) once the stream or server ends."""
        while context.is_active() and not self.stopping.is_set():
            new_version, device_list = self.devices.wait_change(version, WATCH_TICK)
            if new_version != version:
                return new_version, device_list
        return version, None

    def _die(self, sent):
        say(f"--die-after-updates: exiting with status 3 after {sent} ListAndWatch responses")
        # A moment for grpc's core to push the last frame out of the process,
        # so the peer sees K responses and then a dead connection.
        time.sleep(0.2)
        os._exit(3)

    def preferred(self, request, context):
        self.events.rpc("GetPreferredAllocation", request)
        responses = []
        for r in request.container_requests:
            ids = pick_preferred(r.available_deviceIDs, r.must_include_deviceIDs, r.allocation_size)
            if self.cfg.preferred_short:
                ids = ids[:max(r.allocation_size - 1, 0)]
            responses.append(self.pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return self.pb.PreferredAllocationResponse(container_responses=responses)

    def allocate(self, request, context):
        self.events.rpc("Allocate", request)
        if self.cfg.allocate_delay:
            time.sleep(self.cfg.allocate_delay)
        if self.cfg.allocate_error:
            context.abort(grpc.StatusCode[self.cfg.allocate_error], "widget allocation failed")
        # api.proto: one ContainerAllocateResponse per ContainerAllocateRequest, in order.
        responses = [self._container_allocation(r.devices_ids) for r in request.container_requests]
        if self.cfg.allocate_short:
            responses = responses[:max(len(responses) - 1, 0)]
        return self.pb.AllocateResponse(container_responses=responses)

    def _container_allocation(self, device_ids):
        ids = sorted(device_ids)
        joined = ",".join(ids)
        write_ids_file(self.cfg.mount_dir, joined)
        envs = {"WIDGET_IDS": joined}
        envs.update({env_name(i): "1" for i in ids})
        pb = self.pb
        return pb.ContainerAllocateResponse(
            envs=envs,
            mounts=[pb.Mount(host_path=self.cfg.mount_dir, container_path="/widget", read_only=True)],
            devices=[pb.DeviceSpec(host_path="/dev/null", container_path=f"/dev/{i}", permissions="rw") for i in ids],
            annotations={"example.com/widget-ids": joined},
        )

    def pre_start(self, request, context):
        self.events.rpc("PreStartContainer", request)
        return self.pb.PreStartContainerResponse()


def write_ids_file(mount_dir, joined):
    """<mount-dir>/ids holds the IDs of the latest container allocation (atomic replace)."""
    os.makedirs(mount_dir, exist_ok=True)
    tmp = os.path.join(mount_dir, f".ids.{os.getpid()}.{threading.get_ident()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(joined + "\n")
    os.replace(tmp, os.path.join(mount_dir, "ids"))


def plugin_options(cfg, pb):
    return pb.DevicePluginOptions(pre_start_required=cfg.pre_start_required,
                                  get_preferred_allocation_available=cfg.preferred_allocation)


# --- the pluginregistration.Registration service (--registry) -----------------

class RegistrationService:
    def __init__(self, cfg, reg, events):
        self.cfg, self.reg, self.events = cfg, reg, events

    def handler(self):
        reg = self.reg
        return grpc.method_handlers_generic_handler("pluginregistration.Registration", {
            "GetInfo": unary(self.get_info, reg.InfoRequest, reg.PluginInfo),
            "NotifyRegistrationStatus": unary(self.notify, reg.RegistrationStatus, reg.RegistrationStatusResponse),
        })

    def get_info(self, request, context):
        self.events.rpc("GetInfo", request)
        return self.reg.PluginInfo(type=self.cfg.lie_type or "DevicePlugin", name=self.cfg.resource,
                                   endpoint=self.cfg.socket_path, supported_versions=[API_VERSION])

    def notify(self, request, context):
        # The fields are spelled out: MessageToDict leaves out false and "".
        self.events.write({"rpc": "NotifyRegistrationStatus", "request": to_dict(request),
                           "plugin_registered": request.plugin_registered, "error": request.error})
        say(f"registration status: registered={request.plugin_registered} error={request.error!r}")
        return self.reg.RegistrationStatusResponse()


# --- servers, registration, supervision ---------------------------------------

def serve(path, handler):
    return peerlib.serve(path, [handler], workers=16)


class ServerLife:
    """The plugin's servers from one start to one stop; a kubelet restart starts a new life."""

    def __init__(self, cfg, pb, reg, devices, events):
        self.stopping = threading.Event()
        self.servers = []
        # DevicePlugin first: it must be serving before anyone is told the endpoint.
        dp = DevicePluginService(cfg, pb, devices, events, self.stopping)
        self.servers.append((serve(cfg.socket_path, dp.handler()), cfg.socket_path))
        say(f"serving v1beta1.DevicePlugin on {cfg.socket_path}")
        if cfg.registry:
            rs = RegistrationService(cfg, reg, events)
            self.servers.append((serve(cfg.registry_socket, rs.handler()), cfg.registry_socket))
            say(f"serving pluginregistration.Registration on {cfg.registry_socket}")

    def stop(self):
        self.stopping.set()  # ends open ListAndWatch streams
        for server, path in reversed(self.servers):  # registration socket first
            server.stop(grace=None).wait()
            remove_file(path)


def socket_identity(path):
    """Identifies one socket file. The ctime is included because a recreated file
    can be given the inode number the removed one had."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def register(cfg, pb, events):
    """One Register call to the kubelet; True if it succeeded."""
    request = pb.RegisterRequest(version=API_VERSION, endpoint=cfg.endpoint, resource_name=cfg.resource,
                                 options=plugin_options(cfg, pb))
    events.write({"rpc": "RegisterSent", "request": to_dict(request)})
    try:
        with grpc.insecure_channel("unix://" + cfg.kubelet_socket) as channel:
            call = channel.unary_unary("/v1beta1.Registration/Register",
                                       request_serializer=pb.RegisterRequest.SerializeToString,
                                       response_deserializer=pb.Empty.FromString)
            call(request, timeout=CALL_DEADLINE)
    except grpc.RpcError as e:
        error = f"{e.code().name}: {e.details()}"
        events.write({"rpc": "RegisterResult", "ok": False, "error": error})
        say(f"Register failed ({error}); retrying in {REGISTER_RETRY}s")
        return False
    events.write({"rpc": "RegisterResult", "ok": True, "error": ""})
    say(f"registered {cfg.resource} at {cfg.kubelet_socket}")
    return True


def watch(cfg, pb, events, stop):
    """Register (unless --registry), then wait for a reason to restart the servers.

    Returns that reason, or None once asked to stop. `baseline` is the
    kubelet.sock we registered with; a different file there is a new kubelet.
    """
    baseline, next_attempt, said_missing = None, 0.0, False
    while True:
        if not os.path.exists(cfg.socket_path):
            return f"{cfg.socket_path} was removed"  # a starting kubelet empties the directory
        if cfg.registry and not os.path.exists(cfg.registry_socket):
            return f"{cfg.registry_socket} was removed"
        kubelet = socket_identity(cfg.kubelet_socket)
        if baseline is not None:
            if kubelet is not None and kubelet != baseline:
                return f"{cfg.kubelet_socket} was recreated"
        elif cfg.registry:
            baseline = kubelet  # nothing to call: only remember which kubelet.sock we saw
        elif kubelet is None:
            if not said_missing:
                say(f"{cfg.kubelet_socket} is missing; waiting for it")
            said_missing = True
        elif time.monotonic() >= next_attempt:
            said_missing = False
            if register(cfg, pb, events):
                baseline = kubelet
            else:
                next_attempt = time.monotonic() + REGISTER_RETRY
        if stop.wait(WATCH_TICK):
            return None


# --- command line -------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--resource", default="example.com/widget")
    p.add_argument("--endpoint")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--id-prefix", default="widget")
    p.add_argument("--numa", type=int)
    p.add_argument("--control")
    p.add_argument("--log")
    p.add_argument("--mount-dir")
    p.add_argument("--pre-start-required", action="store_true")
    p.add_argument("--preferred-allocation", action="store_true")
    p.add_argument("--registry")
    p.add_argument("--lie-type")
    p.add_argument("--die-after-updates", type=int, default=0)
    p.add_argument("--allocate-short", action="store_true")
    p.add_argument("--allocate-error", type=str.upper)
    p.add_argument("--allocate-delay", type=float, default=0.0)
    p.add_argument("--preferred-short", action="store_true")
    cfg = p.parse_args(argv)
    if cfg.devices < 0 or cfg.die_after_updates < 0 or cfg.allocate_delay < 0:
        p.error("--devices, --die-after-updates and --allocate-delay must not be negative")
    if cfg.allocate_error and cfg.allocate_error not in set(grpc.StatusCode.__members__) - {"OK"}:
        p.error(f"--allocate-error: not a gRPC error status code name: {cfg.allocate_error}")
    if cfg.lie_type and not cfg.registry:
        p.error("--lie-type needs --registry")
    basename = cfg.resource.rsplit("/", 1)[-1]
    cfg.dir = os.path.abspath(cfg.dir)
    # api.proto: the endpoint is the socket's name relative to the device-plugins directory.
    cfg.endpoint = cfg.endpoint or f"{basename}.sock"
    cfg.socket_path = os.path.join(cfg.dir, cfg.endpoint)
    cfg.kubelet_socket = os.path.join(cfg.dir, "kubelet.sock")
    cfg.mount_dir = os.path.abspath(cfg.mount_dir or os.path.join(cfg.dir, "..", "widget-data"))
    if cfg.registry:
        cfg.registry = os.path.abspath(cfg.registry)
        cfg.registry_socket = os.path.join(cfg.registry, f"{basename}-reg.sock")
    return cfg


def main(argv):
    cfg = parse_args(argv)
    pb, reg = load_protos()
    events = EventLog(cfg.log)
    devices = Devices(cfg.id_prefix, cfg.devices)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    for d in [cfg.dir, cfg.mount_dir] + ([cfg.registry] if cfg.registry else []):
        os.makedirs(d, exist_ok=True)
    if cfg.control:
        poller = ControlPoller(cfg.control, devices, cfg.devices)
        poller.poll_once()  # so the first ListAndWatch response already reflects the file
        threading.Thread(target=poller.run, args=(stop,), daemon=True, name="control").start()
    while not stop.is_set():
        life = ServerLife(cfg, pb, reg, devices, events)
        try:
            reason = watch(cfg, pb, events, stop)
        finally:
            life.stop()
        if reason:
            say(f"restarting the servers: {reason}")
    say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
