"""The `--accelerator-*` flags: id lists parsed and refused with the value named, defaults, and
the registry's create() on a wrong root."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from topodra.drivers import registry
from topodra.drivers.accelerator import options
from topodra.drivers.accelerator.options import IdMatch, OptionError, parse_id, parse_ids


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="topodra", exit_on_error=False)
    registry.add_arguments(p, list(registry.KINDS))  # all three drivers' flags on one parser
    return p


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("10de:2330", IdMatch(0x10DE, 0x2330)),
        ("0x1002:0x740F", IdMatch(0x1002, 0x740F)),
        (" 1da3:* ", IdMatch(0x1DA3, None)),
        ("1A03:2000", IdMatch(0x1A03, 0x2000)),
    ],
)
def test_ids_parse(text: str, want: IdMatch) -> None:
    assert parse_id(text) == want


@pytest.mark.parametrize(
    "text", ["10de", "10de:", "nvidia", "10de:23301", "10d:2330", "*:2330", "10de:2g30", "10de:**"]
)
def test_bad_ids_are_refused_naming_the_value(text: str) -> None:
    with pytest.raises(OptionError, match=r"is not vendor:device: two 4-digit hex PCI ids"):
        parse_id(text)


def test_lists_skip_empty_items() -> None:
    assert parse_ids("10de:*,, 1002:740f,") == [IdMatch(0x10DE, None), IdMatch(0x1002, 0x740F)]
    assert parse_ids("") == []


def test_matching() -> None:
    assert IdMatch(0x10DE, None).matches(0x10DE, 0x1234)
    assert not IdMatch(0x10DE, None).matches(0x1002, 0x1234)
    assert IdMatch(0x10DE, 0x2330).matches(0x10DE, 0x2330)
    assert not IdMatch(0x10DE, 0x2330).matches(0x10DE, 0x2331)
    assert not IdMatch(0x10DE, None).matches(None, None)
    assert str(IdMatch(0x10DE, None)) == "10de:*" and str(IdMatch(0x1002, 0x740F)) == "1002:740f"


def test_flags_reach_the_options() -> None:
    args = parser().parse_args(
        [
            "--accelerator-include",
            "10de:*,1002:740f",
            "--accelerator-include",
            "1da3:1020",
            "--accelerator-exclude",
            "10de:2330",
            "--accelerator-dev-root",
            "/tmp/devroot",
            "--accelerator-taint-unhealthy",
            "--accelerator-node-check",
            "exists",
            "--accelerator-pci-ids",
            "/x/pci.ids",
        ]
    )
    o = options.from_args(args, Path("/host"), "node-a")
    assert o.include == (IdMatch(0x10DE, None), IdMatch(0x1002, 0x740F), IdMatch(0x1DA3, 0x1020))
    assert o.exclude == (IdMatch(0x10DE, 0x2330),)
    assert o.dev_root == Path("/tmp/devroot") and o.taint_unhealthy and o.node_check == "exists"
    assert o.pci_ids == ("/x/pci.ids",) and o.sysfs_root == Path("/host") and o.node_name == "node-a"


def test_defaults() -> None:
    o = options.from_args(parser().parse_args([]), Path("/"), "n")
    assert (o.include, o.exclude, o.dev_root, o.taint_unhealthy, o.node_check) == (
        (),
        (),
        Path("/"),
        False,
        "strict",
    )
    assert o.rescan_interval == 5.0 and o.pci_ids == ()
    # a namespace built by hand (tests, embedding) may carry strings; they are parsed the same way
    hand = options.from_args(argparse.Namespace(accelerator_include=["10de:*"]), Path("/"), "n")
    assert hand.include == (IdMatch(0x10DE, None),)
    with pytest.raises(OptionError):
        options.from_args(argparse.Namespace(accelerator_exclude=["bogus"]), Path("/"), "n")


def test_a_bad_flag_value_is_an_argparse_error_naming_the_flag() -> None:
    with pytest.raises(argparse.ArgumentError, match="'zz:1' is not vendor:device"):
        parser().parse_args(["--accelerator-exclude", "zz:1"])


def test_create_refuses_a_root_without_sysfs(tmp_path: Path) -> None:
    from topodra.common.topology.discover import NotASysfsTree

    common = registry.CommonOptions(tmp_path, "node-a", parser().parse_args([]))
    with pytest.raises(NotASysfsTree, match="is not a sysfs root"):
        registry.create("accelerator", common)
