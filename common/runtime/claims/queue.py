"""Group commit of prepare and unprepare calls.

Calls are serialized, and every checkpoint write costs two fsyncs. Calls that arrive while
another is being served queue up, and the next batch serves the whole queue with one checkpoint
write per run of one operation, in the order `stages` gives (docs/design/claim-lifecycle.md).

One caller at a time is the leader: it serves batches until its own call is done, then hands the
lead to the oldest waiting call. Everybody else waits on its own call's event, so an answered call
returns at once instead of queueing behind the next batch for the serving lock (which made
batches small and callers wait for batches not theirs). The caller's own thread does the work:
a call that finds nobody leading is served at once, with no hand-off to another thread.

A call can instead carry a callback (`submit_async`): its caller does not wait, and the thread
that answers it runs the callback. Such a call never leads after it is queued; the leader keeps
serving as long as only such calls are queued. The kubelet's calls come this way, so a handful of
gRPC workers keeps any number of calls in flight and a batch holds every call that arrived
while the previous one was written (docs/design/claim-lifecycle.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.common import logs
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
    on_answer: Callable[[Call], None] | None = None  # set: nobody waits; run once answered

    def finish(self) -> None:
        self.answered = True
        if self.wake is not None:
            self.wake.set()
        if self.on_answer is not None:
            answer, self.on_answer = self.on_answer, None
            try:
                answer(self)
            except Exception:  # the answer's writer logs its own failures; never stop a batch
                _log.exception("answering a claim call failed", claims=[c.uid for c in self.claims])

    def fail(self, message: str) -> None:
        for c in self.claims:
            text = f"{label(c)}: {message}"
            if self.op == "prepare":
                self.prepared.setdefault(c.uid, ClaimOutcome(error=text))
            else:
                self.unprepared.setdefault(c.uid, text)


_log = logs.get(__name__)

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

    def submit_async(self, call: Call, serve: Serve, on_answer: Callable[[Call], None]) -> None:
        """Queue `call`; `on_answer(call)` runs once it is answered, in the thread that answers
        it. Returns at once, unless nobody leads: then this thread serves until the queue is
        empty (or a waiting caller takes the lead over)."""
        call.on_answer = on_answer
        with self._lock:
            lead = not self._leading
            self._queue.append(call)
            self._leading = True
        if lead:
            self._lead(call, serve)

    def _take(self) -> list[Call]:
        with self._lock:
            batch, self._queue = self._queue, []
        return batch

    def _lead(self, call: Call, serve: Serve) -> None:
        """Serve queued calls in batches until `call` is answered, then pass the lead on: to the
        oldest caller that waits, or, when only callback calls are queued, to nobody: this
        thread goes on serving them, each in turn as the call it serves for."""
        while True:
            failed: BaseException | None = None
            try:
                while not call.answered:
                    try:
                        serve(self._take)
                    except LockTimeout as e:
                        call.fail(str(e))  # each waiting call gets its own full wait for the lock
                        self._remove(call)
                        call.finish()
            except BaseException as e:  # e.g. a checkpoint from a newer version
                failed = e
            stranded: list[Call] = []
            with self._lock:
                if call in self._queue:
                    self._queue.remove(call)  # its caller gets the exception
                waiter = next((c for c in self._queue if c.wake is not None), None)
                follow = None
                if waiter is not None:
                    waiter.wake.set()  # type: ignore[union-attr]
                elif self._queue and (failed is None or call.on_answer is not None):
                    follow = self._queue[0]
                else:
                    stranded, self._queue = self._queue, []  # callback calls only, if any
                    self._leading = False
            if failed is not None:
                message = f"internal error: {type(failed).__name__}: {failed}"
                for c in stranded:  # nobody is left to serve them: they get this thread's error
                    c.fail(message)
                    c.finish()
                if call.on_answer is None:
                    raise failed
                call.fail(message)
                call.finish()
            if follow is None:
                return
            call = follow

    def _remove(self, call: Call) -> None:
        with self._lock:
            if call in self._queue:
                self._queue.remove(call)


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
