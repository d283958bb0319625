"""Plugins started in-process on real unix sockets under a short temporary kubelet root."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime.plugin import Plugin, PluginOptions
from topodra.common.runtime.seams import ResultDevice

from tests.kubelet.client import KubeletClient
from tests.kubelet.standins import TableDriver, TableProcessor

DRIVER = "gpu.test.topodra.io"
NODE = "node-a"


@pytest.fixture
def kubelet_root() -> Iterator[Path]:
    """Short on purpose: pytest's tmp_path can push socket paths near the 108-byte limit."""
    root = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def allocations() -> dict[str, tuple[ResultDevice, ...]]:
    return {
        "uid-1": (ResultDevice(("gpu",), NODE, "gpu-0", (f"{DRIVER}/claim=uid-1-gpu-0",), "share-7"),),
        "uid-2": (
            ResultDevice((), NODE, "gpu-1", ()),
            ResultDevice(("a", "b"), NODE, "gpu-2", ("x/y=1", "x/y=2")),
        ),
    }


PluginFactory = Callable[..., tuple[Plugin, TableDriver, TableProcessor]]


@pytest.fixture
def make_plugin(kubelet_root: Path) -> Iterator[PluginFactory]:
    started: list[Plugin] = []

    def make(
        name: str = DRIVER, pod_uid: str | None = None, start: bool = True, **options: Any
    ) -> tuple[Plugin, TableDriver, TableProcessor]:
        driver = TableDriver(name, ["gpu-0", "gpu-1", "gpu-2"])
        processor = TableProcessor(name, allocations())
        opts = replace(PluginOptions(kubelet_root=kubelet_root, node_name=NODE, pod_uid=pod_uid), **options)
        plugin = Plugin(driver, processor, opts)
        if start:
            plugin.start()
            started.append(plugin)
        return plugin, driver, processor

    yield make
    for p in started:
        p.stop()


@pytest.fixture
def kubelet() -> Iterator[KubeletClient]:
    with KubeletClient() as client:
        yield client
