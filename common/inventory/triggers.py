"""When to scan: uevents, a changed signature, or a request; one thread decides.

A uevent (hot-plug, a driver bound or unbound, an interface added, moved or renamed) scans
after a short quiet period: events come in bursts (a VF is a pci, a net and an infiniband
event), and one scan serves the burst. The signature (signature.py) is polled every `interval`
seconds as the fallback where no uevent socket exists (some containers) and as the safety net
where one does. `request()` wakes the thread at once through a pipe, so a driver's or the claim
core's request is served without waiting for any timeout.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from topodra.common import logs

UDEVD_CONTROL = "/run/udev/control"


def open_monitor(subsystems: Sequence[str], source: str | None = None) -> Any:
    """A started udev monitor for `subsystems`: udevd's processed events where udevd runs (after
    its rules and renames), else the kernel's own. Raises OSError/ImportError where uevents cannot
    be had (no netlink socket, no libudev). pyudev is imported here, not with the module: a
    driver that watches no uevents (the CPU driver) does not pay its ~3 MiB."""
    import pyudev

    context = pyudev.Context()
    source = source or ("udev" if os.path.exists(UDEVD_CONTROL) else "kernel")
    monitor = pyudev.Monitor.from_netlink(context, source=source)
    for subsystem in subsystems:
        monitor.filter_by(subsystem)
    monitor.start()
    return monitor


RETRY = 1.0  # seconds after a failed scan before the next try


class Triggers:
    """Calls `on_change(reason)` ("uevent", "request", "signature", "retry") from its own thread,
    and `on_deadline()` when `next_deadline()` (a monotonic time, or None) has come. When
    `on_change` answers False (the scan failed) it is called again after RETRY seconds."""

    def __init__(
        self,
        on_change: Callable[[str], bool],
        *,
        subsystems: Sequence[str] = (),
        interval: float = 5.0,
        signature: Callable[[], object] | None = None,
        next_deadline: Callable[[], float | None] = lambda: None,
        on_deadline: Callable[[], None] = lambda: None,
        debounce: float = 0.2,
        open_monitor: Callable[[Sequence[str]], Any] = open_monitor,
        name: str = "",
    ) -> None:
        self._on_change = on_change
        self._subsystems = tuple(subsystems)
        self._interval = interval
        self._signature = signature
        self._next_deadline = next_deadline
        self._on_deadline = on_deadline
        self._debounce = debounce
        self._open_monitor = open_monitor
        self._name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._monitor: Any = None
        self._wake_r, self._wake_w = -1, -1
        self._last: object = None
        self._retry_at = math.inf
        self._pending = False  # a request not yet served (guarded by _flag)
        self._flag = threading.Lock()
        self._log = logs.get(__name__, driver=name) if name else logs.get(__name__)
        self.counts: Counter[str] = Counter()  # on_change calls by reason
        self.events = 0  # uevents received
        self.polls = 0  # signature reads at the polling interval

    @property
    def udev_active(self) -> bool:
        return self._monitor is not None

    def start(self) -> None:
        """Read the signature now (the caller's first scan is based on it) and start watching."""
        if self._thread is not None:
            return
        self._last = self._read()
        if self._subsystems:
            try:
                self._monitor = self._open_monitor(self._subsystems)
            except (OSError, ImportError) as err:  # no netlink socket, no permission, no libudev
                self._log.warning(
                    "uevents unavailable; polling the signature only", error=str(err), interval=self._interval
                )
                self._monitor = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"inventory-{self._name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r, self._wake_w = -1, -1
        self._monitor = None

    def request(self) -> None:
        with self._flag:
            self._pending = True
        self._wake()

    def deadline_changed(self) -> None:
        """`next_deadline()` may be earlier now: look at it again without scanning."""
        self._wake()

    def retry_later(self) -> None:
        """Call `on_change("retry")` after RETRY seconds (the caller's own scan failed)."""
        self._retry_at = time.monotonic() + RETRY
        self._wake()

    def _wake(self) -> None:
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):  # the pipe is full: a wake-up is pending anyway
                os.write(self._wake_w, b"x")

    def _read(self) -> object:
        return None if self._signature is None else self._signature()

    # --- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        polling = self._signature is not None and self._interval > 0
        next_poll = time.monotonic() + self._interval if polling else math.inf
        while not self._stop.is_set():
            deadline = self._next_deadline()
            due = min(next_poll, self._retry_at, math.inf if deadline is None else deadline)
            timeout = None if due == math.inf else max(0.0, due - time.monotonic())
            event, requested = self._wait(timeout)
            if self._stop.is_set():
                return
            if event:
                self._settle()
                self._fire("uevent")
            elif requested:
                self._fire("request")
            elif time.monotonic() >= self._retry_at:
                self._fire("retry")
            now = time.monotonic()
            if now >= next_poll:
                next_poll = now + self._interval
                self.polls += 1
                current = self._read()
                if current != self._last:
                    self._fire("signature", current)
            deadline = self._next_deadline()
            if deadline is not None and time.monotonic() >= deadline:
                self._guarded(self._on_deadline, "deadline")

    def _wait(self, timeout: float | None) -> tuple[bool, bool]:
        """(a uevent arrived, a request arrived) within `timeout` seconds."""
        fds: list[Any] = [self._wake_r] + ([self._monitor] if self._monitor is not None else [])
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            return False, False
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                os.read(self._wake_r, 4096)
        with self._flag:
            requested, self._pending = self._pending, False
        event = self._monitor is not None and self._monitor in ready and self._receive()
        return event, requested

    def _receive(self) -> bool:
        try:
            device = self._monitor.poll(timeout=0)
        except Exception as err:  # any failure of the socket ends uevents, not the thread
            self._log.warning("udev monitor failed; polling the signature only", error=str(err))
            self._monitor = None
            return False
        if device is None:  # a message libudev dropped (wrong sender, filtered)
            return False
        self.events += 1
        self._log.debug("uevent", subsystem=device.subsystem, action=device.action, path=device.sys_path)
        return True

    def _settle(self) -> None:
        """Take the rest of a burst of uevents before scanning."""
        until = time.monotonic() + self._debounce
        while (left := until - time.monotonic()) > 0 and not self._stop.is_set():
            self._wait(left)

    def _fire(self, reason: str, signature: object = None) -> None:
        self._last = self._read() if signature is None else signature
        self.counts[reason] += 1
        self._retry_at = math.inf
        if not self._guarded(lambda: self._on_change(reason), reason):
            self._retry_at = time.monotonic() + RETRY

    def _guarded(self, call: Callable[[], object], reason: str) -> bool:
        try:
            return call() is not False
        except Exception:  # the next trigger tries again; the thread must live on
            self._log.exception("inventory trigger failed", reason=reason)
            return False
