"""Small builders for the API objects the control-plane tests create, and a polling helper.

Plain dicts (as a manifest would be), used with the dynamic client, so every field reaches the
server exactly as written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def eventually(what: str, get: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Polls until get() returns something truthy: controllers and the scheduler are asynchronous."""
    deadline = time.monotonic() + timeout
    while True:
        value = get()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def pod_body(
    name: str, claims: list[dict[str, str]], node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod whose one container uses every listed pod claim.

    Each claim is {"name": ..., "resourceClaimName" or "resourceClaimTemplateName": ...}.
    """
    spec: dict[str, Any] = {
        "resourceClaims": claims,
        "containers": [
            {
                "name": "app",
                "image": "topodra.invalid/app:test",
                "resources": {"claims": [{"name": c["name"]} for c in claims]},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def device_class_body(name: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    }


def slice_body(driver: str, node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """A node-local slice, alone in its pool (named after the node)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node}-{driver}-"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
