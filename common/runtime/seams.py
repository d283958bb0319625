"""The seam between the gRPC plane and the claim-processing core.

The DRA servicer (v1 and v1beta1) only translates wire messages into `ClaimRef`s and the answers
below back into protobuf; everything about claims (fetching, validation, checkpoint, CDI) lives
behind `ClaimProcessor`. Keeping the seam this small lets both sides be tested on their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from topodra.common.runtime.driver import ClaimRef


@dataclass(frozen=True, slots=True)
class ResultDevice:
    """One device of a prepared claim, as the kubelet wants it (`Device` in the DRA API).

    `request_names` holds main request names only (`req`, never `req/sub`): container claim
    references use the main name. `share_id` is sent only over v1 (v1beta1 has no such field).
    """

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """Prepare's answer for one claim; a non-empty `error` means this claim failed (the others
    of the same call are unaffected) and `devices` is then empty."""

    devices: tuple[ResultDevice, ...] = ()
    error: str = ""


class ClaimProcessor(Protocol):
    """What the DRA servicer calls. Never raises for a bad claim: each claim gets its own outcome,
    keyed by claim UID, and every requested UID is present in the answer."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]: ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """uid -> error message, "" when the claim is (now) unprepared."""
        ...


@runtime_checkable
class AsyncClaimProcessor(ClaimProcessor, Protocol):
    """A processor that can answer later, from whichever thread serves the claims: the DRA
    servicer then holds no gRPC worker per call in flight, and one batch can hold every call
    that arrived while the previous batch was written (common/runtime/claims/queue.py)."""

    def prepare_async(
        self, claims: Sequence[ClaimRef], done: Callable[[dict[str, ClaimOutcome]], None]
    ) -> None: ...

    def unprepare_async(self, claims: Sequence[ClaimRef], done: Callable[[dict[str, str]], None]) -> None: ...
