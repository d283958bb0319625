"""One driver's device list and health, and the only place that decides when to look again.

    inventory = Inventory(driver)
    inventory.subscribe(callback)   # called with every new Snapshot (publisher, health stream)
    inventory.start()               # first scan now; then uevents, the signature, requests
    inventory.request_rescan()      # e.g. after an unprepare gave a device back to the host
    inventory.stop()

A snapshot is built from three inputs: the last scan (the driver's devices plus the devices its
prepared claims hold), the last health report (pushed by the driver, or read by the inventory
from `check_health` every second, and Unknown once older than its deadline) and the taint
policy. A new snapshot reaches the subscribers only when it differs from the last one; its
`devices` tuple is the same object while the published devices did not change, so a subscriber
can tell a health-only change apart by identity.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from topodra.common import logs
from topodra.common.device import Device
from topodra.common.inventory import signature
from topodra.common.inventory.compose import DeviceStatus, HealthBoard, published, statuses, tainted
from topodra.common.inventory.triggers import Triggers, open_monitor
from topodra.common.runtime import capabilities
from topodra.common.runtime.driver import DeviceHealth, Driver, Scan


@dataclass(frozen=True, slots=True)
class Snapshot:
    generation: int  # 0: nothing scanned yet
    devices: tuple[Device, ...]  # what is published: host and held devices, tainted by policy
    health: tuple[DeviceStatus, ...]  # every published device, in name order
    at: float  # unix time this snapshot was made

    def health_of(self, name: str) -> DeviceStatus | None:
        return next((s for s in self.health if s.device == name), None)


EMPTY = Snapshot(0, (), (), 0.0)


class DevicesTo:
    """A subscriber that hands each changed device list on, e.g. to a publisher's set_devices
    (health-only changes are not its business: the devices tuple stays the same object)."""

    def __init__(self, set_devices: Callable[[Sequence[Device]], None]) -> None:
        self._set_devices = set_devices
        self._last: tuple[Device, ...] | None = None

    def __call__(self, snapshot: Snapshot) -> None:
        if snapshot.devices is not self._last:
            self._set_devices(snapshot.devices)
            self._last = snapshot.devices


class Inventory:
    """Implements contract.InventoryHandle for one driver; see the module docstring."""

    def __init__(
        self,
        driver: Driver,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        open_monitor: Callable[[Sequence[str]], Any] = open_monitor,
        debounce: float = 0.2,
    ) -> None:
        caps = capabilities.of(driver)
        self.driver = driver
        self.policy = caps.policy
        self._taint_key = self.policy.taint_key or f"{driver.name}/unhealthy"
        self._check_health = caps.check_health
        self._bind = caps.bind_inventory
        self._clock = clock
        self._wall = wall
        self._scan_lock = threading.Lock()  # one scan at a time
        self._compose_lock = threading.RLock()  # one snapshot at a time, handed out in order
        self._lock = threading.Lock()  # the inputs below
        self._base: tuple[Device, ...] | None = None  # published() of the last scan, untainted
        self._board = HealthBoard()
        self._snapshot = EMPTY
        self._reported_at = 0.0  # unix time of the last health report, changed or not
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._stopped = threading.Event()
        self._health_thread: threading.Thread | None = None
        self._log = logs.get(__name__, driver=driver.name)
        self.scans: Counter[str] = Counter()  # scans by reason: start, uevent, request, signature
        self._triggers = Triggers(
            self._look,
            subsystems=self.policy.subsystems,
            interval=self.policy.interval,
            signature=partial(signature.read, self.policy)
            if signature.watches_anything(self.policy)
            else None,
            next_deadline=self._next_deadline,
            on_deadline=self._compose,
            debounce=debounce,
            open_monitor=open_monitor,
            name=driver.name,
        )

    # --- what the runtime calls ----------------------------------------------------------------
    def subscribe(self, callback: Callable[[Snapshot], None]) -> None:
        """`callback(snapshot)` for every new snapshot, in order, from the thread that made it;
        at once with the current one if there is one. It must be quick and must not raise."""
        with self._compose_lock:
            self._subscribers.append(callback)
            if self._snapshot.generation:
                callback(self._snapshot)

    def start(self) -> None:
        """Scan once now (the first snapshot exists when this returns), then keep watching."""
        self._stopped.clear()
        if self._bind is not None:
            self._bind(self)
        self._triggers.start()
        if not self._look("start"):
            self._triggers.retry_later()
        if self._check_health is not None:
            self._health_thread = threading.Thread(
                target=self._health_loop, name=f"health-{self.driver.name}", daemon=True
            )
            self._health_thread.start()
        self._log.info(
            "inventory watching",
            uevents=self._triggers.udev_active,
            subsystems=list(self.policy.subsystems),
            interval=self.policy.interval,
            devices=len(self._snapshot.devices),
        )

    def stop(self) -> None:
        self._stopped.set()
        self._triggers.stop()
        if self._health_thread is not None:
            self._health_thread.join(5)
            self._health_thread = None

    def refresh(self) -> Snapshot:
        """Scan and check health now, in this thread (one-shot users: `topodra slices`, tests);
        a failing scan raises."""
        self._look("request", raise_errors=True)
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        with self._compose_lock:
            return self._snapshot

    def devices(self) -> tuple[Device, ...]:
        """The published devices (what the claim core checks allocations against)."""
        return self.snapshot().devices

    def confirmed_at(self) -> float:
        """Unix time the published health was last confirmed: the newest report, even one that
        changed nothing (what the health stream sends as `last_updated_time`)."""
        with self._lock:
            return max(self._reported_at, self._snapshot.at)

    @property
    def udev_active(self) -> bool:
        return self._triggers.udev_active

    @property
    def uevents(self) -> int:
        return self._triggers.events

    @property
    def polls(self) -> int:
        """How often the signature was read at the polling interval."""
        return self._triggers.polls

    # --- InventoryHandle ----------------------------------------------------------------------
    def request_rescan(self) -> None:
        self._triggers.request()

    def report_health(self, health: Mapping[str, DeviceHealth], *, valid_for: float) -> None:
        with self._lock:
            self._board.report(health, self._clock(), valid_for)
            self._reported_at = self._wall()
        self._triggers.deadline_changed()
        self._compose()

    # --- scans --------------------------------------------------------------------------------
    def _look(self, reason: str, raise_errors: bool = False) -> bool:
        """A scan, then the health of what it found (a new device is not Unknown for a second),
        then one snapshot of both. False when the scan failed (the triggers retry soon)."""
        if not self._scan(reason, raise_errors):
            return False
        if self._check_health is not None:
            self._check()
        else:
            self._compose()
        return True

    def _scan(self, reason: str, raise_errors: bool) -> bool:
        with self._scan_lock:
            try:
                scan = self.driver.scan()
            except Exception:  # the next trigger tries again; what is published stays
                if raise_errors:
                    raise
                self._log.exception("scan failed; keeping the devices published before", reason=reason)
                return False
            self.scans[reason] += 1
            with self._lock:
                previous = [d.name for d in self._snapshot.devices]
                base = published(Scan(tuple(scan.devices), scan.held), previous)
                if self._base is not None and base == self._base:
                    base = self._base
                elif self._base is not None:
                    before = {d.name for d in self._base}
                    after = {d.name for d in base}
                    if before != after:
                        self._log.info(
                            "device list changed",
                            reason=reason,
                            added=sorted(after - before),
                            removed=sorted(before - after),
                        )
                self._base = base
        return True

    # --- health -------------------------------------------------------------------------------
    def _health_loop(self) -> None:
        while not self._stopped.wait(self.policy.health_interval):
            self._check()

    def _check(self) -> None:
        assert self._check_health is not None
        valid_for = self.policy.health_valid_for
        try:
            health = self._check_health()
        except Exception as e:
            self._log.exception("health check failed")
            with self._lock:
                self._board.fail(f"health check failed: {type(e).__name__}: {e}", self._clock(), valid_for)
                self._reported_at = self._wall()
            self._triggers.deadline_changed()
            self._compose()
            return
        self.report_health(health, valid_for=valid_for)

    def _next_deadline(self) -> float | None:
        with self._lock:
            return self._board.next_deadline()

    # --- snapshots ----------------------------------------------------------------------------
    def _compose(self) -> None:
        with self._compose_lock:
            with self._lock:
                base = self._base
                if base is None:
                    return
                old = self._snapshot
                health = self._board.effective([d.name for d in base], self._clock())
            devices = tainted(base, health, self._taint_key) if self.policy.taint_unhealthy else base
            if devices == old.devices:
                devices = old.devices
            status = statuses(devices, health)
            if old.generation and devices is old.devices and status == old.health:
                return
            for before, now in _changes(old.health, status):
                self._log.info(
                    "device health changed",
                    device=now.device,
                    health=now.health.name,
                    message=now.message,
                    previous=before.health.name if before else None,
                )
            snapshot = Snapshot(old.generation + 1, devices, status, self._wall())
            self._snapshot = snapshot
            for callback in list(self._subscribers):
                try:
                    callback(snapshot)
                except Exception:  # one subscriber's bug must not starve the others
                    self._log.exception("inventory subscriber failed", generation=snapshot.generation)


def _changes(
    old: Sequence[DeviceStatus], new: Sequence[DeviceStatus]
) -> list[tuple[DeviceStatus | None, DeviceStatus]]:
    before = {s.device: s for s in old}
    return [(before.get(s.device), s) for s in new if before.get(s.device) != s]
