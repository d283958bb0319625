"""`topodra slices -o text|wide` against `-o json` of the same machine: one row per published
device, and every locality column is the device's own attribute (the shipped machine with nested
switches, where the leaf switch column differs from the switch column)."""

from __future__ import annotations

import json
import re
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from topodra.drivers.cli.main import main

from tests.kit.machines import synth_builder

STD, TOPO = "resource.kubernetes.io/", "topology.topodra.io/"
COLUMNS = {
    "SOCKET": f"{TOPO}socket",
    "NUMA": f"{STD}numaNode",
    "PCIE-ROOT": f"{STD}pcieRoot",
    "PCIE-SWITCH": f"{TOPO}pcieSwitch",
    "PCI-BUS-ID": f"{STD}pciBusID",
    "PCIE-LEAF-SWITCH": f"{TOPO}pcieLeafSwitch",
}


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_builder(tmp_path_factory, "slices-table")("2s-8acc-8nic-pxb").root


def slices(root: Path, output: str) -> str:
    out = StringIO()
    with redirect_stdout(out):
        code = main(
            ["slices", "--driver", "all", "--sysfs-root", str(root), "--node-name", "n1", "-o", output]
        )
    assert code == 0
    return out.getvalue()


def table(text: str) -> list[dict[str, str]]:
    """Rows by header; cells are two or more spaces apart, the last one (DETAILS) may hold one."""
    lines = text.splitlines()
    header = re.split(r"\s{2,}", lines[0])
    return [
        dict(zip(header, re.split(r"\s{2,}", line, maxsplit=len(header) - 1), strict=True))
        for line in lines[1:]
    ]


def shown(attr: dict[str, Any] | None) -> str:
    return "-" if attr is None else str(next(iter(attr.values())))


@pytest.mark.parametrize("output", ["text", "wide"])
def test_every_device_is_a_row_with_its_own_attributes(machine: Path, output: str) -> None:
    published = {
        (s["spec"]["driver"].partition(".")[0], d["name"]): d.get("attributes") or {}
        for s in json.loads(slices(machine, "json"))["items"]
        for d in s["spec"].get("devices") or []
    }
    rows = table(slices(machine, output))
    assert {(r["DRIVER"], r["DEVICE"]) for r in rows} == set(published) and len(rows) == len(published)
    checked = [c for c in COLUMNS if c in rows[0]]
    assert ("PCIE-LEAF-SWITCH" in checked) is (output == "wide")
    for r in rows:
        attrs = published[(r["DRIVER"], r["DEVICE"])]
        for column in checked:
            assert r[column] == shown(attrs.get(COLUMNS[column])), (r["DEVICE"], column)
    gpus = [r for r in rows if r["DRIVER"] == "accelerator"]
    assert len(gpus) == 8
    if output == "wide":  # nested switches: each GPU's leaf is its own, below the shared switch
        assert all(r["PCIE-LEAF-SWITCH"] not in ("-", r["PCIE-SWITCH"]) for r in gpus)
        assert len({r["PCIE-LEAF-SWITCH"] for r in gpus}) == 8 and len({r["PCIE-SWITCH"] for r in gpus}) == 4
