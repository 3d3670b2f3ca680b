#!/usr/bin/env python3
"""A small CSI node plugin that end-to-end tests use to drive rkubelet's CSI volumes.

It follows the text of the CSI spec v1 (container-storage-interface/spec,
spec.md) for the Identity and Node services, through its own transcription
tests/plugins/csi/csi.proto (deliberately not rkubelet's
protos/csi/v1/csi.proto), and, with --registry, plays node-driver-registrar
on the plugin registration API v1 (protos/pluginregistration/v1/api.proto).
Volumes are directories under --data, bind-mounted; mounting needs root.
The message modules are generated with protoc at start-up; the services are
written by hand (python3-grpc-tools is not needed).

Flags:
  --csi-address PATH        serve csi.v1.Identity and csi.v1.Node on this unix socket (required)
  --registry DIR            serve pluginregistration.Registration on DIR/<name>-reg.sock
  --lie-type TYPE           with --registry: GetInfo reports TYPE, not "CSIPlugin"
  --name NAME               driver name (csi.example.com)
  --node-id ID              NodeGetInfo node_id (node-<hostname>)
  --max-volumes N           NodeGetInfo max_volumes_per_node (0)
  --topology KEY=VALUE      NodeGetInfo accessible_topology segment; repeatable
  --no-stage                no STAGE_UNSTAGE_VOLUME: NodeStage/UnstageVolume answer UNIMPLEMENTED
  --data DIR                backing store, DIR/<volume_id>/ per volume (/tmp/csidriver-data)
  --log FILE                append one JSON line per RPC answered
Bad-input switches:
  --fail RPC=CODE           answer RPC with status CODE, "csidriver: injected failure"; repeatable
  --delay RPC=SECONDS       sleep before answering RPC; repeatable
  --control FILE            polled every 100 ms: {"fail": {RPC: CODE}, "delay": {RPC: secs}},
                            replacing --fail and --delay while the file exists
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from system_python import reexec_if_missing_grpc  # noqa: E402

reexec_if_missing_grpc()
import grpc  # noqa: E402
import peerlib  # noqa: E402
from peerlib import EventLog, import_file, remove_file, to_dict  # noqa: E402

PROTOS = os.path.join(HERE, "..", "..", "protos")
CSI_PROTO = "csi/csi.proto"                 # under HERE: the driver's own transcription
REG_PROTO = "pluginregistration/v1/api.proto"  # under PROTOS, shared with deviceplugin.py
VENDOR_VERSION = "0.1.0"
REGISTRATION_VERSIONS = ["1.0.0"]
CONTROL_TICK = 0.1
INJECTED = "csidriver: injected failure"
BLOCK_FILE = "block"                        # DIR/<volume_id>/block backs a block volume
BLOCK_SIZE = 64 << 20                       # sparse
LOOP_FILE = "loop"                          # DIR/<volume_id>/loop names the loop device showing it

IDENTITY_RPCS = ("GetPluginInfo", "GetPluginCapabilities", "Probe")
NODE_RPCS = ("NodeStageVolume", "NodeUnstageVolume", "NodePublishVolume", "NodeUnpublishVolume",
             "NodeGetVolumeStats", "NodeExpandVolume", "NodeGetCapabilities", "NodeGetInfo")
REGISTRATION_RPCS = ("GetInfo", "NotifyRegistrationStatus")
ALL_RPCS = IDENTITY_RPCS + NODE_RPCS + REGISTRATION_RPCS
ERROR_CODES = frozenset(grpc.StatusCode.__members__) - {"OK"}


def say(message):
    print(f"csidriver[{os.getpid()}] {time.strftime('%H:%M:%S')}: {message}", file=sys.stderr, flush=True)


# --- protos -------------------------------------------------------------------

def generate(include_dir, proto, module_name):
    """protoc --python_out for one file; import the result as module_name."""
    includes = [f"-I{include_dir}"]
    if os.path.isdir("/usr/include/google/protobuf"):  # wrappers.proto, if protoc lacks a built-in path
        includes.append("-I/usr/include")
    with tempfile.TemporaryDirectory(prefix="csidriver-pb-") as out:
        subprocess.run(["protoc", f"--python_out={out}"] + includes + [proto], check=True)
        return import_file(module_name, os.path.join(out, proto.replace(".proto", "_pb2.py")))


def load_protos():
    """(csi, pluginregistration) message modules: the driver's CSI transcription and the shared registration API."""
    return generate(HERE, CSI_PROTO, "csidriver_csi_pb2"), generate(PROTOS, REG_PROTO, "pluginregistration_api_pb2")


