"""Claim status writes off the prepare path.

The kubelet must not wait for the API server while a driver prepares, and a status write that
fails (a conflict, an outage) is retried with backoff rather than failing the pod. The runtime
hands drivers their `ClaimStatusWriter` wrapped in this queue; its calls return at once.

The claim's owner can make our writes fail: every change they make to their ResourceClaim moves
its resourceVersion, and our update of the status then meets 409. So each claim has its own lane.
A claim waits out its backoff in its lane, not on the writer thread, and the lanes take turns,
so a tenant who keeps their claims conflicting delays only their own status. Within a lane writes
keep their order: a retried "set" never lands after the "remove" that followed it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
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


class _Lane:
    """One claim's writes, oldest first, and how often the oldest has failed."""

    __slots__ = ("claim", "failures", "writes")

    def __init__(self, claim: ClaimRef) -> None:
        self.claim = claim
        self.writes: deque[Callable[[], None]] = deque()
        self.failures = 0


class QueuedStatusWriter:
    """A ClaimStatusWriter whose writes run on one thread, a lane per claim; a write that fails
    with ClaimStatusError is tried up to `max_attempts` times, waiting `backoff` seconds after the
    first failure, doubling up to `max_backoff`."""

    def __init__(
        self,
        writer: ClaimStatusWriter,
        *,
        max_attempts: int = 10,
        backoff: float = 0.2,
        max_backoff: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._writer = writer
        self._max = max_attempts
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._clock = clock
        self._cv = threading.Condition()
        self._lanes: dict[str, _Lane] = {}  # by claim uid
        self._due: list[tuple[float, int, str]] = []  # (when, turn, uid): one entry per lane
        self._turn = itertools.count()
        self._busy = 0  # writes not yet done or given up
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="claim-status", daemon=True)
        self._thread.start()

    def set_devices(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        entries = tuple(devices)
        self._put(claim, lambda: self._writer.set_devices(claim, entries))

    def remove_devices(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        gone = tuple(keys)
        self._put(claim, lambda: self._writer.remove_devices(claim, gone))

    def flush(self, timeout: float) -> bool:
        """Wait until every queued write is done or given up (tests, shutdown)."""
        with self._cv:
            return self._cv.wait_for(lambda: self._busy == 0, timeout)

    def close(self) -> None:
        """Stop the thread; writes still queued, and any asked for from now on, are dropped (a
        write in flight may still land; flush() no longer waits for it)."""
        with self._cv:
            self._closed = True
            self._busy -= sum(len(lane.writes) for lane in self._lanes.values())
            self._lanes.clear()
            self._due.clear()
            self._cv.notify_all()

    def _put(self, claim: ClaimRef, call: Callable[[], None]) -> None:
        with self._cv:
            if self._closed:  # nobody would write it, and flush() would wait for it
                _log.warning(f"status of {describe_claim(claim)} not written: stopping", **logs.claim(claim))
                return
            self._busy += 1
            lane = self._lanes.get(claim.uid)
            if lane is None:
                lane = self._lanes[claim.uid] = _Lane(claim)
                self._schedule(claim.uid, self._clock())
            lane.writes.append(call)

    def _schedule(self, uid: str, when: float) -> None:
        heapq.heappush(self._due, (when, next(self._turn), uid))
        self._cv.notify_all()

    def _next(self) -> _Lane | None:
        """The lane whose turn it is, once it is due; None when closed."""
        with self._cv:
            while not self._closed:
                if self._due:
                    wait = self._due[0][0] - self._clock()
                    if wait <= 0:
                        return self._lanes[heapq.heappop(self._due)[2]]
                    self._cv.wait(wait)
                else:
                    self._cv.wait()
            return None

    def _run(self) -> None:
        while (lane := self._next()) is not None:
            claim = lane.claim
            failed = False
            try:
                lane.writes[0]()
            except ClaimStatusError as e:
                failed = lane.failures + 1 < self._max
                _log.warning(
                    f"cannot write status of {describe_claim(claim)}: {e}"
                    + ("; will retry" if failed else f"; gave up after {self._max} attempts"),
                    **logs.claim(claim),
                    error=str(e),
                )
            except Exception:
                _log.exception(f"status write of {describe_claim(claim)} crashed", **logs.claim(claim))
            with self._cv:
                if self._closed:  # close() dropped this lane, the write just made included
                    return
                if failed:
                    delay = min(self._backoff * 2**lane.failures, self._max_backoff)
                    lane.failures += 1
                    self._schedule(claim.uid, self._clock() + delay)
                    continue
                lane.writes.popleft()
                lane.failures = 0
                self._busy -= 1
                if lane.writes:
                    self._schedule(claim.uid, self._clock())  # behind the lanes already due
                else:
                    del self._lanes[claim.uid]
                    self._cv.notify_all()
