"""Every captured machine: topodra's own slices check clean against topodra's own discovery.

The slices are built by the drivers and the publisher exactly as `topodra slices` prints them,
so a driver that publishes a value its own discovery contradicts (or leaves out one it knows)
fails here, on real machines' trees.
"""

from __future__ import annotations

import pytest
from topodra.common.check import build_report, node_devices
from topodra.common.topology import discover

from tests.check_kit import topodra_slices
from tests.conftest import FixtureTrees, fixture_names


@pytest.mark.parametrize("name", fixture_names())
@pytest.mark.parametrize("options", [(), ("--cpu-device-granularity", "core")], ids=["numa", "core"])
def test_own_slices_check_clean(fixture_trees: FixtureTrees, name: str, options: tuple[str, ...]) -> None:
    root = fixture_trees.root(name)
    report = build_report(discover(root), node_devices(topodra_slices(root, "n1", extra=options), "n1"))
    bad = [(d, dev, f.message) for d, dev, f in report.findings() if f.severity in ("error", "warning")]
    assert bad == []
    assert report.exit_code == 0


@pytest.mark.parametrize("name", fixture_names())
def test_list_attributes_only_warn_about_their_form(fixture_trees: FixtureTrees, name: str) -> None:
    """`--cpu-list-attributes` puts the roots local to a CPU device in a pcieRoot list: the values
    must be right; the form is a warning by design (the standard defines one string)."""
    root = fixture_trees.root(name)
    report = build_report(
        discover(root), node_devices(topodra_slices(root, "n1", extra=("--cpu-list-attributes",)), "n1")
    )
    bad = [(d, f.code) for d, _, f in report.findings() if f.severity in ("error", "warning")]
    assert all(code == "list-form" and d == "cpu.topodra.io" for d, code in bad), bad
    assert report.exit_code == 0
