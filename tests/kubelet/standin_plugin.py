"""A plugin process for tests: the real runtime (Plugin, serve_all, Observability, signals)
around the TableDriver/TableProcessor stand-ins, so process-level behaviour (SIGTERM cleanup,
kill -9 leftovers, HTTP readiness) is tested in a real child process.

    python -m tests.kubelet.standin_plugin --kubelet-root R --driver a.test.io [--driver ...]
        [--pod-uid U] [--metrics-address 127.0.0.1:0] --started-file F

Once everything serves it writes `{"metrics_port": N, "pid": P}` to F (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from topodra.common import logs
from topodra.common.runtime.observability import Observability
from topodra.common.runtime.plugin import Plugin, PluginOptions, serve_all

from tests.kubelet.standins import TableDriver, TableProcessor
from tests.unit.runtime_grpc.conftest import allocations


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kubelet-root", type=Path, required=True)
    p.add_argument("--driver", action="append", required=True)
    p.add_argument("--pod-uid", default=None)
    p.add_argument("--metrics-address", default="127.0.0.1:0")
    p.add_argument("--started-file", type=Path, required=True)
    p.add_argument("--health-resend", type=float, default=10.0)
    args = p.parse_args()
    logs.setup("INFO")
    options = PluginOptions(
        kubelet_root=args.kubelet_root,
        node_name="node-a",
        pod_uid=args.pod_uid,
        health_resend_interval=args.health_resend,
    )
    plugins = [
        Plugin(TableDriver(name, ["gpu-0", "gpu-1", "gpu-2"]), TableProcessor(name, allocations()), options)
        for name in args.driver
    ]
    http = Observability(args.metrics_address, lambda: [p.status() for p in plugins])
    http.start()

    def started() -> None:
        tmp = args.started_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"metrics_port": http.port, "pid": os.getpid()}))
        tmp.rename(args.started_file)

    try:
        serve_all(plugins, on_started=started)
    finally:
        http.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
