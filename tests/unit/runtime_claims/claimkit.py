"""Test parts for the claim core: a driver with observable "hardware", claim objects, claim stores.

`HoldDriver` is a real Driver implementation whose side effects are files: preparing device `d`
for claim `u` creates `<hw>/<d>` (or `<d>@<shareID>`) holding `u`, created with O_EXCL, so a
device given to two claims is visible on disk (and recorded in `<hw>/VIOLATIONS`) even across
process crashes. That is what the fault trials inspect after a kill -9. `MemoryHoldDriver` is
the same driver with holds that die with its process, as the CPU and accelerator drivers' do.

Claims, their builders and the in-memory and file claim stores are tests/kit/claims.py's (shared
with the drivers' tests); `KubeClaimStore` puts them into a real kube-apiserver (tests take a
`claim_store` fixture, so switching is a fixture change).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topodra.common.cdi.edits import ContainerEdits, DeviceNode
from topodra.common.device import Device
from topodra.common.runtime.config import read_typed
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    PrepareError,
    Scan,
)

from tests.kit.claims import (  # noqa: F401  (re-exported: the claim core's tests import them from here)
    NODE,
    FileClaimStore,
    Result,
    claim_object,
    create_allocated,
    new_uid,
    opaque,
    ref_of,
)
from tests.kit.claims import TEST_DRIVER as DRIVER
from tests.kit.claims import ClaimStore as MemoryClaimStore  # noqa: F401

DEVICE_CLASS = DRIVER
EXCLUSIVE = tuple(f"dev-{i}" for i in range(8))
SHARED = ("shared-0",)


# --- claims (tests/kit/claims.py) ----------------------------------------------------------


def driver_config(source: str = "FromClaim", requests: Sequence[str] = (), **params: Any) -> dict[str, Any]:
    return opaque(
        DRIVER,
        OpaqueConfig(
            source,
            tuple(requests),
            {"apiVersion": "test.topodra.io/v1alpha1", "kind": "TestConfig", **params},
        ),
    )


class KubeClaimStore:
    """Claims in a real kube-apiserver (`create_allocated`), read back by the real
    KubeClaimSource. UIDs are the server's."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client
        from topodra.common.kubeapi.claims import KubeClaimSource

        self._client = api_client
        self._api = client.CustomObjectsApi(api_client)
        self.source = KubeClaimSource(api_client)
        self._args = ("resource.k8s.io", "v1")

    def put(self, obj: Mapping[str, Any]) -> ClaimRef:
        return create_allocated(self._client, obj)

    def deallocate(self, namespace: str, name: str) -> None:
        cur: Any = self._api.get_namespaced_custom_object(*self._args, namespace, "resourceclaims", name)
        cur["status"] = {}
        self._api.replace_namespaced_custom_object_status(*self._args, namespace, "resourceclaims", name, cur)

    def delete(self, namespace: str, name: str) -> None:
        self._api.delete_namespaced_custom_object(*self._args, namespace, "resourceclaims", name)


# --- the driver ------------------------------------------------------------------------------


def hold_name(device: str, share_id: str | None) -> str:
    return f"{device}@{share_id}" if share_id else device


