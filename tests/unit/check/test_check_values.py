"""Attribute values as the API carries them, and what names say about locality."""

from __future__ import annotations

from typing import Any

import pytest
from topodra.common.check.attrs import own_meaning, parse_value, qualify


@pytest.mark.parametrize(
    ("raw", "kind", "items"),
    [
        ({"int": 3}, "int", (3,)),
        ({"int": -1}, "int", (-1,)),
        ({"string": "pci0000:00"}, "string", ("pci0000:00",)),
        ({"bool": True}, "bool", (True,)),
        ({"version": "1.2.3"}, "version", ("1.2.3",)),
        ({"ints": [0, 1]}, "ints", (0, 1)),
        ({"strings": ["pci0000:00", "pci0000:80"]}, "strings", ("pci0000:00", "pci0000:80")),
    ],
)
def test_values_keep_the_api_field_used(raw: dict[str, Any], kind: str, items: tuple[Any, ...]) -> None:
    v = parse_value(raw)
    assert (v.kind, v.items) == (kind, items)
    assert v.is_list == kind.endswith("s")
    assert v.base == kind.removesuffix("s")


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"int": 1, "string": "1"},  # exactly one value field
        {"int": "1"},  # a YAML file with a quoted number
        {"int": True},  # bool is not an int in the API
        {"ints": []},
        {"ints": [0, "1"]},
        {"strings": "pci0000:00"},
        "pci0000:00",
        None,
    ],
)
def test_anything_else_is_invalid_and_says_why(raw: Any) -> None:
    v = parse_value(raw)
    assert v.kind == "invalid" and v.problem
    assert v.items == ()


def test_show_and_json_round_trip() -> None:
    assert parse_value({"strings": ["a", "b"]}).show() == '["a", "b"]'
    assert parse_value({"bool": False}).show() == "false"
    assert parse_value({"ints": [1]}).to_json() == {"ints": [1]}


def test_unqualified_names_belong_to_the_driver() -> None:
    assert qualify("gpu.intel.com", "pciAddress") == "gpu.intel.com/pciAddress"
    assert qualify("gpu.intel.com", "resource.kubernetes.io/pcieRoot") == "resource.kubernetes.io/pcieRoot"


@pytest.mark.parametrize(
    ("name", "meaning"),
    [
        ("dra.net/numaNode", "numa"),
        ("dra.cpu/numaNodeID", "numa"),
        ("gpu.nvidia.com/numa", "numa"),
        ("dra.net/pciAddress", "address"),
        ("gpu.intel.com/pciRoot", "root"),
        ("dra.net/ifName", "interface"),
        ("dra.cpu/socketID", "socket"),
        ("cpu.topodra.io/cpus", "cpus"),
        ("gpu.intel.com/pciId", None),  # the PCI device id, not an address
        ("resource.kubernetes.io/numaNode", None),  # standard: checked as such
        ("topology.topodra.io/socket", None),
    ],
)
def test_driver_domain_names_are_classified(name: str, meaning: str | None) -> None:
    assert own_meaning(name) == meaning
