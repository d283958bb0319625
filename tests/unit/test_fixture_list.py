"""The captured machines are what several tiers parametrize over (discovery against hwloc and
the captures' expected views, the NIC driver's slices, `topodra slices`). Without them pytest
turns each of those into an empty parameter set, which it skips quietly: in CI that must fail."""

from __future__ import annotations

from tests.conftest import FIXTURES, fixture_names, skip_or_fail


def test_the_captured_machines_are_there() -> None:
    names = fixture_names()
    if not names:
        skip_or_fail(f"no captured machines in {FIXTURES}: every test parametrized over them would not run")
    missing = [n for n in names if not (FIXTURES / f"{n}.expected.json").is_file()]
    assert not missing, f"captures without their expected view: {missing}"
