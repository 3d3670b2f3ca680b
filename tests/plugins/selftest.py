#!/usr/bin/env python3
"""Self-test of deviceplugin.py: python3 tests/plugins/selftest.py

Plays a fake kubelet (a v1beta1.Registration server on a temporary
device-plugins directory's kubelet.sock), runs deviceplugin.py as a
subprocess against it, and checks each behaviour through a gRPC client.
Exits 0 if every check passed.
"""

import json
import os
import queue
import subprocess
import sys
import threading
import time
from concurrent import futures

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import deviceplugin  # noqa: E402  (also re-executes under /usr/bin/python3 if grpc is missing)
import peerlib  # noqa: E402
import grpc  # noqa: E402

PB, REG = deviceplugin.load_protos()
PLUGIN = os.path.join(HERE, "deviceplugin.py")
DEADLINE = 5.0
RUNNING = []  # every Plugin started, for reap()


from peerlib import Failure, write_control  # noqa: E402


def check(condition, what):
    if not condition:
        raise Failure(what)


def eventually(predicate, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise Failure(f"timed out waiting for: {what}")


# --- the fake kubelet ---------------------------------------------------------

class FakeKubelet:
    """Serves v1beta1.Registration on DIR/kubelet.sock and records each Register.

    Like a kubelet, it dials the plugin's endpoint while handling Register, so
    a plugin that registers before it serves is caught. `fail_next` rejects
    that many calls with UNAVAILABLE.
    """

    def __init__(self, directory, fail_next=0):
        self.dir, self.fail_next = directory, fail_next
        self.requests = queue.Queue()
        self.path = os.path.join(directory, "kubelet.sock")
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": deviceplugin.unary(self.register, PB.RegisterRequest, PB.Empty)}),))
        check(self.server.add_insecure_port("unix://" + self.path), "fake kubelet binds")
        self.server.start()

    def register(self, request, context):
        if self.fail_next > 0:
            self.fail_next -= 1
            self.requests.put((request, "rejected"))
            context.abort(grpc.StatusCode.UNAVAILABLE, "fake kubelet says no")
        try:
            options = Client(os.path.join(self.dir, request.endpoint)).options()
            self.requests.put((request, options))
        except grpc.RpcError as e:
            self.requests.put((request, e))
        return PB.Empty()

    def next_register(self, timeout=10.0):
        try:
            return self.requests.get(timeout=timeout)
        except queue.Empty:
            raise Failure("no Register received") from None

    def stop(self):
        self.server.stop(None).wait()
        deviceplugin.remove_file(self.path)


# --- a client of the plugin's services ----------------------------------------

class Client:
    def __init__(self, socket_path):
        self.channel = grpc.insecure_channel("unix://" + socket_path)

    def _unary(self, service, method, request, response_cls, timeout=DEADLINE):
        call = self.channel.unary_unary(f"/{service}/{method}", request_serializer=type(request).SerializeToString,
                                        response_deserializer=response_cls.FromString)
        return call(request, timeout=timeout)

    def options(self):
        return self._unary("v1beta1.DevicePlugin", "GetDevicePluginOptions", PB.Empty(), PB.DevicePluginOptions)

    def allocate(self, *containers, timeout=DEADLINE):
        request = PB.AllocateRequest(container_requests=[PB.ContainerAllocateRequest(devices_ids=c) for c in containers])
        return self._unary("v1beta1.DevicePlugin", "Allocate", request, PB.AllocateResponse, timeout)

    def preferred(self, available, must, size):
        request = PB.PreferredAllocationRequest(container_requests=[PB.ContainerPreferredAllocationRequest(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size)])
        return self._unary("v1beta1.DevicePlugin", "GetPreferredAllocation", request, PB.PreferredAllocationResponse)

    def pre_start(self, ids):
        return self._unary("v1beta1.DevicePlugin", "PreStartContainer", PB.PreStartContainerRequest(devices_ids=ids),
                           PB.PreStartContainerResponse)

    def get_info(self):
        return self._unary("pluginregistration.Registration", "GetInfo", REG.InfoRequest(), REG.PluginInfo)

    def notify(self, registered, error):
        return self._unary("pluginregistration.Registration", "NotifyRegistrationStatus",
                           REG.RegistrationStatus(plugin_registered=registered, error=error),
                           REG.RegistrationStatusResponse)

    def watch(self):
        return Stream(self.channel)


class Stream:
    """A ListAndWatch stream read by a thread, so a test can wait with a timeout."""

    def __init__(self, channel):
        call = channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch", request_serializer=PB.Empty.SerializeToString,
                                    response_deserializer=PB.ListAndWatchResponse.FromString)
        self.call = call(PB.Empty())
        self.items = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for response in self.call:
                self.items.put(response)
            self.items.put("end")
        except grpc.RpcError as e:
            self.items.put(e)

    def next(self, timeout=5.0):
        """The next response, "end", an RpcError, or None if nothing came within timeout."""
        try:
            return self.items.get(timeout=timeout)
        except queue.Empty:
            return None

    def next_list(self, timeout=5.0):
        item = self.next(timeout)
        check(isinstance(item, PB.ListAndWatchResponse), f"a ListAndWatch response, got {item!r}")
        return [(d.ID, d.health) for d in item.devices], item

    def cancel(self):
        self.call.cancel()


