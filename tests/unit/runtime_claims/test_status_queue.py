"""The queued claim-status writer the runtime hands to drivers: calls return at once, writes
run in order, a failed write is retried a bounded number of times."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from topodra.common.runtime.driver import AllocatedDeviceStatus, ClaimRef, ClaimStatusError
from topodra.common.runtime.statusqueue import QueuedStatusWriter

CLAIM = ClaimRef("ns", "c", "uid-1")


class Writer:
    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.gate = threading.Event()
        self.gate.set()
        self.calls: list[tuple[str, int]] = []

    def set_devices(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        self.gate.wait(30)
        self.calls.append(("set", len(devices)))
        if self.failures:
            self.failures -= 1
            raise ClaimStatusError("409 conflict")

    def remove_devices(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        self.calls.append(("remove", len(keys)))


def test_calls_return_while_the_api_server_is_slow_and_run_in_order() -> None:
    writer = Writer()
    writer.gate.clear()  # the API server does not answer
    queued = QueuedStatusWriter(writer)
    try:
        queued.set_devices(CLAIM, [AllocatedDeviceStatus("pool", "dev-0")])
        queued.remove_devices(CLAIM, [("pool", "dev-0", None)])
        assert not queued.flush(0.2) and writer.calls == []
        writer.gate.set()
        assert queued.flush(30)
        assert writer.calls == [("set", 1), ("remove", 1)]
    finally:
        queued.close()


def test_a_failed_write_is_retried_then_given_up() -> None:
    writer = Writer(failures=2)
    queued = QueuedStatusWriter(writer, max_attempts=6)
    try:
        queued.set_devices(CLAIM, [AllocatedDeviceStatus("pool", "dev-0")])
        assert queued.flush(30)
        assert writer.calls == [("set", 1)] * 3
        writer.failures = 10
        queued.set_devices(CLAIM, [])
        assert queued.flush(30)
        assert len(writer.calls) == 3 + 6  # six attempts, then it stops
    finally:
        queued.close()
