"""The NIC driver behind the real kubelet plugin: registration, NodePrepareResources and the
health stream over unix sockets, read by the kubelet-side test client.

The machine is a private copy of a synthetic tree; a link going down is its sysfs files
changing the way the kernel changes them.

Stand-in kept (the Python kubelet client): the NIC plugin's gRPC answers and health messages field
by field, which the real kubelet (tests/node) does not expose.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.plugin import Plugin, PluginOptions
from topodra.drivers.nic.devices import DRIVER
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.drivers.nic.conftest import SynthTree
from tests.kubelet.client import KubeletClient
from tests.unit.runtime_claims.claimkit import MemoryClaimStore, Result, claim_object, new_uid
from tests.unit.runtime_grpc.test_grpc_health import Reader

NODE = "node-a"
ENO2 = "pci-0000-02-00-1"
HEALTHY, UNHEALTHY = 1, 2


@pytest.fixture
def served(
    synth_machine: Callable[[str], SynthTree], tmp_path: Path
) -> Iterator[tuple[Plugin, MemoryClaimStore, Path]]:
    root = tmp_path / "machine"
    shutil.copytree(synth_machine("1s-4acc").root, root, symlinks=True)
    kubelet_root = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))  # short socket paths
    driver = NicDriver(
        NicOptions(
            sysfs_root=str(root),
            node_name=NODE,
            hook_dir=tmp_path / "hooks",
            state_dir=tmp_path / "state",
            taint_unhealthy=True,
            rescan_interval=0.0,
        )
    )
    store = MemoryClaimStore()
    manager = ClaimManager(
        driver,
        NODE,
        store,
        Checkpoint(tmp_path / "ckpt", DRIVER),
        CdiWriter(tmp_path / "cdi", cdi_kind(DRIVER)),
    )
    manager.start()
    opts = PluginOptions(kubelet_root=kubelet_root, node_name=NODE)
    plugin = Plugin(driver, manager, opts)
    plugin.start()
    try:
        yield plugin, store, root
    finally:
        plugin.stop()
        manager.close()
        shutil.rmtree(kubelet_root, ignore_errors=True)


def health_of(reader: Reader, device: str, want: int, timeout: float = 10.0) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    last: tuple[int, str] = (-1, "")
    while time.monotonic() < deadline:
        msg: Any = reader.next(timeout=max(0.1, deadline - time.monotonic()))
        for d in msg.devices:
            if d.device.device_name == device:
                last = (d.health, d.message)
        if last[0] == want:
            return last
    raise AssertionError(f"{device} never became {want}; last {last}")


def test_health_stream_follows_the_link_and_prepare_answers_cdi_ids(
    served: tuple[Plugin, MemoryClaimStore, Path],
) -> None:
    plugin, store, root = served
    carrier = (root / "sys/class/net/eno2").resolve() / "carrier"
    with KubeletClient() as kubelet:
        kubelet.register(plugin.registration_socket)
        reader = Reader(kubelet.watch_health())
        try:
            assert health_of(reader, ENO2, HEALTHY) == (HEALTHY, "eno2: link up")
            carrier.write_text("0\n")
            assert health_of(reader, ENO2, UNHEALTHY) == (UNHEALTHY, "eno2: no carrier")
            carrier.write_text("1\n")
            assert health_of(reader, ENO2, HEALTHY)[0] == HEALTHY
        finally:
            reader.close()

        ref = store.put(claim_object("ns1", "web", new_uid(), [Result("nic", ENO2, driver=DRIVER)]))
        resp = kubelet.prepare([(ref.namespace, ref.name, ref.uid)])
        got = resp.claims[ref.uid]
        assert not got.error, got.error
        (dev,) = got.devices
        assert dev.device_name == ENO2 and dev.pool_name == NODE
        assert list(dev.cdi_device_ids) == [f"{DRIVER}/claim={ref.uid}-{ENO2}"]
        assert not kubelet.unprepare([(ref.namespace, ref.name, ref.uid)]).claims[ref.uid].error
