"""Re-discovery triggers: udev events (hot-plug, link changes) plus a periodic rescan.

The runtime passes a callback that rediscovers and calls `SlicePublisher.set_devices`; this
module only decides *when*. Events come in bursts (a VF appears as pci + net + infiniband
events), so they are coalesced for `debounce` seconds: one rescan, not twenty, and still well
inside the 2 s target. Without pyudev or without a uevent socket (some containers) the
periodic rescan alone keeps the slices current, just later.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from topodra.common import logs

SUBSYSTEMS = ("pci", "net", "drm", "infiniband", "accel")


def _open_monitor(subsystems: Sequence[str]) -> Any | None:
    """A started pyudev monitor, or None when udev events cannot be had here."""
    try:
        import pyudev
    except ImportError:
        return None
    context = pyudev.Context()
    # With udevd running, its processed events (after rules and renames); else the kernel's own.
    source = "udev" if os.path.exists("/run/udev/control") else "kernel"
    monitor = pyudev.Monitor.from_netlink(context, source=source)
    for subsystem in subsystems:
        monitor.filter_by(subsystem)
    monitor.start()
    return monitor


class Rescanner:
    """Calls `callback()` after device events (debounced) and every `period` seconds."""

    def __init__(
        self,
        callback: Callable[[], None],
        *,
        subsystems: Sequence[str] = SUBSYSTEMS,
        period: float = 30.0,
        debounce: float = 0.2,
        name: str = "",
        open_monitor: Callable[[Sequence[str]], Any | None] = _open_monitor,
    ) -> None:
        self._callback = callback
        self._subsystems = tuple(subsystems)
        self._period = period
        self._debounce = debounce
        self._open_monitor = open_monitor
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._monitor: Any | None = None
        self._log = logs.get(__name__, driver=name) if name else logs.get(__name__)
        self.rescans = 0
        self.events = 0

    @property
    def udev_active(self) -> bool:
        return self._monitor is not None

    def start(self) -> None:
        if self._thread is not None:
            return
        try:
            self._monitor = self._open_monitor(self._subsystems)
        except Exception as err:  # no netlink socket, no permission, no libudev
            self._log.warning(
                "udev events unavailable; periodic rescan only", error=str(err), period=self._period
            )
            self._monitor = None
        if self._monitor is None:
            self._log.info("udev events unavailable; periodic rescan only", period=self._period)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="rescan", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self._monitor = None

    def _loop(self) -> None:
        next_periodic = time.monotonic() + self._period
        while not self._stop.is_set():
            timeout = max(0.0, min(next_periodic - time.monotonic(), 0.5))
            if self._wait_event(timeout):
                self.events += 1
                self._drain(time.monotonic() + self._debounce)
                self._rescan("device event")
                next_periodic = time.monotonic() + self._period
            elif time.monotonic() >= next_periodic:
                self._rescan("periodic")
                next_periodic = time.monotonic() + self._period

    def _wait_event(self, timeout: float) -> bool:
        """True when a device event arrived within `timeout` (short, so stop() is prompt)."""
        monitor = self._monitor
        if monitor is None:
            self._stop.wait(timeout)
            return False
        try:
            ready, _, _ = select.select([monitor], [], [], timeout)
            if not ready:
                return False
            device = monitor.poll(timeout=0)
        except Exception as err:
            self._log.warning("udev monitor failed; periodic rescan only", error=str(err))
            self._monitor = None
            return False
        if device is not None:
            self._log.debug(
                "device event", subsystem=device.subsystem, action=device.action, path=device.sys_path
            )
        return device is not None

    def _drain(self, until: float) -> None:
        """Swallow the rest of a burst of events."""
        while (left := until - time.monotonic()) > 0 and not self._stop.is_set():
            if self._wait_event(left):
                self.events += 1

    def _rescan(self, reason: str) -> None:
        self.rescans += 1
        try:
            self._callback()
        except Exception as err:  # the next event or period tries again
            self._log.exception("rescan failed", reason=reason, error=str(err))
