"""Keeps this node's ResourceSlices of one driver equal to the driver's devices.

Two threads, one job each:
- the watch thread lists and watches our own slices (field selector driver + node) into a cache,
  relisting after 410 Gone or any error; a change that did not come from our own writes
  (someone deleted or edited a slice, the kubelet wiped the node's slices at its start)
  schedules a sync after `resync_delay` (0.5 s, where the Go helper waits 30 s);
- the sync thread plans against that cache (`plan.plan_sync`: zero writes when nothing
  changed) and writes deletes, then updates, then creates, storing every server answer in the
  cache at once. Our own writes therefore never look foreign when their watch events arrive,
  and never cause another sync.
Every API failure is retried with capped exponential backoff and jitter; nothing escapes the
threads, so a broken API server never takes the driver down.

Two instances of one driver on one node (a surge rollout whose new version publishes other
attributes) would each repair the other's writes forever. Every slice we write names its writer
in the annotation `<driver>/publisher` (start time, then a random id: later sorts higher). A
foreign change signed by a newer instance makes us stand back, first for `defer_initial`
seconds, doubling up to `defer_max` (it starts over only after a quiet `defer_max`: our own
retry being answered is no reason to retry sooner), so the newest instance owns the pool; a
sync that wrote does not write again over a newer instance's answer; a foreign change by
anyone else is repaired after `resync_delay`, and when such changes keep coming the delay
doubles up to `foreign_max` (it starts over after a quiet `foreign_max`).
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from topodra.common import logs
from topodra.common.clock import SYSTEM, Clock
from topodra.common.device import Device
from topodra.common.kubeapi.errors import ApiError
from topodra.common.kubeapi.slices import KubeSliceApi, SliceApi, WatchStream
from topodra.common.publisher import compare
from topodra.common.publisher.backoff import Backoff
from topodra.common.publisher.build import slice_specs
from topodra.common.publisher.plan import Delete, SyncPlan, infer_dropped, plan_sync
from topodra.common.publisher.validation import DEFAULT_LIMITS, Limits, Problem, validate
from topodra.common.runtime import metrics

_FEATURE_HINT = {
    compare.TAINTS: "device taints",
    compare.CONSUMABLE: "allowMultipleAllocations / capacity requestPolicy",
    compare.LIST_ATTRIBUTES: "list-typed attributes",
    compare.NODE_ALLOCATABLE: "nodeAllocatableResources",
}


_DROPPED = "API server dropped fields: feature gate probably off; publishing without them"

# Fields the server refuses instead of dropping (docs/design/resourceslices.md): the HTTP status,
# the feature, words of its error message, and what the driver logs.
_REFUSALS = (
    # with DRAListTypeAttributes off a list value is dropped, and the empty attribute then fails
    (422, compare.LIST_ATTRIBUTES, ("ints", "bools", "strings", "versions", "exactly one"), _DROPPED),
    # a node whose kubelet does not declare the feature would not honour the mappings: publishing
    # without them is better than publishing nothing (the devices are right; only the cpu
    # accounting stays as it is without the flag)
    (
        403,
        compare.NODE_ALLOCATABLE,
        ("does not support DRANodeAllocatableResources",),
        "the node does not declare DRANodeAllocatableResources (its kubelet runs without the "
        "gate): publishing without nodeAllocatableResources; claimed CPUs are not counted "
        "against the node's allocatable cpu",
    ),
)


@dataclass(frozen=True, slots=True)
class PublisherStatus:
    """What the publisher knows now; cheap to take, safe to hand to other threads."""

    synced: bool  # the stored slices equal the desired ones
    generation: int
    slices: tuple[str, ...]  # names of the stored slices of our pool
    devices: int  # devices desired (after validation and retained merge)
    problems: tuple[Problem, ...]  # what validation left out
    dropped_features: tuple[str, ...]  # gates the API server has off, detected from what it stored
    last_error: str | None
    last_success: float | None  # unix time of the last sync that ended equal
    writes: Mapping[str, int] = field(default_factory=dict)  # accepted writes by verb
    failures: int = 0  # consecutive failed syncs
    deferring_to: str | None = None  # a newer instance publishing this pool, while we stand back


class SlicePublisher:
    """Publishes one driver's devices for one node; see the module docstring for how.

    `api_client` is a `kubeapi.loader.Connection` or an `ApiClient` (or any `SliceApi`).
    `set_devices` may be called from any thread at any time (before or after `start`); slices
    are written only after the first call, so a driver never publishes an empty pool by accident at start-up.
    """

    def __init__(
        self,
        api_client: Any,
        driver_name: str,
        node_name: str,
        *,
        node_uid: str | None = None,
        resync_delay: float = 0.5,
        resync_period: float = 600.0,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        limits: Limits = DEFAULT_LIMITS,
        on_status: Callable[[PublisherStatus], None] | None = None,
        delete_slices_on_stop: bool = False,
        write_parallelism: int = 4,
        clock: Clock = SYSTEM,
        defer_initial: float = 30.0,
        defer_max: float = 300.0,
        foreign_max: float = 60.0,
        instance: str | None = None,
    ) -> None:
        self.api: SliceApi = api_client if hasattr(api_client, "create_slice") else KubeSliceApi(api_client)
        self.driver_name = driver_name
        self.node_name = node_name
        self.field_selector = f"spec.driver={driver_name},spec.nodeName={node_name}"
        self._node_uid = node_uid
        self._recheck_node = False  # set after a foreign delete when we looked the UID up ourselves
        self._uid_given = node_uid is not None
        self._resync_delay = resync_delay
        self._resync_period = resync_period
        self._watch_timeout = watch_timeout
        self._limits = limits
        self._on_status = on_status
        self._delete_on_stop = delete_slices_on_stop
        self._write_parallelism = write_parallelism
        self._clock = clock
        self.instance = instance or f"{int(clock.time() * 1000):013d}.{uuid.uuid4().hex[:8]}"
        self._owner_key = f"{driver_name}/publisher"
        self._defer_backoff = Backoff(defer_initial, defer_max)
        self._defer_until = 0.0
        self._defer_quiet = defer_max
        self._defer_at = float("-inf")
        self._deferring_to: str | None = None
        self._foreign_backoff = Backoff(resync_delay, foreign_max)
        self._foreign_quiet = foreign_max
        self._foreign_at = float("-inf")
        self._foreign_round = False  # a resync for a foreign change is pending
        self._writing = False  # a sync pass is writing (guarded by _cond)
        self._log = logs.get(__name__, driver=driver_name, pool=node_name)

        self._cond = threading.Condition(threading.RLock())
        self._stopping = threading.Event()
        # desired state (guarded by _cond)
        self._specs: list[dict[str, Any]] | None = None
        self._devices: tuple[Device, ...] = ()
        self._problems: tuple[Problem, ...] = ()
        # what the server has (guarded by _cond)
        self._cache: dict[str, dict[str, Any]] = {}
        self._cache_ready = False
        self._need_relist = False
        # scheduling (guarded by _cond)
        self._due: float | None = None
        self._not_before = 0.0
        self._synced = False
        self._disabled: set[str] = set()
        self._adopted = False  # stored slices inspected for dropped features (first sync)
        self._last_error: str | None = None
        self._last_success: float | None = None
        self._generation = 0
        self._writes: Counter[str] = Counter()
        self._sync_backoff = Backoff(backoff_initial, backoff_max)
        self._watch_backoff = Backoff(backoff_initial, backoff_max)
        self._stream: WatchStream | None = None
        self._threads: list[threading.Thread] = []

    # ---- what the runtime calls -------------------------------------------------------------

    def set_devices(self, devices: Sequence[Device]) -> None:
        """Publish exactly these devices, in this order (the inventory's snapshot). Validation
        problems are logged once per change."""
        with self._cond:
            checked = validate(devices, self._limits)
            specs = slice_specs(self.driver_name, self.node_name, checked.devices)
            if checked.problems != self._problems:
                for problem in checked.problems:
                    self._log.warning(
                        "device left out of the ResourceSlices"
                        if problem.action == "dropped-device"
                        else "attribute left out of the ResourceSlices",
                        device=problem.device,
                        rule=problem.rule,
                        field=problem.field,
                        error=problem.detail,
                        action=problem.action,
                    )
            self._problems = checked.problems
            self._devices = checked.devices
            if specs == self._specs:
                return
            self._specs = specs
            metrics.PUBLISHED_DEVICES.labels(self.driver_name).set(len(checked.devices))
            self._trigger(0.0)

    def start(self) -> None:
        if self._threads:
            return
        self._stopping.clear()
        for target, name in ((self._watch_loop, "watch"), (self._sync_loop, "sync")):
            thread = threading.Thread(target=target, name=f"slices-{name}-{self.driver_name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, delete_slices: bool | None = None, timeout: float = 10.0) -> None:
        """Stop both threads. Slices stay by default: the kubelet and Node GC remove them, and a
        restarted driver adopts them without a write. `delete_slices=True` (default: the
        constructor's `delete_slices_on_stop`, i.e. `--delete-slices-on-exit`, for uninstalls)
        deletes them, best effort within `timeout`."""
        if delete_slices is None:
            delete_slices = self._delete_on_stop
        deadline = time.monotonic() + timeout
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
            stream = self._stream
        if stream is not None:
            stream.stop()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []
        if delete_slices:
            self._delete_all(deadline)

    def wait_synced(self, timeout: float) -> bool:
        """Block until the stored slices equal the desired ones; False on timeout."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._synced or self._stopping.is_set(), timeout)
            return done and self._synced

    def status(self) -> PublisherStatus:
        with self._cond:
            names = tuple(sorted(self._pool_slices()))
            return PublisherStatus(
                synced=self._synced,
                generation=self._generation,
                slices=names,
                devices=len(self._devices),
                problems=self._problems,
                dropped_features=tuple(sorted(self._disabled)),
                last_error=self._last_error,
                last_success=self._last_success,
                writes=dict(self._writes),
                failures=self._sync_backoff.failures,
                deferring_to=self._deferring_to,
            )

    def published(self) -> list[dict[str, Any]]:
        """The stored ResourceSlices of our pool as last seen (copies, sorted by name)."""
        with self._cond:
            return [copy.deepcopy(self._cache[n]) for n in sorted(self._pool_slices())]

    def published_devices(self) -> tuple[Device, ...]:
        """The devices we publish (validated, retained ones included), in slice order."""
        with self._cond:
            return self._devices

    # ---- sync thread ------------------------------------------------------------------------

    def _trigger(self, delay: float) -> None:
        """Schedule a sync (caller holds _cond). Never earlier than the current backoff allows."""
        due = max(self._clock.monotonic() + delay, self._not_before)
        self._due = due if self._due is None else min(self._due, due)
        self._synced = False
        self._cond.notify_all()

    def _sync_loop(self) -> None:
        while not self._stopping.is_set():
            with self._cond:
                while not self._stopping.is_set():
                    now = self._clock.monotonic()
                    if self._due is not None and now >= self._due and self._cache_ready:
                        break
                    wait = self._resync_period if self._due is None else max(0.01, self._due - now)
                    if not self._cache_ready:
                        wait = min(wait, 0.5)
                    if (
                        not self._clock.wait(self._cond, wait)
                        and self._due is None
                        and self._specs is not None
                    ):
                        self._trigger(0.0)  # periodic check; writes nothing when all is equal
                if self._stopping.is_set():
                    return
                self._due = None
            try:
                self._sync()
            except ApiError as err:
                self._failed(err)
            except Exception as err:  # a bug must not end publishing: log it, retry with backoff
                self._log.exception("slice sync failed unexpectedly", error=str(err))
                self._failed(ApiError("sync", None, f"{type(err).__name__}: {err}"))

    def _sync(self) -> None:
        with self._cond:
            specs = self._specs
            self._foreign_round = False
        if specs is None:
            return
        if self._node_uid is None or self._recheck_node:
            # Also after someone deleted our slices: a re-created Node has a new UID, and slices
            # owned by the old one would be garbage-collected as soon as we write them.
            node = self.api.get_node(self.node_name)
            uid = str(node["metadata"]["uid"])
            if self._node_uid is not None and uid != self._node_uid:
                self._log.warning("node was re-created; owning slices by its new UID", node_uid=uid)
            self._node_uid = uid
            self._recheck_node = False
        if self._need_relist:
            items, version = self.api.list_slices(self.field_selector)
            with self._cond:
                self._merge_list(items, version)
                self._need_relist = False
        if not self._adopted:
            with self._cond:
                existing = list(self._cache.values())
            found = infer_dropped(specs, existing, driver_name=self.driver_name, node_name=self.node_name)
            with self._cond:
                if found - self._disabled:
                    self._feature_off(found - self._disabled, "stored slices")
                self._adopted = True
        wrote = False
        for _ in range(5):  # a pass writes; the next must find nothing left to do
            with self._cond:
                specs = self._specs
                existing = list(self._cache.values())
                disabled = set(self._disabled)
            assert specs is not None
            plan = plan_sync(
                specs,
                existing,
                driver_name=self.driver_name,
                node_name=self.node_name,
                node_uid=self._node_uid,
                disabled_features=disabled,
            )
            if plan.writes == 0:
                self._succeeded(plan)
                return
            with self._cond:
                newer = _newest_writer(existing, self._owner_key)
                if wrote and newer is not None and newer > self.instance:
                    # its answer to our write came in while we wrote: stand back as for an event
                    self._stand_back(newer, "")
                wait = self._defer_until - self._clock.monotonic()
                if wait > 0:  # a newer instance owns the pool for now
                    self._trigger(wait)
                    return
                self._deferring_to = None
            self._log.info(
                "writing ResourceSlices",
                generation=plan.generation,
                slices=plan.slice_count,
                deletes=len(plan.deletes),
                updates=len(plan.updates),
                creates=len(plan.creates),
                reasons=sorted({d.reason for d in plan.deletes}),
            )
            with self._cond:
                self._writing = True
            wrote = True
            try:
                self._execute(plan)
            finally:
                with self._cond:
                    self._writing = False
        self._log.warning("slices still differ after several passes; retrying later")
        with self._cond:
            self._trigger(self._resync_delay)

    def _execute(self, plan: SyncPlan) -> None:
        """Deletes, then updates, then creates; the writes of one phase are independent of each
        other and go out in parallel (a repaired 300-VF pool is 5 writes, not 5 round trips)."""
        self._phase(plan.deletes, self._delete)
        self._phase(plan.updates, partial(self._put, "update"))
        self._phase(plan.creates, partial(self._put, "create"))

    def _phase(self, items: Sequence[Any], action: Callable[[Any], None]) -> None:
        if len(items) <= 1 or self._write_parallelism <= 1:
            for item in items:
                action(item)
            return
        with ThreadPoolExecutor(min(self._write_parallelism, len(items)), "slices-write") as pool:
            futures = [pool.submit(action, item) for item in items]
        for future in futures:
            if (error := future.exception()) is not None:
                raise error

    def _delete(self, delete: Delete) -> None:
        with self._cond:  # forget it first: its DELETED event must not look foreign
            self._cache.pop(delete.name, None)
        self._write(
            "delete", partial(self.api.delete_slice, delete.name, delete.uid, delete.resource_version)
        )

    def _put(self, verb: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        signed = {**(meta.get("annotations") or {}), self._owner_key: self.instance}
        body = {**body, "metadata": {**meta, "annotations": signed}}

        def call(b: Mapping[str, Any]) -> Callable[[], Any]:
            if verb == "update":
                return partial(self.api.replace_slice, b["metadata"]["name"], b)
            return partial(self.api.create_slice, b)

        stored = self._write(verb, call(body), body)
        if stored is None:  # a field refused, not dropped: the same slice again at once without it
            with self._cond:  # (a later pass would see a new slice and bump the generation)
                off = set(self._disabled)
            body = {**body, "spec": compare.strip_features(body.get("spec") or {}, off)}
            stored = self._write(verb, call(body))
        self._stored(body, stored)

    def _write(self, verb: str, call: Callable[[], Any], body: Mapping[str, Any] | None = None) -> Any:
        try:
            result = call()
        except ApiError as err:
            with self._cond:  # our view may be stale (conflict, or a write whose answer we lost)
                self._need_relist = True
            if body is not None and self._refused(err, body):
                return None
            raise
        metrics.SLICE_WRITES.labels(self.driver_name, verb).inc()
        with self._cond:
            self._writes[verb] += 1
        return result

    def _refused(self, err: ApiError, body: Mapping[str, Any]) -> bool:
        """Whether `err` refuses a field of `body` that the server does not drop (_REFUSALS): its
        feature is turned off, and the caller writes the slice again at once without it. Also
        when a parallel write of another slice turned it off first."""
        spec = body.get("spec") or {}
        for status, feature, words, message in _REFUSALS:
            if err.status != status or not any(w in err.reason for w in words):
                continue
            if compare.strip_features(spec, {feature}) == spec:  # nothing of it in this slice
                return False
            with self._cond:
                if feature not in self._disabled:
                    name = str(body.get("metadata", {}).get("name", ""))
                    self._feature_off({feature}, name, message, error=err.reason)
            return True
        return False

    def _stored(self, sent: Mapping[str, Any], stored: dict[str, Any] | None) -> None:
        if not stored:
            return
        name = stored["metadata"]["name"]
        with self._cond:
            self._cache[name] = stored
            dropped = compare.dropped_features(sent.get("spec") or {}, stored.get("spec") or {})
            if dropped - self._disabled:
                self._feature_off(dropped - self._disabled, name)

    def _feature_off(
        self, features: set[str], slice_name: str, message: str = _DROPPED, **detail: str
    ) -> None:
        """Expect what the server drops from now on, so we do not rewrite it in a loop."""
        self._disabled |= features
        for feature in sorted(features):
            self._log.warning(
                message,
                feature=feature,
                fields=_FEATURE_HINT.get(feature, ""),
                **detail,
                slice=slice_name,
            )

    def _succeeded(self, plan: SyncPlan) -> None:
        now = self._clock.time()
        metrics.SLICE_LAST_SUCCESS.labels(self.driver_name).set(now)
        with self._cond:
            self._sync_backoff.reset()
            self._not_before = 0.0
            self._last_error = None
            self._last_success = now
            self._generation = plan.generation
            self._synced = self._due is None
            self._deferring_to, self._defer_until = None, 0.0  # the pool says what we would say
            self._cond.notify_all()
        if self._on_status is not None:
            try:
                self._on_status(self.status())
            except Exception:  # the listener's bug is not a failed sync
                self._log.exception("status listener failed")

    def _failed(self, err: ApiError) -> None:
        metrics.SLICE_ERRORS.labels(self.driver_name, err.verb, err.code).inc()
        with self._cond:
            delay = self._sync_backoff.next_delay(err.retry_after)
            if err.status == 409 and self._sync_backoff.failures <= 1:
                delay = min(delay, 0.2)  # a conflict is resolved by the relist, not by waiting
            self._last_error = str(err)
            self._not_before = self._clock.monotonic() + delay
            self._trigger(delay)
        self._log.warning(
            "slice sync failed; retrying", error=str(err), status=err.code, retry_in=round(delay, 2)
        )

    # ---- watch thread -----------------------------------------------------------------------

    def _watch_loop(self) -> None:
        version: str | None = None
        while not self._stopping.is_set():
            listed = version is None
            try:
                if version is None:
                    items, version = self.api.list_slices(self.field_selector)
                    with self._cond:
                        self._merge_list(items, version)
                started = self._clock.monotonic()
                events = 0
                stream = self.api.watch_slices(self.field_selector, version, self._watch_timeout)
                with self._cond:
                    self._stream = stream
                if self._stopping.is_set():
                    stream.stop()
                    return
                for event in stream:
                    events += 1
                    version = self._on_event(event) or version
                    if self._stopping.is_set():
                        return
                if events == 0 and self._clock.monotonic() - started < 1.0:
                    raise ApiError("watch", None, "watch ended at once")  # do not spin
                self._watch_backoff.reset()
            except ApiError as err:
                if self._stopping.is_set():
                    return
                version = None
                if err.status == 410 and not listed:  # our resourceVersion is too old: relist at once
                    continue  # (a 410 for a version just listed is a broken server: back off below)
                metrics.SLICE_ERRORS.labels(self.driver_name, err.verb, err.code).inc()
                delay = self._watch_backoff.next_delay(err.retry_after)
                with self._cond:
                    self._last_error = str(err)
                self._log.warning("slice watch failed; relisting", error=str(err), retry_in=round(delay, 2))
                self._pause(delay)
            except Exception as err:
                self._log.exception("slice watch failed unexpectedly", error=str(err))
                version = None
                self._pause(self._watch_backoff.next_delay())
            finally:
                with self._cond:
                    self._stream = None

    def _pause(self, seconds: float) -> None:
        """Wait `seconds` in the clock's time, or until stop()."""
        end = self._clock.monotonic() + seconds
        with self._cond:
            while not self._stopping.is_set() and (left := end - self._clock.monotonic()) > 0:
                self._clock.wait(self._cond, left)

    def _on_event(self, event: Mapping[str, Any]) -> str | None:
        """Apply one watch event to the cache; a change we did not make schedules a resync."""
        kind = event.get("type")
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        version = meta.get("resourceVersion")
        if kind == "BOOKMARK":
            return str(version) if version else None
        name = meta.get("name")
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not name:
            return str(version) if version else None
        with self._cond:
            known = self._cache.get(name)
            if kind == "DELETED":
                if known is None:
                    return str(version) if version else None  # our own delete
                del self._cache[name]
                self._recheck_node = not self._uid_given
            else:
                if known is not None and not _newer(obj, known):
                    return str(version) if version else None  # our own write, already applied
                self._cache[name] = dict(obj)
            if self._writing:
                # Maybe our own write, whose answer is not stored yet; the next pass of the sync
                # plans against this cache anyway, so a foreign change is caught there.
                return str(version) if version else None
            self._foreign(name, kind, (meta.get("annotations") or {}).get(self._owner_key))
        return str(version) if version else None

    def _foreign(self, name: str, kind: str, writer: str | None) -> None:
        """Someone else changed a slice of ours (caller holds _cond): repair it, stand back for a
        newer instance of this driver, or slow down when the changes keep coming."""
        now = self._clock.monotonic()
        if isinstance(writer, str) and writer > self.instance:
            self._stand_back(writer, name)
            return
        if self._foreign_round:
            return  # one repair serves a burst of changes
        if now - self._foreign_at > self._foreign_quiet:
            self._foreign_backoff.reset()
        self._foreign_at = now
        self._foreign_round = True
        first = self._foreign_backoff.failures == 0
        delay = self._foreign_backoff.next_delay()
        if first:
            delay = self._resync_delay  # an isolated change is repaired as before
        self._log.info(
            "slice changed by someone else; resyncing",
            slice=name,
            event=kind,
            writer=writer,
            retry_in=round(delay, 2),
        )
        self._trigger(delay)

    def _stand_back(self, writer: str, name: str) -> None:
        """Leave the pool to a newer instance for the next delay of the defer backoff (caller
        holds _cond)."""
        now = self._clock.monotonic()
        if now - self._defer_at > self._defer_quiet:
            self._defer_backoff.reset()
        self._defer_at = now
        delay = self._defer_backoff.next_delay()
        self._defer_until = now + delay
        if self._deferring_to != writer:
            self._log.warning(
                "a newer instance publishes this pool; standing back",
                slice=name,
                newer=writer,
                instance=self.instance,
                retry_in=round(delay, 1),
            )
        self._deferring_to = writer
        self._trigger(delay)

    def _merge_list(self, items: Sequence[dict[str, Any]], version: str) -> None:
        """Replace the cache with a list result without losing our writes that came after it."""
        listed = {i["metadata"]["name"]: i for i in items}
        merged: dict[str, dict[str, Any]] = {}
        for name, obj in listed.items():
            known = self._cache.get(name)
            merged[name] = known if known is not None and _newer(known, obj) else obj
        for name, obj in self._cache.items():
            if name not in listed and _version(obj) > _int(version):
                merged[name] = obj  # created after the list was taken
        changed = merged != self._cache
        self._cache = merged
        first = not self._cache_ready
        self._cache_ready = True
        if (first or changed) and self._specs is not None:
            self._trigger(0.0 if first else self._resync_delay)
        self._cond.notify_all()

    def _pool_slices(self) -> list[str]:
        return [
            name
            for name, obj in self._cache.items()
            if ((obj.get("spec") or {}).get("pool") or {}).get("name") == self.node_name
        ]

    # ---- shutdown ---------------------------------------------------------------------------

    def _delete_all(self, deadline: float) -> None:
        backoff = Backoff(0.2, 2.0)
        while True:
            try:
                items, _ = self.api.list_slices(self.field_selector)
                for obj in items:
                    meta = obj["metadata"]
                    self.api.delete_slice(meta["name"], meta.get("uid", ""), meta.get("resourceVersion", ""))
                    metrics.SLICE_WRITES.labels(self.driver_name, "delete").inc()
                    with self._cond:
                        self._writes["delete"] += 1
                        self._cache.pop(meta["name"], None)
                self._log.info("deleted our ResourceSlices on exit", slices=len(items))
                return
            except ApiError as err:
                delay = backoff.next_delay(err.retry_after)
                if time.monotonic() + delay > deadline:
                    self._log.error("could not delete our ResourceSlices on exit", error=str(err))
                    return
                time.sleep(delay)


def _int(version: Any) -> int:
    try:
        return int(version)
    except (TypeError, ValueError):
        return -1


def _version(obj: Mapping[str, Any]) -> int:
    return _int((obj.get("metadata") or {}).get("resourceVersion"))


def _newest_writer(slices: Sequence[Mapping[str, Any]], key: str) -> str | None:
    """The latest instance that signed one of `slices` (instance ids sort by start time)."""
    signed = [
        w
        for o in slices
        if isinstance(w := ((o.get("metadata") or {}).get("annotations") or {}).get(key), str)
    ]
    return max(signed, default=None)


def _newer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Is `a` a later state than `b`? resourceVersions are etcd revisions in practice; when they
    do not parse, a different version counts as newer."""
    va, vb = _version(a), _version(b)
    if va >= 0 and vb >= 0:
        return va > vb
    ra = (a.get("metadata") or {}).get("resourceVersion")
    return bool(ra != (b.get("metadata") or {}).get("resourceVersion"))
