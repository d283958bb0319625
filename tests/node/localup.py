"""The supervisor behind hack/local-up.sh: the test tier's real node and drivers, kept up until
SIGTERM or SIGINT, then torn down exactly as the tests tear it down.

    python3 -m tests.node.localup --state FILE [--real-devices]

Writes FILE (JSON: kubeconfig, server, run folder, pid, timings) once the cluster is ready, and
removes it when everything is down. The processes it starts die with it (they are its
children), so killing it hard still stops them; `hack/local-up.sh --down` asks nicely.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from tests.controlplane.binaries import ensure_binaries
from tests.deploy.render import ensure_tools
from tests.node.binaries import ensure_node_binaries
from tests.node.drivers import Drivers
from tests.node.fixtures import DEFAULT_SUBNET
from tests.node.network import pick_network
from tests.node.node import RealNode, real_node_lock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.node.localup", description=__doc__)
    parser.add_argument("--state", type=Path, required=True, help="where to write the cluster's details")
    parser.add_argument(
        "--real-devices",
        action="store_true",
        help="the accelerator and NIC drivers read this machine's /sys (default: the tier's synthetic "
        "machine, tests/node/machine.json, with veths as its NICs)",
    )
    parser.add_argument("--subnet", default=os.environ.get("TOPODRA_NODE_SUBNET", DEFAULT_SUBNET))
    args = parser.parse_args(argv)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    cp_binaries = ensure_binaries(echo=True)
    binaries = ensure_node_binaries(echo=True)
    tools = ensure_tools()
    print("local-up: waiting for the machine's real-node lock (one real node per machine)", flush=True)
    with real_node_lock():
        run_dir = Path(tempfile.mkdtemp(prefix="tdrn-", dir="/tmp"))
        node = RealNode(run_dir, cp_binaries, binaries, pick_network(args.subnet))
        drivers = Drivers(node, tools, synthetic=not args.real_devices)
        try:
            began = time.monotonic()
            node.start()
            print(f"local-up: node up in {node.timings['total']:.1f} s", flush=True)
            drivers.install()
            state = {
                **node.describe(),
                "run_dir": str(run_dir),
                "pid": os.getpid(),
                "drivers": drivers.timings,
                "seconds": round(time.monotonic() - began, 1),
                "busybox_image": node.busybox.name if node.busybox else None,
            }
            args.state.write_text(json.dumps(state, indent=2) + "\n")
            print(f"local-up: ready in {state['seconds']} s", flush=True)
            while not stop.wait(1.0):
                if not (node.kubelet.running and node.containerd.running):
                    print(
                        "local-up: the kubelet or containerd exited; tearing down",
                        file=sys.stderr,
                        flush=True,
                    )
                    break
        finally:
            print("local-up: tearing down", flush=True)
            try:
                drivers.uninstall()
            finally:
                problems = node.stop()
                args.state.unlink(missing_ok=True)
                left = node.leftovers()
                print(f"local-up: down; problems {problems}, left behind {left}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
