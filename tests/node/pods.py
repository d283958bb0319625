"""Pods on the real node: create, wait for a phase, read what the container printed, delete."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import kubernetes.client as k8s
from kubernetes.client.exceptions import ApiException

from tests.controlplane.cluster import unique_name
from tests.node.node import RealNode

DONE = ("Succeeded", "Failed")


def make_namespace(node: RealNode, prefix: str) -> str:
    name = unique_name(prefix)
    node.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name


def delete_namespace(node: RealNode, name: str, timeout: float = 90.0) -> None:
    """Deletes the namespace and waits until its Pods are gone (the kubelet unprepared their claims)."""
    with contextlib.suppress(ApiException):
        node.core.delete_namespace(name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not node.core.list_namespaced_pod(name).items:
            return
        time.sleep(0.5)
    raise TimeoutError(f"pods of namespace {name} still there after {timeout:.0f} s")


def busybox_pod(
    node: RealNode,
    name: str,
    script: str,
    *,
    claims: Mapping[str, str] | None = None,
    restart: str = "Never",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A one-container busybox Pod running `script` with `sh -c`; `claims` maps a request name
    in the Pod to an existing ResourceClaim (or use `extra` for claim templates)."""
    assert node.busybox is not None
    container: dict[str, Any] = {
        "name": "main",
        "image": node.busybox.name,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", script],
    }
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if claims:
        spec["resourceClaims"] = [{"name": k, "resourceClaimName": v} for k, v in claims.items()]
        container["resources"] = {"claims": [{"name": k} for k in claims]}
    spec.update(extra or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create(node: RealNode, namespace: str, pod: Mapping[str, Any]) -> str:
    node.core.create_namespaced_pod(namespace, dict(pod))
    return str(pod["metadata"]["name"])


def wait_phase(
    node: RealNode, namespace: str, name: str, phases: Sequence[str], timeout: float = 120.0
) -> k8s.V1Pod:
    """Waits until the Pod is in one of `phases`; the error names where it is stuck and why."""
    deadline = time.monotonic() + timeout
    pod: k8s.V1Pod | None = None
    while time.monotonic() < deadline:
        pod = node.core.read_namespaced_pod(name, namespace)
        if pod.status.phase in phases:
            return pod
        if pod.status.phase in DONE:
            break
        time.sleep(0.5)
    why = describe(node, namespace, name, pod)
    raise AssertionError(f"pod {namespace}/{name} not in {list(phases)}: {why}")


def wait_running(node: RealNode, namespace: str, name: str, timeout: float = 120.0) -> k8s.V1Pod:
    """Running with every container started (the phase alone is Running before that)."""
    deadline = time.monotonic() + timeout
    pod = wait_phase(node, namespace, name, ["Running"], timeout)
    while time.monotonic() < deadline:
        pod = node.core.read_namespaced_pod(name, namespace)
        if all(s.started for s in pod.status.container_statuses or []):
            return pod
        time.sleep(0.5)
    raise AssertionError(f"pod {namespace}/{name} never started: {describe(node, namespace, name, pod)}")


def wait_gone(node: RealNode, namespace: str, name: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            node.core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.5)
    raise AssertionError(f"pod {namespace}/{name} still there after {timeout:.0f} s")


def run_to_completion(
    node: RealNode, namespace: str, pod: Mapping[str, Any], timeout: float = 120.0
) -> tuple[k8s.V1Pod, str]:
    """Creates the Pod, waits until it ends, returns it and its main container's output."""
    name = create(node, namespace, pod)
    done = wait_phase(node, namespace, name, DONE, timeout)
    return done, node.pod_log(namespace, name, "main")


def describe(node: RealNode, namespace: str, name: str, pod: k8s.V1Pod | None = None) -> str:
    """Phase, container states and the Pod's events: what a test failure needs to say."""
    if pod is None:
        with contextlib.suppress(ApiException):
            pod = node.core.read_namespaced_pod(name, namespace)
    parts = []
    if pod is not None and pod.status is not None:
        parts.append(f"phase={pod.status.phase}")
        for s in pod.status.container_statuses or []:
            parts.append(f"{s.name}: {s.state}")
    events = node.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    parts += [f"event {e.reason}: {e.message}" for e in events]
    return "\n".join(parts)


def unique(prefix: str) -> str:
    return unique_name(prefix)
