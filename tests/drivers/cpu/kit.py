"""Test parts for the CPU driver: allocated ResourceClaims as the API returns them, and a claim store.

`ClaimStore` stands in for the API server's claim GET (the one boundary these tests do not run
for real; the control-plane tier does); it serves the same JSON behind the ClaimSource
interface, so the real ClaimManager, checkpoint and CDI writer run unchanged.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topodra.common.kubeapi.errors import NotFound
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, OpaqueConfig
from topodra.drivers.cpu import devices as layout

NODE = "node-a"


def new_uid() -> str:
    return str(uuid.uuid4())


@dataclass
class Result:
    device: str
    cpus: int | None = None  # consumedCapacity cpu.topodra.io/cpu; None: not multi-allocated
    request: str = "cpus"
    share_id: str | None = None

    def __post_init__(self) -> None:
        if self.cpus is not None and self.share_id is None:
            self.share_id = new_uid()

    def allocated(self) -> AllocatedDevice:
        consumed = {layout.CAPACITY: str(self.cpus)} if self.cpus is not None else {}
        return AllocatedDevice(self.request, NODE, self.device, self.share_id, consumed)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "request": self.request,
            "driver": layout.DRIVER,
            "pool": NODE,
            "device": self.device,
        }
        if self.share_id:
            out["shareID"] = self.share_id
        if self.cpus is not None:
            out["consumedCapacity"] = {layout.CAPACITY: str(self.cpus)}
        return out


def cpu_config(source: str = "FromClaim", requests: Sequence[str] = (), **params: Any) -> OpaqueConfig:
    return OpaqueConfig(
        source, tuple(requests), {"apiVersion": "cpu.topodra.io/v1alpha1", "kind": "CpuConfig", **params}
    )


def claim_object(
    name: str, results: Sequence[Result], config: Sequence[OpaqueConfig] = (), namespace: str = "default"
) -> dict[str, Any]:
    uid = new_uid()
    requests = sorted({r.request.split("/")[0] for r in results})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {
            "devices": {
                "requests": [{"name": r, "exactly": {"deviceClassName": "cpu.topodra.io"}} for r in requests]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [r.to_api() for r in results],
                    "config": [
                        {
                            "source": c.source,
                            "requests": list(c.requests),
                            "opaque": {"driver": layout.DRIVER, "parameters": dict(c.parameters)},
                        }
                        for c in config
                    ],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                    ]
                },
            }
        },
    }


def ref_of(obj: Mapping[str, Any]) -> ClaimRef:
    m = obj["metadata"]
    return ClaimRef(m["namespace"], m["name"], m["uid"])


class ClaimStore:
    def __init__(self) -> None:
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}

    def put(self, obj: Mapping[str, Any]) -> ClaimRef:
        ref = ref_of(obj)
        self._claims[(ref.namespace, ref.name)] = copy.deepcopy(dict(obj))
        return ref

    def delete(self, ref: ClaimRef) -> None:
        self._claims.pop((ref.namespace, ref.name), None)

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        try:
            return copy.deepcopy(self._claims[(namespace, name)])
        except KeyError:
            raise NotFound(f"GET ResourceClaim {namespace}/{name}", 404, "not found") from None


def expand(text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def env_of(edits_env: Sequence[str]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in edits_env)


def hook_dir(tmp: Path) -> Path:
    from topodra.drivers.cpu import pinning

    d = tmp / "hooks"
    pinning.install_hook(d)
    return d
