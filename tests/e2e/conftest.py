"""The end-to-end fleet: a handful of simulated nodes on the session's real control plane.

Built once per session (bring-up costs ~12 driver processes on 2 cores) and shared by the e2e
tests, which only add claims and pods in namespaces of their own. The `control_plane` fixture
comes from the tests.controlplane.fixtures plugin (registered in tests/conftest.py).

Machines (each node its own sysfs root):
- `hgx`: synthetic 2s-8acc-8nic (8 GPUs, 8 RDMA NICs, one switch per GPU+NIC pair), with
  device-node stand-ins; its CDI specs go to /var/run/cdi so podman can run its claims;
- `snc`: synthetic 2s-snc2 (4 NUMA nodes, IB NICs with SR-IOV VFs);
- `small`: synthetic 1s-4acc (4 GPUs, one root complex each, no switch);
- `ve8`: the captured hwloc tree 32intel64-2p8co2t+8ve (8 NEC vector engines, 4 NICs).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, FixtureTrees, skip_or_fail
from tests.controlplane.cluster import ControlPlane, unique_name
from tests.e2e.nodes import HOST_CDI_ROOT, NodeSpec, SimNode, start_all, stop_all, synthetic_args

FLEET_LABEL = "topodra.io/e2e-fleet"
SYNTHETIC = {"hgx": "2s-8acc-8nic", "snc": "2s-snc2", "small": "1s-4acc"}
CAPTURED = {"ve8": "hwloc--32intel64-2p8co2t+8ve"}


@dataclass
class Fleet:
    nodes: dict[str, SimNode]  # by role (hgx, snc, small, ve8)
    label: str  # value of FLEET_LABEL on every node of this fleet
    workdir: Path
    startup_seconds: float

    def node_selector(self) -> dict[str, str]:
        """Keeps pods on this fleet: other tests of the session publish slices of their own."""
        return {FLEET_LABEL: self.label}

    def by_name(self, name: str) -> SimNode:
        (node,) = [n for n in self.nodes.values() if n.name == name]
        return node


def synthesize(spec: str, output: Path, hostname: str) -> Path:
    """`topodra synth` (the real CLI) with device-node stand-ins."""
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "synth", "--spec", spec]
    cmd += ["--dest", str(output), "--hostname", hostname, "--dev-nodes"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"topodra synth --spec {spec} failed: {out.stderr}")
    return output


@pytest.fixture(scope="session")
def e2e_workdir() -> Iterator[Path]:
    # Short: plugin socket paths must stay within 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="e2e-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def fleet(control_plane: ControlPlane, fixture_trees: FixtureTrees, e2e_workdir: Path) -> Iterator[Fleet]:
    import os

    if os.geteuid() != 0:
        skip_or_fail("the e2e fleet needs root (device-node stand-ins, CDI specs in /var/run/cdi)")
    began = time.monotonic()
    label = unique_name("fleet")
    names = {role: unique_name(f"e2e-{role}") for role in (*SYNTHETIC, *CAPTURED)}
    with ThreadPoolExecutor(2) as pool:
        synth = {
            role: pool.submit(synthesize, spec, e2e_workdir / "machines" / role, names[role])
            for role, spec in SYNTHETIC.items()
        }
        roots = {role: fixture_trees.root(tree) for role, tree in CAPTURED.items()}
        roots.update({role: f.result() for role, f in synth.items()})
    specs = {
        role: NodeSpec(
            names[role],
            roots[role],
            driver_args=synthetic_args(roots[role]),
            cdi_root=HOST_CDI_ROOT if role == "hgx" else None,
            labels={FLEET_LABEL: label, "topodra.io/e2e-machine": role},
            description=SYNTHETIC.get(role) or CAPTURED[role],
        )
        for role in (*SYNTHETIC, *CAPTURED)
    }
    sys.stderr.write(f"\ne2e machines ready in {time.monotonic() - began:.1f} s\n")
    nodes = {role: SimNode(control_plane, spec, e2e_workdir / role) for role, spec in specs.items()}
    try:
        took = start_all(list(nodes.values()))
    except BaseException:
        stop_all(nodes.values())
        raise
    sys.stderr.write(f"\ne2e fleet of {len(nodes)} nodes up in {took:.1f} s\n")
    fleet = Fleet(nodes, label, e2e_workdir, took)
    try:
        yield fleet
    finally:
        stopping = time.monotonic()
        codes = stop_all(nodes.values())
        sys.stderr.write(f"\ne2e fleet stopped in {time.monotonic() - stopping:.1f} s: {codes}\n")
        bad = {n: c for n, c in codes.items() if any(v != 0 for v in c.values())}
        if bad:
            sys.stderr.write(f"\ne2e fleet: driver processes exited uncleanly: {bad}\n")
