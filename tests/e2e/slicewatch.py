"""An independent observer of ResourceSlice writes: an admin watch, not the drivers' own counters.

Every ADDED / MODIFIED / DELETED event the API server sends is one accepted write (the watch
cache delivers each resourceVersion change). Counting them from outside the drivers is what
proves "zero writes when idle": a driver's own metrics could miss a write it does not know about.

    with SliceWatch(cp.api_client()) as watch:
        ...
        watch.events(nodes={"n1"}, since=t0)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import kubernetes.client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

WRITE_EVENTS = ("ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True)
class SliceEvent:
    at: float  # time.monotonic() when the event arrived
    type: str
    name: str
    node: str
    driver: str
    resource_version: str


class SliceWatch:
    """Watches every ResourceSlice from a list's resourceVersion on, in a daemon thread.

    A watch that ends (server timeout) is resumed from the last resourceVersion, so no event is
    missed; a 410 Gone or a connection failure is recorded in `gaps` (events may be missing
    there) and the watch relists.
    """

    def __init__(self, api_client: k8s.ApiClient, watch_seconds: int = 60) -> None:
        self._api = k8s.ResourceV1Api(api_client)
        self._watch_seconds = watch_seconds
        self._lock = threading.Lock()
        self._events: list[SliceEvent] = []
        self.gaps: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._watch: k8s_watch.Watch | None = None
        self._version = ""
        self._thread = threading.Thread(target=self._run, name="slice-watch", daemon=True)
        self._started = threading.Event()

    def __enter__(self) -> SliceWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        if not self._started.wait(timeout):
            raise RuntimeError("the ResourceSlice watch did not start")

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()  # type: ignore[no-untyped-call]
        self._thread.join(timeout=self._watch_seconds + 10)

    def events(
        self, nodes: set[str] | None = None, since: float = 0.0, until: float | None = None
    ) -> list[SliceEvent]:
        """Write events for `nodes` (all when None) that arrived in [since, until]."""
        with self._lock:
            found = list(self._events)
        return [
            e
            for e in found
            if (nodes is None or e.node in nodes) and e.at >= since and (until is None or e.at <= until)
        ]

    def _relist(self) -> None:
        listed = self._api.list_resource_slice(limit=1)
        if listed.metadata is None or not listed.metadata.resource_version:
            raise RuntimeError("a ResourceSlice list came without a resourceVersion")
        self._version = listed.metadata.resource_version

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                if first or not self._version:
                    self._relist()
                    self._started.set()
                    first = False
                self._watch = k8s_watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(  # type: ignore[no-untyped-call]
                    self._api.list_resource_slice,
                    resource_version=self._version,
                    timeout_seconds=self._watch_seconds,
                ):
                    self._on_event(event)
                    if self._stop.is_set():
                        break
            except ApiException as e:
                self.gaps.append((time.monotonic(), f"{e.status}: {e.reason}"))
                self._version = ""
                self._stop.wait(0.5)
            except Exception as e:  # connection refused during an outage, reset, ...
                self.gaps.append((time.monotonic(), f"{type(e).__name__}: {e}"))
                self._version = ""
                self._stop.wait(0.5)

    def _on_event(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        kind = event["type"]
        if kind not in WRITE_EVENTS:
            return
        version = obj.metadata.resource_version
        self._version = version
        spec = obj.spec
        item = SliceEvent(
            at=time.monotonic(),
            type=kind,
            name=obj.metadata.name,
            node=spec.node_name or "",
            driver=spec.driver,
            resource_version=version,
        )
        with self._lock:
            self._events.append(item)
