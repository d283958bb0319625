"""The registry entry point: flags parsed by the CLI's parser become the driver's options."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from topodra.drivers import registry
from topodra.drivers.cpu import NAME, discovery_root

from tests.conftest import FixtureTrees
from tests.kit.inventory import published_list


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    registry.add_arguments(parser, ["cpu"])
    return parser.parse_args(argv)


def test_flags_reach_the_driver(fixture_trees: FixtureTrees, tmp_path: Path) -> None:
    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    args = parse(
        ["--cpu-device-granularity", "core", "--cpu-reserved-cpus", "0,16", "--cpu-hook-dir", str(tmp_path)]
    )
    driver = registry.create("cpu", registry.CommonOptions(root, "node-a", args))
    assert driver.name == NAME
    names = [d.name for d in published_list(driver)]
    # core (0,16) is reserved; core (1,17) is kept for the shared pool (--cpu-shared-min 1)
    assert len(names) == 14 and "core-0-0" not in names and "core-0-1" not in names
    assert driver.withheld == frozenset({0, 16, 1, 17})  # type: ignore[attr-defined]


def test_shared_min_flag(fixture_trees: FixtureTrees, tmp_path: Path) -> None:
    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    common = ["--cpu-device-granularity", "core", "--cpu-hook-dir", str(tmp_path)]
    with pytest.raises(ValueError, match="--cpu-shared-min 0 without --cpu-reserved-cpus"):
        registry.create(
            "cpu", registry.CommonOptions(root, "node-a", parse([*common, "--cpu-shared-min", "0"]))
        )
    args = parse([*common, "--cpu-shared-min", "0", "--cpu-reserved-cpus", "0,16"])
    names = [d.name for d in published_list(registry.create("cpu", registry.CommonOptions(root, "n", args)))]
    assert len(names) == 15 and "core-0-0" not in names
    # three CPUs are asked for: two whole cores are kept, the lowest ones
    args = parse([*common, "--cpu-shared-min", "3"])
    names = [d.name for d in published_list(registry.create("cpu", registry.CommonOptions(root, "n", args)))]
    assert len(names) == 14 and "core-0-0" not in names and "core-0-1" not in names


def test_default_flags(fixture_trees: FixtureTrees) -> None:
    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    driver = registry.create("cpu", registry.CommonOptions(root, "node-a", parse([])))
    assert [d.name for d in published_list(driver)] == ["numa-0", "numa-1"]
    # the flag's default keeps one whole core (CPUs 0 and 16) for the shared pool
    capacity = {d.name: d.capacity["cpu.topodra.io/cpu"].value for d in published_list(driver)}
    assert capacity == {"numa-0": "14", "numa-1": "16"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--cpu-reserved-cpus", "0-"],
        ["--cpu-device-granularity", "thread"],
        ["--cpu-pinning", "nri"],
        ["--cpu-shared-min", "x"],
    ],
)
def test_bad_flags_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert "--cpu-" in capsys.readouterr().err


def test_relative_hook_dir_is_refused(
    fixture_trees: FixtureTrees, capsys: pytest.CaptureFixture[str]
) -> None:
    """By the parser (one line, exit 2) and, for a namespace built by hand, by the options."""
    with pytest.raises(SystemExit) as exit_:
        parse(["--cpu-hook-dir", "hooks"])
    assert exit_.value.code == 2
    assert "argument --cpu-hook-dir: 'hooks' is not an absolute path" in capsys.readouterr().err
    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    by_hand = argparse.Namespace(cpu_hook_dir=Path("hooks"))
    with pytest.raises(ValueError, match="--cpu-hook-dir must be an absolute path"):
        registry.create("cpu", registry.CommonOptions(root, "node-a", by_hand))


def test_sysfs_mount_itself_is_accepted(fixture_trees: FixtureTrees) -> None:
    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    assert discovery_root(root / "sys") == root
    assert discovery_root(root) == root
    via_mount = registry.create("cpu", registry.CommonOptions(root / "sys", "node-a", parse([])))
    assert [d.name for d in published_list(via_mount)] == ["numa-0", "numa-1"]
