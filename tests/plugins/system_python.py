"""Shared by the test peers: run under the system python3, which has
Debian's python3-grpcio, when `python3` is another interpreter (pyenv,
venv) without it."""

import os
import sys


def reexec_if_missing_grpc():
    """Import grpc, or re-run this script under /usr/bin/python3."""
    try:
        import grpc  # noqa: F401
    except ImportError:
        system = "/usr/bin/python3"
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system):
            os.execv(system, [system] + sys.argv)
        raise
