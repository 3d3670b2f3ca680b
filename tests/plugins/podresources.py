#!/usr/bin/env python3
"""A pod resources API v1 client, as a monitoring agent is: it follows the
text of protos/podresources/v1/api.proto and prints the answer as JSON.

    podresources.py SOCKET list
    podresources.py SOCKET allocatable
    podresources.py SOCKET get NAMESPACE NAME

Prints {"ok": true, "response": {...}} or {"ok": false, "code": "...",
"details": "..."}; exits 0 either way (2 on bad usage).
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from system_python import reexec_if_missing_grpc  # noqa: E402

reexec_if_missing_grpc()
import grpc  # noqa: E402
from google.protobuf import json_format  # noqa: E402

PROTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "protos")
PROTO = "podresources/v1/api.proto"
SERVICE = "/v1.PodResourcesLister/"
DEADLINE = 5.0


def load_api():
    with tempfile.TemporaryDirectory(prefix="podresources-pb-") as out:
        subprocess.run(["protoc", f"--python_out={out}", f"-I{PROTOS}", PROTO], check=True)
        spec = importlib.util.spec_from_file_location("podresources_v1_pb2", os.path.join(out, PROTO.replace(".proto", "_pb2.py")))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


def call(channel, method, request, response_cls):
    stub = channel.unary_unary(SERVICE + method, request_serializer=type(request).SerializeToString,
                               response_deserializer=response_cls.FromString)
    return stub(request, timeout=DEADLINE)


def main(argv):
    if len(argv) < 3 or argv[2] not in ("list", "allocatable", "get") or (argv[2] == "get" and len(argv) != 5):
        print(__doc__, file=sys.stderr)
        return 2
    api = load_api()
    socket, what = argv[1], argv[2]
    with grpc.insecure_channel("unix://" + socket) as channel:
        try:
            if what == "list":
                resp = call(channel, "List", api.ListPodResourcesRequest(), api.ListPodResourcesResponse)
            elif what == "allocatable":
                resp = call(channel, "GetAllocatableResources", api.AllocatableResourcesRequest(),
                            api.AllocatableResourcesResponse)
            else:
                req = api.GetPodResourcesRequest(pod_namespace=argv[3], pod_name=argv[4])
                resp = call(channel, "Get", req, api.GetPodResourcesResponse)
        except grpc.RpcError as e:
            print(json.dumps({"ok": False, "code": e.code().name, "details": e.details()}))
            return 0
    body = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    print(json.dumps({"ok": True, "response": body}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
