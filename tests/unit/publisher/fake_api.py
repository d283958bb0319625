"""An in-memory ResourceSlice store behind the publisher's SliceApi boundary.

Used only where the real kube-apiserver cannot produce the situation on demand (429 with
Retry-After, a 422 for list attributes, dropped fields, a precisely timed failure). It keeps the
server semantics the publisher relies on: generateName, resourceVersion preconditions (409),
NotFound on delete, field-selector filtering, watch from a resourceVersion and 410 Gone.
Everything else is tested against the real API server in tests/controlplane. Its watch waits in
the given clock's time (tests/kit/clock.py), like the publisher.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from topodra.common.clock import SYSTEM, Clock
from topodra.common.kubeapi.errors import ApiError

Fault = Callable[[str, Mapping[str, Any] | None], ApiError | None]


class FakeSliceApi:
    def __init__(self, node_uid: str = "node-uid-1", clock: Clock = SYSTEM) -> None:
        self.node_uid = node_uid
        self.clock = clock
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: Counter[str] = Counter()
        self.call_times: list[tuple[float, str]] = []
        self.writes: Counter[str] = Counter()
        self.faults: list[Fault] = []  # consulted before every call; first non-None error wins
        self.transform: Callable[[dict[str, Any]], dict[str, Any]] = lambda o: o  # server-side rewriting
        self._rv = itertools.count(1000)
        self._names = itertools.count(1)
        self._events: list[tuple[int, str, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self.oldest_watchable = 0

    # ---- test controls ----------------------------------------------------------------------

    def edit(self, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Someone else changes a stored slice."""
        with self._cond:
            obj = copy.deepcopy(self.objects[name])
            change(obj)
            self._store(obj, "MODIFIED")

    def remove(self, name: str) -> None:
        with self._cond:
            obj = self.objects.pop(name)
            self._emit("DELETED", obj)

    # ---- SliceApi ---------------------------------------------------------------------------

    def get_node(self, name: str) -> dict[str, Any]:
        self._enter("get-node", None)
        return {"metadata": {"name": name, "uid": self.node_uid}}

    def list_slices(self, field_selector: str) -> tuple[list[dict[str, Any]], str]:
        self._enter("list", None)
        with self._cond:
            items = [copy.deepcopy(o) for o in self.objects.values() if _selected(o, field_selector)]
            return items, str(self._current())

    def watch_slices(self, field_selector: str, resource_version: str, timeout_seconds: int) -> _Watch:
        self._enter("watch", None)
        return _Watch(self, field_selector, int(resource_version), timeout_seconds)

    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._enter("create", body)
        with self._cond:
            obj = copy.deepcopy(dict(body))
            meta = obj["metadata"]
            meta["name"] = meta.pop("generateName") + f"{next(self._names):05d}"[-5:]
            meta["uid"] = f"uid-{meta['name']}"
            self.writes["create"] += 1
            return copy.deepcopy(self._store(self.transform(obj), "ADDED"))

    def replace_slice(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self._enter("update", body)
        with self._cond:
            old = self.objects.get(name)
            if old is None:
                raise ApiError("update", 404, f"resourceslices {name!r} not found")
            if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
                raise ApiError("update", 409, "the object has been modified; please apply your changes")
            self.writes["update"] += 1
            return copy.deepcopy(self._store(self.transform(copy.deepcopy(dict(body))), "MODIFIED"))

    def delete_slice(self, name: str, uid: str, resource_version: str) -> None:
        self._enter("delete", None)
        with self._cond:
            old = self.objects.get(name)
            if old is None:
                return
            if resource_version and resource_version != old["metadata"]["resourceVersion"]:
                raise ApiError("delete", 409, "Precondition failed: ResourceVersion")
            self.writes["delete"] += 1
            del self.objects[name]
            self._emit("DELETED", old)

    # ---- internals --------------------------------------------------------------------------

    def _enter(self, verb: str, body: Mapping[str, Any] | None) -> None:
        self.calls[verb] += 1
        self.call_times.append((self.clock.monotonic(), verb))
        for fault in list(self.faults):
            err = fault(verb, body)
            if err is not None:
                raise err

    def _current(self) -> int:
        return self._events[-1][0] if self._events else 999

    def _store(self, obj: dict[str, Any], kind: str) -> dict[str, Any]:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[obj["metadata"]["name"]] = obj
        self._emit(kind, obj)
        return obj

    def _emit(self, kind: str, obj: dict[str, Any]) -> None:
        rv = next(self._rv) if kind == "DELETED" else int(obj["metadata"]["resourceVersion"])
        event_obj = copy.deepcopy(obj)
        event_obj["metadata"]["resourceVersion"] = str(rv)
        self._events.append((rv, kind, event_obj))
        self._cond.notify_all()


class _Watch:
    def __init__(self, api: FakeSliceApi, selector: str, since: int, timeout: int) -> None:
        self._api = api
        self._selector = selector
        self._since = since
        self._deadline = api.clock.monotonic() + timeout
        self._stopped = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        api = self._api
        if self._since < api.oldest_watchable:
            raise ApiError("watch", 410, "too old resource version")
        sent = self._since
        while not self._stopped and (left := self._deadline - api.clock.monotonic()) > 0:
            with api._cond:
                pending = [e for e in api._events if e[0] > sent]
                if not pending:
                    api.clock.wait(api._cond, left)
                    continue
            for rv, kind, obj in pending:
                sent = rv
                if _selected(obj, self._selector):
                    yield {"type": kind, "object": copy.deepcopy(obj)}

    def stop(self) -> None:
        self._stopped = True
        with self._api._cond:
            self._api._cond.notify_all()


def _selected(obj: Mapping[str, Any], selector: str) -> bool:
    spec = obj.get("spec") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        field = {"spec.driver": spec.get("driver"), "spec.nodeName": spec.get("nodeName")}[key]
        if field != value:
            return False
    return True


def network_down(verbs: set[str] | None = None) -> Fault:
    def fault(verb: str, body: Mapping[str, Any] | None) -> ApiError | None:
        if verbs is None or verb in verbs:
            return ApiError(verb, None, "ConnectionRefusedError: [Errno 111] Connection refused")
        return None

    return fault


def fail_once(verb: str, err: ApiError) -> Fault:
    used = []

    def fault(v: str, body: Mapping[str, Any] | None) -> ApiError | None:
        if v == verb and not used:
            used.append(1)
            return err
        return None

    return fault
