#!/usr/bin/env python3
"""Self-test of csidriver.py: python3 tests/plugins/csi_selftest.py

Runs csidriver.py as a subprocess on temporary sockets and calls every RPC
through a client generated from rkubelet's protos/csi/v1/csi.proto, the
other transcription of the spec (the driver speaks tests/plugins/csi/csi.proto),
so a difference between the two shows up here. It also compares the two
files' descriptors field by field. The parts that mount need root; without
it they are reported as skipped. Exits 0 if every check passed.
"""

import json
import os
import stat
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import csidriver  # noqa: E402  (also re-executes under /usr/bin/python3 if grpc is missing)
import peerlib  # noqa: E402
import grpc  # noqa: E402
from google.protobuf import descriptor_pb2  # noqa: E402

# rkubelet's transcription, never the driver's: both define csi.v1 and cannot share a process.
PB = csidriver.generate(csidriver.PROTOS, "csi/v1/csi.proto", "rkubelet_csi_pb2")
REG = csidriver.generate(csidriver.PROTOS, csidriver.REG_PROTO, "pluginregistration_api_pb2")
DRIVER = os.path.join(HERE, "csidriver.py")
DEADLINE = 5.0
ROOT = os.geteuid() == 0
RUNNING = []  # every Driver started, for reap()
MOUNT = PB.VolumeCapability(mount=PB.VolumeCapability.MountVolume(fs_type="ext4", mount_flags=["noatime"]),
                            access_mode=PB.VolumeCapability.AccessMode(
                                mode=PB.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))
BLOCK = PB.VolumeCapability(block=PB.VolumeCapability.BlockVolume(),
                            access_mode=PB.VolumeCapability.AccessMode(
                                mode=PB.VolumeCapability.AccessMode.SINGLE_NODE_WRITER))


from peerlib import Failure, Skip, write_control  # noqa: E402


def check(condition, what):
    if not condition:
        raise Failure(what)


def need_root():
    if not ROOT:
        raise Skip("needs root (mount)")


