"""hack/bench/apiserver_gc.py against real API servers: with profiling on, a collection is asked
for and made (the Go runtime counts it as forced); with profiling off, as the shared control
plane runs it, the benchmark is told so instead of going on without one."""

from __future__ import annotations

import http.client
import re
import ssl
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

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
    """The Go runtime's count of collections asked for (runtime.GC), from the API server's metrics."""
    url = urlsplit(cp.server)
    context = ssl.create_default_context(cafile=str(cp.ca_file))
    context.load_cert_chain(str(cp.pki.admin.cert), str(cp.pki.admin.key))
    conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=context, timeout=30)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    found = re.search(r"^go_gc_cycles_forced_gc_cycles_total (\S+)$", text, re.MULTILINE)
    assert found, "the API server exports no count of forced collections"
    return int(float(found.group(1)))


def admin(cp: ControlPlane) -> tuple[Path, Path, Path]:
    return cp.ca_file, cp.pki.admin.cert, cp.pki.admin.key


def test_each_call_makes_one_collection_and_returns_when_it_is_done(profiling: ControlPlane) -> None:
    before = forced_collections(profiling)
    took = [collect(profiling.server, *admin(profiling)) for _ in range(3)]
    assert forced_collections(profiling) == before + 3
    assert all(t > 0 for t in took)


def test_an_api_server_without_profiling_is_named_not_skipped(control_plane: ControlPlane) -> None:
    with pytest.raises(RuntimeError, match=r"HTTP 404 .*--profiling=true") as e:
        collect(control_plane.server, *admin(control_plane))
    assert control_plane.server in str(e.value)


def test_only_an_https_url_is_taken(control_plane: ControlPlane) -> None:
    with pytest.raises(ValueError, match="not an https URL"):
        collect("http://127.0.0.1:1", *admin(control_plane))
