"""topology.topodra.io/pcieLeafSwitch on the real kube-scheduler, on a machine with nested PCIe
switches (the shipped spec 2s-8acc-8nic-pxb: four switch trees, each a top switch over two leaf
switches of one GPU and one NIC).

A claim that matches on pcieLeafSwitch gets a GPU and the NIC of its own leaf (nvidia-smi PIX),
eight times over; one that matches only on pcieSwitch accepts a pair across two leaves (PXB).
What the scheduler chose is checked against the synthetic manifest, whose leaf switches come from
the roles the plan gave the bridges, not from the rule that makes the published attribute. No
kubelet: the allocation is what is tested.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from topodra.common.pciattrs import PCIE_LEAF_SWITCH, PCIE_SWITCH

from tests.controlplane.allocation import ACC, NIC, Node, claim_namespace, submit
from tests.controlplane.cluster import ControlPlane
from tests.kit.machines import SynthTree, synth_builder

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

SPEC = "2s-8acc-8nic-pxb"


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    with claim_namespace(control_plane, "leaf") as ns:
        yield ns


@dataclass(frozen=True)
class Place:
    pcie_switch: str | None
    pcie_leaf_switch: str | None


class Truth:
    """Where each PCI function sits by the synthetic manifest (common/synth/manifest.py)."""

    def __init__(self, tree: SynthTree) -> None:
        self._by = {p["bdf"]: Place(p["pcie_switch"], p["pcie_leaf_switch"]) for p in tree.manifest["pci"]}

    def pci(self, address: str) -> Place | None:
        return self._by.get(address)


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth]:
    tree = synth_builder(tmp_path_factory, "leaf")(SPEC)
    return tree.root, Truth(tree)


def pair_claim(match: str, accelerators: int = 1) -> dict[str, Any]:
    """`accelerators` GPUs and one NIC, all with the same value of `match` (which the onboard
    NICs on a root port do not carry)."""
    requests = [{"name": f"gpu-{i}", "exactly": {"deviceClassName": ACC}} for i in range(accelerators)]
    requests.append({"name": "nic", "exactly": {"deviceClassName": NIC}})
    names = [r["name"] for r in requests]
    return {"devices": {"requests": requests, "constraints": [{"requests": names, "matchAttribute": match}]}}


def address(node: Node, result: dict[str, Any]) -> str:
    value = node.attr(result, "resource.kubernetes.io/pciBusID")
    assert isinstance(value, str), result
    return value


def test_every_leaf_claim_gets_a_gpu_and_the_nic_of_its_own_leaf(
    control_plane: ControlPlane, namespace: str, machine: tuple[Path, Truth]
) -> None:
    root, topo = machine
    node = Node(control_plane, root, "pxb-leaf")
    leaves = []
    for i in range(8):
        results = submit(control_plane, namespace, node, f"leaf-{i}", pair_claim(PCIE_LEAF_SWITCH))
        assert results is not None, f"claim {i} found no pair on one leaf"
        (gpu,) = [r for r in results if r["driver"] == ACC]
        (nic,) = [r for r in results if r["driver"] == NIC]
        a, b = topo.pci(address(node, gpu)), topo.pci(address(node, nic))
        assert a is not None and b is not None
        assert a.pcie_leaf_switch == b.pcie_leaf_switch != a.pcie_switch  # PIX, below the top switch
        leaves.append(a.pcie_leaf_switch)
    assert len(set(leaves)) == 8  # every leaf once: the eight GPUs are gone
    assert submit(control_plane, namespace, node, "leaf-8", pair_claim(PCIE_LEAF_SWITCH)) is None


def test_two_gpus_and_a_nic_share_a_switch_tree_but_never_a_leaf(
    control_plane: ControlPlane, namespace: str, machine: tuple[Path, Truth]
) -> None:
    """Each leaf holds one GPU: two GPUs and a NIC on one leaf cannot exist, on one switch tree
    they can (and then at least one GPU is PXB from the NIC)."""
    root, topo = machine
    node = Node(control_plane, root, "pxb-tree")
    assert submit(control_plane, namespace, node, "tree-leaf", pair_claim(PCIE_LEAF_SWITCH, 2)) is None
    results = submit(control_plane, namespace, node, "tree-switch", pair_claim(PCIE_SWITCH, 2))
    assert results is not None
    fns = [topo.pci(address(node, r)) for r in results]
    assert all(f is not None for f in fns)
    assert len({f.pcie_switch for f in fns if f is not None}) == 1
    assert len({f.pcie_leaf_switch for f in fns if f is not None}) == 2
