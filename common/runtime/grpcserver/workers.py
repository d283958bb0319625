"""The threads that run the server's calls: up to `size`, started as calls need them.

Why not concurrent.futures' ThreadPoolExecutor: it makes a Future per call (a Condition and its
lock), takes and gives a semaphore per call and keeps what a call raised inside that Future, which
nobody here reads. The server needs only "run this soon on a thread of the pool": one lock
taken per call and a hand-off to one thread (docs/bench/latest.md has what it cost). What a
call raises is logged, naming the call, instead of being kept. The threads are daemons: a
driver that exits does not wait for a call stuck past the server's grace period, which
ThreadPoolExecutor's threads made it do; ending a call anywhere is what a kill does, and the
claim core is safe against a kill at every step (docs/design/claim-lifecycle.md).

A call wakes one thread, the one that runs it. With all idle threads waiting on one queue
(queue.SimpleQueue's get), the thread that took a call woke another, which found the queue empty
and slept again: 100 calls one after another, 2 ms apart, with 8 threads idle, cost the pool's
threads 379-387 voluntary context switches, where threads that ran one call switched 64-73
times; with a lock of each idle thread's own, 173-179. In `topodra serve cpu` answering one call
at a time: 14.2-14.3 voluntary context switches of the process per prepare+unprepare, now 9.4-9.6.
The thread asleep longest takes the next call. Handing it to the one asleep the shortest
instead (warmer caches) cost more in 64-in-flight rounds: the claims per second of `serve cpu`
0.93x of the queue's in the same run, against 1.02x (docs/bench/latest.md). As with the queue, a
call starts a thread only when no thread that finished its call is free (`_idle`); else it waits
in the backlog, which threads take from as they finish; a burst wakes sleepers one after another
(see `_waking`). Letting a thread that took a call from the backlog start the next one, as a
first version did, started up to twice the threads in a burst (29-58 against 27-39 after
bench-peer's warm-up) and cost their stacks' memory.

A burst of calls starts up to `size` threads; when it is over, threads beyond `keep` that waited
`linger` seconds for a call end, so a pool sized for bursts does not keep them and their stacks
(measured on `topodra serve cpu` with 64 workers, right after 64-in-flight rounds: 71 threads,
41.9 MiB resident; 35 s later: 15 threads, 40.9 MiB).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from topodra.common import logs

_Call = tuple[Callable[..., None], tuple[Any, ...]]


KEEP = 8  # threads that wait for calls however long it takes
LINGER = 30.0  # seconds a thread beyond KEEP waits for a call before it ends


class _Sleeper:
    """A sleeping thread's wake-up: held while the thread sleeps; whoever takes the thread off
    the sleepers releases it."""

    __slots__ = ("wake",)

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()


class Workers:
    def __init__(
        self, size: int, name: str, log: logs.Logger, keep: int = KEEP, linger: float = LINGER
    ) -> None:
        if size < 1:
            raise ValueError(f"a worker pool needs at least one thread, not {size}")
        self._size = size
        self._keep = keep
        self._linger = linger
        self._name = name
        self._log = log
        self._lock = threading.Lock()
        self._backlog: collections.deque[_Call] = collections.deque()  # calls no thread took yet
        self._sleeping: collections.deque[_Sleeper] = collections.deque()  # longest asleep first
        self._started = 0  # threads running, never more than `size`
        self._named = 0  # threads ever started
        # Threads that finished a call and will take the next one (asleep, or about to look at
        # the backlog): each submit takes one such promise or, with none left, starts a thread
        # (up to `size`); with neither, the call waits in the backlog for the first thread free.
        self._idle = 0
        # Sleepers woken that have not yet looked at the backlog. While one is on its way, a
        # submit wakes nobody: the one on its way takes a call and, if more wait, wakes the next
        # sleeper. A burst thus wakes sleepers one after another, each as the one before runs,
        # rather than all at once to queue for the interpreter lock.
        self._waking = 0
        self._closed = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"worker pool {self._name} is closed")
            self._backlog.append((fn, args))
            if self._idle:
                self._idle -= 1
                wake = self._wake_sleeper()
            elif self._started < self._size:
                self._started += 1
                self._named += 1  # names stay unique when threads that lingered have ended
                name = f"{self._name}-{self._named - 1}"
                wake = threading.Thread(target=self._work, name=name, daemon=True).start
            else:
                return
        if wake is not None:
            wake()

    def _wake_sleeper(self) -> Callable[[], None] | None:
        """Under the lock: the sleeper to wake for a call in the backlog, unless one is on its
        way or none sleeps (a thread that just finished a call looks at the backlog first)."""
        if self._sleeping and not self._waking:
            self._waking += 1
            return self._sleeping.popleft().wake.release
        return None

    def _next(self, me: _Sleeper, finished: bool) -> _Call | None:
        """The next call; None to end: at close, or after `linger` seconds without one while
        more than `keep` threads are started and one idle thread can be spared (an idle thread
        is a promise to some submit; one that gives its promise back may end). `finished`: the
        thread just ran a call and becomes such a promise (under the same lock as the look at
        the backlog: one lock taken per call, not two)."""
        woken = False  # from the second pass on: woken by whoever took `me` off the sleepers
        while True:
            with self._lock:
                if finished:
                    self._idle += 1
                    finished = False
                if woken:
                    self._waking -= 1
                if self._closed:
                    self._started -= 1
                    return None
                if self._backlog:
                    call = self._backlog.popleft()
                    wake = self._wake_sleeper() if self._backlog else None
                    break
                self._sleeping.append(me)
            while not me.wake.acquire(timeout=self._linger):
                with self._lock:
                    if me in self._sleeping and self._started > self._keep and self._idle > 0:
                        self._sleeping.remove(me)
                        self._idle -= 1
                        self._started -= 1
                        return None
                # kept, or taken off the sleepers by someone about to wake it
            woken = True
        if wake is not None:
            wake()
        return call

    def _work(self) -> None:
        me = _Sleeper()
        finished = False  # started for a call of a submit: no promise to give
        while (call := self._next(me, finished)) is not None:
            finished = True
            fn, args = call
            try:
                fn(*args)
            except BaseException as e:  # a worker outlives the call it ran
                self._log.exception(
                    "gRPC worker: a call raised",
                    pool=self._name,
                    call=getattr(fn, "__qualname__", repr(fn)),
                    error=f"{type(e).__name__}: {e}",
                )
            del call, fn, args  # hold nothing of the call while waiting for the next one

    def close(self) -> None:
        """No new calls; calls not yet started are dropped (their connections are closed by
        now), those running finish on their own: this does not wait for them."""
        with self._lock:
            self._closed = True
            self._backlog.clear()
            sleeping, self._sleeping = self._sleeping, collections.deque()
            self._waking += len(sleeping)
        for sleeper in sleeping:
            sleeper.wake.release()
