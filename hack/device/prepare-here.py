"""On a lent accelerator machine: does the accelerator driver hand out the machine's real nodes?

For each accelerator it publishes, prepare a claim against the machine's own /dev (the driver
checks each node's numbers against sysfs), print the nodes, environment and what stat() says of
each host node, then unprepare. Then the same driver on an unpacked `topodra capture` of the
machine: the accelerators (nodes, minors, problems) must be the same. Prints one JSON document;
exit 1 when prepare refused a device or the capture differs. Run by hack/device/capture-machine.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import uuid
from pathlib import Path
from typing import Any

from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, PrepareError
from topodra.drivers.accelerator.driver import AcceleratorDriver
from topodra.drivers.accelerator.options import AcceleratorOptions

NODE = "capture-node"


def driver(root: Path) -> AcceleratorDriver:
    return AcceleratorDriver(AcceleratorOptions(sysfs_root=root, node_name=NODE, dev_root=Path("/")))


def view(root: Path) -> dict[str, Any]:
    return {
        name: {
            "address": a.address,
            "driver": a.driver,
            "nodes": [(n.path, n.major, n.minor) for n in a.nodes],
            "shared": [(n.path, n.major, n.minor) for n in a.shared_nodes],
            "problem": a.problem,
        }
        for name, a in sorted(driver(root).accelerators().items())
    }


def host_numbers(path: str | None) -> str:
    try:
        st = os.stat(path or "")
    except OSError as e:
        return f"stat: {e.strerror}"
    kind = "c" if stat.S_ISCHR(st.st_mode) else "?"
    return f"{kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def main() -> int:
    unpacked = Path(sys.argv[1])
    d = driver(Path("/"))
    report: dict[str, Any] = {"prepared": {}, "refused": {}}
    for name in sorted(d.accelerators()):
        claim = ClaimRef("default", f"try-{name}", str(uuid.uuid4()))
        try:
            prep = d.prepare(claim, [AllocatedDevice("gpu", NODE, name)], [])
        except PrepareError as e:
            report["refused"][name] = str(e)
            continue
        edits = [*(p.edits for p in prep.devices), prep.claim_edits]
        report["prepared"][name] = {
            "nodes": [
                {
                    "path": n.path,
                    "host": n.host_path,
                    "numbers": f"{n.major}:{n.minor}",
                    "stat": host_numbers(n.host_path or n.path),
                }
                for e in edits
                for n in e.device_nodes
            ],
            "env": [v for e in edits for v in e.env],
        }
        d.unprepare(claim, prep)
    live, replay = view(Path("/")), view(unpacked)
    report["live"] = live
    report["capture_same"] = live == replay
    if live != replay:
        report["capture"] = replay
    print(json.dumps(report, indent=1))
    return 0 if report["capture_same"] and not report["refused"] else 1


if __name__ == "__main__":
    sys.exit(main())
