"""Pair alignment follows the scheduler's matchAttribute rules, independent of any machine."""

from __future__ import annotations

from typing import Any

from topodra.common.check.align import Placed, align_pair
from topodra.common.check.attrs import parse_value
from topodra.common.check.devices import SliceDevice
from topodra.common.check.truth import Truth

ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"


def placed(
    driver: str,
    name: str,
    attrs: dict[str, Any],
    truth: Truth | None = None,
    bad: frozenset[str] = frozenset(),
) -> Placed:
    dev = SliceDevice(driver, "pool", name, {k: parse_value(v) for k, v in attrs.items()})
    return Placed(dev, truth or Truth("?", False, False), bad)


def level(a: list[Placed], b: list[Placed], name: str) -> Any:
    return next(lv for lv in align_pair("a", a, "b", b).levels if lv.level == name)


def test_equal_scalars_of_one_type_align() -> None:
    lv = level([placed("a", "x", {NUMA: {"int": 0}})], [placed("b", "y", {NUMA: {"int": 0}})], "numa")
    assert (lv.verdict, lv.via, lv.keys[0].pairs) == ("yes", NUMA, 1)


def test_an_int_never_meets_a_string() -> None:
    lv = level([placed("a", "x", {NUMA: {"int": 0}})], [placed("b", "y", {NUMA: {"string": "0"}})], "numa")
    assert lv.verdict == "no" and lv.keys[0].pairs == 0


def test_lists_meet_by_intersection() -> None:
    a = [placed("a", "cpu", {ROOT: {"strings": ["pci0000:00", "pci0000:80"]}})]
    b = [
        placed("b", "gpu", {ROOT: {"string": "pci0000:80"}}),
        placed("b", "gpu2", {ROOT: {"string": "pci0000:40"}}),
    ]
    lv = level(a, b, "root")
    assert (lv.verdict, lv.keys[0].pairs) == ("yes", 1)


def test_a_missing_name_is_a_gap_the_report_names() -> None:
    t = Truth("PCI", True, True, numa=0)
    lv = level(
        [placed("a", "x", {NUMA: {"int": 0}}, t)], [placed("b", "y", {"b/numa": {"int": 0}}, t)], "numa"
    )
    assert lv.verdict == "no"
    assert lv.add == (("b", NUMA),)
    assert "b publishes no" in lv.reason


def test_no_suggestion_where_the_machine_has_no_shared_place() -> None:
    a = [placed("a", "x", {NUMA: {"int": 0}}, Truth("PCI", True, True, numa=0))]
    b = [placed("b", "y", {}, Truth("PCI", True, True, numa=1))]
    lv = level(a, b, "numa")
    assert lv.verdict == "no" and lv.add == () and not lv.machine


def test_shared_driver_domain_names_are_tried_and_labelled() -> None:
    a = [placed("a", "x", {"dra.net/numaNode": {"int": 1}})]
    b = [placed("b", "y", {"dra.net/numaNode": {"int": 1}})]
    lv = level(a, b, "numa")
    assert (lv.verdict, lv.via) == ("yes", "dra.net/numaNode")
    assert [k.key for k in lv.keys] == [NUMA, "dra.net/numaNode"]


def test_meeting_only_through_bad_values_is_false() -> None:
    a = [placed("a", "x", {NUMA: {"int": 0}}, bad=frozenset({NUMA}))]
    b = [placed("b", "y", {NUMA: {"int": 0}})]
    assert level(a, b, "numa").verdict == "false"
