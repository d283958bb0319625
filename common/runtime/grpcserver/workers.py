"""The threads that run the server's calls: up to `size`, started as calls need them.

Why not concurrent.futures' ThreadPoolExecutor: it makes a Future per call (a Condition and its
lock), takes and gives a semaphore per call and keeps what a call raised inside that Future, which
nobody here reads. The server needs only "run this soon on a thread of the pool": one lock
taken per call and a queue (docs/bench/latest.md has what it cost). What a call raises is
logged, naming the call, instead of being kept. The threads are daemons: a driver that exits
does not wait for a call stuck past the server's grace period, which ThreadPoolExecutor's threads
made it do; ending a call anywhere is what a kill does, and the claim core is safe against a kill
at every step (docs/design/claim-lifecycle.md).

A burst of calls starts up to `size` threads; when it is over, threads beyond `keep` that waited
`linger` seconds for a call end, so a pool sized for bursts does not keep them and their stacks
(measured on `topodra serve cpu` with 64 workers, right after 64-in-flight rounds: 71 threads,
41.9 MiB resident; 35 s later: 15 threads, 40.9 MiB).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from topodra.common import logs

_Item = tuple[Callable[..., None], tuple[Any, ...]] | None  # None: a worker's signal to end


KEEP = 8  # threads that wait for calls however long it takes
LINGER = 30.0  # seconds a thread beyond KEEP waits for a call before it ends


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
        self._calls: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0  # threads running, never more than `size`
        self._named = 0  # threads ever started
        # Workers that finished a call and will take the next one: each submit takes one such
        # promise or, with none left, starts a thread (up to `size`); with neither, the call
        # waits in the queue for the first worker free.
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"worker pool {self._name} is closed")
            self._calls.put((fn, args))
            if self._idle:
                self._idle -= 1
                return
            if self._started >= self._size:
                return
            thread = threading.Thread(target=self._work, name=f"{self._name}-{self._named}", daemon=True)
            self._started += 1
            self._named += 1  # names stay unique when threads that lingered have ended
        thread.start()

    def _next(self) -> _Item:
        """The next call; None to end: at close, or after `linger` seconds without one while
        more than `keep` threads are started and one idle thread can be spared (an idle thread
        is a promise to some submit; one that gives its promise back may end)."""
        while True:
            try:
                return self._calls.get(timeout=self._linger)
            except queue.Empty:
                with self._lock:
                    if self._started > self._keep and self._idle > 0:
                        self._idle -= 1
                        self._started -= 1
                        return None

    def _work(self) -> None:
        lock = self._lock
        while (item := self._next()) is not None:
            fn, args = item
            try:
                fn(*args)
            except BaseException as e:  # a worker outlives the call it ran
                self._log.exception(
                    "gRPC worker: a call raised",
                    pool=self._name,
                    call=getattr(fn, "__qualname__", repr(fn)),
                    error=f"{type(e).__name__}: {e}",
                )
            del item, fn, args  # hold nothing of the call while waiting for the next one
            with lock:
                self._idle += 1

    def close(self) -> None:
        """No new calls; calls not yet started are dropped (their connections are closed by
        now), those running finish on their own: this does not wait for them."""
        with self._lock:
            self._closed = True
            threads = self._started
        while True:
            try:
                self._calls.get_nowait()
            except queue.Empty:
                break
        for _ in range(threads):
            self._calls.put(None)
