"""CPU claims and the Pods that watch their CPUs on the real node, for the tests of the host CPU
driver (tests/node/cpu_host_driver.py): the DeviceClass, a claim for some CPUs, Pod bodies of
watcher containers, running them and reading their samples back.
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException
from topodra.drivers.cpu import devices as layout

from tests.controlplane.cluster import api_resource
from tests.controlplane.objects import device_class_body, eventually
from tests.kit.claims import claim_body
from tests.node.cpu_host_driver import Sample, cpu_samples, watcher
from tests.node.node import RealNode
from tests.node.pods import wait_running

CLASS = "cpu.topodra.io"


def cpu_device_class(node: RealNode) -> None:
    """The DeviceClass the claims here name, for the CPU driver's devices."""
    with contextlib.suppress(ApiException):  # shared cluster: another module may have made it
        api_resource(node.cp.dynamic, "DeviceClass").create(body=device_class_body(CLASS, layout.DRIVER))


def cpu_claim(node: RealNode, ns: str, name: str, count: int = 1) -> None:
    """A claim named `name` for `count` CPUs (its request is `cpus`)."""
    body = claim_body(name, CLASS, request="cpus", capacity={"requests": {layout.CAPACITY: str(count)}})
    api_resource(node.cp.dynamic, "ResourceClaim").create(body=body, namespace=ns)


def image(node: RealNode) -> str:
    assert node.busybox is not None
    return node.busybox.name


def pod(
    node: RealNode, name: str, containers: list[dict[str, Any]], claim: str | None = None
) -> dict[str, Any]:
    """A Pod of `containers`; with `claim`, that ResourceClaim is its pod claim `cpus`."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": containers,
    }
    if claim:
        spec["resourceClaims"] = [{"name": "cpus", "resourceClaimName": claim}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def watching_pod(node: RealNode, name: str, claim: str | None = None) -> dict[str, Any]:
    """A Pod of one watcher container `main`, which uses `claim` (as `cpus`) when given."""
    return pod(node, name, [watcher("main", image(node), claims=["cpus"] if claim else ())], claim=claim)


def run(node: RealNode, ns: str, body: dict[str, Any]) -> str:
    node.core.create_namespaced_pod(ns, body)
    name = str(body["metadata"]["name"])
    wait_running(node, ns, name)
    return name


def samples(node: RealNode, ns: str, pod: str, container: str = "main", at_least: int = 1) -> list[Sample]:
    return eventually(
        f"{at_least} CPU samples from {pod}/{container}",
        lambda: (s := cpu_samples(node, ns, pod, container)) and len(s) >= at_least and s,
        30,
    )


def claim_pod(
    node: RealNode, ns: str, name: str, sidecar: bool = False
) -> tuple[frozenset[int], datetime.datetime]:
    """A Pod whose main container holds a one-CPU claim; its CPUs and its first sample's time."""
    cpu_claim(node, ns, f"{name}-claim")
    containers = [watcher("main", image(node), claims=["cpus"])]
    if sidecar:
        containers.append(watcher("sidecar", image(node)))
    run(node, ns, pod(node, name, containers, claim=f"{name}-claim"))
    first = samples(node, ns, name)[0]
    return first.cpus, first.at
