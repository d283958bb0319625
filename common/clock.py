"""Time as a dependency, for the loops whose behaviour over time is the point (backoff, resync).

Production passes SYSTEM. A test passes a clock it advances itself (tests/kit/clock.py), so
that "retried after 1.5 s, not a busy loop" is checked in the clock's time, without sleeping
and without measuring the machine the test runs on.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Unix time (what is reported to people and to Prometheus)."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        """`cond.wait(timeout)` in this clock's time; the caller holds `cond`. False on timeout."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        return cond.wait(timeout)


SYSTEM = SystemClock()
