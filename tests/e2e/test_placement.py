"""The examples in deploy/examples, with their pods, on the real scheduler.

Every example with a constraint (numaNode, pcieRoot, pcieSwitch alignment; distinctAttribute
spread) is allocated and every allocation honours its constraint, checked here from the
allocated devices' attributes in the stored slices (not from the scheduler's word). Then the
count-only baseline and the alignment examples stripped of their constraints are allocated
too, and the test reports how often those came out misaligned (a figure, not an assertion:
with no constraint the scheduler owes no alignment).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.controlplane.cluster import unique_name
from tests.e2e.conftest import Fleet
from tests.e2e.workloads import (
    Example,
    Placement,
    Workloads,
    constraint_holds,
    load_examples,
    without_constraints,
)

pytestmark = pytest.mark.controlplane

REPLICAS = 2  # pods per constrained example
BASELINE = {"baseline-count-only": 8, "pcieroot-aligned": 3, "pcieswitch-aligned": 3}
# How "aligned" is judged for the unconstrained claims: the alignment examples' own constraints.
CHECKS = {
    "numaNode": ("resource.kubernetes.io/numaNode", ("cpus", "accelerator", "nic")),
    "pcieRoot": ("resource.kubernetes.io/pcieRoot", ("accelerator", "nic")),
    "pcieSwitch": ("topology.topodra.io/pcieSwitch", ("accelerator", "nic")),
}


@pytest.fixture
def workloads(fleet: Fleet) -> Iterator[Workloads]:
    w = Workloads(fleet.nodes["hgx"].cp, unique_name("e2e-place"))
    try:
        yield w
    finally:
        w.close()


def attributes(fleet: Fleet, placement: Placement) -> dict[tuple[str, str], Any]:
    node = fleet.by_name(placement.node)
    return node.device_attributes()


def check_allocation(fleet: Fleet, example: Example, placement: Placement) -> list[str]:
    """Every device from the pod's node, every constraint of the example held."""
    assert {r.pool for r in placement.results} == {placement.node}, placement.results
    terms = placement.claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert [f["values"] for t in terms for f in t.get("matchFields") or []] == [[placement.node]]
    assert sorted({r.request for r in placement.results}) == sorted(example.requests)
    attrs = attributes(fleet, placement)
    seen = []
    for constraint in example.constraints:
        devices = placement.by_request(constraint.get("requests"))
        ok, values = constraint_holds(constraint, devices, attrs)
        what = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        assert ok, f"{placement.pod} on {placement.node}: {what} not honoured: {values} ({devices})"
        seen.append(f"{what}={values}")
    return seen


def test_examples_are_allocated_aligned_and_the_baseline_reports_misalignment(
    fleet: Fleet, workloads: Workloads, record_property: Any
) -> None:
    examples = load_examples()
    constrained = {n: e for n, e in examples.items() if e.constraints}
    assert {"numa-aligned", "pcieroot-aligned", "pcieswitch-aligned", "spread-distinct"} <= set(constrained)
    assert not examples["baseline-count-only"].constraints
    # the baseline is the numa example without its constraint, as the file says
    assert (
        examples["baseline-count-only"].claim_spec["devices"]["requests"]
        == (examples["numa-aligned"].claim_spec["devices"]["requests"])
    )

    lines = []
    placed: dict[str, Placement] = {}
    for name, example in constrained.items():
        workloads.create_template(example, name)
        for i in range(REPLICAS):
            workloads.create_pod(example, f"{name}-{i}", name, fleet.node_selector())
    for name, example in constrained.items():
        for i in range(REPLICAS):
            p = workloads.wait_placed(f"{name}-{i}", timeout=90)
            placed[p.pod] = p
            lines.append(f"{p.pod:22} -> {fleet.by_name(p.node).spec.description:30} "
                         + "; ".join(check_allocation(fleet, example, p)))  # fmt: skip
    sys.stdout.write("\nconstrained examples (all aligned):\n" + "\n".join(lines) + "\n")
    for pod in placed:
        workloads.delete_pod(pod)

    # the baseline and the stripped alignment examples, on the now empty fleet
    unconstrained = {
        name: examples[name] if not examples[name].constraints else without_constraints(examples[name])
        for name in BASELINE
    }
    for name, example in unconstrained.items():
        workloads.create_template(example, example.name)
        for i in range(BASELINE[name]):
            workloads.create_pod(example, f"{example.name}-{i}", example.name, fleet.node_selector())
    tally: dict[str, list[bool]] = {check: [] for check in CHECKS}
    rows = []
    for name, example in unconstrained.items():
        for i in range(BASELINE[name]):
            p = workloads.wait_placed(f"{example.name}-{i}", timeout=90)
            check_allocation(fleet, example, p)  # placed, on one node (no constraint to check)
            attrs = attributes(fleet, p)
            verdicts = []
            for check, (key, requests) in CHECKS.items():
                if not set(requests) <= set(example.requests):
                    continue
                aligned, values = constraint_holds({"matchAttribute": key}, p.by_request(requests), attrs)
                tally[check].append(aligned)
                verdicts.append(f"{check}={'ok' if aligned else 'MIS'}{values}")
            rows.append(f"{p.pod:34} -> {fleet.by_name(p.node).spec.description:30} " + " ".join(verdicts))
    fractions = {c: (sum(not a for a in v) / len(v) if v else None) for c, v in tally.items()}
    summary = {c: f"{sum(not a for a in v)}/{len(v)}" for c, v in tally.items()}
    record_property("baseline_misaligned", json.dumps(summary))
    sys.stdout.write("\nunconstrained claims (count-only baseline and stripped examples):\n")
    sys.stdout.write("\n".join(rows) + "\n")
    sys.stdout.write(
        "misaligned without constraints: "
        + ", ".join(f"{c} {summary[c]} ({fractions[c]:.0%})" for c in CHECKS if fractions[c] is not None)
        + "\n"
    )
    assert all(tally.values())