# --- event log (--log) --------------------------------------------------------

# --- injected failures and delays (--fail, --delay, --control) ----------------

def check_faults(fail, delay):
    """Raise ValueError unless fail is {RPC: CODE} and delay {RPC: seconds >= 0}."""
    if not isinstance(fail, dict) or not isinstance(delay, dict):
        raise ValueError('"fail" and "delay" must be objects')
    for rpc, code in fail.items():
        if rpc not in ALL_RPCS:
            raise ValueError(f"unknown RPC {rpc!r}")
        if code not in ERROR_CODES:
            raise ValueError(f"{rpc}: not a gRPC error status code name: {code!r}")
    for rpc, secs in delay.items():
        if rpc not in ALL_RPCS:
            raise ValueError(f"unknown RPC {rpc!r}")
        if isinstance(secs, bool) or not isinstance(secs, (int, float)) or secs < 0:
            raise ValueError(f"{rpc}: delay is not a non-negative number: {secs!r}")


class Faults:
    """What to inject, per RPC name. The control file, while it exists, replaces the flags."""

    def __init__(self, fail, delay, control):
        self.flags = (dict(fail), dict(delay))
        self.control = control
        self._state = self.flags
        self._source = "flags"
        self._last_error = None
        self._lock = threading.Lock()

    def fail(self, rpc):
        with self._lock:
            return self._state[0].get(rpc)

    def delay(self, rpc):
        with self._lock:
            return self._state[1].get(rpc, 0)

    def _set(self, state, source):
        with self._lock:
            changed = state != self._state
            self._state, self._source = state, source
        if changed:
            say(f"injection now from {source}: fail={state[0]} delay={state[1]}")

    def poll_once(self):
        try:
            with open(self.control, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            fail, delay = data.get("fail", {}), data.get("delay", {})
            if isinstance(fail, dict):
                fail = {k: v.upper() if isinstance(v, str) else v for k, v in fail.items()}
            check_faults(fail, delay)
        except FileNotFoundError:
            self._last_error = None
            self._set(self.flags, "flags")
            return
        except (OSError, ValueError) as e:
            error = f"control file {self.control}: {e}; keeping the {self._source} state"
            if error != self._last_error:  # once per distinct error, not every 100 ms
                say(error)
            self._last_error = error
            return
        self._last_error = None
        self._set((fail, delay), "the control file")

    def run(self, stop):
        while not stop.wait(CONTROL_TICK):
            self.poll_once()


# --- RPC plumbing -------------------------------------------------------------

class RpcError(Exception):
    """An answer other than OK: a status code name and a message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


def invalid(message):
    return RpcError("INVALID_ARGUMENT", message)


class Dispatcher:
    """Wraps each handler: delay, injected failure, the handler, one log line, the answer."""

    def __init__(self, faults, events):
        self.faults, self.events = faults, events

    def method(self, name, fn, request_cls, response_cls, extra=None):
        def handle(request, context):
            delay = self.faults.delay(name)
            if delay:
                time.sleep(delay)
            code, message, response = "OK", "", None
            try:
                injected = self.faults.fail(name)
                if injected:
                    raise RpcError(injected, INJECTED)
                response = fn(request)
            except RpcError as e:
                code, message = e.code, e.message
            except Exception as e:  # noqa: BLE001 -- a bug here is an INTERNAL answer, not a dead thread
                code, message = "INTERNAL", f"csidriver: {type(e).__name__}: {e}"
                traceback.print_exc()
            record = {"rpc": name, "request": to_dict(request), "code": code}
            if code != "OK":
                record["message"] = message
            if extra:
                record.update(extra(request))
            self.events.write(record)
            if code != "OK":
                say(f"{name}: {code}: {message}")
                context.abort(grpc.StatusCode[code], message)
            return response

        return grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=request_cls.FromString, response_serializer=response_cls.SerializeToString)


# --- mounts -------------------------------------------------------------------

def _unescape(field):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_options(path):
    """The per-mount options of the topmost mount on path, or None if path is no mount point."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if _unescape(fields[4]) == path:
                found = fields[5].split(",")  # later lines are mounted on top
    return found


def same_file(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except FileNotFoundError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def loop_backs(dev, backing):
    """True if the loop device dev shows the file backing."""
    name = os.path.basename(dev)
    try:
        with open(f"/sys/block/{name}/loop/backing_file", encoding="utf-8") as f:
            return f.read().strip() == os.path.realpath(backing)
    except FileNotFoundError:
        return False


def holds(path, source):
    """True if path is a mount point showing source (a bind mount of it)."""
    return mount_options(path) is not None and same_file(path, source)


def run(*args):
    result = subprocess.run(list(args), capture_output=True, text=True)
    if result.returncode != 0:
        raise RpcError("INTERNAL", f"csidriver: {' '.join(args)}: {result.stderr.strip() or result.returncode}")


def bind(source, target, readonly):
    run("mount", "--bind", source, target)
    if readonly:
        try:
            run("mount", "-o", "remount,bind,ro", target)
        except RpcError:
            run("umount", target)
            raise


def unbind(path, source):
    """Unmount every mount of source stacked on path; False if a mount of something else is left."""
    while holds(path, source):
        run("umount", path)
    return mount_options(path) is None


# --- the volumes --------------------------------------------------------------

def access_type(capability):
    return capability.WhichOneof("access_type")


class Volumes:
    """DIR/<volume_id>/ per volume: the mounted directory, plus the files staged-by and published."""

    def __init__(self, cfg, pb):
        self.cfg, self.pb = cfg, pb
        self.lock = threading.Lock()  # one volume operation at a time; delays happen outside it

    def dir(self, volume_id):
        if not volume_id:
            raise invalid("volume_id is required")
        if "/" in volume_id or ".." in volume_id or volume_id == "." or "\0" in volume_id:
            raise invalid(f"volume_id {volume_id!r} is not a safe file name")
        return os.path.join(self.cfg.data, volume_id)

    def backing(self, volume_id, kind):
        """The directory (mount) or file (block) that holds the volume; created on first use."""
        d = self.dir(volume_id)
        os.makedirs(d, exist_ok=True)
        if kind != "block":
            return d
        path = os.path.join(d, BLOCK_FILE)
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.truncate(BLOCK_SIZE)
        return path

    def device(self, volume_id):
        """A block volume as a block device: its backing file on a loop device, attached on first use."""
        backing = self.backing(volume_id, "block")
        dev = self._loop(volume_id)
        if dev and loop_backs(dev, backing):
            return dev
        out = subprocess.run(["losetup", "--find", "--show", backing], capture_output=True, text=True)
        if out.returncode != 0:
            raise RpcError("INTERNAL", f"csidriver: losetup {backing}: {out.stderr.strip()}")
        dev = out.stdout.strip()
        self._write(volume_id, LOOP_FILE, dev + "\n")
        return dev

    def _loop(self, volume_id):
        try:
            with open(os.path.join(self.dir(volume_id), LOOP_FILE), encoding="utf-8") as f:
                return f.read().strip() or None
        except FileNotFoundError:
            return None

    def release_device(self, volume_id):
        dev = self._loop(volume_id)
        if dev:
            if loop_backs(dev, os.path.join(self.dir(volume_id), BLOCK_FILE)):
                run("losetup", "-d", dev)
            os.remove(os.path.join(self.dir(volume_id), LOOP_FILE))

    def _write(self, volume_id, name, text):
        d = self.dir(volume_id)
        tmp = os.path.join(d, f".{name}.{os.getpid()}.{threading.get_ident()}")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(d, name))

    def _published(self, volume_id):
        try:
            with open(os.path.join(self.dir(volume_id), "published"), encoding="utf-8") as f:
                return [line.rstrip("\n") for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def _set_published(self, volume_id, targets):
        self._write(volume_id, "published", "".join(t + "\n" for t in targets))

    # - validation, as the spec's REQUIRED fields and errors tables say -

    def _capability(self, capability, present):
        if not present:
            raise invalid("volume_capability is required")
        if access_type(capability) is None:
            raise invalid("volume_capability: one of block or mount is required")
        if not capability.HasField("access_mode") or capability.access_mode.mode == 0:
            raise invalid("volume_capability.access_mode.mode is required")
        return access_type(capability)

    @staticmethod
    def _path(value, field):
        if not value:
            raise invalid(f"{field} is required")
        if not os.path.isabs(value):
            raise invalid(f"{field} {value!r} is not an absolute path")
        return value

    # - the RPCs -

    def stage(self, request):
        if not self.cfg.stage:
            raise RpcError("UNIMPLEMENTED", "csidriver: no STAGE_UNSTAGE_VOLUME capability (--no-stage)")
        self.dir(request.volume_id)
        staging = self._path(request.staging_target_path, "staging_target_path")
        kind = self._capability(request.volume_capability, request.HasField("volume_capability"))
        record = {"staging_target_path": staging, "publish_context": dict(request.publish_context),
                  "volume_context": dict(request.volume_context),
                  "volume_capability": to_dict(request.volume_capability)}
        with self.lock:
            if not os.path.isdir(staging):
                say(f"NodeStageVolume: {staging} is missing (the CO should create it); creating it")
                os.makedirs(staging)
            source = self.backing(request.volume_id, kind)
            previous = self._staged_by(request.volume_id)
            if kind == "mount":
                if holds(staging, source):
                    if previous and previous.get("volume_capability") != record["volume_capability"]:
                        raise RpcError("ALREADY_EXISTS", f"csidriver: {request.volume_id} is staged at {staging} "
                                                         "with another volume_capability")
                elif mount_options(staging) is not None:
                    raise RpcError("ALREADY_EXISTS", f"csidriver: something else is mounted at {staging}")
                else:
                    bind(source, staging, False)
            # A block volume is not mounted at the staging directory: publish binds the backing file.
            self._write(request.volume_id, "staged-by", json.dumps(record, sort_keys=True) + "\n")
        return self.pb.NodeStageVolumeResponse()

    def _staged_by(self, volume_id):
        try:
            with open(os.path.join(self.dir(volume_id), "staged-by"), encoding="utf-8") as f:
                return json.load(f)
        except (FileNotFoundError, ValueError):
            return None

    def unstage(self, request):
        if not self.cfg.stage:
            raise RpcError("UNIMPLEMENTED", "csidriver: no STAGE_UNSTAGE_VOLUME capability (--no-stage)")
        d = self.dir(request.volume_id)
        staging = self._path(request.staging_target_path, "staging_target_path")
        with self.lock:
            # Not staged there (any more): OK, as the spec's idempotency rule says.
            if os.path.isdir(d) and not unbind(staging, d):
                say(f"NodeUnstageVolume: {staging} holds a mount that is not {request.volume_id}; left alone")
            if os.path.isdir(d) and not self._published(request.volume_id):
                self.release_device(request.volume_id)
        return self.pb.NodeUnstageVolumeResponse()

    def publish(self, request):
        self.dir(request.volume_id)
        target = self._path(request.target_path, "target_path")
        kind = self._capability(request.volume_capability, request.HasField("volume_capability"))
        # Kubernetes' inline ephemeral volumes are published without a
        # stage (the kubelet says so in the volume context when the
        # CSIDriver has podInfoOnMount), as csi-driver-host-path treats them.
        ephemeral = request.volume_context.get("csi.storage.k8s.io/ephemeral") == "true"
        with self.lock:
            if self.cfg.stage and not ephemeral:
                if not request.staging_target_path:
                    raise RpcError("FAILED_PRECONDITION", "csidriver: staging_target_path is not set, "
                                                          "but the plugin has STAGE_UNSTAGE_VOLUME")
                staging = self._path(request.staging_target_path, "staging_target_path")
            source = self.device(request.volume_id) if kind == "block" else self.backing(request.volume_id, kind)
            if kind == "mount" and self.cfg.stage and not ephemeral:
                if not holds(staging, source):
                    raise RpcError("FAILED_PRECONDITION",
                                   f"csidriver: {request.volume_id} is not staged at {staging}")
                source = staging
            parent = os.path.dirname(target.rstrip("/"))
            if not os.path.isdir(parent):
                raise RpcError("FAILED_PRECONDITION", f"csidriver: the parent of target_path, {parent}, is missing "
                                                      "(the CO creates it)")
            if kind == "block":
                if not os.path.exists(target):
                    open(target, "a").close()
            else:
                os.makedirs(target, exist_ok=True)
            options = mount_options(target)
            if options is not None:
                if not same_file(target, source):
                    raise RpcError("ALREADY_EXISTS", f"csidriver: something else is mounted at {target}")
                if ("ro" in options) != request.readonly:
                    raise RpcError("ALREADY_EXISTS", f"csidriver: {request.volume_id} is published at {target} "
                                                     f"with readonly={not request.readonly}")
            else:
                bind(source, target, request.readonly)
            targets = self._published(request.volume_id)
            if target not in targets:
                self._set_published(request.volume_id, targets + [target])
        return self.pb.NodePublishVolumeResponse()

    def unpublish(self, request):
        d = self.dir(request.volume_id)
        target = self._path(request.target_path, "target_path")
        with self.lock:
            block = os.path.join(d, BLOCK_FILE)
            loop = self._loop(request.volume_id) if os.path.isdir(d) else None
            if loop and same_file(target, loop):
                source = loop
            else:
                source = block if os.path.isfile(target) and os.path.exists(block) else d
            if os.path.lexists(target):
                if not unbind(target, source):
                    raise RpcError("FAILED_PRECONDITION",
                                   f"csidriver: {target} holds a mount that is not {request.volume_id}")
                # The spec: the SP deletes the file or directory it created at target_path.
                if os.path.isdir(target) and not os.path.islink(target):
                    os.rmdir(target)
                else:
                    os.unlink(target)
            # Missing target: already unpublished, OK.
            if os.path.isdir(d):
                self._set_published(request.volume_id, [t for t in self._published(request.volume_id) if t != target])
                if not self.cfg.stage and not self._published(request.volume_id):
                    self.release_device(request.volume_id)
        return self.pb.NodeUnpublishVolumeResponse()

    def stats(self, request):
        d = self.dir(request.volume_id)
        path = self._path(request.volume_path, "volume_path")
        pb = self.pb
        if not os.path.exists(path):
            raise RpcError("NOT_FOUND", f"csidriver: volume_path {path} does not exist")
        loop = self._loop(request.volume_id) if os.path.isdir(d) else None
        if os.path.isfile(path) or (loop and same_file(path, loop)):
            block = os.path.join(d, BLOCK_FILE)
            if not (same_file(path, block) or (loop and same_file(path, loop))):
                raise RpcError("NOT_FOUND", f"csidriver: {request.volume_id} is not at {path}")
            usage = [pb.VolumeUsage(unit=pb.VolumeUsage.BYTES, total=os.stat(block).st_size)]
        else:
            if not same_file(path, d):
                raise RpcError("NOT_FOUND", f"csidriver: {request.volume_id} is not at {path}")
            st = os.statvfs(path)
            usage = [
                pb.VolumeUsage(unit=pb.VolumeUsage.BYTES, total=st.f_blocks * st.f_frsize,
                               available=st.f_bavail * st.f_frsize, used=(st.f_blocks - st.f_bfree) * st.f_frsize),
                pb.VolumeUsage(unit=pb.VolumeUsage.INODES, total=st.f_files, available=st.f_favail,
                               used=st.f_files - st.f_ffree),
            ]
        return pb.NodeGetVolumeStatsResponse(
            usage=usage, volume_condition=pb.VolumeCondition(abnormal=False, message="csidriver: volume is healthy"))

    def expand(self, request):
        self.dir(request.volume_id)
        path = self._path(request.volume_path, "volume_path")
        if not os.path.exists(path):
            raise RpcError("NOT_FOUND", f"csidriver: volume_path {path} does not exist")
        say(f"NodeExpandVolume {request.volume_id} at {path} to {request.capacity_range.required_bytes} bytes")
        return self.pb.NodeExpandVolumeResponse(capacity_bytes=request.capacity_range.required_bytes)


# --- the services -------------------------------------------------------------

class CsiServices:
    def __init__(self, cfg, pb, dispatcher):
        self.cfg, self.pb, self.d = cfg, pb, dispatcher
        self.volumes = Volumes(cfg, pb)

    def handlers(self):
        pb, m, v = self.pb, self.d.method, self.volumes
        identity = grpc.method_handlers_generic_handler("csi.v1.Identity", {
            "GetPluginInfo": m("GetPluginInfo", self.plugin_info, pb.GetPluginInfoRequest, pb.GetPluginInfoResponse),
            "GetPluginCapabilities": m("GetPluginCapabilities", self.plugin_capabilities,
                                       pb.GetPluginCapabilitiesRequest, pb.GetPluginCapabilitiesResponse),
            "Probe": m("Probe", self.probe, pb.ProbeRequest, pb.ProbeResponse),
        })
        node = grpc.method_handlers_generic_handler("csi.v1.Node", {
            "NodeStageVolume": m("NodeStageVolume", v.stage, pb.NodeStageVolumeRequest, pb.NodeStageVolumeResponse),
            "NodeUnstageVolume": m("NodeUnstageVolume", v.unstage, pb.NodeUnstageVolumeRequest,
                                   pb.NodeUnstageVolumeResponse),
            "NodePublishVolume": m("NodePublishVolume", v.publish, pb.NodePublishVolumeRequest,
                                   pb.NodePublishVolumeResponse),
            "NodeUnpublishVolume": m("NodeUnpublishVolume", v.unpublish, pb.NodeUnpublishVolumeRequest,
                                     pb.NodeUnpublishVolumeResponse),
            "NodeGetVolumeStats": m("NodeGetVolumeStats", v.stats, pb.NodeGetVolumeStatsRequest,
                                    pb.NodeGetVolumeStatsResponse),
            "NodeExpandVolume": m("NodeExpandVolume", v.expand, pb.NodeExpandVolumeRequest,
                                  pb.NodeExpandVolumeResponse),
            "NodeGetCapabilities": m("NodeGetCapabilities", self.node_capabilities, pb.NodeGetCapabilitiesRequest,
                                     pb.NodeGetCapabilitiesResponse),
            "NodeGetInfo": m("NodeGetInfo", self.node_info, pb.NodeGetInfoRequest, pb.NodeGetInfoResponse),
        })
        return identity, node

    def plugin_info(self, request):
        return self.pb.GetPluginInfoResponse(name=self.cfg.name, vendor_version=VENDOR_VERSION)

    def plugin_capabilities(self, request):
        pb = self.pb
        caps = []
        if self.cfg.topology:
            caps.append(pb.PluginCapability(service=pb.PluginCapability.Service(
                type=pb.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)))
        return pb.GetPluginCapabilitiesResponse(capabilities=caps)

    def probe(self, request):
        response = self.pb.ProbeResponse()
        response.ready.value = True
        return response

    def node_capabilities(self, request):
        rpc = self.pb.NodeServiceCapability.RPC
        types = ([rpc.STAGE_UNSTAGE_VOLUME] if self.cfg.stage else []) + \
            [rpc.GET_VOLUME_STATS, rpc.EXPAND_VOLUME, rpc.VOLUME_CONDITION]
        return self.pb.NodeGetCapabilitiesResponse(
            capabilities=[self.pb.NodeServiceCapability(rpc=rpc(type=t)) for t in types])

    def node_info(self, request):
        response = self.pb.NodeGetInfoResponse(node_id=self.cfg.node_id, max_volumes_per_node=self.cfg.max_volumes)
        if self.cfg.topology:  # no --topology: leave accessible_topology unset, not empty
            response.accessible_topology.segments.update(self.cfg.topology)
        return response


class RegistrationService:
    """pluginregistration.Registration, as node-driver-registrar serves it for a CSI driver."""

    def __init__(self, cfg, reg, dispatcher):
        self.cfg, self.reg, self.d = cfg, reg, dispatcher

    def handler(self):
        reg, m = self.reg, self.d.method
        return grpc.method_handlers_generic_handler("pluginregistration.Registration", {
            "GetInfo": m("GetInfo", self.get_info, reg.InfoRequest, reg.PluginInfo),
            # The fields are spelled out: MessageToDict leaves out false and "".
            "NotifyRegistrationStatus": m("NotifyRegistrationStatus", self.notify, reg.RegistrationStatus,
                                          reg.RegistrationStatusResponse,
                                          extra=lambda r: {"plugin_registered": r.plugin_registered,
                                                           "error": r.error}),
        })

    def get_info(self, request):
        return self.reg.PluginInfo(type=self.cfg.lie_type or "CSIPlugin", name=self.cfg.name,
                                   endpoint=self.cfg.csi_address, supported_versions=REGISTRATION_VERSIONS)

    def notify(self, request):
        say(f"registration status: registered={request.plugin_registered} error={request.error!r}")
        return self.reg.RegistrationStatusResponse()


# --- servers ------------------------------------------------------------------

def serve(path, handlers):
    # 8 workers: a delayed RPC holds one, the others go on answering.
    return peerlib.serve(path, handlers, workers=8)


# --- command line -------------------------------------------------------------

def _pairs(values, flag, convert):
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} {item!r}: want KEY=VALUE")
        out[key] = convert(value)
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--csi-address", required=True)
    p.add_argument("--registry")
    p.add_argument("--lie-type")
    p.add_argument("--name", default="csi.example.com")
    p.add_argument("--node-id", default=f"node-{socket.gethostname()}")
    p.add_argument("--max-volumes", type=int, default=0)
    p.add_argument("--topology", action="append", default=[])
    p.add_argument("--no-stage", dest="stage", action="store_false")
    p.add_argument("--data", default="/tmp/csidriver-data")
    p.add_argument("--log")
    p.add_argument("--fail", action="append", default=[])
    p.add_argument("--delay", action="append", default=[])
    p.add_argument("--control")
    cfg = p.parse_args(argv)
    try:
        cfg.topology = _pairs(cfg.topology, "--topology", str)
        cfg.fail = _pairs(cfg.fail, "--fail", str.upper)
        cfg.delay = _pairs(cfg.delay, "--delay", float)
        check_faults(cfg.fail, cfg.delay)
    except ValueError as e:
        p.error(str(e))
    if cfg.max_volumes < 0:
        p.error("--max-volumes must not be negative")
    if cfg.lie_type and not cfg.registry:
        p.error("--lie-type needs --registry")
    cfg.csi_address = os.path.abspath(cfg.csi_address)
    cfg.data = os.path.abspath(cfg.data)
    if cfg.registry:
        cfg.registry = os.path.abspath(cfg.registry)
        cfg.registry_socket = os.path.join(cfg.registry, f"{cfg.name}-reg.sock")
    if cfg.control:
        cfg.control = os.path.abspath(cfg.control)
    return cfg


def main(argv):
    cfg = parse_args(argv)
    pb, reg = load_protos()
    events = EventLog(cfg.log)
    faults = Faults(cfg.fail, cfg.delay, cfg.control)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    os.makedirs(cfg.data, exist_ok=True)
    if cfg.control:
        faults.poll_once()  # so the first RPC already sees the file
        threading.Thread(target=faults.run, args=(stop,), daemon=True, name="control").start()
    dispatcher = Dispatcher(faults, events)
    servers = []
    try:
        # The CSI socket first: it must be serving before anyone is told the endpoint.
        servers.append((serve(cfg.csi_address, CsiServices(cfg, pb, dispatcher).handlers()), cfg.csi_address))
        say(f"serving csi.v1.Identity and csi.v1.Node as {cfg.name} on {cfg.csi_address}")
        if cfg.registry:
            rs = RegistrationService(cfg, reg, dispatcher)
            servers.append((serve(cfg.registry_socket, [rs.handler()]), cfg.registry_socket))
            say(f"serving pluginregistration.Registration on {cfg.registry_socket}")
        while not stop.wait(1.0):
            pass
    finally:
        for server, path in reversed(servers):  # registration socket first
            server.stop(grace=None).wait()
            remove_file(path)
    say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
