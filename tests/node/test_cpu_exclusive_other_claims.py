"""A Pod whose claims are all for other drivers runs on the CPU driver's shared pool.

Beside tests/node/test_cpu_exclusive.py (same host CPU driver in NRI mode), with the tier's
DaemonSets installed so that the accelerator driver prepares a real claim: the Pod has claims,
just none for CPUs, and neither its container using the accelerator claim nor its plain sidecar
may run on CPUs another Pod's claim holds. The CPU DaemonSet is down meanwhile (one CPU driver
and one cpuset-setting NRI plugin per node).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from topodra.common.topology import discover

from tests.controlplane.cluster import api_resource
from tests.node.cpu_host_driver import HostCpuDriver, in_nri_mode, watcher
from tests.node.cpu_pods import claim_pod, image, pod, run, samples
from tests.node.drivers import Drivers
from tests.node.pods import delete_namespace, make_namespace

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def driver(node_drivers: Drivers) -> Iterator[HostCpuDriver]:
    with in_nri_mode(node_drivers.node) as d:
        yield d


@pytest.fixture
def ns(node_drivers: Drivers, driver: HostCpuDriver) -> Iterator[str]:
    name = make_namespace(node_drivers.node, "exot")
    yield name
    delete_namespace(node_drivers.node, name)


def test_a_pod_with_claims_but_none_for_cpus_runs_on_the_shared_pool(
    node_drivers: Drivers, ns: str, driver: HostCpuDriver
) -> None:
    node = node_drivers.node
    online = frozenset(discover("/").usable_cpus())
    if len(online) < 2:
        pytest.skip("needs two CPUs: one to claim, one for the shared pool")
    claimed, _ = claim_pod(node, ns, "holder")
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu-claim"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "accelerator.topodra.io"}}]
            }
        },
    }
    api_resource(node.cp.dynamic, "ResourceClaim").create(body=body, namespace=ns)
    containers = [watcher("main", image(node), claims=["gpu"]), watcher("plain", image(node))]
    gpu_pod = pod(node, "gpu", containers)
    gpu_pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
    run(node, ns, gpu_pod)
    shared = online - claimed
    for container in ("main", "plain"):
        seen = samples(node, ns, "gpu", container, at_least=3)
        assert all(s.cpus == shared for s in seen), (container, [sorted(s.cpus) for s in seen])
    assert all(s.cpus == claimed for s in samples(node, ns, "holder"))
