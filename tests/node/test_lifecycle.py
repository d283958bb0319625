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
from kubernetes.client.exceptions import ApiException

from tests.controlplane.cluster import api_resource
from tests.controlplane.processes import wait_until
from tests.node.claims import claim_cpus
from tests.node.drivers import KINDS, Drivers, bring_up, restart_driver, roll, take_down
from tests.node.pods import delete_namespace, describe, make_namespace
from tests.node.workload import Workload

pytestmark = pytest.mark.node

ONCE = dict.fromkeys(KINDS, 1)
REGISTERED = "kubelet registered the plugin"  # the drivers' log line when the kubelet confirms
PYTHON = "/usr/bin/python3"  # the node image's interpreter (tests/node/images.py); ctr exec sets no PATH


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


def _kubelet_says(drivers: Drivers, kind: str, namespace: str, name: str, uid: str) -> str:
    """What the driver's own code, run in its own container (its mounts, user and dropped
    capabilities), reads from the real kubelet's pod resources socket about the claim."""
    (pod,) = [p for p in drivers.pods(kind) if p.metadata.deletion_timestamp is None]  # not one going
    container = pod.status.container_statuses[0].container_id.split("//", 1)[1]
    (args,) = [c["args"] for c in drivers.daemonset(kind)["spec"]["template"]["spec"]["containers"]]
    (root,) = [a.split("=", 1)[1] for a in args if a.startswith("--kubelet-root-dir=")]
    code = (
        "import sys; from pathlib import Path; from topodra.common.runtime.driver import ClaimRef; "
        "from topodra.common.runtime.podresources import SOCKET, KubeletPods; "
        "print(*KubeletPods(Path(sys.argv[1]) / SOCKET).in_use([ClaimRef(*sys.argv[2:5])]).values())"
    )
    exec_id = f"podres-{time.monotonic_ns()}"
    done = drivers.node.containerd.ctr(
        "tasks", "exec", "--exec-id", exec_id, container,
        PYTHON, "-c", code, root, namespace, name, uid,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_kubelet_still_lists_a_claim_its_tenant_deleted_under_a_running_pod(
    node_drivers: Drivers, ns: str
) -> None:
    """A tenant can remove their claim's finalizer and delete it while their pod runs. Reconcile
    releases a claim the API server no longer has unless something still uses it: every driver
    asks the kubelet's pod resources list (common/runtime/podresources.py), which keeps naming
    the pod's container with the claim from the kubelet's own record. Read here by each driver's
    own code inside its own container, through the DaemonSet's mount. Deleting the pod then
    releases the claim (the kubelet unprepares it from that record), and the list lets go."""
    node = node_drivers.node
    w = started(node_drivers, ns, "gone")
    claims = api_resource(node.cp.dynamic, "ResourceClaim")
    obj = claims.get(name=w.name, namespace=ns).to_dict()
    assert obj["metadata"].get("finalizers"), obj["metadata"]  # the controller's delete protection
    obj["metadata"]["finalizers"] = []
    claims.replace(body=obj, namespace=ns)
    claims.delete(name=w.name, namespace=ns)

    def claim_gone() -> bool:
        try:
            claims.get(name=w.name, namespace=ns)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until("the claim is gone from the API server", claim_gone, 60, alive=node._alive)
    for kind in KINDS:
        said = _kubelet_says(node_drivers, kind, ns, w.name, w.claim_uid)
        assert said == f"the kubelet lists container {ns}/{w.name}/main with it", (kind, said)
    w.assert_intact()
    assert w.held_by() == ONCE
    w.delete()
    w.assert_released()
    for kind in KINDS:
        assert _kubelet_says(node_drivers, kind, ns, w.name, w.claim_uid) == "", kind
