"""Device health from the drivers' health stream, through the real kubelet, into the Pod's
status (`allocatedResourcesStatus`): an accelerator whose PCIe fatal-error count rises shows
Unhealthy there, and Healthy again once the device is re-enumerated (a lower count)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.drivers import Drivers
from tests.node.pods import delete_namespace, make_namespace
from tests.node.workload import Workload

pytestmark = pytest.mark.node


@pytest.fixture
def ns(node_drivers: Drivers) -> Iterator[str]:
    name = make_namespace(node_drivers.node, "health")
    yield name
    delete_namespace(node_drivers.node, name)


def resource_health(w: Workload) -> dict[str, str]:
    """resourceID -> health, as the kubelet reports it in the Pod's container status."""
    pod = w.node.core.read_namespaced_pod(w.name, w.namespace)
    out = {}
    for status in pod.status.container_statuses or []:
        for entry in status.allocated_resources_status or []:
            for r in entry.resources or []:
                out[r.resource_id] = r.health
    return out


def wait_health(w: Workload, driver: str, device: str, want: str, timeout: float = 90.0) -> float:
    """The kubelet names a resource by the CDI device it gave the container
    (`<driver>/claim=<claim uid>-<device>`); waits for `device`'s entry to read `want`."""
    began = time.monotonic()
    seen: dict[str, str] = {}
    resource = f"{driver}/claim={w.claim_uid}-{device}"
    while time.monotonic() - began < timeout:
        seen = resource_health(w)
        if seen.get(resource) == want:
            return time.monotonic() - began
        time.sleep(0.5)
    raise AssertionError(f"{resource} not {want} in the Pod's status after {timeout:.0f} s: {seen}")


def set_fatal_errors(aer: Path, total: int) -> None:
    lines = [line for line in aer.read_text().splitlines() if not line.startswith("TOTAL_ERR_FATAL")]
    aer.write_text("\n".join([*lines, f"TOTAL_ERR_FATAL {total}"]) + "\n")


def test_an_unhealthy_accelerator_shows_in_the_pods_status(node_drivers: Drivers, ns: str) -> None:
    w = Workload.create(node_drivers, ns, "hl")
    w.wait_running()
    results = w.claim()["status"]["allocation"]["devices"]["results"]
    (gpu,) = [r for r in results if r["driver"] == "accelerator.topodra.io"]
    wait_health(w, gpu["driver"], gpu["device"], "Healthy")
    pci = next(
        next(iter(d["attributes"]["resource.kubernetes.io/pciBusID"].values()))
        for d in node_drivers.devices("accelerator")
        if d["name"] == gpu["device"]
    )
    assert node_drivers.synthetic is not None
    aer = node_drivers.synthetic.root / "sys/bus/pci/devices" / pci / "aer_dev_fatal"
    original = aer.read_text()
    try:
        set_fatal_errors(aer, 3)
        took = wait_health(w, gpu["driver"], gpu["device"], "Unhealthy")
        sys.stderr.write(
            f"\nreal node figure: fatal AER count to Unhealthy in the Pod's status: {took:.1f} s\n"
        )
    finally:
        aer.write_text(original)
    wait_health(w, gpu["driver"], gpu["device"], "Healthy")
    w.delete()
    w.assert_released()
