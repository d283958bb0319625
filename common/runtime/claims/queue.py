"""Group commit of prepare and unprepare calls.

Calls are serialized, and every checkpoint write costs two fsyncs. Calls that arrive while
another is being served queue up, and the next batch serves the whole queue with one checkpoint
write per run of one operation, in the order `stages` gives (docs/design/claim-lifecycle.md).

One caller at a time is the leader: it serves batches until its own call is done, then hands the
lead to the oldest waiting call. Everybody else waits on its own call's event, so an answered call
returns at once instead of queueing behind the next batch for the serving lock (which made
batches small and callers wait for batches not theirs). The caller's own thread does the work:
a call that finds nobody leading is served at once, with no hand-off to another thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.common.runtime.checkpoint import LockTimeout
from topodra.common.runtime.claims.check import label
from topodra.common.runtime.driver import ClaimRef
from topodra.common.runtime.seams import ClaimOutcome


@dataclass(slots=True)
class Call:
    """One prepare or unprepare call waiting to be served (possibly by another thread)."""

    op: str  # prepare | unprepare
    claims: tuple[ClaimRef, ...]
    fetched: dict[str, Any]  # uid -> claim object or the exception its GET raised
    prepared: dict[str, ClaimOutcome] = field(default_factory=dict)
    unprepared: dict[str, str] = field(default_factory=dict)
    answered: bool = False
    # set when answered or made the leader; only a call that queues behind a leader waits on one
    # (made under the queue's lock before anyone can take the call), so the common call that
    # serves itself makes no Event at all
    wake: threading.Event | None = None

    def finish(self) -> None:
        self.answered = True
        if self.wake is not None:
            self.wake.set()

    def fail(self, message: str) -> None:
        for c in self.claims:
            text = f"{label(c)}: {message}"
            if self.op == "prepare":
                self.prepared.setdefault(c.uid, ClaimOutcome(error=text))
            else:
                self.unprepared.setdefault(c.uid, text)


# serves the batch that `take()` hands it, once it holds whatever locks serving needs
Serve = Callable[[Callable[[], list[Call]]], None]


class CallQueue:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Call] = []
        self._leading = False  # a caller is serving the queue

    def waiting(self) -> int:
        """Calls queued and not yet taken into a batch."""
        with self._lock:
            return len(self._queue)

    def submit(self, call: Call, serve: Serve) -> None:
        """Returns once `call` is answered (by this thread or a leader)."""
        with self._lock:
            lead = not self._leading
            if not lead:
                call.wake = threading.Event()
            self._queue.append(call)
            self._leading = True
        if call.wake is not None:
            call.wake.wait()  # answered, or handed the lead
        if not call.answered:
            self._lead(call, serve)

    def _take(self) -> list[Call]:
        with self._lock:
            batch, self._queue = self._queue, []
        return batch

    def _lead(self, call: Call, serve: Serve) -> None:
        """Serve queued calls in batches until `call` is answered, then pass the lead on."""
        try:
            while not call.answered:
                try:
                    serve(self._take)
                except LockTimeout as e:
                    call.fail(str(e))  # each waiting call gets its own full wait for the lock
                    call.finish()  # (the finally below takes it out of the queue)
        finally:  # also when serving raised (e.g. a checkpoint from a newer version)
            with self._lock:
                if call in self._queue:
                    self._queue.remove(call)  # its caller gets the exception
                if self._queue:
                    _wake(self._queue[0])
                else:
                    self._leading = False


def _wake(call: Call) -> None:
    """Hands the lead to a queued call: every call queued behind a leader has its Event."""
    if call.wake is None:  # not reachable: such a call never waits, so it must not be queued
        raise RuntimeError(f"call of {len(call.claims)} claims queued without a wake event")
    call.wake.set()


def stages(batch: Sequence[Call]) -> list[tuple[str, list[Call]]]:
    """The order in which a batch is served: runs of one operation, each served with one
    checkpoint write. Calls that share a claim are served in the order they arrived (a prepare
    and an unprepare of one claim that overlap must end as the later one says); calls that share
    none are concurrent, and unprepares go first so that the devices they free can be reused."""
    runs: list[tuple[str, list[Call], set[str]]] = [("unprepare", [], set()), ("prepare", [], set())]
    for call in batch:
        uids = {c.uid for c in call.claims}
        after = max((i for i, (_, _, seen) in enumerate(runs) if seen & uids), default=0)
        at = next((i for i in range(after, len(runs)) if runs[i][0] == call.op), None)
        if at is None:
            runs.append((call.op, [], set()))
            at = len(runs) - 1
        runs[at][1].append(call)
        runs[at][2].update(uids)
    return [(op, calls) for op, calls, _ in runs if calls]
