"""The best-locality claim shapes (hack/bench/fallback.py), checked without a cluster: within the
API's limits, every level tied, and valid for the 1.34 and 1.37 schemas. Their behaviour on the
real scheduler is tests/controlplane/test_fallback.py."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from hack.bench import fallback


def _names(spec: dict[str, Any]) -> set[str]:
    out = set()
    for r in spec["devices"]["requests"]:
        out.add(r["name"])
        out |= {f"{r['name']}/{s['name']}" for s in r.get("firstAvailable", [])}
    return out


@pytest.mark.parametrize("k", range(1, 9))
def test_within_the_api_limits_and_schemas(k: int) -> None:
    spec = fallback.best_locality_spec(k)
    devices = spec["devices"]
    assert len(devices["requests"]) <= 32 and len(devices["constraints"]) <= 32
    assert all(len(r.get("firstAvailable", [])) <= 8 for r in devices["requests"])
    names = _names(spec)
    for c in devices["constraints"]:
        assert set(c["requests"]) <= names and len(set(c["requests"])) == len(c["requests"])
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "x"},
        "spec": spec,
    }
    for version in ("1.34", "1.37"):
        kubernetes_validate.validate(body, version, strict=True)


def _ties(spec: dict[str, Any], attribute: str) -> set[tuple[str, str]]:
    """(accelerator subrequest, NIC subrequest) pairs that a tie constraint forbids together."""
    out = set()
    for c in spec["devices"]["constraints"]:
        if c.get("matchAttribute") != attribute:
            continue
        accs = [n for n in c["requests"] if n.startswith("accelerator")]
        nics = [n for n in c["requests"] if n.startswith("nic")]
        out |= {(a, n) for a in accs for n in nics}
    return out


@pytest.mark.parametrize("k", [1, 2])
def test_pairs_tie_every_accelerator_level_to_the_same_nic_level(k: int) -> None:
    spec = fallback.pair_spec(k)
    ties = _ties(spec, fallback.BUS_ID)
    for i in range(k):
        for a in fallback.PAIR_LEVELS:
            for n in fallback.PAIR_LEVELS:
                pair = (f"accelerator-{i}/{a}", f"nic-{i}/{n}")
                assert (pair in ties) == (a != n), pair
    # a tie never spans two pairs: each pair falls back on its own
    assert all(a.split("/")[0][-1] == n.split("/")[0][-1] for a, n in ties)


@pytest.mark.parametrize("k", [3, 4, 8])
def test_groups_tie_levels_on_kind_and_spread_on_rails(k: int) -> None:
    spec = fallback.group_spec(k)
    ties = _ties(spec, fallback.KIND)
    for a in fallback.GROUP_LEVELS:
        for n in fallback.GROUP_LEVELS:
            assert ((f"accelerators/{a}", f"nics/{n}") in ties) == (a != n)
    spread = [c["requests"] for c in spec["devices"]["constraints"] if c.get("distinctAttribute")]
    rails = [lv for lv in fallback.GROUP_LEVELS if lv.endswith("rails")]
    assert sorted(spread) == sorted([[f"accelerators/{lv}" for lv in rails], [f"nics/{lv}" for lv in rails]])
    counts = {s.get("count", 1) for r in spec["devices"]["requests"] for s in r.get("firstAvailable", [])}
    assert counts == {k}


def test_shape_by_size_and_level_names() -> None:
    assert fallback.best_locality_spec(2) == fallback.pair_spec(2)
    assert fallback.best_locality_spec(3) == fallback.group_spec(3)
    with pytest.raises(ValueError):
        fallback.pair_spec(3)
    assert fallback.level_of("nic-0/root") == "root"
    assert fallback.level_of("accelerators/numa-rails") == "numa-rails"
    assert fallback.level_of("accelerators") is None and fallback.level_of("x/other") is None