# --- running the plugin -------------------------------------------------------

class Plugin:
    def __init__(self, base, *flags, kubelet_dir=None):
        self.base = base
        self.dir = kubelet_dir or os.path.join(base, "device-plugins")
        self.log_path = os.path.join(base, "plugin.log")
        self.stderr_path = os.path.join(base, "plugin.stderr")
        self.socket = os.path.join(self.dir, "widget.sock")
        os.makedirs(self.dir, exist_ok=True)
        args = [sys.executable, PLUGIN, "--dir", self.dir, "--log", self.log_path] + list(flags)
        with open(self.stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
        RUNNING.append(self)  # so main() can stop it whatever the test does

    def wait_serving(self):
        eventually(lambda: os.path.exists(self.socket) or self.proc.poll() is not None, "plugin socket")
        check(self.proc.poll() is None, f"plugin running; stderr:\n{self.stderr()}")
        return Client(self.socket)

    def events(self, rpc=None):
        try:
            with open(self.log_path, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        return [e for e in lines if rpc is None or e["rpc"] == rpc]

    def stderr(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def terminate(self):
        return peerlib.terminate(self.proc, "plugin")


# --- the checks ---------------------------------------------------------------

def test_register_and_services(base):
    os.makedirs(os.path.join(base, "device-plugins"))
    kubelet = FakeKubelet(os.path.join(base, "device-plugins"))  # the kubelet is there first
    control = os.path.join(base, "control.json")
    plugin = Plugin(base, "--devices", "3", "--numa", "1", "--pre-start-required", "--preferred-allocation",
                    "--control", control)
    try:
        request, options = kubelet.next_register()
        check(request.version == "v1beta1", f"Register version: {request.version}")
        check(request.endpoint == "widget.sock", f"Register endpoint is the basename: {request.endpoint}")
        check(request.resource_name == "example.com/widget", f"Register resource: {request.resource_name}")
        check(request.options.pre_start_required and request.options.get_preferred_allocation_available,
              f"Register options: {request.options}")
        check(isinstance(options, PB.DevicePluginOptions), f"endpoint served during Register: {options!r}")
        client = Client(plugin.socket)
        check(client.options() == request.options, "GetDevicePluginOptions equals the registered options")
        eventually(lambda: plugin.events("RegisterResult"), "RegisterResult logged")
        sent = plugin.events("RegisterSent")[0]["request"]
        check(sent["version"] == "v1beta1" and sent["resource_name"] == "example.com/widget", f"RegisterSent: {sent}")
        check(plugin.events("RegisterResult")[0] == {"rpc": "RegisterResult", "ok": True, "error": ""},
              "RegisterResult ok")

        # ListAndWatch: the full list at once, with topology from --numa.
        s1, s2 = client.watch(), client.watch()
        devices, raw = s1.next_list()
        check(devices == [("widget-0", "Healthy"), ("widget-1", "Healthy"), ("widget-2", "Healthy")],
              f"initial list: {devices}")
        check(all([n.ID for n in d.topology.nodes] == [1] for d in raw.devices), "NUMA node 1 on every device")
        s2.next_list()
        # A health change reaches every open stream.
        write_control(control, {"unhealthy": ["widget-1"]})
        for s in (s1, s2):
            devices, _ = s.next_list()
            check(devices[1] == ("widget-1", "Unhealthy") and len(devices) == 3, f"widget-1 unhealthy: {devices}")
        write_control(control, {"unhealthy": [], "devices": 4})
        devices, _ = s1.next_list()
        check([d[0] for d in devices] == [f"widget-{i}" for i in range(4)] and {d[1] for d in devices} == {"Healthy"},
              f"four healthy devices: {devices}")
        s2.next_list()
        # Same state again, a bad file, a missing file: no new response, no crash.
        write_control(control, {"devices": 4, "unhealthy": []})
        write_control(control, "{not json")
        time.sleep(0.5)
        os.unlink(control)
        check(s1.next(timeout=1.0) is None, "no response when nothing changed")
        check(plugin.proc.poll() is None, "a bad or missing control file does not kill the plugin")
        check("control file" in plugin.stderr(), "control file problems are logged to stderr")
        check(len(plugin.events("ListAndWatch")) == 2, "each ListAndWatch logged")

        # Allocate: one response per container, in order.
        response = client.allocate(["widget-2", "widget-0"], ["widget-1"])
        check(len(response.container_responses) == 2, "two container responses")
        first, second = response.container_responses
        check(dict(first.envs) == {"WIDGET_IDS": "widget-0,widget-2", "WIDGET_WIDGET_0": "1", "WIDGET_WIDGET_2": "1"},
              f"envs: {dict(first.envs)}")
        check(dict(second.envs) == {"WIDGET_IDS": "widget-1", "WIDGET_WIDGET_1": "1"}, f"envs: {dict(second.envs)}")
        mount_dir = os.path.join(base, "widget-data")
        check([(m.host_path, m.container_path, m.read_only) for m in first.mounts] == [(mount_dir, "/widget", True)],
              f"mounts: {first.mounts}")
        check([(d.host_path, d.container_path, d.permissions) for d in first.devices] ==
              [("/dev/null", "/dev/widget-0", "rw"), ("/dev/null", "/dev/widget-2", "rw")], f"devices: {first.devices}")
        check(dict(first.annotations) == {"example.com/widget-ids": "widget-0,widget-2"}, "annotations")
        check(len(first.cdi_devices) == 0, "no CDI devices")
        with open(os.path.join(mount_dir, "ids"), encoding="utf-8") as f:
            check(f.read() == "widget-1\n", "ids file holds the latest container's IDs")
        logged = plugin.events("Allocate")[-1]["request"]
        check(logged == {"container_requests": [{"devices_ids": ["widget-2", "widget-0"]},
                                                {"devices_ids": ["widget-1"]}]}, f"Allocate logged: {logged}")

        # GetPreferredAllocation: must_include first, then descending.
        response = client.preferred(["widget-0", "widget-1", "widget-2", "widget-3"], ["widget-1"], 3)
        ids = list(response.container_responses[0].deviceIDs)
        check(ids == ["widget-1", "widget-3", "widget-2"], f"preferred: {ids}")
        logged = plugin.events("GetPreferredAllocation")[-1]["request"]["container_requests"][0]
        check(logged["allocation_size"] == 3 and logged["must_include_deviceIDs"] == ["widget-1"], f"logged {logged}")

        check(client.pre_start(["widget-0"]) == PB.PreStartContainerResponse(), "PreStartContainer answers empty")
        check(plugin.events("PreStartContainer")[-1]["request"] == {"devices_ids": ["widget-0"]}, "PreStart logged")

        # A new kubelet: kubelet.sock recreated. The plugin restarts, ending the old streams, and registers again.
        kubelet.stop()
        kubelet = FakeKubelet(plugin.dir)
        request, options = kubelet.next_register()
        check(request.resource_name == "example.com/widget" and isinstance(options, PB.DevicePluginOptions),
              "registered again with the new kubelet.sock")
        check(isinstance(s1.next(), (grpc.RpcError, str)), "old ListAndWatch stream ended")
        devices, _ = Client(plugin.socket).watch().next_list()
        check(len(devices) == 4, "device state kept across the restart")

        # Only the plugin's socket removed (kubelet.sock untouched): serve again and register again.
        os.unlink(plugin.socket)
        request, options = kubelet.next_register()
        check(isinstance(options, PB.DevicePluginOptions), "socket recreated and registered again")

        # A kubelet that empties the directory at start: the plugin's socket vanishes.
        kubelet.stop()
        for name in os.listdir(plugin.dir):
            os.unlink(os.path.join(plugin.dir, name))
        kubelet = FakeKubelet(plugin.dir)
        request, options = kubelet.next_register()
        check(isinstance(options, PB.DevicePluginOptions), "socket recreated and registered again after removal")

        check(plugin.terminate() == 0, "SIGTERM: exit 0")
        check(not os.path.exists(plugin.socket), "socket removed on exit")
    finally:
        plugin.terminate()
        kubelet.stop()


def test_register_retry(base):
    """No kubelet.sock at first, then a kubelet that rejects twice: the plugin keeps trying."""
    plugin = Plugin(base)
    try:
        plugin.wait_serving()
        time.sleep(1.0)
        check(not plugin.events("RegisterSent"), "no Register while kubelet.sock is missing")
        kubelet = FakeKubelet(plugin.dir, fail_next=2)
        start = time.monotonic()
        check(kubelet.next_register()[1] == "rejected" and kubelet.next_register()[1] == "rejected", "two rejected")
        request, options = kubelet.next_register()
        check(isinstance(options, PB.DevicePluginOptions), "third Register accepted")
        check(time.monotonic() - start >= 0.9, "retries about 0.5 s apart")
        results = eventually(lambda: len(plugin.events("RegisterResult")) == 3 and plugin.events("RegisterResult"),
                             "three RegisterResult lines")
        check([r["ok"] for r in results] == [False, False, True], f"RegisterResult lines: {results}")
        check("fake kubelet says no" in results[0]["error"], f"error logged: {results[0]}")
        check(request.options == PB.DevicePluginOptions(), "options all false by default")
        devices, raw = Client(plugin.socket).watch().next_list()
        check(devices == [("widget-0", "Healthy"), ("widget-1", "Healthy")], f"default devices: {devices}")
        check(not any(d.HasField("topology") for d in raw.devices), "no topology without --numa")
        kubelet.stop()
    finally:
        check(plugin.terminate() == 0, "exit 0")


def test_custom_names(base):
    mount_dir = os.path.join(base, "elsewhere")
    plugin = Plugin(base, "--resource", "vendor.io/gadget", "--endpoint", "g.sock", "--id-prefix", "g",
                    "--devices", "1", "--mount-dir", mount_dir)
    plugin.socket = os.path.join(plugin.dir, "g.sock")
    kubelet = FakeKubelet(plugin.dir)
    try:
        request, _ = kubelet.next_register()
        check((request.resource_name, request.endpoint) == ("vendor.io/gadget", "g.sock"), f"names: {request}")
        response = Client(plugin.socket).allocate(["g-0"]).container_responses[0]
        check(response.mounts[0].host_path == mount_dir and dict(response.envs)["WIDGET_G_0"] == "1", "custom names")
    finally:
        plugin.terminate()
        kubelet.stop()


def test_die_after_updates(base):
    control = os.path.join(base, "control.json")
    plugin = Plugin(base, "--die-after-updates", "2", "--control", control)
    client = plugin.wait_serving()
    stream = client.watch()
    stream.next_list()
    write_control(control, {"unhealthy": ["widget-0"]})
    devices, _ = stream.next_list()
    check(devices[0] == ("widget-0", "Unhealthy"), "second response arrives before the death")
    check(isinstance(stream.next(), grpc.RpcError), "stream fails after K responses")
    check(plugin.proc.wait(timeout=5) == 3, "exit status 3")


def test_allocate_short(base):
    client = Plugin(base, "--allocate-short").wait_serving()
    check(len(client.allocate(["widget-0"], ["widget-1"]).container_responses) == 1, "2 requested, 1 answered")
    check(len(client.allocate(["widget-0"]).container_responses) == 0, "1 requested, 0 answered")


def test_allocate_error(base):
    client = Plugin(base, "--allocate-error", "UNAVAILABLE").wait_serving()
    try:
        client.allocate(["widget-0"])
        raise Failure("Allocate should fail")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAVAILABLE and e.details() == "widget allocation failed",
              f"status: {e.code()} {e.details()}")


def test_allocate_delay(base):
    client = Plugin(base, "--allocate-delay", "1.5").wait_serving()
    start = time.monotonic()
    check(len(client.allocate(["widget-0"]).container_responses) == 1, "delayed Allocate still answers")
    check(time.monotonic() - start >= 1.5, "Allocate delayed by 1.5 s")
    try:
        client.allocate(["widget-0"], timeout=0.5)
        raise Failure("a 0.5 s deadline should expire")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, f"deadline: {e.code()}")


def test_preferred_short(base):
    client = Plugin(base, "--preferred-short", "--preferred-allocation").wait_serving()
    ids = list(client.preferred(["widget-0", "widget-1"], [], 2).container_responses[0].deviceIDs)
    check(ids == ["widget-1"], f"one ID fewer than allocation_size: {ids}")


def test_registry(base):
    registry = os.path.join(base, "plugins_registry")
    plugin = Plugin(base, "--registry", registry)
    kubelet = FakeKubelet(plugin.dir)
    try:
        plugin.wait_serving()
        reg_socket = os.path.join(registry, "widget-reg.sock")
        eventually(lambda: os.path.exists(reg_socket), "registration socket")
        info = Client(reg_socket).get_info()
        check((info.type, info.name, info.endpoint, list(info.supported_versions)) ==
              ("DevicePlugin", "example.com/widget", plugin.socket, ["v1beta1"]), f"GetInfo: {info}")
        check(Client(info.endpoint).options() == PB.DevicePluginOptions(), "the endpoint GetInfo names serves")
        Client(reg_socket).notify(False, "resource taken")
        Client(reg_socket).notify(True, "")
        notes = [(e["plugin_registered"], e["error"]) for e in plugin.events("NotifyRegistrationStatus")]
        check(notes == [(False, "resource taken"), (True, "")], f"NotifyRegistrationStatus logged: {notes}")
        check(plugin.events("GetInfo"), "GetInfo logged")
        # The plugin's socket removed: both servers come back, the registration socket as a new file.
        before = deviceplugin.socket_identity(reg_socket)
        os.unlink(plugin.socket)
        eventually(lambda: deviceplugin.socket_identity(reg_socket) not in (None, before), "new registration socket")
        check(Client(reg_socket).get_info().endpoint == plugin.socket, "GetInfo after restart")
        check(kubelet.requests.empty() and not plugin.events("RegisterSent"), "no Register call in registry mode")
    finally:
        check(plugin.terminate() == 0, "exit 0")
        kubelet.stop()
    check(not os.path.exists(os.path.join(registry, "widget-reg.sock")), "registration socket removed on exit")


def test_lie_type(base):
    registry = os.path.join(base, "plugins_registry")
    plugin = Plugin(base, "--registry", registry, "--lie-type", "Bogus")
    plugin.wait_serving()
    reg_socket = os.path.join(registry, "widget-reg.sock")
    eventually(lambda: os.path.exists(reg_socket), "registration socket")
    check(Client(reg_socket).get_info().type == "Bogus", "GetInfo reports the lie")


def test_bad_flags(base):
    for flags in (["--allocate-error", "NOPE"], ["--allocate-error", "OK"], ["--lie-type", "X"], ["--devices", "-1"]):
        result = subprocess.run([sys.executable, PLUGIN, "--dir", base] + flags, capture_output=True, timeout=30)
        check(result.returncode == 2, f"{flags} refused at start-up")


TESTS = [test_register_and_services, test_register_retry, test_custom_names, test_die_after_updates,
         test_allocate_short, test_allocate_error, test_allocate_delay, test_preferred_short, test_registry,
         test_lie_type, test_bad_flags]


def main():
    return peerlib.run_tests(TESTS, "dpst-", "plugin.stderr", reap)


def reap(base):
    """Stop plugin processes a test left running (tests that only check one answer)."""
    for plugin in [p for p in RUNNING if p.base == base]:
        try:
            plugin.terminate()
        except Failure:
            pass
        RUNNING.remove(plugin)


if __name__ == "__main__":
    sys.exit(main())
