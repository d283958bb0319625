"""pytest plugin with the session-wide `real_node` fixture (loaded by tests/conftest.py).

One real node per session (and per machine: real_node_lock), shared by the tests marked `node`.
Tests create their objects in namespaces of their own and delete their Pods; the node itself is
never stopped by a test (tests that restart the kubelet or containerd start them again).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail
from tests.controlplane.binaries import BuildFailed, GoMissing, ensure_binaries
from tests.deploy.render import ToolsUnavailable, ensure_tools
from tests.node.binaries import HostToolMissing, ensure_node_binaries
from tests.node.drivers import Drivers, image_tools_missing
from tests.node.network import pick_network
from tests.node.node import RealNode, real_node_lock

DEFAULT_SUBNET = "10.213.0.0/24"
_active: list[RealNode] = []


def node_prerequisites() -> str | None:
    """Why a real node cannot run here, or None."""
    if os.geteuid() != 0:
        return "the real node needs root (mounts, cgroups, a bridge, containers)"
    if shutil.which("mount") is None or shutil.which("ip") is None:
        return "mount and ip (util-linux, iproute2) are needed"
    return None


@pytest.fixture(scope="session")
def real_node() -> Iterator[RealNode]:
    """A running single-node cluster: real API server, scheduler, controller-manager, containerd,
    kubelet, with the pause and busybox images imported (see tests/node/node.py)."""
    why = node_prerequisites()
    if why:
        skip_or_fail(why)
    try:
        cp_binaries = ensure_binaries()
        binaries = ensure_node_binaries()
    except (GoMissing, HostToolMissing) as e:
        skip_or_fail(str(e))
    except BuildFailed as e:
        pytest.fail(f"building the node failed: {e}")
    subnet = os.environ.get("TOPODRA_NODE_SUBNET", DEFAULT_SUBNET)
    with real_node_lock():
        # Short: the drivers' socket paths under it must stay within 108 bytes.
        run_dir = Path(tempfile.mkdtemp(prefix="tdrn-", dir="/tmp"))
        node = RealNode(run_dir, cp_binaries, binaries, pick_network(subnet))
        began = time.monotonic()
        try:
            node.start()
        except Exception as e:
            pytest.fail(f"the real node did not come up: {e}\n{node.logs()}")
        took = time.monotonic() - began
        steps = ", ".join(f"{k} {v:.1f} s" for k, v in node.timings.items() if k != "total")
        sys.stderr.write(f"\nreal node up in {took:.1f} s ({steps}) at {node.cp.server}\n")
        _active.append(node)
        try:
            yield node
        finally:
            _active.remove(node)
            stopping = time.monotonic()
            problems = node.stop()
            sys.stderr.write(f"\nreal node stopped in {time.monotonic() - stopping:.1f} s\n")
            left = node.leftovers()
            if problems or left:
                pytest.fail(f"real node teardown: problems {problems}, left behind {left}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, object, object]:
    """A failing test that used the real node gets the kubelet's and containerd's log tails."""
    report = yield
    if (
        isinstance(report, pytest.TestReport)
        and report.failed
        and _active
        and "real_node" in getattr(item, "fixturenames", ())
    ):
        report.sections.append(("real node logs", _active[0].logs(40)))
    return report


@pytest.fixture(scope="session")
def node_drivers(real_node: RealNode) -> Iterator[Drivers]:
    """deploy/overlays/all on the real node: the three DaemonSets running this checkout's image,
    ready and publishing (see tests/node/drivers.py)."""
    why = image_tools_missing()
    if why:
        skip_or_fail(why)
    try:
        tools = ensure_tools()
    except ToolsUnavailable as e:
        skip_or_fail(str(e))
    drivers = Drivers(real_node, tools)
    try:
        drivers.install()
    except Exception as e:
        logs = "\n".join(f"--- {k} driver:\n{drivers.log(k)[-3000:]}" for k in ("cpu", "accelerator", "nic"))
        drivers.uninstall()
        pytest.fail(f"the drivers did not come up: {e}\n{logs}")
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in drivers.timings.items())
    sys.stderr.write(f"\nreal node drivers up: {steps}\n")
    try:
        yield drivers
    finally:
        drivers.uninstall()
