"""numaNode in its list form across the three drivers, on a machine shaped like what GB200 users
report: the accelerator's own NUMA node holds only its memory (no CPUs), nearest by SLIT to the
node of its socket's CPUs and NIC. As scalars the three
numaNode values disagree and `matchAttribute: resource.kubernetes.io/numaNode` can never put
them together; as lists (the node, then the same-socket nodes nearest to it) the three share an
element, which is what matchAttribute asks of lists (set intersection, DRAListTypeAttributes).
"""

from __future__ import annotations

from pathlib import Path

from topodra.common.device import AttributeValue
from topodra.common.topology import discover
from topodra.drivers.accelerator.devices import build_devices as accelerators
from topodra.drivers.accelerator.options import AcceleratorOptions
from topodra.drivers.accelerator.probe import HostInfo
from topodra.drivers.cpu.devices import build_devices as cpus
from topodra.drivers.cpu.options import CpuOptions
from topodra.drivers.nic.devices import Selection, build_nics

from tests.kit.sysfs import Tree

NUMA = "resource.kubernetes.io/numaNode"


def _machine(root: Path) -> None:
    """Two sockets of two CPUs; node 2 is socket 0's accelerator memory (CPU-less), farther from
    socket 1 than socket 0's CPUs are (as such SLITs are: a CPU-less node has no socket to
    compare, and the upstream rule keeps a node of unknown socket when it is nearest)."""
    t = Tree(root).simple_cpus(4, packages=2)
    t.node(0, [0, 1], distance="10 40 20")
    t.node(1, [2, 3], distance="40 10 80")
    t.node(2, [], distance="20 80 10")
    t.pci(
        "pci0000:00/0000:00:01.0/0000:01:00.0", class_="0x030200", vendor="0x10de", device="0x2941", numa="2"
    )
    nic = t.pci("pci0000:00/0000:00:02.0/0000:02:00.0", class_="0x020000", vendor="0x15b3", numa="0")
    t.netdev(nic, "ens2")


def _numa(devices: dict[str, dict[str, AttributeValue]]) -> dict[str, AttributeValue]:
    return {name: attrs.get(NUMA) for name, attrs in devices.items()}


def test_lists_line_up_what_scalars_keep_apart(tmp_path: Path) -> None:
    _machine(tmp_path)
    topo = discover(tmp_path)

    def published(lists: bool) -> dict[str, AttributeValue]:
        acc = accelerators(topo, HostInfo(), AcceleratorOptions(list_attributes=lists))
        cpu = cpus(topo, CpuOptions(list_attributes=lists))
        nic = build_nics(topo, frozenset(), Selection(list_attributes=lists))
        found = {d.name: dict(d.attributes) for d in (*acc, *cpu, *(n.device for n in nic))}
        return _numa(found)

    scalar = published(False)
    assert scalar == {"pci-0000-01-00-0": 2, "numa-0": 0, "numa-1": 1, "pci-0000-02-00-0": 0}
    lists = published(True)
    assert lists == {"pci-0000-01-00-0": (2, 0), "numa-0": (0, 2), "numa-1": (1,), "pci-0000-02-00-0": (0, 2)}
    gpu, cpu0, nic = (set(lists[n]) for n in ("pci-0000-01-00-0", "numa-0", "pci-0000-02-00-0"))  # type: ignore[arg-type]
    assert gpu & cpu0 & nic == {0, 2}
    assert not set(lists["numa-1"]) & gpu  # type: ignore[arg-type]  # the other socket stays apart
