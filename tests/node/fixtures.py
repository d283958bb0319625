"""pytest plugin with the session-wide `real_node` and `node_drivers` fixtures (loaded by
tests/conftest.py).

One real node per session (and per machine: real_node_lock), shared by the tests marked `node`.
Tests create their objects in namespaces of their own and delete their Pods; the node itself is
never stopped by a test (tests that restart the kubelet or containerd start them again).

The node goes down right after the last collected test that uses it, not at the end of the
session: it frees the machine-wide lock (another session waiting for a real node goes on) and
the memory for the rest of the suite. Teardown is checked: anything left behind fails the run.
"""

from __future__ import annotations

import contextlib
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
from tests.kit.reports import log_tails_on_failure
from tests.node.binaries import HostToolMissing, ensure_node_binaries
from tests.node.drivers import KINDS, Drivers, image_tools_missing
from tests.node.network import pick_network
from tests.node.node import RealNode, real_node_lock

DEFAULT_SUBNET = "10.213.0.0/24"
NODE_FIXTURES = frozenset({"real_node", "node_drivers"})
LOCAL_UP_TESTS = "tests/node/test_local_up.py"


class _Tier:
    """The session's node, its drivers and the lock, closed once (early or at session end)."""

    def __init__(self) -> None:
        self.node: RealNode | None = None
        self.drivers: Drivers | None = None
        self.stack = contextlib.ExitStack()
        self.last_user: str | None = None
        self.problems: list[str] = []
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.drivers is not None:
            try:
                self.drivers.uninstall()
            except Exception as e:  # the node's own teardown still deletes every pod
                self.problems.append(f"uninstalling the drivers: {e}")
        if self.node is not None:
            stopping = time.monotonic()
            self.problems += self.node.stop()
            sys.stderr.write(f"\nreal node stopped in {time.monotonic() - stopping:.1f} s\n")
            self.problems += [f"left behind: {x}" for x in self.node.leftovers()]
        self.stack.close()


_tier = _Tier()


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
    if _tier.closed:
        pytest.fail("the real node was already stopped after its last planned user")
    subnet = os.environ.get("TOPODRA_NODE_SUBNET", DEFAULT_SUBNET)
    _tier.stack.enter_context(real_node_lock())
    # Short: the drivers' socket paths under it must stay within 108 bytes.
    run_dir = Path(tempfile.mkdtemp(prefix="tdrn-", dir="/tmp"))
    node = RealNode(run_dir, cp_binaries, binaries, pick_network(subnet))
    _tier.node = node
    began = time.monotonic()
    try:
        node.start()
    except Exception as e:
        logs = node.logs()
        _tier.close()
        pytest.fail(f"the real node did not come up: {e}\n{logs}")
    took = time.monotonic() - began
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in node.timings.items() if k != "total")
    sys.stderr.write(f"\nreal node up in {took:.1f} s ({steps}) at {node.cp.server}\n")
    try:
        yield node
    finally:
        _tier.close()
        if _tier.problems:
            pytest.fail(f"real node teardown: {_tier.problems}")


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
        logs = "\n".join(f"--- {k} driver:\n{drivers.log(k)[-3000:]}" for k in KINDS)
        drivers.uninstall()
        pytest.fail(f"the drivers did not come up: {e}\n{logs}")
    _tier.drivers = drivers
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in drivers.timings.items())
    sys.stderr.write(f"\nreal node drivers up: {steps}\n")
    yield drivers  # uninstalled by _tier.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    # hack/local-up.sh brings up a node of its own: after every user of the session's node.
    own_node = [i for i in items if i.nodeid.startswith(LOCAL_UP_TESTS)]
    items[:] = [i for i in items if not i.nodeid.startswith(LOCAL_UP_TESTS)] + own_node
    users = [i for i in items if NODE_FIXTURES & set(getattr(i, "fixturenames", ()))]
    _tier.last_user = users[-1].nodeid if users else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """After the last test that uses the node: stop it now (see the module docstring)."""
    yield
    if item.nodeid == _tier.last_user and _tier.node is not None and not _tier.closed:
        _tier.close()
        if _tier.problems:
            raise AssertionError(f"real node teardown: {_tier.problems}")


def _logs(item: pytest.Item) -> str | None:
    """The kubelet's and containerd's log tails, for a test that used the running node."""
    if _tier.node is not None and not _tier.closed and NODE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return _tier.node.logs(40)
    return None


pytest_runtest_makereport = log_tails_on_failure("real node logs", _logs)
