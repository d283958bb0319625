"""Claimed CPUs are exclusive on the real node: the CPU driver as an NRI plugin of containerd.

Real Pods through the real scheduler, kubelet, containerd and runc; every container prints the
CPUs its process may run on (Cpus_allowed_list) three times a second, and the kubelet's log
timestamps say when. With the kubelet's CPU manager `none` (required with DRA CPU drivers), a
container without a claim would run on every CPU; here:

- a best-effort Pod started before a claim Pod, and one started after it, never show the claimed
  CPUs once the claim's container runs, and get them back after the claim is unprepared;
- a sidecar without a claim inside the claim's Pod runs on the shared pool;
- the shared pool keeps its minimum: a claim for the CPUs `--cpu-shared-min` keeps back is
  unschedulable, and no container is ever left without a CPU;
- a driver restart with a claim Pod running moves nobody onto the claimed CPUs, and a Pod
  created while the driver was away (which the runtime starts unadjusted, on every CPU) is
  corrected when the driver's NRI plugin synchronizes;
- a runtime restart with a claim Pod running: the driver says `hook` while containerd is away,
  reconnects and synchronizes with the new one, and a Pod created afterwards gets the shared pool.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator

import pytest
from topodra.common.topology import discover
from topodra.common.topology.parse import compress
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu.options import CpuOptions

from tests.controlplane.objects import eventually
from tests.node.cpu_host_driver import HostCpuDriver, Sample, cpu_samples, in_nri_mode
from tests.node.cpu_pods import claim_pod, cpu_claim, cpu_device_class, run, samples, watching_pod
from tests.node.node import RealNode
from tests.node.pods import delete_namespace, make_namespace, wait_gone

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def online() -> frozenset[int]:
    cpus = frozenset(discover("/").usable_cpus())
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: one to claim, one for the shared pool")
    return cpus


@pytest.fixture(scope="module")
def driver(real_node: RealNode, online: frozenset[int]) -> Iterator[HostCpuDriver]:
    cpu_device_class(real_node)
    with in_nri_mode(real_node) as d:
        yield d


@pytest.fixture
def ns(real_node: RealNode, driver: HostCpuDriver) -> Iterator[str]:
    name = make_namespace(real_node, "excl")
    yield name
    delete_namespace(real_node, name)  # the driver is still up: the kubelet unprepares


def after(seen: list[Sample], moment: datetime.datetime) -> list[Sample]:
    return [s for s in seen if s.at > moment]


def test_best_effort_pods_before_and_after_a_claim_never_share_its_cpus(
    real_node: RealNode, ns: str, online: frozenset[int], driver: HostCpuDriver
) -> None:
    early = run(real_node, ns, watching_pod(real_node, "early"))
    claimed, started = claim_pod(real_node, ns, "claimer")
    assert len(claimed) == 1 and claimed < online
    shared = online - claimed
    late = run(real_node, ns, watching_pod(real_node, "late"))
    time.sleep(2)  # a few more samples of everybody while the claim is held

    early_seen = samples(real_node, ns, early)
    assert any(s.cpus == online for s in early_seen if s.at < started)  # it had every CPU before
    held = after(early_seen, started)
    assert held and all(s.cpus == shared for s in held), [(s.at, sorted(s.cpus)) for s in held]
    late_seen = samples(real_node, ns, late)
    assert all(s.cpus == shared for s in late_seen), [sorted(s.cpus) for s in late_seen]
    assert all(s.cpus == claimed for s in samples(real_node, ns, "claimer"))

    real_node.core.delete_namespaced_pod("claimer", ns)
    wait_gone(real_node, ns, "claimer")  # the kubelet unprepared the claim
    for name in (early, late):
        eventually(
            f"{name} to get the claimed CPUs back",
            lambda name=name: cpu_samples(real_node, ns, name, "main")[-1].cpus == online,  # type: ignore[misc]
            30,
        )
    assert driver.metric("topodra_cpu_pinning_mode", driver=layout.DRIVER, mode="nri") == 1.0


def test_a_sidecar_without_a_claim_runs_on_the_shared_pool(
    real_node: RealNode, ns: str, online: frozenset[int]
) -> None:
    claimed, _ = claim_pod(real_node, ns, "withside", sidecar=True)
    side = samples(real_node, ns, "withside", "sidecar", at_least=3)
    assert all(s.cpus == online - claimed for s in side), [sorted(s.cpus) for s in side]
    assert all(s.cpus == claimed for s in samples(real_node, ns, "withside", at_least=3))


def test_the_shared_pool_keeps_its_minimum_whatever_is_asked(
    real_node: RealNode, ns: str, online: frozenset[int], driver: HostCpuDriver
) -> None:
    kept = layout.shared_keep(discover("/"), CpuOptions(shared_min=1))
    claimable = online - kept
    # every CPU the driver publishes, taken by claims of one CPU each
    names = []
    for i in range(len(claimable)):
        claimed, _ = claim_pod(real_node, ns, f"fill{i}")
        names.append(f"fill{i}")
        assert claimed <= claimable
    # one more is more than the published capacity: the scheduler cannot place it
    cpu_claim(real_node, ns, "over-claim")
    real_node.core.create_namespaced_pod(ns, watching_pod(real_node, "over", claim="over-claim"))

    def unschedulable() -> bool:
        p = real_node.core.read_namespaced_pod("over", ns)
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in p.status.conditions or []
        )

    eventually("the extra claim's pod to be unschedulable", unschedulable, 60)
    # and a container without a claim still has the kept CPUs to run on
    spare = run(real_node, ns, watching_pod(real_node, "spare"))
    assert all(s.cpus == kept for s in samples(real_node, ns, spare, at_least=3))
    assert driver.detail()["shared_pool"] == compress(sorted(kept))


def test_driver_restart_moves_nobody_onto_claimed_cpus_and_corrects_pods_started_meanwhile(
    real_node: RealNode, ns: str, online: frozenset[int], driver: HostCpuDriver
) -> None:
    steady = run(real_node, ns, watching_pod(real_node, "steady"))
    claimed, started = claim_pod(real_node, ns, "holder")
    shared = online - claimed

    driver.stop()
    try:
        meanwhile = run(real_node, ns, watching_pod(real_node, "meanwhile"))
        # nobody adjusted it: the runtime started it on every CPU, the claimed ones included
        assert samples(real_node, ns, meanwhile)[0].cpus == online
    finally:
        driver.start()
    eventually("NRI mode again", lambda: driver.detail().get("pinning") == "nri", 30)
    moved = eventually(
        "the pod started meanwhile to be moved to the shared pool",
        lambda: (last := cpu_samples(real_node, ns, meanwhile, "main")[-1]).cpus == shared and last,
        30,
    )
    time.sleep(2)
    # the claim's container kept its CPUs throughout; the steady pod never went back to them
    assert all(s.cpus == claimed for s in samples(real_node, ns, "holder"))
    steady_seen = after(samples(real_node, ns, steady), started)
    assert steady_seen and all(s.cpus == shared for s in steady_seen)
    fixed = after(samples(real_node, ns, meanwhile), moved.at)
    assert fixed and all(s.cpus == shared for s in fixed)
    assert "restored CPU holdings of" in driver.log_text()


def test_runtime_restart_keeps_the_claim_exclusive_and_pins_pods_created_after_it(
    real_node: RealNode, ns: str, online: frozenset[int], driver: HostCpuDriver
) -> None:
    steady = run(real_node, ns, watching_pod(real_node, "steady"))
    claimed, started = claim_pod(real_node, ns, "holder")
    shared = online - claimed
    try:
        real_node.containerd.stop()
        # without the runtime the driver cannot promise exclusivity, and says so
        eventually(
            "hook mode while the runtime is away", lambda: driver.detail().get("pinning") == "hook", 30
        )
        real_node.containerd.start()
        eventually("NRI mode with the new runtime", lambda: driver.detail().get("pinning") == "nri", 60)
    finally:
        real_node.wait_node_ready()
    after_restart = run(real_node, ns, watching_pod(real_node, "later"))
    time.sleep(2)
    later_seen = samples(real_node, ns, after_restart)
    assert all(s.cpus == shared for s in later_seen), [sorted(s.cpus) for s in later_seen]
    assert all(s.cpus == claimed for s in samples(real_node, ns, "holder"))
    steady_seen = after(samples(real_node, ns, steady), started)
    assert steady_seen and all(s.cpus == shared for s in steady_seen), [sorted(s.cpus) for s in steady_seen]
