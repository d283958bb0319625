"""Capped exponential backoff with jitter for API retries.

Jitter keeps the drivers of many nodes from retrying in lockstep after an API server outage;
the cap keeps recovery within half a minute of the server coming back.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(slots=True)
class Backoff:
    initial: float = 0.5
    maximum: float = 30.0
    jitter: float = 0.2  # the delay varies by ±20 %
    failures: int = 0
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def next_delay(self, retry_after: float | None = None) -> float:
        """Record a failure; the delay before the next attempt (at least the server's Retry-After)."""
        base = min(self.maximum, self.initial * float(2 ** min(self.failures, 30)))
        self.failures += 1
        delay = base * (1 + self._random.uniform(-self.jitter, self.jitter))
        delay = min(self.maximum, max(self.initial / 2, delay))
        if retry_after is not None and retry_after > delay:
            delay = min(retry_after, self.maximum * 4)
        return delay

    def reset(self) -> None:
        self.failures = 0
