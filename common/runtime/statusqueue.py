"""Claim status writes off the prepare path.

The kubelet must not wait for the API server while a driver prepares, and a status write that
fails (a conflict, an outage) is retried with backoff rather than failing the pod. The runtime
hands drivers their `ClaimStatusWriter` wrapped in this queue; its calls return at once.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

from topodra.common import logs
from topodra.common.runtime.config import describe_claim
from topodra.common.runtime.driver import (
    AllocatedDeviceStatus,
    ClaimRef,
    ClaimStatusError,
    ClaimStatusWriter,
)

_log = logs.get(__name__)

Write = tuple[ClaimRef, Callable[[], None], int]  # the claim, the call, attempts made


class QueuedStatusWriter:
    """A ClaimStatusWriter whose writes run in order on one thread, each retried up to
    `max_attempts` times on ClaimStatusError."""

    def __init__(self, writer: ClaimStatusWriter, *, max_attempts: int = 6) -> None:
        self._writer = writer
        self._q: queue.Queue[Write | None] = queue.Queue()
        self._max = max_attempts
        self._idle = threading.Condition()
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="claim-status", daemon=True)
        self._thread.start()

    def set_devices(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        entries = tuple(devices)
        self._put(claim, lambda: self._writer.set_devices(claim, entries))

    def remove_devices(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        gone = tuple(keys)
        self._put(claim, lambda: self._writer.remove_devices(claim, gone))

    def flush(self, timeout: float) -> bool:
        """Wait until every queued write is done (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def close(self) -> None:
        self._q.put(None)

    def _put(self, claim: ClaimRef, call: Callable[[], None]) -> None:
        with self._idle:
            self._busy += 1
        self._q.put((claim, call, 0))

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            claim, call, attempt = item
            retry = False
            try:
                call()
            except ClaimStatusError as e:
                retry = attempt + 1 < self._max
                _log.warning(
                    f"cannot write status of {describe_claim(claim)}: {e}"
                    + ("; will retry" if retry else ""),
                    **logs.claim(claim),
                    error=str(e),
                )
            except Exception:
                _log.exception(f"status write of {describe_claim(claim)} crashed", **logs.claim(claim))
            if retry:
                time.sleep(min(0.2 * 2**attempt, 5.0))
                self._q.put((claim, call, attempt + 1))
                continue
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()
