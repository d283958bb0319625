"""What happens to a running Pod's claims when the node's parts come and go (real kubelet,
real DaemonSets): a driver restarted, the kubelet restarted, a driver down while a Pod is
created or deleted, a rolling update of each DaemonSet. Each time nothing is lost (the Pod keeps
its container, its CPUs, device nodes and NIC) and nothing doubled (each checkpoint holds the
claim once, one CDI spec per driver), and a later delete releases everything.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from tests.controlplane.processes import wait_until
from tests.node.claims import claim_cpus
from tests.node.drivers import KINDS, Drivers, bring_up, restart_driver, roll, take_down
from tests.node.pods import delete_namespace, describe, make_namespace
from tests.node.workload import Workload

pytestmark = pytest.mark.node

ONCE = dict.fromkeys(KINDS, 1)
REGISTERED = "kubelet registered the plugin"  # the drivers' log line when the kubelet confirms


@pytest.fixture
def ns(node_drivers: Drivers) -> Iterator[str]:
    name = make_namespace(node_drivers.node, "life")
    yield name
    delete_namespace(node_drivers.node, name)


def _figure(what: str, seconds: float) -> None:
    sys.stderr.write(f"\nreal node figure: {what}: {seconds:.1f} s\n")


def started(drivers: Drivers, ns: str, prefix: str) -> Workload:
    w = Workload.create(drivers, ns, prefix)
    w.wait_running()
    w.assert_intact()
    assert w.held_by() == ONCE
    assert len(w.cdi_specs()) == len(KINDS), w.cdi_specs()
    return w


def test_driver_restart_keeps_the_pod_and_the_new_instance_releases_it(
    node_drivers: Drivers, ns: str
) -> None:
    w = started(node_drivers, ns, "drv")
    for kind in KINDS:
        began = time.monotonic()
        restart_driver(node_drivers, kind)
        _figure(f"{kind} driver restart to Ready", time.monotonic() - began)
    w.assert_intact()
    assert w.held_by() == ONCE
    # the new instances prepare a new claim and release the old one; where a device has room
    # for two one-CPU claims beside the shared pool's CPUs, the two share the NUMA device
    # (consumable capacity, one share each) but never a CPU; else one after the other
    room = max(int(d["capacity"]["cpu.topodra.io/cpu"]["value"]) for d in node_drivers.devices("cpu"))
    if room < 2:
        w.delete()
        w.assert_released()
    other = started(node_drivers, ns, "drv2")
    if room >= 2:
        assert not claim_cpus(w.report()) & claim_cpus(other.report())
        w.delete()
        w.assert_released()
    other.delete()
    other.assert_released()


def test_kubelet_restart_keeps_the_pod_and_its_claims(node_drivers: Drivers, ns: str) -> None:
    node = node_drivers.node
    w = started(node_drivers, ns, "kubelet")
    registered = {kind: node_drivers.log(kind).count(REGISTERED) for kind in KINDS}
    began = time.monotonic()
    node.kubelet.stop()
    node.kubelet.start()
    node.wait_node_ready()

    def all_registered_again() -> bool:
        return all(node_drivers.log(kind).count(REGISTERED) > n for kind, n in registered.items())

    wait_until("every driver registered with the new kubelet", all_registered_again, 120, alive=node._alive)
    _figure("kubelet restart until every driver registered with it again", time.monotonic() - began)
    w.assert_intact()
    assert w.held_by() == ONCE
    w.delete()
    w.assert_released()


@pytest.mark.parametrize("kind", KINDS)
def test_pod_created_while_its_driver_is_down_starts_once_it_is_back(
    node_drivers: Drivers, ns: str, kind: str
) -> None:
    take_down(node_drivers, kind)
    try:
        w = Workload.create(node_drivers, ns, f"down-{kind[:3]}")
        time.sleep(10)  # the kubelet tries (and fails) to prepare meanwhile
        pod = node_drivers.node.core.read_namespaced_pod(w.name, ns)
        assert pod.status.phase == "Pending", describe(node_drivers.node, ns, w.name, pod)
    finally:
        began = time.monotonic()
        bring_up(node_drivers, kind)
    w.wait_running()
    _figure(f"pod created with {kind} driver down: running after driver back", time.monotonic() - began)
    w.assert_intact()
    assert w.held_by() == ONCE
    w.delete()
    w.assert_released()


@pytest.mark.parametrize("kind", KINDS)
def test_pod_deleted_while_its_driver_is_down_is_released_once_it_is_back(
    node_drivers: Drivers, ns: str, kind: str
) -> None:
    node = node_drivers.node
    w = started(node_drivers, ns, f"del-{kind[:3]}")
    take_down(node_drivers, kind)
    try:
        node.core.delete_namespaced_pod(w.name, ns)
        time.sleep(10)
        # the kubelet cannot unprepare: the claim stays held by the driver that is down
        assert w.held_by()[kind] == 1
    finally:
        began = time.monotonic()
        bring_up(node_drivers, kind)
    w.delete()  # already requested; waits until the kubelet finished
    w.assert_released()
    _figure(f"pod deleted with {kind} driver down: released after driver back", time.monotonic() - began)


@pytest.mark.parametrize("kind", KINDS)
def test_rolling_update_with_a_prepared_claim(node_drivers: Drivers, ns: str, kind: str) -> None:
    w = started(node_drivers, ns, f"roll-{kind[:3]}")
    began = time.monotonic()
    seen = roll(node_drivers, kind)
    _figure(f"{kind} rolling update", time.monotonic() - began)
    assert len(seen) == 2, f"expected one old and one new driver pod, saw {seen}"
    w.assert_intact()
    assert w.held_by() == ONCE
    assert len(w.cdi_specs()) == len(KINDS), w.cdi_specs()
    w.delete()
    w.assert_released()
