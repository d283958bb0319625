"""A node reboot, simulated: every process, mount, cgroup and tmpfs gone (the CDI specs in
/var/run/cdi and containerd's state with them), the disk kept (the kubelet's and the drivers'
checkpoints, images). After boot the kubelet still holds the claim, the drivers rewrite its CDI
specs from their checkpoints, and the Pod starts again with the same devices (user ask: Pods
stuck in CreateContainerError after a reboot because the claim's CDI spec was gone).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

from tests.node.claims import allowed_cpus, claim_cpus, host_has_link, pod_links
from tests.node.drivers import KINDS, Drivers, add_host_nics
from tests.node.pods import delete_namespace, describe, make_namespace
from tests.node.workload import POD_NIC_NAME, Workload, cdi_dir

pytestmark = pytest.mark.node


@pytest.fixture
def ns(node_drivers: Drivers) -> Iterator[str]:
    name = make_namespace(node_drivers.node, "reboot")
    yield name
    delete_namespace(node_drivers.node, name)


def wait_new_container(w: Workload, old: str, timeout: float = 240.0) -> str:
    """A reboot ends every container: the Pod runs again in a new one (the API shows the old one
    until the kubelet reports)."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        pod = w.node.core.read_namespaced_pod(w.name, w.namespace)
        (status,) = pod.status.container_statuses or [None]
        if status is not None and status.container_id not in (None, old) and status.state.running:
            return str(status.container_id)
        time.sleep(1.0)
    raise AssertionError(
        f"{w.name} did not run again after the reboot: {describe(w.node, w.namespace, w.name)}"
    )


def test_after_a_reboot_the_cdi_specs_come_back_and_the_pod_runs_again(
    node_drivers: Drivers, ns: str
) -> None:
    node = node_drivers.node
    w = Workload.create(node_drivers, ns, "rb", restart="Always")
    w.wait_running()
    w.assert_intact()
    specs = w.cdi_specs()
    assert len(specs) == len(KINDS), specs
    before = w.claim()["status"]["allocation"]["devices"]["results"]
    old_container = w.container_id

    assert node_drivers.synthetic is not None
    synthetic = node_drivers.synthetic

    def hardware_back() -> None:
        assert not list(cdi_dir(node_drivers).iterdir()), "the CDI folder survived the reboot"
        add_host_nics(synthetic, only_missing=True)

    took = node.simulate_reboot(hardware=hardware_back)
    began = time.monotonic()
    node_drivers.wait_ready()
    w.container_id = wait_new_container(w, old_container)
    back = time.monotonic() - began
    sys.stderr.write(f"\nreal node figure: reboot (down and kubelet Ready): {took:.1f} s, "
                     f"drivers Ready and the pod running again: {back:.1f} s\n")  # fmt: skip
    assert w.cdi_specs() == specs
    assert w.held_by() == dict.fromkeys(KINDS, 1)
    assert w.claim()["status"]["allocation"]["devices"]["results"] == before
    seen = w.report()
    assert allowed_cpus(seen) == claim_cpus(seen), seen
    assert POD_NIC_NAME in pod_links(seen), seen
    assert not host_has_link(w.host_nic)
    w.delete()
    w.assert_released()