@dataclass
class HoldDriver:
    """A Driver whose prepared state is files in `hw` (see module doc)."""

    hw: Path
    name: str = DRIVER
    exclusive: tuple[str, ...] = EXCLUSIVE
    shared: tuple[str, ...] = SHARED
    calls: list[tuple[str, str]] = field(default_factory=list)
    restored: dict[ClaimRef, Preparation] = field(default_factory=dict)
    fail_unprepare: bool = False
    bad_edits: bool = False

    def __post_init__(self) -> None:
        self.hw.mkdir(parents=True, exist_ok=True)

    def scan(self) -> Scan:
        return Scan(
            tuple(Device(d) for d in self.exclusive)
            + tuple(Device(d, allow_multiple_allocations=True) for d in self.shared)
        )

    def _violation(self, text: str) -> None:
        with open(self.hw / "VIOLATIONS", "a") as f:
            f.write(text + "\n")

    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig]
    ) -> Preparation:
        self.calls.append(("prepare", claim.uid))
        env: list[str] = []
        for i, c in enumerate(config):
            p = read_typed(claim, c, i, ["test.topodra.io/v1alpha1"], "TestConfig")
            env.extend(p.strings("env", pattern=r"[A-Z_]+=[^\n]*"))
            if p.boolean("fail", default=False):
                p.finish()
                raise PrepareError(f"claim {claim.namespace}/{claim.name}: asked to fail")
            p.finish()
        devices = []
        holds = []
        for a in results:
            node = DeviceNode(path=f"/dev/topodra-{a.device}", host_path="/dev/null")
            path_edits = ContainerEdits(
                env=(f"TEST_DEVICE_{a.device.upper().replace('-', '_')}={a.request}", *env),
                device_nodes=(node,) if not self.bad_edits else (DeviceNode(path="relative/path"),),
            )
            devices.append(PreparedDevice(a.request, a.pool, a.device, path_edits, a.share_id))
            if a.admin_access:
                continue  # admin access observes a device without holding it
            hold = hold_name(a.device, a.share_id)
            path = self.hw / hold
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                owner = path.read_text()
                if owner and owner != claim.uid:
                    self._violation(f"{hold} prepared for {claim.uid} while held by {owner}")
                    raise PrepareError(f"device {a.device} is held by {owner}") from None
                fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.write(fd, claim.uid.encode())
            os.fsync(fd)
            os.close(fd)
            holds.append(hold)
        return Preparation(
            devices=tuple(devices),
            claim_edits=ContainerEdits(env=(f"TEST_CLAIM={claim.namespace}/{claim.name}",)),
            state={"holds": holds},
        )

    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        self.calls.append(("unprepare", claim.uid))
        if self.fail_unprepare:
            raise RuntimeError("device busy")
        holds = preparation.state.get("holds")
        if holds is None:  # rollback of an interrupted prepare: only the allocation is known
            holds = [hold_name(d.device, d.share_id) for d in preparation.devices]
        for hold in holds:
            path = self.hw / hold
            with contextlib.suppress(FileNotFoundError):
                owner = path.read_text()
                # an empty or partial content is our own interrupted write
                if claim.uid.startswith(owner):
                    path.unlink()

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        self.calls.append(("restore", ",".join(sorted(c.uid for c in prepared))))
        self.restored = dict(prepared)

    def holdings(self) -> dict[str, str]:
        """hold file -> claim uid, as on "the hardware" now."""
        return {p.name: p.read_text() for p in self.hw.iterdir() if p.name != "VIOLATIONS"}

    def violations(self) -> list[str]:
        try:
            return (self.hw / "VIOLATIONS").read_text().splitlines()
        except FileNotFoundError:
            return []


@dataclass
class MemoryHoldDriver(HoldDriver):
    """A HoldDriver whose holds live as long as its process, like the CPU and accelerator
    drivers' holds in their memory: each process gets a folder of its own under `hw` (its
    "memory"; a kill loses it, as far as any later process can tell), and `restore` rebuilds the
    holds of the claims it is told about. Its class says `holds_in_memory`, so the claim core
    writes no started mark before it acts. Double allocations are still recorded, in
    `<hw>/VIOLATIONS` (shared by every process of a trial)."""

    holds_in_memory = True

    def __post_init__(self) -> None:
        self.memory = self.hw
        self.hw.mkdir(parents=True, exist_ok=True)
        self.hw = Path(tempfile.mkdtemp(prefix="memory-", dir=self.hw))

    def _violation(self, text: str) -> None:
        with open(self.memory / "VIOLATIONS", "a") as f:
            f.write(text + "\n")

    def violations(self) -> list[str]:
        try:
            return (self.memory / "VIOLATIONS").read_text().splitlines()
        except FileNotFoundError:
            return []

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        super().restore(prepared)
        for claim, prep in prepared.items():
            for hold in prep.state.get("holds", ()):
                path = self.hw / hold
                if path.exists() and path.read_text() != claim.uid:
                    self._violation(f"{hold} restored for {claim.uid} while held by {path.read_text()}")
                path.write_text(claim.uid)
