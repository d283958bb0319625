"""Product names from a pci.ids database: optional, read only when asked."""

from __future__ import annotations

from pathlib import Path

from topodra.common.topology.model import PciFunction
from topodra.common.topology.pciids import lookup

IDS = """\
# comment
10de  NVIDIA Corporation
\t2330  GH100 [H100 SXM5 80GB]
\t\t10de 16c1  H100 SXM5 80GB
8086  Intel Corporation
\t1521  I350 Gigabit Network Connection
C 02  Network controller
\t00  Ethernet controller
"""


def function(vendor: int, device: int) -> PciFunction:
    return PciFunction(
        "0000:01:00.0", 0x030200, vendor, device, None, None, None, (), None, None, None, None,
        None, None, (), None, "",
    )  # fmt: skip


def test_names_come_from_the_given_database(tmp_path: Path) -> None:
    ids = tmp_path / "pci.ids"
    ids.write_text(IDS)
    paths = (str(ids),)
    assert lookup(0x10DE, 0x2330, paths) == "NVIDIA Corporation GH100 [H100 SXM5 80GB]"
    assert lookup(0x8086, 0x9999, paths) == "Intel Corporation"
    assert lookup(0x1234, 0x0001, paths) is None
    assert function(0x8086, 0x1521).product_name(paths) == "Intel Corporation I350 Gigabit Network Connection"


def test_no_database_no_name(tmp_path: Path) -> None:
    assert function(0x10DE, 0x2330).product_name((str(tmp_path / "absent"),)) is None
