"""hack/bench/apiserver_gc.py against real API servers: with profiling on, a collection is asked
for and made (the Go runtime counts it as forced); with profiling off, as the shared control
plane runs it, the benchmark is told so instead of going on without one."""

from __future__ import annotations

import re
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from hack.bench.apiserver_gc import collect
from tests.controlplane.cluster import ControlPlane, running_control_plane

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


@pytest.fixture(scope="module")
def profiling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    from tests.conftest import skip_or_fail
    from tests.controlplane.binaries import GoMissing

    try:
        with running_control_plane(
            Path(tmp_path_factory.mktemp("profiling")), driver_access=False, profiling=True
        ) as cp:
            yield cp
    except GoMissing as e:
        skip_or_fail(str(e))


def forced_collections(cp: ControlPlane) -> int:
    """The Go runtime's count of completed collections asked for (runtime.GC), from the API
    server's metrics."""
    with urllib.request.urlopen(f"{cp.server}/metrics", context=cp.admin_tls(), timeout=30) as resp:
        text = resp.read().decode()
    found = re.search(r"^go_gc_cycles_forced_gc_cycles_total (\S+)$", text, re.MULTILINE)
    assert found, "the API server exports no count of forced collections"
    return int(float(found.group(1)))


def test_each_call_makes_one_collection_and_returns_when_it_is_done(profiling: ControlPlane) -> None:
    before = forced_collections(profiling)
    for _ in range(3):
        collect(profiling.server, profiling.admin_tls())
    assert forced_collections(profiling) == before + 3  # completed ones only: each was done


def test_an_api_server_without_profiling_is_named_not_skipped(control_plane: ControlPlane) -> None:
    with pytest.raises(RuntimeError, match=r"HTTP 404 .*--profiling=true") as e:
        collect(control_plane.server, control_plane.admin_tls())
    assert control_plane.server in str(e.value)


def test_only_an_https_url_is_taken() -> None:
    with pytest.raises(ValueError, match="not an https URL"):
        collect("http://127.0.0.1:1", ssl.create_default_context())
