"""The parts of the API's objects that topodra reads, as the JSON the API server sends.

These describe, they do not check: an answer is whatever the server (or a tenant, for a claim's
opaque parameters) put there, so every reader still checks types before it trusts a value. All
keys are optional (`total=False`): the API omits empty fields. Field names are the API's own
(resource.k8s.io/v1, meta/v1).
"""

from __future__ import annotations

from typing import Any, TypedDict


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    labels: dict[str, str]
    ownerReferences: list[dict[str, Any]]


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str  # the resource (plural) for NotFound, e.g. "resourceclaims"


class Status(TypedDict, total=False):
    """meta/v1 Status: the body of an error answer."""

    kind: str  # "Status"
    status: str  # "Failure"
    message: str
    reason: str  # "NotFound", "Conflict", ...
    details: StatusDetails
    code: int


# --- ResourceClaim ------------------------------------------------------------------------------


class DeviceRequestAllocationResult(TypedDict, total=False):
    request: str  # "req" or "req/sub"
    driver: str
    pool: str
    device: str
    shareID: str
    adminAccess: bool
    consumedCapacity: dict[str, str]


class OpaqueDeviceConfiguration(TypedDict, total=False):
    driver: str
    parameters: Any  # a JSON object the driver defines


class DeviceAllocationConfiguration(TypedDict, total=False):
    source: str  # FromClass | FromClaim
    requests: list[str]
    opaque: OpaqueDeviceConfiguration


class DeviceAllocationResult(TypedDict, total=False):
    results: list[DeviceRequestAllocationResult]
    config: list[DeviceAllocationConfiguration]


class AllocationResult(TypedDict, total=False):
    devices: DeviceAllocationResult
    nodeSelector: dict[str, Any]


class AllocatedDeviceStatus(TypedDict, total=False):
    """One entry of `status.devices`, written by the driver that prepared the device."""

    driver: str
    pool: str
    device: str
    shareID: str
    conditions: list[dict[str, Any]]
    data: dict[str, Any]
    networkData: dict[str, Any]


class ResourceClaimStatus(TypedDict, total=False):
    allocation: AllocationResult
    reservedFor: list[dict[str, Any]]
    devices: list[AllocatedDeviceStatus]


class ResourceClaim(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: ResourceClaimStatus


# --- ResourceSlice ------------------------------------------------------------------------------


class ResourcePool(TypedDict, total=False):
    name: str
    generation: int
    resourceSliceCount: int


class ResourceSliceSpec(TypedDict, total=False):
    driver: str
    pool: ResourcePool
    nodeName: str
    allNodes: bool
    perDeviceNodeSelection: bool
    devices: list[dict[str, Any]]
    sharedCounters: list[dict[str, Any]]


class ResourceSlice(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceSliceSpec
