"""Test parts for the CPU driver: its allocation results and claims (built by tests/kit/claims.py,
whose ClaimStore serves them behind the ClaimSource interface, so the real ClaimManager,
checkpoint and CDI writer run unchanged), CPU lists, the pinning hook.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topodra.common.runtime.driver import AllocatedDevice, OpaqueConfig
from topodra.drivers.cpu import devices as layout

from tests.kit import claims as kit

NODE = kit.NODE
ClaimStore = kit.ClaimStore
new_uid = kit.new_uid


@dataclass
class Result:
    """A result of the CPU driver: `cpus` is its consumedCapacity (None: not multi-allocated)."""

    device: str
    cpus: int | None = None
    request: str = "cpus"
    share_id: str | None = None

    def __post_init__(self) -> None:
        if self.cpus is not None and self.share_id is None:
            self.share_id = new_uid()

    def generic(self) -> kit.Result:
        consumed = {layout.CAPACITY: str(self.cpus)} if self.cpus is not None else {}
        return kit.Result(self.request, self.device, NODE, layout.DRIVER, self.share_id, consumed=consumed)

    def allocated(self) -> AllocatedDevice:
        return self.generic().allocated()

    def to_api(self) -> dict[str, Any]:
        return self.generic().to_api()


def cpu_config(source: str = "FromClaim", requests: Sequence[str] = (), **params: Any) -> OpaqueConfig:
    return OpaqueConfig(
        source, tuple(requests), {"apiVersion": "cpu.topodra.io/v1alpha1", "kind": "CpuConfig", **params}
    )


def claim_object(
    name: str, results: Sequence[Result], config: Sequence[OpaqueConfig] = (), namespace: str = "default"
) -> dict[str, Any]:
    return kit.claim_object(
        namespace,
        name,
        new_uid(),
        [r.generic() for r in results],
        [kit.opaque(layout.DRIVER, c) for c in config],
        device_class="cpu.topodra.io",
    )


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
