"""The placement study's workload: a seeded mix of jobs, and the claims each scenario submits.

Pure functions only, so tests/bench checks the shapes without a cluster and every scenario is
guaranteed to submit the same jobs in the same order; only the claim differs: A count-only, B
strict pairs, C best locality with fallback (hack/bench/fallback.py, the shipped templates).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hack.bench.fallback import best_locality_spec

SIZES = (1, 2, 4, 8)
# Share of jobs (by count) wanting 1, 2, 4 or 8 accelerators.
DEFAULT_MIX: Mapping[int, float] = {1: 0.35, 2: 0.30, 4: 0.20, 8: 0.15}
CPUS_PER_ACCELERATOR = 4

ACCELERATOR_CLASS = "accelerator.topodra.io"
NIC_CLASS = "nic.topodra.io"
CPU_CLASS = "cpu.topodra.io"
CPU_CAPACITY = "cpu.topodra.io/cpu"
SWITCH = "topology.topodra.io/pcieSwitch"
LEAF_SWITCH = "topology.topodra.io/pcieLeafSwitch"
NUMA = "resource.kubernetes.io/numaNode"

COUNT_ONLY = "count-only"
ALIGNED = "aligned"
BEST = "best-locality"
SCENARIOS = (COUNT_ONLY, ALIGNED, BEST)
# B with each pair on one leaf switch instead of one switch: the leaf-switch study's second
# scenario (hack/bench/leaf_switch.py), not one of the placement study's
ALIGNED_LEAF = "aligned-leaf"


@dataclass(frozen=True, slots=True)
class Job:
    """One pod: k accelerators, k NICs (one per accelerator) and CPUs in proportion."""

    index: int
    accelerators: int
    cpus_per_accelerator: int = CPUS_PER_ACCELERATOR

    @property
    def nics(self) -> int:
        return self.accelerators

    @property
    def cpus(self) -> int:
        return self.accelerators * self.cpus_per_accelerator

    @property
    def name(self) -> str:
        return f"job-{self.index:03d}-{self.accelerators}acc"


def generate(
    seed: int,
    total_accelerators: int,
    *,
    oversubscription: float = 1.5,
    mix: Mapping[int, float] = DEFAULT_MIX,
    cpus_per_accelerator: int = CPUS_PER_ACCELERATOR,
) -> list[Job]:
    """Jobs in submission order until their accelerators reach `oversubscription` x the cluster's.

    Asking for more than fits is the point: submission goes on until nothing more fits, so what
    each scenario leaves unplaced (and stranded) is measured, not assumed.
    """
    if total_accelerators <= 0:
        raise ValueError(f"total_accelerators must be positive, got {total_accelerators}")
    if oversubscription <= 0:
        raise ValueError(f"oversubscription must be positive, got {oversubscription}")
    sizes = sorted(mix)
    if not sizes or any(s not in SIZES for s in sizes) or any(mix[s] < 0 for s in sizes):
        raise ValueError(f"mix must weigh sizes among {SIZES} with non-negative weights, got {dict(mix)}")
    weights = [mix[s] for s in sizes]
    if sum(weights) <= 0:
        raise ValueError("mix weights sum to zero")
    rng = random.Random(seed)
    jobs: list[Job] = []
    demand = 0
    while demand < oversubscription * total_accelerators:
        k = rng.choices(sizes, weights)[0]
        jobs.append(Job(len(jobs), k, cpus_per_accelerator))
        demand += k
    return jobs


def _request(name: str, device_class: str, count: int = 1, cpus: int | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if count != 1:
        exactly["count"] = count
    if cpus is not None:
        exactly["capacity"] = {"requests": {CPU_CAPACITY: str(cpus)}}
    return {"name": name, "exactly": exactly}


def count_only_spec(job: Job) -> dict[str, Any]:
    """Scenario A: the deploy/examples baseline shape scaled to k (counts, no constraints)."""
    requests = [
        _request("cpus", CPU_CLASS, cpus=job.cpus),
        _request("accelerators", ACCELERATOR_CLASS, count=job.accelerators),
        _request("nics", NIC_CLASS, count=job.nics),
    ]
    return {"devices": {"requests": requests}}


def aligned_spec(job: Job, switch: str = SWITCH) -> dict[str, Any]:
    """Scenario B: k (accelerator, NIC, CPU share) triples, each pinned to one switch and NUMA node.

    One matchAttribute over all k accelerators and k NICs would demand a single switch for all
    2k devices, which no machine here has for k > 1 (one accelerator and one NIC per switch), so
    the claim names k pairs. Each pair's accelerator and NIC match on pcieSwitch; the pair's CPU
    share matches both on numaNode (the CPU driver's NUMA device is consumable, so several shares
    may come from one device). Nothing ties pairs to each other: an 8-pair job may span sockets,
    as it must on a 2-socket machine.
    """
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    for i in range(job.accelerators):
        acc, nic, cpu = f"accelerator-{i}", f"nic-{i}", f"cpus-{i}"
        requests += [
            _request(acc, ACCELERATOR_CLASS),
            _request(nic, NIC_CLASS),
            _request(cpu, CPU_CLASS, cpus=job.cpus_per_accelerator),
        ]
        constraints += [
            {"requests": [acc, nic], "matchAttribute": switch},
            {"requests": [cpu, acc, nic], "matchAttribute": NUMA},
        ]
    return {"devices": {"requests": requests, "constraints": constraints}}


def claim_body(job: Job, scenario: str) -> dict[str, Any]:
    if scenario == COUNT_ONLY:
        spec = count_only_spec(job)
    elif scenario == ALIGNED:
        spec = aligned_spec(job)
    elif scenario == ALIGNED_LEAF:
        spec = aligned_spec(job, LEAF_SWITCH)
    elif scenario == BEST:
        spec = best_locality_spec(job.accelerators, job.cpus_per_accelerator)
    else:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {(*SCENARIOS, ALIGNED_LEAF)}")
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": job.name, "labels": {"topodra.io/bench": "placement"}},
        "spec": spec,
    }


def pod_body(job: Job) -> dict[str, Any]:
    """A pod using the job's claim (same name); no kubelet runs it, the scheduler only binds it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": job.name, "labels": {"topodra.io/bench": "placement"}},
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimName": job.name}],
            "containers": [
                {
                    "name": "app",
                    "image": "topodra.invalid/bench:placement",
                    "resources": {"claims": [{"name": "devices"}]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }
