"""pytest plugin with the session-wide `control_plane` fixture (loaded by tests/conftest.py).

One control plane serves the whole test session, whichever test package asks for it first, so
bring-up is paid once. Tests share it: create objects under unique names (`unique_name()`) or
in their own namespace, and never stop it (the outage helpers restart the apiserver in place).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from tests.conftest import skip_or_fail
from tests.controlplane.binaries import BuildFailed, GoMissing, ensure_binaries
from tests.controlplane.cluster import ControlPlane
from tests.kit.reports import log_tails_on_failure

_active: list[ControlPlane] = []


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A running control plane with deploy/base RBAC and VAP applied (see cluster.ControlPlane)."""
    try:
        binaries = ensure_binaries()
    except GoMissing as e:
        skip_or_fail(str(e))
    except BuildFailed as e:
        pytest.fail(f"building the control plane failed: {e}")
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"), binaries)
    started = time.monotonic()
    try:
        cp.start()
        cp.install_driver_access()
    except Exception as e:
        logs = cp.logs()
        cp.stop()
        pytest.fail(f"control plane did not come up: {e}\n{logs}")
    took = time.monotonic() - started
    sys.stderr.write(f"\ncontrol plane {binaries.k8s_version} up in {took:.1f} s at {cp.server}\n")
    _active.append(cp)
    try:
        yield cp
    finally:
        _active.remove(cp)
        cp.stop()


def _logs(item: pytest.Item) -> str | None:
    """The components' log tails, for a test that used the control plane."""
    if _active and "control_plane" in getattr(item, "fixturenames", ()):
        return _active[0].logs(40)
    return None


pytest_runtest_makereport = log_tails_on_failure("control plane logs", _logs)
