"""deploy/overlays/all on a real node: the DaemonSets run, register with the real kubelet and
publish; a Pod's claims are prepared by them and reach its containers through containerd."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.node.drivers import Drivers
from tests.node.node import RealNode
from tests.node.pods import delete_namespace, make_namespace

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def ns(real_node: RealNode) -> Iterator[str]:
    name = make_namespace(real_node, "drv")
    yield name
    delete_namespace(real_node, name)


def test_every_driver_runs_from_its_daemonset_and_publishes(node_drivers: Drivers) -> None:
    for kind in ("cpu", "accelerator", "nic"):
        (pod,) = node_drivers.pods(kind)
        assert pod.status.phase == "Running"
        assert all(c.ready for c in pod.status.container_statuses)
        assert node_drivers.devices(kind), f"{kind}: no devices published\n{node_drivers.log(kind)[-2000:]}"
