"""ResourceClaims for tests, in the shapes the API server takes and gives, and a claim store.

- `claim_body`: a claim to create (no status), one request for devices of one class;
- `claim_object`: an allocated claim as `GET resource.k8s.io/v1` returns it;
- `create_allocated`: creates a claim in a real API server and allocates it through the status
  subresource, as the scheduler does;
- `ClaimStore` / `FileClaimStore`: the claim GET behind the ClaimSource interface, in memory or in
  a file shared with child processes. They stand in for the API server only where a test is
  about the node side (the claim core, a driver); the control-plane tier reads claims from the
  real server (`create_allocated` plus the real KubeClaimSource).
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topodra.common.kubeapi.errors import ApiError, NotFound
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, OpaqueConfig

NODE = "node-a"
TEST_DRIVER = "test.topodra.io"  # the claim core's tests: a driver that exists only there


def new_uid() -> str:
    return str(uuid.uuid4())


def claim_ref(name: str = "c1", namespace: str = "ns1") -> ClaimRef:
    """A claim's identity with a fresh UID (for calling a driver without any claim object)."""
    return ClaimRef(namespace, name, new_uid())


def ref_of(obj: Mapping[str, Any]) -> ClaimRef:
    m = obj["metadata"]
    return ClaimRef(m["namespace"], m["name"], m["uid"])


@dataclass
class Result:
    """One allocation result (`status.allocation.devices.results[]`)."""

    request: str
    device: str
    pool: str = NODE
    driver: str = TEST_DRIVER
    share_id: str | None = None
    admin_access: bool = False
    consumed: Mapping[str, str] = field(default_factory=dict)  # consumedCapacity

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
        if self.consumed:
            out["consumedCapacity"] = dict(self.consumed)
        return out

    def allocated(self) -> AllocatedDevice:
        """What the claim core hands the driver for this result."""
        return AllocatedDevice(
            self.request, self.pool, self.device, self.share_id, dict(self.consumed), self.admin_access
        )


def opaque(driver: str, config: OpaqueConfig) -> dict[str, Any]:
    """An allocation config entry (`status.allocation.devices.config[]`) for `driver`."""
    return {
        "source": config.source,
        "requests": list(config.requests),
        "opaque": {"driver": driver, "parameters": dict(config.parameters)},
    }


def claim_body(
    name: str, device_class: str, selector: str | None = None, *, request: str = "dev", **exactly: Any
) -> dict[str, Any]:
    """A claim to create: one request for devices of the class (extra fields go into `exactly`)."""
    wanted: dict[str, Any] = {"deviceClassName": device_class, **exactly}
    if selector:
        wanted["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": request, "exactly": wanted}]}},
    }


def allocation(
    results: Sequence[Result], config: Sequence[Mapping[str, Any]] = (), node: str = NODE
) -> dict[str, Any]:
    """`status.allocation` for `results` on `node`."""
    return {
        "devices": {"results": [r.to_api() for r in results], "config": [dict(c) for c in config]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def claim_object(
    namespace: str,
    name: str,
    uid: str,
    results: Sequence[Result] | None,
    config: Sequence[Mapping[str, Any]] = (),
    *,
    device_class: str | None = None,
    node: str = NODE,
) -> dict[str, Any]:
    """A ResourceClaim as `GET resource.k8s.io/v1` returns it (results None: not allocated).
    A result for `main/sub` gets a request `main` with subrequests, as the API wants it; the
    device class is the first result's driver unless given."""
    cls = device_class or (results[0].driver if results else TEST_DRIVER)
    subs: dict[str, list[str]] = {}
    for r in results or [Result("req", "unused")]:
        main, _, sub = r.request.partition("/")
        subs.setdefault(main, [])
        if sub and sub not in subs[main]:
            subs[main].append(sub)
    requests: list[dict[str, Any]] = []
    for main, names in sorted(subs.items()):
        if names:
            requests.append(
                {"name": main, "firstAvailable": [{"name": n, "deviceClassName": cls} for n in names]}
            )
        else:
            requests.append({"name": main, "exactly": {"deviceClassName": cls}})
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": requests}},
        "status": {},
    }
    if results is not None:
        obj["status"]["allocation"] = allocation(results, config, node)
    return obj


def create_allocated(api_client: Any, obj: Mapping[str, Any]) -> ClaimRef:
    """Create `obj` (a `claim_object`) in a real API server and, if it has a status, allocate it
    through the status subresource as the scheduler would. The UID is the server's."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    args = ("resource.k8s.io", "v1")
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    body = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {"name": name},
        "spec": obj["spec"],
    }
    created: Any = api.create_namespaced_custom_object(*args, ns, "resourceclaims", body)
    if obj.get("status"):
        created["status"] = copy.deepcopy(obj["status"])
        created = api.replace_namespaced_custom_object_status(*args, ns, "resourceclaims", name, created)
    return ClaimRef(ns, name, created["metadata"]["uid"])


class ClaimStore:
    """The claim GET in memory (see the module doc). `down` makes every GET fail as an
    unreachable server does; `gets` and `cached_gets` count the calls."""

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
    def source(self) -> ClaimStore:
        return self


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

    def _save(self, data: Mapping[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.path)

    def put(self, obj: Mapping[str, Any]) -> ClaimRef:
        ref = ref_of(obj)
        data = self._load()
        data[f"{ref.namespace}/{ref.name}"] = dict(obj)
        self._save(data)
        return ref

    def delete(self, namespace: str, name: str) -> None:
        data = self._load()
        data.pop(f"{namespace}/{name}", None)
        self._save(data)

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        obj = self._load().get(f"{namespace}/{name}")
        if obj is None:
            raise NotFound(f"GET ResourceClaim {namespace}/{name}", 404, "not found")
        return dict(obj)
