"""Kubelet and control-plane behaviour the drivers must survive, without restarts.

- A kubelet starting up deletes all ResourceSlices of its node (DeleteCollection with field
  selector spec.nodeName=<node>); the drivers must republish them within 5 s. That bound is a
  behaviour, not a speed target: a driver that only notices at a periodic resync (the upstream
  helper waits 30 s, ours 600 s) fails it by a wide margin, one that watches passes with room.
- The API server is stopped and started again (same etcd): every driver process keeps running,
  re-syncs slices that were deleted right after the restart (before its watch reconnected;
  a delete during the outage itself cannot be made, there is no server to take it),
  and prepares a claim that was created after the restart.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import kubernetes.client as k8s
import pytest

from tests.controlplane.cluster import unique_name
from tests.e2e.conftest import Fleet
from tests.e2e.nodes import SimNode
from tests.e2e.workloads import Workloads, load_examples

pytestmark = pytest.mark.controlplane

REPUBLISH_BOUND = 5.0  # seconds, from the issue
WAIT = 60.0  # how long to wait before calling it broken (longer than the bound: to measure)


def wipe(node: SimNode) -> set[str]:
    """What the kubelet does at start; returns the UIDs of the slices that were there."""
    before = {s["metadata"]["uid"] for s in node.slices()}
    k8s.ResourceV1Api(node.cp.admin).delete_collection_resource_slice(
        field_selector=f"spec.nodeName={node.name}"
    )
    return before


def wait_republished(node: SimNode, old_uids: set[str], began: float, timeout: float = WAIT) -> float:
    """Seconds from `began` until the node's slices equal `topodra slices` again, all new objects."""
    expected = node.expected_devices()
    deadline = began + timeout
    while time.monotonic() < deadline:
        node.check_alive()
        slices = node.slices()
        uids = {s["metadata"]["uid"] for s in slices}
        if not uids & old_uids and node.published_devices() == expected:
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"{node.name}: slices not republished {timeout:.0f} s after the wipe\n{node.logs()}")


@pytest.fixture
def workloads(fleet: Fleet) -> Iterator[Workloads]:
    w = Workloads(fleet.nodes["hgx"].cp, unique_name("e2e-survive"))
    try:
        yield w
    finally:
        w.close()


def test_a_kubelet_wipe_of_the_nodes_slices_is_republished_within_5s(
    fleet: Fleet, record_property: Any
) -> None:
    for node in fleet.nodes.values():
        node.wait_published()
    took = {}
    for role, node in fleet.nodes.items():
        pids = {k: p.pid for k, p in node.drivers.items()}
        began = time.monotonic()
        old = wipe(node)
        assert old, f"{role}: nothing to wipe"
        took[role] = wait_republished(node, old, began)
        assert {k: p.pid for k, p in node.drivers.items()} == pids
    record_property("republish_seconds", json.dumps({r: round(t, 2) for r, t in took.items()}))
    sys.stdout.write(
        "\nrepublish after a kubelet-style wipe (all drivers of the node): "
        + ", ".join(f"{r} {t:.2f} s" for r, t in took.items())
        + f"; median {statistics.median(took.values()):.2f} s, max {max(took.values()):.2f} s\n"
    )
    slow = {r: t for r, t in took.items() if t > REPUBLISH_BOUND}
    assert not slow, f"republished later than {REPUBLISH_BOUND} s: {slow}"


def test_drivers_recover_from_an_apiserver_restart_without_restarting(
    fleet: Fleet, workloads: Workloads, record_property: Any
) -> None:
    cp = fleet.nodes["hgx"].cp
    for node in fleet.nodes.values():
        node.wait_published()
    pids = {(n.name, k): p.pid for n in fleet.nodes.values() for k, p in n.drivers.items()}

    stopping = time.monotonic()
    cp.stop_apiserver()
    outage = time.monotonic()
    time.sleep(3.0)  # the drivers' watches and syncs fail and back off meanwhile
    for node in fleet.nodes.values():
        node.check_alive()
    cp.start_apiserver()
    back = time.monotonic()
    # Every node wiped as soon as the server answers: the drivers' watches are still backing
    # off, so each of the 12 publishers must notice from its relist, not from a watch event.
    old = {role: wipe(node) for role, node in fleet.nodes.items()}
    healed = {role: wait_republished(node, old[role], back) for role, node in fleet.nodes.items()}
    hgx = fleet.nodes["hgx"]
    healed_at = time.monotonic()

    # a claim created after the restart, allocated by the scheduler and prepared on the node
    example = load_examples()["pcieswitch-aligned"]
    workloads.create_template(example, "after-restart")
    workloads.create_pod(
        example, "after-restart", "after-restart", {**fleet.node_selector(), "topodra.io/e2e-machine": "hgx"}
    )
    placed = workloads.wait_placed("after-restart", timeout=90)
    assert placed.node == hgx.name
    allocated_at = time.monotonic()
    drivers = {r.driver for r in placed.results}
    answers = hgx.prepare(placed.claim_ref, drivers)
    for driver, answer in answers.items():
        assert answer.error == "", f"{driver}: {answer.error}"
        assert {d.device_name for d in answer.devices} == {
            r.device for r in placed.results if r.driver == driver
        }
    assert hgx.unprepare(placed.claim_ref, drivers) == {d: "" for d in drivers}
    prepared_at = time.monotonic()
    workloads.delete_pod("after-restart")

    assert {(n.name, k): p.pid for n in fleet.nodes.values() for k, p in n.drivers.items()} == pids
    for node in fleet.nodes.values():
        node.check_alive()
    down = back - outage
    record_property("apiserver_outage_seconds", round(down, 1))
    record_property("resync_after_restart_seconds", json.dumps({r: round(t, 2) for r, t in healed.items()}))
    sys.stdout.write(
        f"\napiserver down {down:.1f} s; slices equal again after it answered: "
        + ", ".join(f"{r} {t:.2f} s" for r, t in healed.items())
        + " (every node wiped right after the restart)\n"
        + f"phases: stop {outage - stopping:.1f} s, start {back - outage - 3.0:.1f} s, "
        + f"heal {healed_at - back:.1f} s, claim allocated {allocated_at - healed_at:.1f} s "
        + f"(scheduler and claim controller reconnecting), prepared {prepared_at - allocated_at:.1f} s\n"
    )
