"""The contract between the shared kubelet-plugin runtime and one driver.

A driver knows how to find its devices and how to prepare them; everything else belongs to the
runtime: when to look again and what to publish (common/inventory), gRPC, registration,
checkpointing, CDI files, claim fetching and validation. What a driver may offer beyond the
four methods below is declared in common/runtime/capabilities.py and checked there, once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from topodra.common.cdi.edits import ContainerEdits
from topodra.common.device import Device


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """Identifies one ResourceClaim as the kubelet names it."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of ours (`status.allocation.devices.results[]`, driver == ours)."""

    request: str  # "req" or "req/sub"
    pool: str
    device: str
    share_id: str | None = None
    consumed_capacity: Mapping[str, str] = field(default_factory=dict)  # quantities as strings
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """Parameters for our driver from `status.allocation.devices.config[]` (class first, then claim)."""

    source: str  # FromClass | FromClaim
    requests: tuple[str, ...]  # empty: applies to every request
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """What prepare made of one allocated device: its container edits for the claim's CDI spec."""

    request: str
    pool: str
    device: str
    edits: ContainerEdits = field(default_factory=ContainerEdits)
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class Preparation:
    """A driver's answer to prepare. `state` is JSON data kept in the checkpoint so that unprepare
    and a restarted driver know what this claim holds (e.g. the exact CPUs chosen)."""

    devices: tuple[PreparedDevice, ...]
    claim_edits: ContainerEdits = field(default_factory=ContainerEdits)  # applies to all devices
    state: Mapping[str, Any] = field(default_factory=dict)


class Health(Enum):
    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    health: Health
    message: str = ""
    reason: str = ""  # CamelCase token for the taint value of an unhealthy device, e.g. "LinkDown"


@dataclass(frozen=True, slots=True)
class Scan:
    """What one look at the host found.

    `devices` are the devices on the host now, in the order they should be published. `held`
    are the devices prepared claims hold, as last seen on the host: the inventory keeps them
    published while they are absent from `devices` (a NIC inside a pod, an accelerator that
    fell off the bus), so the scheduler keeps seeing what is allocated.
    """

    devices: tuple[Device, ...]
    held: Mapping[str, Device] = field(default_factory=dict)


class PrepareError(Exception):
    """A per-claim failure with a message for the kubelet; the other claims of a call go on."""


class Driver(Protocol):
    name: str  # the DRA driver name, e.g. "cpu.topodra.io"

    def scan(self) -> Scan:
        """Look at the host now. The inventory decides when; a scan may be a full discovery."""
        ...

    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig]
    ) -> Preparation:
        """Make allocated devices usable for the claim; raise PrepareError for a bad claim."""
        ...

    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        """Release what prepare did; must succeed when it was already released."""
        ...

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        """After a restart: learn which claims hold what, from the checkpoint."""
        ...


# --- optional: drivers that see a claim in use on the node (reconcile) ---------------------------


class SeesUse(Protocol):
    def in_use(self, claim: ClaimRef, preparation: Preparation) -> str:
        """What on this node still uses the claim's devices (a container, a pod's network
        namespace), for the log; "" when nothing the driver can see does. Reconcile keeps a
        claim the API server has dropped while this says something: a tenant can delete a
        claim under a running pod (its finalizer is the tenant's to remove), and releasing the
        devices would let the scheduler hand them to another claim while the pod holds them."""
        ...


# --- optional: drivers that write ResourceClaim status (additive; used by the NIC driver) -------


@dataclass(frozen=True, slots=True)
class NetworkDeviceData:
    """`status.devices[].networkData`: what the pod's network sees of the device."""

    interface_name: str = ""  # ≤256 bytes
    hardware_address: str = ""  # ≤128 bytes
    ips: tuple[str, ...] = ()  # ≤16, CIDR interface addresses, e.g. "192.0.2.5/24"


@dataclass(frozen=True, slots=True)
class DeviceCondition:
    """A metav1.Condition in `status.devices[].conditions` (≤8); lastTransitionTime is managed
    by the writer (kept while the status does not change)."""

    type: str  # e.g. "Ready"
    status: str  # "True" | "False" | "Unknown"
    reason: str  # CamelCase
    message: str = ""


@dataclass(frozen=True, slots=True)
class AllocatedDeviceStatus:
    """One `status.devices[]` entry of this driver (keyed by driver, pool, device, shareID)."""

    pool: str
    device: str
    share_id: str | None = None
    conditions: tuple[DeviceCondition, ...] = ()
    network_data: NetworkDeviceData | None = None
    data: Mapping[str, Any] | None = None  # JSON object ≤10 KiB


class ClaimStatusError(Exception):
    """The claim's status could not be written (API error, claim gone or replaced)."""


class ClaimStatusWriter(Protocol):
    """Writes this driver's entries of `ResourceClaim.status.devices` (resourceclaims/status).

    The runtime builds one per driver and hands it to drivers that declare
    `capabilities.WritesClaimStatus`, queued (statusqueue.py): calls return at once and failed
    writes are retried, so a driver may call it from prepare.
    """

    def set_devices(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        """Make our entries for these (pool, device, shareID) equal to `devices`; others stay."""
        ...

    def remove_devices(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        """Drop our entries with these (pool, device, shareID); a missing claim is fine."""
        ...
