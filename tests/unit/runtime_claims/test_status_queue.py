"""The queued claim-status writer the runtime hands to drivers: calls return at once, a claim's
writes run in order, a failed write is retried a bounded number of times in its claim's lane
while other claims' writes go ahead."""

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
    queued = QueuedStatusWriter(writer, max_attempts=6, backoff=0.01)
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


class Claims:
    """A stand-in API server (the writer's boundary; the real one is tested in the control-plane
    tier): each claim's devices, and claims whose owner keeps changing them, so that every write
    of their status meets a conflict."""

    def __init__(self, conflicting: set[str] = frozenset(), conflicts_left: int = 0) -> None:
        self.conflicting = set(conflicting)
        self.conflicts_left = conflicts_left
        self.devices: dict[str, set[str]] = {}
        self.calls: list[tuple[str, str]] = []
        self.wrote = threading.Condition()

    def _write(self, claim: ClaimRef, verb: str) -> None:
        with self.wrote:
            self.calls.append((claim.name, verb))
            self.wrote.notify_all()
            if claim.name in self.conflicting:
                raise ClaimStatusError("409 conflict: the object has been modified")
            if self.conflicts_left:
                self.conflicts_left -= 1
                raise ClaimStatusError("409 conflict: the object has been modified")

    def set_devices(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        self._write(claim, "set")
        self.devices.setdefault(claim.name, set()).update(d.device for d in devices)

    def remove_devices(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        self._write(claim, "remove")
        self.devices.setdefault(claim.name, set()).difference_update(k[1] for k in keys)


def test_a_retried_write_keeps_its_place_before_the_claims_next_write() -> None:
    # prepare's write meets one conflict, unprepare's follows at once: the status must end empty,
    # not with the device put back by the retried "set" after the "remove"
    api = Claims(conflicts_left=1)
    queued = QueuedStatusWriter(api, backoff=0.01)
    try:
        queued.set_devices(CLAIM, [AllocatedDeviceStatus("pool", "dev-0")])
        queued.remove_devices(CLAIM, [("pool", "dev-0", None)])
        assert queued.flush(30)
        assert api.calls == [("c", "set"), ("c", "set"), ("c", "remove")]
        assert api.devices == {"c": set()}
    finally:
        queued.close()


def test_claims_that_keep_conflicting_do_not_hold_up_other_claims() -> None:
    hostile = {f"hostile-{i}" for i in range(5)}
    api = Claims(conflicting=hostile)
    # a backoff far longer than the test: the hostile claims' second attempts are not due yet
    queued = QueuedStatusWriter(api, backoff=60.0)
    try:
        for name in sorted(hostile):
            queued.set_devices(
                ClaimRef("tenant-a", name, f"uid-{name}"), [AllocatedDeviceStatus("pool", name)]
            )
        with api.wrote:
            assert api.wrote.wait_for(lambda: len(api.calls) == len(hostile), 30)
        honest = ClaimRef("tenant-b", "honest", "uid-honest")
        queued.set_devices(honest, [AllocatedDeviceStatus("pool", "dev-9")])
        queued.remove_devices(honest, [("pool", "dev-9", None)])
        queued.set_devices(honest, [AllocatedDeviceStatus("pool", "dev-8")])
        with api.wrote:
            assert api.wrote.wait_for(lambda: len(api.calls) == len(hostile) + 3, 30)
        assert api.devices["honest"] == {"dev-8"}
        assert sorted(api.calls[: len(hostile)]) == sorted((name, "set") for name in hostile)
        assert api.calls[len(hostile) :] == [("honest", "set"), ("honest", "remove"), ("honest", "set")]
        assert not queued.flush(0.1)  # the hostile claims' writes wait in their lanes
    finally:
        queued.close()


def test_lanes_take_turns() -> None:
    # a claim with many writes queued does not keep the thread from a claim queued after it
    api = Claims()
    first = ClaimRef("ns", "busy", "uid-busy")
    other = ClaimRef("ns", "other", "uid-other")

    queued = QueuedStatusWriter(api)
    try:
        with api.wrote:  # no write can start until all are queued
            queued.set_devices(first, [AllocatedDeviceStatus("pool", "d0")])
            assert api.wrote.wait_for(lambda: len(api.calls) == 1, 30)
            for i in range(1, 4):
                queued.set_devices(first, [AllocatedDeviceStatus("pool", f"d{i}")])
            queued.set_devices(other, [AllocatedDeviceStatus("pool", "x")])
        assert queued.flush(30)
        assert [c for c, _ in api.calls] == ["busy", "busy", "other", "busy", "busy"]
    finally:
        queued.close()


def test_after_close_nothing_is_queued_and_flush_does_not_wait() -> None:
    writer = Writer()
    writer.gate.clear()  # one write in flight when the queue closes, one queued behind it
    queued = QueuedStatusWriter(writer)
    queued.set_devices(CLAIM, [AllocatedDeviceStatus("pool", "dev-0")])
    queued.set_devices(ClaimRef("ns", "d", "uid-2"), [AllocatedDeviceStatus("pool", "dev-1")])
    queued.close()
    queued.set_devices(CLAIM, [AllocatedDeviceStatus("pool", "dev-2")])
    assert queued.flush(0.5)
    writer.gate.set()
    queued._thread.join(10)
    assert not queued._thread.is_alive()
    assert writer.calls in ([], [("set", 1)])  # at most the write that was in flight
