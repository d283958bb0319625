"""A clock that moves only when the test says so (implements common.clock.Clock).

Loops written against a Clock wait in this clock's time: `advance()` wakes them, and `settle()`
waits until the given number of threads are waiting again, each having seen the new time, so
that a test can step through backoff and resync delays without sleeping and then assert what
happened, counted in the clock's seconds rather than the machine's.
"""

from __future__ import annotations

import threading
import time


class ManualClock:
    EPOCH = 1_800_000_000.0  # what time() reports at monotonic() == 0

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()
        self._conds: list[threading.Condition] = []
        self._epoch = 0  # bumped by every advance
        self._waiting: dict[int, int] = {}  # thread id -> epoch it started waiting in

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self.EPOCH + self._now

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        deadline = None if timeout is None else self._now + timeout
        me = threading.get_ident()
        with self._lock:
            if all(c is not cond for c in self._conds):
                self._conds.append(cond)
            if deadline is not None and self._now >= deadline:
                return False
            self._waiting[me] = self._epoch
        try:
            cond.wait()  # a notify of the caller's own, or advance()
        finally:
            with self._lock:
                self._waiting.pop(me, None)
        return deadline is None or self._now < deadline

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
            self._epoch += 1
            conds = list(self._conds)
        for cond in conds:
            with cond:
                cond.notify_all()

    def waiting(self) -> int:
        """Threads waiting in this clock that started waiting after the last advance."""
        with self._lock:
            return sum(1 for e in self._waiting.values() if e == self._epoch)

    def settle(self, threads: int, deadline: float = 30.0) -> None:
        """Wait (in real time, only as a hang guard) until `threads` threads wait again."""
        end = time.monotonic() + deadline
        while self.waiting() < threads:
            if time.monotonic() > end:
                raise AssertionError(f"{self.waiting()} of {threads} threads came back to wait")
            time.sleep(0.002)

    def step(self, seconds: float, threads: int, step: float = 0.05) -> None:
        """Advance `seconds` in steps, letting `threads` threads settle after each."""
        left = seconds
        while left > 1e-9:
            d = min(step, left)
            self.advance(d)
            self.settle(threads)
            left -= d
