"""Test parts for the claim core: a driver with observable "hardware", claim objects, claim stores.

`HoldDriver` is a real Driver implementation whose side effects are files: preparing device `d`
for claim `u` creates `<hw>/<d>` (or `<d>@<shareID>`) holding `u`, created with O_EXCL, so a
device given to two claims is visible on disk (and recorded in `<hw>/VIOLATIONS`) even across
process crashes. That is what the fault trials inspect after a kill -9.

Claim stores serve ResourceClaim JSON behind the ClaimSource interface. `MemoryClaimStore` is the
stand-in allowed until the control-plane tier lands (tests take a `claim_store` fixture, so
switching to the real kube-apiserver is a fixture change); `FileClaimStore` is the same for a
child process.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topodra.common.cdi.edits import ContainerEdits, DeviceNode
from topodra.common.device import Device
from topodra.common.kubeapi.errors import ApiError, NotFound
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

DRIVER = "test.topodra.io"
DEVICE_CLASS = "test.topodra.io"
NODE = "node-a"
EXCLUSIVE = tuple(f"dev-{i}" for i in range(8))
SHARED = ("shared-0",)


def new_uid() -> str:
    return str(uuid.uuid4())


# --- claims ---------------------------------------------------------------------------------


@dataclass
class Result:
    request: str
    device: str
    pool: str = NODE
    driver: str = DRIVER
    share_id: str | None = None
    admin_access: bool = False

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
        }
        if self.share_id:
            out["shareID"] = self.share_id
        if self.admin_access:
            out["adminAccess"] = True
        return out


def claim_object(
    namespace: str,
    name: str,
    uid: str,
    results: Sequence[Result] | None,
    config: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ResourceClaim as `GET resource.k8s.io/v1` returns it (results None: not allocated)."""
    subs: dict[str, list[str]] = {}
    for r in results or [Result("req", "unused")]:
        main, _, sub = r.request.partition("/")
        subs.setdefault(main, [])
        if sub and sub not in subs[main]:
            subs[main].append(sub)
    requests: list[dict[str, Any]] = []
    for main, names in sorted(subs.items()):
        if names:  # a request with subrequests, as the API wants it for `main/sub` results
            requests.append(
                {
                    "name": main,
                    "firstAvailable": [{"name": n, "deviceClassName": DEVICE_CLASS} for n in names],
                }
            )
        else:
            requests.append({"name": main, "exactly": {"deviceClassName": DEVICE_CLASS}})
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": requests}},
        "status": {},
    }
    if results is not None:
        obj["status"]["allocation"] = {
            "devices": {"results": [r.to_api() for r in results], "config": list(config)},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
        }
    return obj


def driver_config(source: str = "FromClaim", requests: Sequence[str] = (), **params: Any) -> dict[str, Any]:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": "test.topodra.io/v1alpha1", "kind": "TestConfig", **params},
        },
    }


def ref_of(obj: Mapping[str, Any]) -> ClaimRef:
    m = obj["metadata"]
    return ClaimRef(m["namespace"], m["name"], m["uid"])


class MemoryClaimStore:
    """Stand-in for the API server's claim GET (see module doc). `down` simulates unreachability."""

    def __init__(self) -> None:
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.down = False
        self.gets = 0
        self.cached_gets = 0  # of which from the watch cache (resourceVersion=0)

    def put(self, obj: Mapping[str, Any]) -> ClaimRef:
        ref = ref_of(obj)
        self._claims[(ref.namespace, ref.name)] = copy.deepcopy(dict(obj))
        return ref

    def delete(self, namespace: str, name: str) -> None:
        self._claims.pop((namespace, name), None)

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        self.gets += 1
        self.cached_gets += cached
        if self.down:
            raise ApiError(f"GET ResourceClaim {namespace}/{name}", None, "connection refused")
        try:
            return copy.deepcopy(self._claims[(namespace, name)])
        except KeyError:
            raise NotFound(f"GET ResourceClaim {namespace}/{name}", 404, "not found") from None

    @property
    def source(self) -> MemoryClaimStore:
        return self


class KubeClaimStore:
    """Claims in a real kube-apiserver: created, then allocated through the status subresource
    (as the scheduler would), read back by the real KubeClaimSource. UIDs are the server's."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client
        from topodra.common.kubeapi.claims import KubeClaimSource

        self._api = client.CustomObjectsApi(api_client)
        self.source = KubeClaimSource(api_client)
        self._args = ("resource.k8s.io", "v1")

    def put(self, obj: Mapping[str, Any]) -> ClaimRef:
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": name},
            "spec": obj["spec"],
        }
        created: Any = self._api.create_namespaced_custom_object(*self._args, ns, "resourceclaims", body)
        if obj.get("status"):
            created["status"] = copy.deepcopy(obj["status"])
            created = self._api.replace_namespaced_custom_object_status(
                *self._args, ns, "resourceclaims", name, created
            )
        return ClaimRef(ns, name, created["metadata"]["uid"])

    def deallocate(self, namespace: str, name: str) -> None:
        cur: Any = self._api.get_namespaced_custom_object(*self._args, namespace, "resourceclaims", name)
        cur["status"] = {}
        self._api.replace_namespaced_custom_object_status(*self._args, namespace, "resourceclaims", name, cur)

    def delete(self, namespace: str, name: str) -> None:
        self._api.delete_namespaced_custom_object(*self._args, namespace, "resourceclaims", name)


class FileClaimStore:
    """Claims in one JSON file, shared between a test and its child processes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _load(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return data

    def put(self, obj: Mapping[str, Any]) -> ClaimRef:
        ref = ref_of(obj)
        data = self._load()
        data[f"{ref.namespace}/{ref.name}"] = dict(obj)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)
        return ref

    def delete(self, namespace: str, name: str) -> None:
        data = self._load()
        data.pop(f"{namespace}/{name}", None)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        obj = self._load().get(f"{namespace}/{name}")
        if obj is None:
            raise NotFound(f"GET ResourceClaim {namespace}/{name}", 404, "not found")
        return dict(obj)


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
