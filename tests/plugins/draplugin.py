#!/usr/bin/env python3
"""A small DRA driver's kubelet plugin that end-to-end tests use to drive
rkubelet's DRA manager.

It follows the text of the kubelet's DRA plugin API
(protos/dra/v1/api.proto; v1beta1 has the same messages under its own
package name) and of the plugin registration API v1
(protos/pluginregistration/v1/api.proto): it serves the DRA services on its
endpoint and registers through the plugin watcher's directory, as a DRA
driver's kubelet plugin does. The message modules are generated with protoc
at start-up; the services are written by hand.

Flags:
  --registry DIR        the kubelet's plugins_registry: serves
                        pluginregistration.Registration on DIR/<driver>-reg.sock (required)
  --endpoint PATH       the DRA services' socket (required)
  --driver NAME         driver name (gpu.example.com)
  --services LIST       comma-separated services served and registered
                        (v1.DRAPlugin,v1beta1.DRAPlugin)
  --cdi-dir DIR         writes a CDI spec per prepared claim there (kind
                        example.com/gpu, device named by the claim UID: env
                        DRA_CLAIM=<namespace>/<name>, device node
                        /dev/dra-gpu from /dev/null); removed by unprepare
  --log FILE            appends one JSON line per RPC answered, and one
                        (NodePrepareResourcesStarted) when a prepare begins
  --control FILE        polled at each call: {"fail": "message"} fails every
                        claim of NodePrepareResources with it; {"delay": secs}
                        sleeps before answering it

Every prepared claim gets one device: pool "pool-0", device "dev-<claim name>",
no request names (it serves every request of the claim), CDI ID
example.com/gpu=<claim UID>.
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
from peerlib import EventLog, import_file, remove_file, serve, to_dict  # noqa: E402

PROTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "protos")
DRA_PROTO = "dra/v1/api.proto"
REG_PROTO = "pluginregistration/v1/api.proto"
CDI_KIND = "example.com/gpu"
PACKAGES = {"v1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1",
            "v1beta1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1beta1"}


def say(message):
    print(f"draplugin[{os.getpid()}] {time.strftime('%H:%M:%S')}: {message}", file=sys.stderr, flush=True)


def load_protos():
    with tempfile.TemporaryDirectory(prefix="draplugin-pb-") as out:
        subprocess.run(["protoc", f"--python_out={out}", f"-I{PROTOS}", DRA_PROTO, REG_PROTO], check=True)
        dra = import_file("dra_v1_api_pb2", os.path.join(out, DRA_PROTO.replace(".proto", "_pb2.py")))
        reg = import_file("pluginregistration_api_pb2", os.path.join(out, REG_PROTO.replace(".proto", "_pb2.py")))
    return dra, reg


def unary(fn, request_cls, response_cls):
    return grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=request_cls.FromString, response_serializer=response_cls.SerializeToString)


def read_control(path):
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class Driver:
    def __init__(self, cfg, dra, events):
        self.cfg, self.dra, self.events = cfg, dra, events

    def handlers(self):
        out = []
        for service in self.cfg.services:
            def prepare(req, ctx, service=service):
                return self.prepare(service, req)

            def unprepare(req, ctx, service=service):
                return self.unprepare(service, req)
            out.append(grpc.method_handlers_generic_handler(f"{PACKAGES[service]}.DRAPlugin", {
                "NodePrepareResources": unary(
                    prepare, self.dra.NodePrepareResourcesRequest, self.dra.NodePrepareResourcesResponse),
                "NodeUnprepareResources": unary(
                    unprepare, self.dra.NodeUnprepareResourcesRequest, self.dra.NodeUnprepareResourcesResponse),
            }))
        return out

    def prepare(self, service, req):
        self.events.write({"rpc": "NodePrepareResourcesStarted", "service": service, "request": to_dict(req)})
        control = read_control(self.cfg.control)
        time.sleep(float(control.get("delay", 0)))
        resp = self.dra.NodePrepareResourcesResponse()
        for claim in req.claims:
            result = resp.claims[claim.uid]
            if control.get("fail"):
                result.error = str(control["fail"])
                continue
            cdi_id = f"{CDI_KIND}={claim.uid}"
            result.devices.add(pool_name="pool-0", device_name=f"dev-{claim.name}", cdi_device_ids=[cdi_id])
            self.write_cdi_spec(claim)
        self.events.write({"rpc": "NodePrepareResources", "service": service, "request": to_dict(req),
                           "response": to_dict(resp)})
        return resp

    def unprepare(self, service, req):
        resp = self.dra.NodeUnprepareResourcesResponse()
        for claim in req.claims:
            resp.claims[claim.uid].SetInParent()
            if self.cfg.cdi_dir:
                remove_file(self.cdi_path(claim))
        self.events.write({"rpc": "NodeUnprepareResources", "service": service, "request": to_dict(req)})
        return resp

    def cdi_path(self, claim):
        return os.path.join(self.cfg.cdi_dir, f"example.com-gpu-{claim.uid}.json")

    def write_cdi_spec(self, claim):
        """A CDI spec (github.com/cncf-tags/container-device-interface SPEC.md, 0.5.0)."""
        if not self.cfg.cdi_dir:
            return
        os.makedirs(self.cfg.cdi_dir, exist_ok=True)
        spec = {"cdiVersion": "0.5.0", "kind": CDI_KIND, "devices": [{
            "name": claim.uid,
            "containerEdits": {
                "env": [f"DRA_CLAIM={claim.namespace}/{claim.name}"],
                "deviceNodes": [{"path": "/dev/dra-gpu", "hostPath": "/dev/null"}],
            },
        }]}
        tmp = self.cdi_path(claim) + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        os.replace(tmp, self.cdi_path(claim))


class Registration:
    def __init__(self, cfg, reg, events):
        self.cfg, self.reg, self.events = cfg, reg, events

    def handler(self):
        return grpc.method_handlers_generic_handler("pluginregistration.Registration", {
            "GetInfo": unary(self.get_info, self.reg.InfoRequest, self.reg.PluginInfo),
            "NotifyRegistrationStatus": unary(
                self.notify, self.reg.RegistrationStatus, self.reg.RegistrationStatusResponse),
        })

    def get_info(self, req, ctx):
        self.events.rpc("GetInfo", req)
        return self.reg.PluginInfo(type="DRAPlugin", name=self.cfg.driver, endpoint=self.cfg.endpoint,
                                   supported_versions=self.cfg.services)

    def notify(self, req, ctx):
        self.events.write({"rpc": "NotifyRegistrationStatus", "request": to_dict(req),
                           "plugin_registered": req.plugin_registered, "error": req.error})
        return self.reg.RegistrationStatusResponse()


def parse(argv):
    p = argparse.ArgumentParser(description="a DRA kubelet plugin for tests")
    p.add_argument("--registry", required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--driver", default="gpu.example.com")
    p.add_argument("--services", default="v1.DRAPlugin,v1beta1.DRAPlugin")
    p.add_argument("--cdi-dir")
    p.add_argument("--log")
    p.add_argument("--control")
    cfg = p.parse_args(argv)
    cfg.services = [s for s in cfg.services.split(",") if s]
    unknown = [s for s in cfg.services if s not in PACKAGES]
    if unknown:
        p.error(f"unknown services {unknown}; known: {sorted(PACKAGES)}")
    cfg.endpoint = os.path.abspath(cfg.endpoint)
    cfg.registry_socket = os.path.join(os.path.abspath(cfg.registry), f"{cfg.driver}-reg.sock")
    return cfg


def main(argv):
    cfg = parse(argv)
    dra, reg = load_protos()
    events = EventLog(cfg.log)
    driver = serve(cfg.endpoint, Driver(cfg, dra, events).handlers(), 4)
    say(f"serving {cfg.services} on {cfg.endpoint}")
    # The registration socket last: the kubelet dials the endpoint once told of it.
    registration = serve(cfg.registry_socket, [Registration(cfg, reg, events).handler()], 2)
    say(f"serving pluginregistration.Registration on {cfg.registry_socket}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    registration.stop(None)
    driver.stop(None)
    remove_file(cfg.registry_socket)
    remove_file(cfg.endpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
