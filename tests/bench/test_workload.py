"""The placement study's job mix and claim shapes (pure, no cluster)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import kubernetes_validate
import pytest

from hack.bench.workload import (
    ALIGNED,
    ALIGNED_LEAF,
    COUNT_ONLY,
    CPU_CAPACITY,
    LEAF_SWITCH,
    NUMA,
    SWITCH,
    Job,
    claim_body,
    generate,
    pod_body,
)


def test_same_seed_same_jobs_and_order() -> None:
    assert generate(7, 128) == generate(7, 128)
    assert generate(7, 128) != generate(8, 128)


def test_demand_stops_just_past_oversubscription() -> None:
    jobs = generate(3, 100, oversubscription=1.5)
    demand = sum(j.accelerators for j in jobs)
    assert demand >= 150
    assert demand - jobs[-1].accelerators < 150  # the last job is the one that crossed the line
    assert [j.index for j in jobs] == list(range(len(jobs)))
    assert len({j.name for j in jobs}) == len(jobs)


def test_mix_is_followed() -> None:
    jobs = generate(1, 20000, mix={1: 0.5, 8: 0.5})
    sizes = Counter(j.accelerators for j in jobs)
    assert set(sizes) == {1, 8}
    assert abs(sizes[1] / len(jobs) - 0.5) < 0.03


@pytest.mark.parametrize(
    "kwargs",
    [
        {"total_accelerators": 0},
        {"total_accelerators": 8, "oversubscription": 0},
        {"total_accelerators": 8, "mix": {3: 1.0}},
        {"total_accelerators": 8, "mix": {1: 0.0}},
        {"total_accelerators": 8, "mix": {1: -1.0, 2: 2.0}},
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        generate(1, **kwargs)


def _requests(body: dict[str, Any]) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = body["spec"]["devices"]["requests"]
    return requests


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_count_only_claim_asks_for_totals_without_constraints(k: int) -> None:
    job = Job(0, k)
    body = claim_body(job, COUNT_ONLY)
    reqs = {r["name"]: r["exactly"] for r in _requests(body)}
    assert "constraints" not in body["spec"]["devices"]
    assert reqs["accelerators"].get("count", 1) == k
    assert reqs["nics"].get("count", 1) == k
    assert reqs["cpus"]["capacity"]["requests"][CPU_CAPACITY] == str(4 * k)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_aligned_claim_pins_each_pair(k: int) -> None:
    body = claim_body(Job(0, k), ALIGNED)
    reqs = _requests(body)
    cons = body["spec"]["devices"]["constraints"]
    names = [r["name"] for r in reqs]
    assert len(names) == len(set(names)) == 3 * k <= 32  # API limit: 32 requests
    assert len(cons) == 2 * k <= 32
    for c in cons:
        assert set(c["requests"]) <= set(names)
    switch = [frozenset(c["requests"]) for c in cons if c["matchAttribute"] == SWITCH]
    numa = [frozenset(c["requests"]) for c in cons if c["matchAttribute"] == NUMA]
    assert switch == [frozenset({f"accelerator-{i}", f"nic-{i}"}) for i in range(k)]
    assert numa == [frozenset({f"cpus-{i}", f"accelerator-{i}", f"nic-{i}"}) for i in range(k)]
    # the same devices and CPUs as the count-only claim, only split into pairs
    total_cpus = sum(
        int(r["exactly"]["capacity"]["requests"][CPU_CAPACITY]) for r in reqs if "capacity" in r["exactly"]
    )
    assert total_cpus == 4 * k
    assert sum(1 for n in names if n.startswith("accelerator-")) == k
    assert sum(1 for n in names if n.startswith("nic-")) == k


def test_the_leaf_scenario_is_b_with_each_pair_on_one_leaf_switch() -> None:
    """The leaf-switch study's claims (hack/bench/leaf_switch.py): scenario B's, the pair
    constraints on pcieLeafSwitch instead of pcieSwitch, nothing else changed."""
    for k in (1, 8):
        b, leaf = claim_body(Job(0, k), ALIGNED), claim_body(Job(0, k), ALIGNED_LEAF)
        swapped = json.loads(json.dumps(b["spec"]).replace(SWITCH, LEAF_SWITCH))
        assert leaf["spec"] == swapped and swapped != b["spec"]


def test_unknown_scenario_is_named() -> None:
    with pytest.raises(ValueError, match="nope"):
        claim_body(Job(0, 1), "nope")


@pytest.mark.parametrize("version", ["1.34", "1.37"])
@pytest.mark.parametrize("scenario", [COUNT_ONLY, ALIGNED])
def test_bodies_pass_the_api_schema(version: str, scenario: str) -> None:
    """kubernetes-validate's bundled OpenAPI schemas, strict (unknown fields rejected)."""
    job = Job(5, 8)
    for body in (claim_body(job, scenario), pod_body(job)):
        kubernetes_validate.validate(body, version, strict=True)


def test_pod_uses_the_claim_of_the_same_name() -> None:
    job = Job(3, 2)
    pod = pod_body(job)
    assert pod["metadata"]["name"] == job.name == claim_body(job, ALIGNED)["metadata"]["name"]
    assert pod["spec"]["resourceClaims"] == [{"name": "devices", "resourceClaimName": job.name}]
