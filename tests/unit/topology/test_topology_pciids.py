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


def test_lines_around_a_vendor_keep_their_meaning(tmp_path: Path) -> None:
    """Names are looked up in the file, not parsed from all of it (pciids.py): a comment inside
    a vendor's devices, a subsystem line, the last vendor before the device classes, and a
    database without vendors (the next path answers) read as in the whole file."""
    ids = tmp_path / "pci.ids"
    ids.write_text(
        "15b3  Mellanox Technologies\n"
        "\t1017  MT27800 Family [ConnectX-5]\n"
        "# a comment between devices\n"
        "\t\t15b3 1021  MT2894 Family [ConnectX-6 Lx] subsystem\n"
        "\t101d  MT2892 Family [ConnectX-6 Dx]\n"
        "1af4  Red Hat, Inc.\n"
        "C 02  Network controller\n"
        "\t1021  not a device\n"
    )
    only_classes = tmp_path / "classes.ids"
    only_classes.write_text("# classes only\nC 02  Network controller\n")
    paths = (str(only_classes), str(ids))
    assert lookup(0x15B3, 0x101D, paths) == "Mellanox Technologies MT2892 Family [ConnectX-6 Dx]"
    assert lookup(0x15B3, 0x1021, paths) == "Mellanox Technologies"  # a subsystem, not a device
    assert lookup(0x1AF4, 0x1021, paths) == "Red Hat, Inc."  # the classes are no vendor's devices
    assert lookup(0x0002, 0x1021, paths) is None