def eventually(predicate, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise Failure(f"timed out waiting for: {what}")


def expect_error(code, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except grpc.RpcError as e:
        check(e.code() == code, f"{fn.__name__}: want {code.name}, got {e.code().name}: {e.details()}")
        return e.details()
    raise Failure(f"{fn.__name__}: want {code.name}, got OK")


# --- a client of the driver's services ----------------------------------------

class Client:
    def __init__(self, socket_path):
        self.channel = grpc.insecure_channel("unix://" + socket_path)

    def call(self, service, method, request, response_cls, timeout=DEADLINE):
        stub = self.channel.unary_unary(f"/{service}/{method}", request_serializer=type(request).SerializeToString,
                                        response_deserializer=response_cls.FromString)
        return stub(request, timeout=timeout)

    def identity(self, method, request, timeout=DEADLINE):
        return self.call("csi.v1.Identity", method, request,
                         getattr(PB, type(request).__name__.replace("Request", "Response")), timeout)

    def node(self, method, timeout=DEADLINE, **fields):
        request = getattr(PB, method + "Request")(**fields)
        return self.call("csi.v1.Node", method, request, getattr(PB, method + "Response"), timeout)

    def stage(self, **fields):
        return self.node("NodeStageVolume", **fields)

    def unstage(self, **fields):
        return self.node("NodeUnstageVolume", **fields)

    def publish(self, **fields):
        return self.node("NodePublishVolume", **fields)

    def unpublish(self, **fields):
        return self.node("NodeUnpublishVolume", **fields)

    def stats(self, **fields):
        return self.node("NodeGetVolumeStats", **fields)

    def probe(self, timeout=DEADLINE):
        return self.identity("Probe", PB.ProbeRequest(), timeout)

    def get_info(self):
        return self.call("pluginregistration.Registration", "GetInfo", REG.InfoRequest(), REG.PluginInfo)

    def notify(self, registered, error):
        return self.call("pluginregistration.Registration", "NotifyRegistrationStatus",
                         REG.RegistrationStatus(plugin_registered=registered, error=error),
                         REG.RegistrationStatusResponse)


# --- running the driver -------------------------------------------------------

class Driver:
    def __init__(self, base, *flags):
        self.base = base
        self.socket = os.path.join(base, "csi.sock")
        self.data = os.path.join(base, "data")
        self.log_path = os.path.join(base, "driver.log")
        self.stderr_path = os.path.join(base, "driver.stderr")
        args = [sys.executable, DRIVER, "--csi-address", self.socket, "--data", self.data,
                "--log", self.log_path] + list(flags)
        with open(self.stderr_path, "ab") as stderr:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
        RUNNING.append(self)  # so main() can stop it whatever the test does

    def wait_serving(self):
        eventually(lambda: os.path.exists(self.socket) or self.proc.poll() is not None, "driver socket")
        check(self.proc.poll() is None, f"driver running; stderr:\n{self.stderr()}")
        return Client(self.socket)

    def events(self, rpc=None):
        try:
            with open(self.log_path, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
        return [e for e in lines if rpc is None or e["rpc"] == rpc]

    def last(self, rpc):
        lines = self.events(rpc)
        check(lines, f"{rpc} logged")
        return lines[-1]

    def stderr(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def terminate(self):
        return peerlib.terminate(self.proc, "driver")


def mounted(path):
    return csidriver.mount_options(path) is not None


# --- the checks ---------------------------------------------------------------

def test_transcriptions_agree(base):
    """Every message and enum of rkubelet's file exists in the driver's with the same fields and values."""
    def load(include, proto):
        out = os.path.join(base, os.path.basename(include) + ".pb")
        subprocess.run(["protoc", f"-I{include}", f"--descriptor_set_out={out}", proto], check=True)
        files = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read()).file
        check(len(files) == 1 and files[0].package == "csi.v1", f"{proto}: one file, package csi.v1")
        return files[0]

    def flatten(prefix, messages, enums, out):
        for e in enums:
            out[f"{prefix}.{e.name}"] = sorted((v.name, v.number) for v in e.value)
        for m in messages:
            name = f"{prefix}.{m.name}"
            out[name] = sorted((f.name, f.number, f.type, f.label, f.type_name,
                                m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else "")
                               for f in m.field)
            flatten(name, m.nested_type, m.enum_type, out)
        return out

    ours = load(os.path.join(csidriver.PROTOS), "csi/v1/csi.proto")
    theirs = load(HERE, csidriver.CSI_PROTO)
    check(not ours.dependency and list(theirs.dependency) == ["google/protobuf/wrappers.proto"], "imports")
    a = flatten(".csi.v1", ours.message_type, ours.enum_type, {})
    b = flatten(".csi.v1", theirs.message_type, theirs.enum_type, {})
    # rkubelet's local BoolValue stands for google.protobuf.BoolValue: same single field.
    check(a.pop(".csi.v1.BoolValue") == [("value", 1, 8, 1, "", "")], "local BoolValue is {bool value = 1}")
    a = {k: [tuple(x if x != ".csi.v1.BoolValue" else ".google.protobuf.BoolValue" for x in f) for f in v]
         for k, v in a.items()}
    for name, fields in a.items():
        check(name in b, f"{name} in the driver's transcription")
        check(fields == b[name], f"{name}: rkubelet {fields} != driver {b[name]}")
    for theirs_s, ours_s in zip(theirs.service, ours.service):
        check([(m.name, m.input_type, m.output_type) for m in ours_s.method] ==
              [(m.name, m.input_type, m.output_type) for m in theirs_s.method], f"service {ours_s.name} methods")
    check([s.name for s in ours.service] == [s.name for s in theirs.service] == ["Identity", "Node"], "services")


def test_identity_and_registration(base):
    registry = os.path.join(base, "plugins_registry")
    driver = Driver(base, "--registry", registry, "--name", "x.example.com", "--node-id", "n1", "--max-volumes", "5",
                    "--topology", "topology.example.com/zone=z1", "--topology", "topology.example.com/rack=r1")
    client = driver.wait_serving()
    try:
        info = client.identity("GetPluginInfo", PB.GetPluginInfoRequest())
        check((info.name, info.vendor_version, dict(info.manifest)) == ("x.example.com", "0.1.0", {}), f"{info}")
        caps = client.identity("GetPluginCapabilities", PB.GetPluginCapabilitiesRequest()).capabilities
        check([(c.WhichOneof("type"), c.service.type) for c in caps] ==
              [("service", PB.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)], f"plugin caps: {caps}")
        probe = client.probe()
        check(probe.HasField("ready") and probe.ready.value, f"Probe ready: {probe}")
        node = client.node("NodeGetInfo")
        check((node.node_id, node.max_volumes_per_node, dict(node.accessible_topology.segments)) ==
              ("n1", 5, {"topology.example.com/zone": "z1", "topology.example.com/rack": "r1"}), f"{node}")
        rpc = PB.NodeServiceCapability.RPC
        caps = client.node("NodeGetCapabilities").capabilities
        check([c.rpc.type for c in caps] == [rpc.STAGE_UNSTAGE_VOLUME, rpc.GET_VOLUME_STATS, rpc.EXPAND_VOLUME,
                                             rpc.VOLUME_CONDITION], f"node caps: {caps}")

        reg_socket = os.path.join(registry, "x.example.com-reg.sock")
        eventually(lambda: os.path.exists(reg_socket), "registration socket DIR/<name>-reg.sock")
        info = Client(reg_socket).get_info()
        check((info.type, info.name, info.endpoint, list(info.supported_versions)) ==
              ("CSIPlugin", "x.example.com", driver.socket, ["1.0.0"]), f"GetInfo: {info}")
        Client(reg_socket).notify(False, "driver name taken")
        Client(reg_socket).notify(True, "")
        notes = [(e["plugin_registered"], e["error"], e["code"]) for e in driver.events("NotifyRegistrationStatus")]
        check(notes == [(False, "driver name taken", "OK"), (True, "", "OK")], f"Notify logged: {notes}")
        check(driver.last("GetInfo") == {"rpc": "GetInfo", "request": {}, "code": "OK"}, "GetInfo logged")
        names = [e["rpc"] for e in driver.events()]
        check(names[:5] == ["GetPluginInfo", "GetPluginCapabilities", "Probe", "NodeGetInfo", "NodeGetCapabilities"],
              f"one log line per RPC: {names}")
        check(all(e["code"] == "OK" and "message" not in e for e in driver.events()), "all OK, no message")
    finally:
        check(driver.terminate() == 0, "SIGTERM: exit 0")
    check(not os.path.exists(driver.socket) and not os.path.exists(reg_socket), "sockets removed on exit")


def test_defaults_and_no_stage(base):
    driver = Driver(base, "--no-stage")
    client = driver.wait_serving()
    info = client.identity("GetPluginInfo", PB.GetPluginInfoRequest())
    check(info.name == "csi.example.com", f"default name: {info.name}")
    check(not client.identity("GetPluginCapabilities", PB.GetPluginCapabilitiesRequest()).capabilities,
          "no plugin capabilities without --topology")
    node = client.node("NodeGetInfo")
    check(node.node_id == "node-" + os.uname().nodename and node.max_volumes_per_node == 0, f"defaults: {node}")
    check(not node.HasField("accessible_topology"), "no accessible_topology without --topology")
    rpc = PB.NodeServiceCapability.RPC
    check([c.rpc.type for c in client.node("NodeGetCapabilities").capabilities] ==
          [rpc.GET_VOLUME_STATS, rpc.EXPAND_VOLUME, rpc.VOLUME_CONDITION], "no STAGE_UNSTAGE_VOLUME")
    staging = os.path.join(base, "staging")
    expect_error(grpc.StatusCode.UNIMPLEMENTED, client.stage, volume_id="v", staging_target_path=staging,
                 volume_capability=MOUNT)
    expect_error(grpc.StatusCode.UNIMPLEMENTED, client.unstage, volume_id="v", staging_target_path=staging)
    check(driver.last("NodeUnstageVolume")["code"] == "UNIMPLEMENTED", "UNIMPLEMENTED logged")


def test_validation(base):
    """Missing or bad fields; none of these mounts anything."""
    driver = Driver(base)
    client = driver.wait_serving()
    staging, target = os.path.join(base, "staging"), os.path.join(base, "pod", "mount")
    bad = grpc.StatusCode.INVALID_ARGUMENT
    for volume_id in ("", "../x", "a/b", "..", "."):
        expect_error(bad, client.stage, volume_id=volume_id, staging_target_path=staging, volume_capability=MOUNT)
        expect_error(bad, client.publish, volume_id=volume_id, staging_target_path=staging, target_path=target,
                     volume_capability=MOUNT)
    check(not os.listdir(os.path.join(base, "data")), "no volume directory for a refused id")
    expect_error(bad, client.stage, volume_id="v", volume_capability=MOUNT)
    expect_error(bad, client.stage, volume_id="v", staging_target_path="rel/path", volume_capability=MOUNT)
    expect_error(bad, client.stage, volume_id="v", staging_target_path=staging)
    no_type = PB.VolumeCapability(access_mode=MOUNT.access_mode)
    expect_error(bad, client.stage, volume_id="v", staging_target_path=staging, volume_capability=no_type)
    no_mode = PB.VolumeCapability(mount=MOUNT.mount)
    expect_error(bad, client.stage, volume_id="v", staging_target_path=staging, volume_capability=no_mode)
    expect_error(bad, client.publish, volume_id="v", staging_target_path=staging, volume_capability=MOUNT)
    expect_error(bad, client.publish, volume_id="v", staging_target_path=staging, target_path=target)
    details = expect_error(grpc.StatusCode.FAILED_PRECONDITION, client.publish, volume_id="v", target_path=target,
                           volume_capability=MOUNT)
    check("staging_target_path" in details, f"missing staging path named: {details}")
    expect_error(bad, client.unpublish, volume_id="v")
    expect_error(bad, client.unstage, volume_id="v")
    expect_error(bad, client.stats, volume_id="v")
    expect_error(grpc.StatusCode.NOT_FOUND, client.stats, volume_id="v", volume_path=os.path.join(base, "nope"))
    expect_error(grpc.StatusCode.NOT_FOUND, client.stats, volume_id="v", volume_path=base)  # exists, not the volume
    expect_error(bad, client.node, "NodeExpandVolume", volume_id="v")
    expect_error(grpc.StatusCode.NOT_FOUND, client.node, "NodeExpandVolume", volume_id="v",
                 volume_path=os.path.join(base, "nope"))
    # Idempotent undo of what was never done: OK, never NOT_FOUND.
    client.unpublish(volume_id="v", target_path=target)
    client.unstage(volume_id="v", staging_target_path=staging)
    line = driver.events("NodeStageVolume")[0]
    check(line["code"] == "INVALID_ARGUMENT" and "volume_id" in line["message"], f"error logged: {line}")
    check(driver.last("NodeUnstageVolume") == {"rpc": "NodeUnstageVolume", "code": "OK",
                                               "request": {"volume_id": "v", "staging_target_path": staging}},
          "NodeUnstageVolume logged")
    response = client.node("NodeExpandVolume", volume_id="v", volume_path=base,
                           capacity_range=PB.CapacityRange(required_bytes=1 << 30))
    check(response.capacity_bytes == 1 << 30, f"NodeExpandVolume capacity: {response}")
    check(driver.last("NodeExpandVolume")["request"]["capacity_range"] == {"required_bytes": str(1 << 30)},
          "NodeExpandVolume logged (int64 as a JSON string)")


def test_stage_publish_lifecycle(base):
    need_root()
    driver = Driver(base)
    client = driver.wait_serving()
    backing = os.path.join(driver.data, "vol-1")
    staging = os.path.join(base, "plugins", "staging", "vol-1")
    os.makedirs(staging)
    pods = [os.path.join(base, "pods", p, "volumes", "csi", "pv") for p in ("a", "b")]
    for p in pods:
        os.makedirs(p)
    targets = [os.path.join(p, "mount") for p in pods]
    stage = dict(volume_id="vol-1", staging_target_path=staging, volume_capability=MOUNT,
                 publish_context={"device": "/dev/fake"}, volume_context={"k": "v"}, secrets={"user": "u1"})
    client.stage(**stage)
    check(mounted(staging) and csidriver.same_file(staging, backing), "backing dir bind-mounted at staging path")
    with open(os.path.join(backing, "staged-by"), encoding="utf-8") as f:
        staged = json.load(f)
    check(staged["publish_context"] == {"device": "/dev/fake"} and staged["volume_context"] == {"k": "v"}
          and staged["staging_target_path"] == staging, f"staged-by: {staged}")
    client.stage(**stage)
    check(csidriver.mount_options(staging) and len([1 for line in open("/proc/self/mountinfo")
                                                    if line.split()[4] == staging]) == 1,
          "second NodeStageVolume: OK, not mounted twice")
    other = PB.VolumeCapability(mount=PB.VolumeCapability.MountVolume(fs_type="xfs"), access_mode=MOUNT.access_mode)
    expect_error(grpc.StatusCode.ALREADY_EXISTS, client.stage, volume_id="vol-1", staging_target_path=staging,
                 volume_capability=other)

    context = {"csi.storage.k8s.io/pod.name": "a", "csi.storage.k8s.io/pod.namespace": "default",
               "csi.storage.k8s.io/pod.uid": "uid-a", "csi.storage.k8s.io/serviceAccount.name": "default",
               "csi.storage.k8s.io/ephemeral": "false",
               "csi.storage.k8s.io/serviceAccount.tokens": '{"": {"token": "t", "expirationTimestamp": "x"}}'}
    publish = dict(volume_id="vol-1", staging_target_path=staging, target_path=targets[0], volume_capability=MOUNT,
                   volume_context=context)
    client.publish(**publish)
    check(mounted(targets[0]) and csidriver.same_file(targets[0], backing), "published: bind mount of the volume")
    with open(os.path.join(targets[0], "written-by-pod"), "w") as f:
        f.write("hello")
    check(os.path.exists(os.path.join(backing, "written-by-pod")), "a write through the target lands in --data")
    client.publish(**publish)
    check(len([1 for line in open("/proc/self/mountinfo") if line.split()[4] == targets[0]]) == 1,
          "second NodePublishVolume: OK, not mounted twice")
    expect_error(grpc.StatusCode.ALREADY_EXISTS, client.publish, **dict(publish, readonly=True))
    logged = driver.last("NodePublishVolume")
    check(logged["code"] == "ALREADY_EXISTS", f"ALREADY_EXISTS logged: {logged}")
    logged = driver.events("NodePublishVolume")[0]
    check(logged["code"] == "OK" and logged["request"]["volume_context"] == context and
          logged["request"]["target_path"] == targets[0] and
          logged["request"]["volume_capability"]["mount"] == {"fs_type": "ext4", "mount_flags": ["noatime"]},
          f"full request logged: {logged}")

    client.publish(**dict(publish, target_path=targets[1], readonly=True))
    check("ro" in csidriver.mount_options(targets[1]), "readonly publish: ro bind mount")
    try:
        open(os.path.join(targets[1], "x"), "w").close()
        raise Failure("write to a readonly target should fail")
    except OSError:
        pass
    with open(os.path.join(backing, "published"), encoding="utf-8") as f:
        check(f.read().split() == targets, "published lists both targets")

    stats = client.stats(volume_id="vol-1", volume_path=targets[0], staging_target_path=staging)
    units = {u.unit: u for u in stats.usage}
    check(set(units) == {PB.VolumeUsage.BYTES, PB.VolumeUsage.INODES}, f"BYTES and INODES: {stats}")
    st = os.statvfs(backing)
    check(units[PB.VolumeUsage.BYTES].total == st.f_blocks * st.f_frsize and
          units[PB.VolumeUsage.INODES].total == st.f_files, f"statvfs totals: {stats}")
    check(stats.HasField("volume_condition") and not stats.volume_condition.abnormal and
          stats.volume_condition.message, f"volume_condition: {stats.volume_condition}")
    client.stats(volume_id="vol-1", volume_path=staging)
    expect_error(grpc.StatusCode.NOT_FOUND, client.stats, volume_id="vol-2", volume_path=targets[0])

    for t in targets:
        client.unpublish(volume_id="vol-1", target_path=t)
        check(not os.path.exists(t) and os.path.isdir(os.path.dirname(t)), "target removed, parent kept")
        client.unpublish(volume_id="vol-1", target_path=t)
    with open(os.path.join(backing, "published"), encoding="utf-8") as f:
        check(f.read() == "", "published empty after unpublish")
    client.unstage(volume_id="vol-1", staging_target_path=staging)
    check(not mounted(staging) and os.path.isdir(staging), "unstaged: unmounted, directory left to the CO")
    client.unstage(volume_id="vol-1", staging_target_path=staging)
    check(os.path.exists(os.path.join(backing, "written-by-pod")), "data kept after unstage")
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, client.publish, **publish)  # not staged any more
    check(not mounted(targets[0]), "nothing mounted by the refused publish")


def test_no_stage_and_block(base):
    need_root()
    driver = Driver(base, "--no-stage")
    client = driver.wait_serving()
    pod = os.path.join(base, "pod")
    os.makedirs(pod)
    target = os.path.join(pod, "mount")
    client.publish(volume_id="v", target_path=target, volume_capability=MOUNT)
    check(csidriver.same_file(target, os.path.join(driver.data, "v")), "--no-stage: backing dir published directly")
    client.unpublish(volume_id="v", target_path=target)
    check(not os.path.exists(target), "unpublished")

    device = os.path.join(pod, "dev")
    client.publish(volume_id="b", target_path=device, volume_capability=BLOCK)
    backing = os.path.join(driver.data, "b", "block")
    loop = open(os.path.join(driver.data, "b", "loop")).read().strip()
    check(stat.S_ISBLK(os.stat(device).st_mode) and mounted(device) and csidriver.same_file(device, loop)
          and csidriver.loop_backs(loop, backing), "block: a loop device of the backing file, bound")
    stats = client.stats(volume_id="b", volume_path=device)
    check([(u.unit, u.total) for u in stats.usage] == [(PB.VolumeUsage.BYTES, 64 << 20)], f"block stats: {stats}")
    client.unpublish(volume_id="b", target_path=device)
    check(not os.path.exists(device), "block target file removed")
    check(not csidriver.loop_backs(loop, backing), "the loop device released with the last target (--no-stage)")


def test_fail_delay_control(base):
    control = os.path.join(base, "control.json")
    driver = Driver(base, "--fail", "NodePublishVolume=internal", "--fail", "GetInfo=UNAVAILABLE",
                    "--delay", "Probe=1.5", "--control", control, "--registry", os.path.join(base, "reg"))
    client = driver.wait_serving()
    target = os.path.join(base, "t")
    details = expect_error(grpc.StatusCode.INTERNAL, client.publish, volume_id="v", target_path=target,
                           staging_target_path=target, volume_capability=MOUNT)
    check(details == "csidriver: injected failure", f"injected message: {details}")
    check(not os.path.exists(target) and not os.path.exists(os.path.join(driver.data, "v")), "no work done")
    line = driver.last("NodePublishVolume")
    check(line["code"] == "INTERNAL" and line["message"] == "csidriver: injected failure" and
          line["request"]["volume_id"] == "v", f"injected failure logged: {line}")
    reg_socket = os.path.join(base, "reg", "csi.example.com-reg.sock")
    eventually(lambda: os.path.exists(reg_socket), "registration socket")
    expect_error(grpc.StatusCode.UNAVAILABLE, Client(reg_socket).get_info)
    check(driver.last("GetInfo")["code"] == "UNAVAILABLE", "injected GetInfo failure logged")

    # A delayed Probe holds one worker; the others answer meanwhile.
    results = {}
    slow = threading.Thread(target=lambda: results.update(probe=client.probe()))
    start = time.monotonic()
    slow.start()
    time.sleep(0.2)
    client.identity("GetPluginInfo", PB.GetPluginInfoRequest())
    check(time.monotonic() - start < 1.0, "GetPluginInfo answered during a delayed Probe")
    slow.join()
    check(results["probe"].ready.value and time.monotonic() - start >= 1.5, "Probe delayed 1.5 s, then ready")
    expect_error(grpc.StatusCode.DEADLINE_EXCEEDED, client.probe, timeout=0.5)

    # The control file replaces the flags while it exists.
    write_control(control, {"fail": {"Probe": "unavailable"}})
    eventually(lambda: _code(client.probe) == "UNAVAILABLE", "Probe fails from the control file")
    check(_code(lambda: client.publish(volume_id="v")) == "INVALID_ARGUMENT", "--fail is off while the file exists")
    write_control(control, "{broken")
    time.sleep(0.4)
    check(_code(client.probe) == "UNAVAILABLE", "a broken file keeps the last state")
    check("control file" in driver.stderr(), "a broken control file is reported on stderr")
    write_control(control, {"delay": {"NodeGetInfo": 0.6}})
    eventually(lambda: _code(client.probe) == "OK", "healed: Probe OK")
    start = time.monotonic()
    client.node("NodeGetInfo")
    check(time.monotonic() - start >= 0.6, "delay from the control file")
    os.unlink(control)
    eventually(lambda: _code(lambda: client.publish(volume_id="v")) == "INTERNAL", "back to the flags")
    check(driver.terminate() == 0, "exit 0")


def _code(fn):
    try:
        fn()
    except grpc.RpcError as e:
        return e.code().name
    return "OK"


def test_lie_type(base):
    reg_socket = os.path.join(base, "reg", "csi.example.com-reg.sock")
    Driver(base, "--registry", os.path.dirname(reg_socket), "--lie-type", "Bogus").wait_serving()
    eventually(lambda: os.path.exists(reg_socket), "registration socket")
    check(Client(reg_socket).get_info().type == "Bogus", "GetInfo lies")


def test_bad_flags(base):
    sock = os.path.join(base, "csi.sock")
    for flags in (["--fail", "Nope=INTERNAL"], ["--fail", "Probe=NOPE"], ["--fail", "Probe=OK"], ["--fail", "Probe"],
                  ["--delay", "Probe=-1"], ["--delay", "Probe=x"], ["--lie-type", "X"], ["--max-volumes", "-1"],
                  ["--topology", "novalue"], []):
        args = ([] if flags == [] else ["--csi-address", sock]) + flags
        result = subprocess.run([sys.executable, DRIVER] + args, capture_output=True, timeout=30)
        check(result.returncode == 2, f"{flags or 'no --csi-address'} refused at start-up: {result.returncode}")


TESTS = [test_transcriptions_agree, test_identity_and_registration, test_defaults_and_no_stage, test_validation,
         test_stage_publish_lifecycle, test_no_stage_and_block, test_fail_delay_control, test_lie_type,
         test_bad_flags]


def main():
    def cleanup(base):
        reap(base)
        unmount_under(base)
    return peerlib.run_tests(TESTS, "csist-", "driver.stderr", cleanup)


def reap(base):
    """Stop driver processes a test left running."""
    for driver in [d for d in RUNNING if d.base == base]:
        try:
            driver.terminate()
        except Failure:
            pass
        RUNNING.remove(driver)


def unmount_under(base):
    """Undo mounts a failed test left, innermost first, before the tree is removed."""
    if not ROOT:
        return
    base = os.path.realpath(base)
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = [csidriver._unescape(line.split()[4]) for line in f]
    for point in sorted({p for p in points if p.startswith(base + "/")}, key=len, reverse=True):
        while mounted(point):
            subprocess.run(["umount", point], check=False)
            if mounted(point):
                subprocess.run(["umount", "-l", point], check=False)


if __name__ == "__main__":
    sys.exit(main())
