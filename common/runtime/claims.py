"""The claim-processing core: prepare and unprepare ResourceClaims for one driver.

The kubelet sends only claim references; this module GETs each claim, checks that it is really
ours and really allocated here, guards against a device being given to two claims (the driver
is the last line of defence), calls the driver, writes the claim's CDI spec and keeps the
checkpoint. Every claim is handled on its own: a bad claim gets an error string naming it,
the other claims of the same call go on. Operations are serialized per driver (a thread lock
inside the process, the checkpoint's file lock between processes).

CDI naming and what a spec carries: claimspec.py. What is written when, and what a restart
does after a crash at any point or with a damaged file: docs/design/claim-lifecycle.md.
"""

from __future__ import annotations

import contextlib
import json
import operator
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from topodra.common import logs
from topodra.common.cdi.spec import CdiWriter, SpecError
from topodra.common.device import Device
from topodra.common.inventory.compose import published
from topodra.common.kubeapi.claims import ClaimSource
from topodra.common.kubeapi.errors import ApiError, NotFound, Unusable
from topodra.common.runtime import claimspec, metrics
from topodra.common.runtime.checkpoint import Checkpoint, ClaimRecord, Loaded, LockTimeout, Phase
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    Driver,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    PrepareError,
)
from topodra.common.runtime.names import (
    is_dns_label,
    is_dns_subdomain,
    is_request_name,
    is_uid,
    main_request,
)
from topodra.common.runtime.seams import ClaimOutcome

_log = logs.get("topodra.runtime.claims")

CDI_CLASS = "claim"
CONFIG_SOURCES = ("FromClass", "FromClaim")
DELETED_AFTER_ROUNDS = 2  # reconcile rounds in a row that must find a claim NotFound


def cdi_kind(driver_name: str) -> str:
    return f"{driver_name}/{CDI_CLASS}"


class ClaimFailure(Exception):
    """A per-claim failure before any side effect; its text is the kubelet's error string."""


MAX_ERROR_CHARS = 1000  # a claim's error goes to the kubelet, pod events and our logs


def bounded(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how long it was: an error may quote what a
    tenant sent (a value, a list of unknown fields), and that must not cost kilobytes per retry."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}... ({len(text)} characters in all)"


def _label(claim: ClaimRef) -> str:
    return f"claim {claim.namespace}/{claim.name} (uid {claim.uid})"


@dataclass(frozen=True, slots=True)
class _Checked:
    """A claim that passed every check, ready for the driver."""

    claim: ClaimRef
    allocated: tuple[AllocatedDevice, ...]
    configs: tuple[OpaqueConfig, ...]


@dataclass(slots=True)
class _Request:
    """One prepare or unprepare call waiting to be served (possibly by another thread)."""

    op: str  # prepare | unprepare
    claims: tuple[ClaimRef, ...]
    fetched: dict[str, Any]  # uid -> claim object or the exception its GET raised
    prepared: dict[str, ClaimOutcome] = field(default_factory=dict)
    unprepared: dict[str, str] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)  # answered
    wake: threading.Event = field(default_factory=threading.Event)  # answered, or now the leader

    def finish(self) -> None:
        self.done.set()
        self.wake.set()

    def fail(self, message: str) -> None:
        for c in self.claims:
            text = f"{_label(c)}: {message}"
            if self.op == "prepare":
                self.prepared.setdefault(c.uid, ClaimOutcome(error=text))
            else:
                self.unprepared.setdefault(c.uid, text)


@dataclass(slots=True)
class ReconcileReport:
    unprepared: list[str]
    kept: list[str]
    unreachable: bool
    suspected: list[str] = field(default_factory=list)  # NotFound once: unprepared if seen again
    aborted: bool = False  # every claim NotFound: round not believed
    contacted: bool = False  # the API server was asked at all (not when no claim is prepared)


class _Metrics:
    """The claim core's share of the runtime metrics (see metrics.py for who counts what)."""

    def __init__(self, driver: str) -> None:
        self._prepare = metrics.CLAIM_DURATION.labels(driver, "prepare")
        self._unprepare = metrics.CLAIM_DURATION.labels(driver, "unprepare")
        self._prepared = metrics.PREPARED_CLAIMS.labels(driver)

    def prepare(self, seconds: float) -> None:
        self._prepare.observe(seconds)

    def unprepare(self, seconds: float) -> None:
        self._unprepare.observe(seconds)

    def prepared(self, count: int) -> None:
        self._prepared.set(count)


class ClaimManager:
    """Implements `ClaimProcessor` (seams.py) for one driver.

    `pools` are this node's pool names (default: the node name, the convention of node-local
    drivers). Call `start()` once before serving; it recovers from the checkpoint.
    """

    def __init__(
        self,
        driver: Driver,
        node_name: str,
        claim_source: ClaimSource,
        checkpoint: Checkpoint,
        cdi_writer: CdiWriter,
        *,
        pools: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        devices: Callable[[], Sequence[Device]] | None = None,
    ) -> None:
        if cdi_writer.kind != cdi_kind(driver.name):
            raise ValueError(f"CDI writer kind {cdi_writer.kind!r} is not {cdi_kind(driver.name)!r}")
        if checkpoint.driver != driver.name:
            raise ValueError(f"checkpoint is for {checkpoint.driver!r}, driver is {driver.name!r}")
        self.driver = driver
        self.node_name = node_name
        self.pools = frozenset(pools if pools is not None else (node_name,))
        # what this node publishes (the inventory's devices); by default a scan of its own
        self._published = devices or (lambda: published(driver.scan()))
        self._source = claim_source
        self._checkpoint = checkpoint
        self._cdi = cdi_writer
        self._clock = clock
        self._lock = threading.Lock()
        self._queue_lock = threading.Lock()
        self._queue: list[_Request] = []
        self._leading = False  # a caller is serving the queue (see _submit)
        self._here: tuple[tuple[Device, ...], dict[str, Device]] | None = None
        self._records: dict[str, ClaimRecord] = {}
        self._started = False
        self._metrics = _Metrics(driver.name)
        self._log = _log.bind(driver=driver.name)
        self._stop = threading.Event()
        self._reconciler: threading.Thread | None = None
        self._missing: dict[str, int] = {}  # uid -> reconcile rounds in a row it was NotFound

    @classmethod
    def create(
        cls,
        driver: Driver,
        node_name: str,
        claim_source: ClaimSource,
        state_dir: Path,
        cdi_root: Path,
        **kwargs: Any,
    ) -> ClaimManager:
        return cls(
            driver,
            node_name,
            claim_source,
            Checkpoint(state_dir, driver.name),
            CdiWriter(cdi_root, cdi_kind(driver.name)),
            **kwargs,
        )

    # --- lifecycle ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _serialized(self) -> Iterator[None]:
        with self._lock, self._checkpoint.locked():
            if not self._started:
                self._recover()
            elif self._checkpoint.changed_on_disk():
                self._reload()
            yield

    def start(self) -> ReconcileReport:
        """Recover from the checkpoint, then reconcile with the API server once."""
        with self._serialized():
            pass
        return self.reconcile()

    def _reload(self) -> None:
        """Another instance changed the checkpoint: adopt its view, tell the driver."""
        self._records = self._adopt(self._checkpoint.load())
        self._log.info(f"checkpoint changed by another instance; reloaded {len(self._records)} claims")
        self.driver.restore(self._completed_preparations())

    def _completed_preparations(self) -> dict[ClaimRef, Preparation]:
        return {r.claim: r.known_preparation() for r in self._records.values() if r.phase is Phase.COMPLETED}

    def _recover(self) -> None:
        loaded = self._checkpoint.load()
        self._started = True
        for path in self._cdi.remove_stale_temps():
            self._log.info(f"removed stale CDI temp file {path}")
        self._records = self._adopt(loaded)
        for rec in list(self._records.values()):
            if rec.phase is Phase.STARTED:
                self._log.warning(
                    f"{_label(rec.claim)}: prepare was interrupted; rolling back", **logs.claim(rec.claim)
                )
                self._rollback(rec)
        self.driver.restore(self._completed_preparations())
        for rec in self._records.values():
            if rec.phase is Phase.COMPLETED:
                self._ensure_spec(rec)
        self._save_best_effort()
        self._metrics.prepared(self._count_completed())
        self._log.info(f"recovered {self._count_completed()} prepared claims from {self._checkpoint.path}")

    def _adopt(self, loaded: Loaded) -> dict[str, ClaimRecord]:
        """The records to hold after a load, with the CDI specs on disk.

        A usable checkpoint is the truth: a spec of a claim it does not know (only damage or a
        bug leave one, as a spec is written after the claim's "started" record and removed before
        its record goes) is rolled back as an interrupted prepare when it says what it holds,
        else removed. A damaged checkpoint is rebuilt from the specs, which name every device the
        driver may hold for a claim, over the previous good file's records (`Loaded.fallback`):
        fail closed, a device named anywhere stays held until its claim is unprepared."""
        records = dict(loaded.records) if loaded.damage is None else dict(loaded.fallback)
        kind = self._cdi.kind
        for spec_id in self._cdi.list_ids():
            if loaded.damage is None and spec_id in records:
                continue
            file_name = self._cdi.file_name(spec_id)
            try:
                raw = self._cdi.path(spec_id).read_bytes()
            except OSError:
                continue
            try:
                spec: Any = json.loads(raw)
            except (ValueError, RecursionError):
                spec = None
            rec = (
                claimspec.record_from_spec(kind, self.driver.name, spec_id, file_name, spec)
                if is_uid(spec_id)
                else None
            )
            if loaded.damage is None:
                if rec is None:
                    self._cdi.remove(spec_id)
                    self._log.info(f"removed CDI spec of unknown claim uid {spec_id}", claim_uid=spec_id)
                else:
                    self._log.warning(
                        f"{_label(rec.claim)}: CDI spec of a claim the checkpoint does not know; "
                        "rolling it back",
                        **logs.claim(rec.claim),
                    )
                    records[spec_id] = replace(rec, phase=Phase.STARTED)
                continue
            if rec is None:
                if spec_id in records or not is_uid(spec_id):
                    continue  # the previous file knows it, or not a claim's spec: left as it is
                named = claimspec.devices_named(spec_id, raw.decode("utf-8", "replace"), sorted(self.pools))
                rec = ClaimRecord(
                    claim=ClaimRef("", "", spec_id),
                    phase=Phase.COMPLETED,
                    allocated=named,
                    cdi_file=file_name,
                    preparation=Preparation(
                        tuple(PreparedDevice(a.request, a.pool, a.device, share_id=a.share_id) for a in named)
                    ),
                )
                self._log.error(
                    f"CDI spec {file_name} carries no readable record; holding the devices it names "
                    f"({', '.join(sorted({a.device for a in named})) or 'none'}) until claim uid {spec_id} "
                    "is unprepared",
                    claim_uid=spec_id,
                )
            records[spec_id] = rec
        if loaded.damage is not None:
            self._log.warning(
                f"rebuilt {len(records)} claims after a damaged checkpoint: "
                f"{sum(r.phase is Phase.COMPLETED for r in records.values())} prepared, "
                f"{sum(r.phase is Phase.STARTED for r in records.values())} interrupted"
            )
        return records

    def _ensure_spec(self, rec: ClaimRecord) -> None:
        """A reboot empties /var/run/cdi: put the exact spec back if it is missing or differs
        (not for a record rebuilt from a spec it could not read: that file stays as it is)."""
        spec_id = rec.claim.uid
        if not rec.cdi_spec:
            return
        try:
            try:
                current = self._cdi.read(spec_id)
            except ValueError:
                current = None  # unreadable (a power loss can tear an unsynced spec): rewrite it
            if current != rec.cdi_spec:
                self._cdi.write(spec_id, rec.cdi_spec)
                self._log.info(f"rewrote CDI spec for {_label(rec.claim)}", **logs.claim(rec.claim))
        except (OSError, ValueError) as e:
            self._log.error(
                f"{_label(rec.claim)}: cannot rewrite CDI spec: {e}", **logs.claim(rec.claim), error=str(e)
            )

    def _save_best_effort(self) -> None:
        try:
            self._checkpoint.save(self._records)
        except OSError as e:
            self._log.error(f"cannot write checkpoint {self._checkpoint.path}: {e}", error=str(e))

    def _count_completed(self) -> int:
        return sum(1 for r in self._records.values() if r.phase is Phase.COMPLETED)

    def _rollback(self, rec: ClaimRecord) -> bool:
        """Undo a started-only claim. On failure the record stays (its devices stay held)."""
        try:
            self.driver.unprepare(rec.claim, rec.known_preparation())
            self._cdi.remove(rec.claim.uid)
        except Exception as e:
            self._log.error(
                f"{_label(rec.claim)}: rollback failed, devices stay reserved, will retry: {e}",
                **logs.claim(rec.claim),
                error=str(e),
            )
            return False
        self._records.pop(rec.claim.uid, None)
        return True

    def start_reconciler(self, interval: float = 60.0, jitter: float = 0.2) -> None:
        """Reconcile in a daemon thread about every `interval` seconds until `close()`; each wait
        is drawn from interval * (1 +- jitter), so that the nodes of a cluster, started together
        by a rollout, do not read their claims in step."""
        rng = random.Random()

        def loop() -> None:
            while not self._stop.wait(interval * rng.uniform(1 - jitter, 1 + jitter)):
                try:
                    self.reconcile()
                except Exception:
                    self._log.exception("reconcile failed; will retry")

        self._reconciler = threading.Thread(target=loop, name=f"reconcile-{self.driver.name}", daemon=True)
        self._reconciler.start()

    def close(self) -> None:
        self._stop.set()
        if self._reconciler is not None:
            self._reconciler.join(timeout=5)

    # --- queries ------------------------------------------------------------------------------

    def prepared(self) -> dict[str, ClaimRecord]:
        """A snapshot of the checkpointed claims (completed and started), by uid, including what
        another instance on the same state folder did meanwhile."""
        with self._serialized():
            return dict(self._records)

    # --- request batching ---------------------------------------------------------------------
    #
    # Calls are serialized, and every checkpoint write costs fsyncs. Calls that arrive while
    # another is being served queue up, and the next batch serves the whole queue with one
    # checkpoint write per phase (group commit), in the order `_stages` gives.
    #
    # One caller at a time is the leader: it serves batches until its own call is done, then
    # hands the lead to the oldest waiting call. Everybody else waits on its own call's event,
    # so an answered call returns at once instead of queueing behind the next batch for the
    # serving lock (which made batches small and callers wait for batches not theirs).

    def _submit(self, req: _Request) -> None:
        t0 = self._clock()
        with self._queue_lock:
            self._queue.append(req)
            lead = not self._leading
            self._leading = True
        if not lead:
            req.wake.wait()  # answered, or handed the lead
        if not req.done.is_set():
            self._lead(req)
        elapsed = self._clock() - t0
        for _ in req.claims:
            (self._metrics.prepare if req.op == "prepare" else self._metrics.unprepare)(elapsed)

    def _lead(self, req: _Request) -> None:
        """Serve queued calls in batches until `req` is answered, then pass the lead on."""
        try:
            while not req.done.is_set():
                try:
                    with self._lock, self._checkpoint.locked():
                        if not self._started:
                            self._recover()
                        elif self._checkpoint.changed_on_disk():
                            self._reload()
                        with self._queue_lock:
                            batch, self._queue = self._queue, []
                        self._serve(batch)
                except LockTimeout as e:
                    req.fail(str(e))  # each waiting call gets its own full wait for the lock
                    req.finish()  # (the finally below takes it out of the queue)
        finally:  # also when serving raised (e.g. a checkpoint from a newer version)
            with self._queue_lock:
                if req in self._queue:
                    self._queue.remove(req)  # its caller gets the exception
                if self._queue:
                    self._queue[0].wake.set()
                else:
                    self._leading = False

    def _serve(self, batch: list[_Request]) -> None:
        try:
            for op, requests in _stages(batch):
                claims = [c for r in requests for c in r.claims]
                if op == "unprepare":
                    res = self._unprepare_many(claims)
                    for r in requests:
                        r.unprepared = {c.uid: res[c.uid] for c in r.claims}
                else:
                    fetched = {uid: obj for r in requests for uid, obj in r.fetched.items()}
                    out = self._prepare_many(claims, fetched)
                    for r in requests:
                        r.prepared = {c.uid: out[c.uid] for c in r.claims}
            self._metrics.prepared(self._count_completed())
        except Exception as e:  # a bug here must not leave callers hanging
            self._log.exception("claim batch failed")
            for r in batch:
                r.fail(f"internal error: {type(e).__name__}: {e}")
        finally:
            for r in batch:
                r.finish()

    # --- prepare ------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        req = _Request("prepare", tuple(claims), self._prefetch(claims))
        self._submit(req)
        return req.prepared

    def _prefetch(self, claims: Sequence[ClaimRef]) -> dict[str, Any]:
        """GET claims before queueing, outside the lock, so concurrent calls overlap their GETs.
        A claim already completed needs none (an unlocked peek; a wrong guess only costs a GET)."""
        fetched: dict[str, Any] = {}
        for claim in claims:
            rec = self._records.get(claim.uid)
            if claim.uid in fetched or (rec is not None and rec.phase is Phase.COMPLETED):
                continue
            try:
                _check_ref(claim)
                fetched[claim.uid] = self._source.get(claim.namespace, claim.name)
            except Exception as e:  # whatever one claim's GET raised is that claim's error alone
                fetched[claim.uid] = e
        return fetched

    def _get(self, claim: ClaimRef, fetched: Mapping[str, Any]) -> Mapping[str, Any]:
        obj = fetched.get(claim.uid)
        try:
            if obj is None:
                obj = self._source.get(claim.namespace, claim.name)
            if isinstance(obj, BaseException):
                raise obj
        except NotFound as e:
            raise ClaimFailure(f"{_label(claim)}: not found in the API server") from e
        except Unusable as e:
            raise ClaimFailure(f"{_label(claim)}: refusing the API server's answer: {e}") from e
        except ApiError as e:
            raise ClaimFailure(
                f"{_label(claim)}: cannot read it from the API server, retry later: {e}"
            ) from e
        except ClaimFailure:
            raise
        except Exception as e:
            raise ClaimFailure(f"{_label(claim)}: cannot read it: {type(e).__name__}: {e}") from e
        result: Mapping[str, Any] = obj
        return result

    def _prepare_many(
        self, claims: Sequence[ClaimRef], fetched: Mapping[str, Any]
    ) -> dict[str, ClaimOutcome]:
        out: dict[str, ClaimOutcome] = {}
        here = self._devices_here()
        pending: list[_Checked] = []
        dirty = False  # rollbacks of earlier attempts changed the records
        for claim in claims:
            if claim.uid in out or any(p.claim.uid == claim.uid for p in pending):
                continue
            try:
                _check_ref(claim)
                rec = self._records.get(claim.uid)
                if rec is not None and rec.phase is Phase.COMPLETED and rec.result:
                    self._ensure_spec(rec)
                    self._log.debug(f"{_label(claim)}: already prepared", **logs.claim(claim))
                    out[claim.uid] = ClaimOutcome(devices=rec.result)
                    continue
                if rec is not None:
                    if not self._rollback(rec):
                        raise ClaimFailure(
                            f"{_label(claim)}: an earlier interrupted attempt could not be rolled back"
                        )
                    dirty = True
                checked = self._check(claim, self._get(claim, fetched), here)
            except ClaimFailure as e:
                text = bounded(str(e))
                self._log.warning(f"prepare refused: {text}", **logs.claim(claim), error=text)
                out[claim.uid] = ClaimOutcome(error=text)
                continue
            # reserve now, so later claims of this batch see the devices as held
            self._records[claim.uid] = ClaimRecord(
                claim=claim,
                phase=Phase.STARTED,
                allocated=checked.allocated,
                cdi_file=self._cdi.file_name(claim.uid),
            )
            pending.append(checked)
        if not pending:
            if dirty:
                self._save_best_effort()
            return out

        try:
            self._checkpoint.save(self._records, intent=True)  # phase 1: started, before the driver acts
        except OSError as e:
            for c in pending:
                self._records.pop(c.claim.uid, None)
                out[c.claim.uid] = ClaimOutcome(error=f"{_label(c.claim)}: cannot write checkpoint: {e}")
            return out

        done: list[ClaimRecord] = []
        kind, name = self._cdi.kind, self.driver.name
        for c in pending:
            started = self._records[c.claim.uid]
            try:
                # the spec names the devices before the driver acts (see claimspec)
                self._cdi.write(c.claim.uid, claimspec.provisional(kind, name, c.claim, c.allocated))
                prep = self.driver.prepare(c.claim, c.allocated, c.configs)
                # the record keeps its own copy, exactly as a restart reads it back, and must
                # never change once checkpointed (the checkpoint caches each record's encoding)
                prep = replace(prep, state=json.loads(json.dumps(dict(prep.state), sort_keys=True)))
                spec, result = claimspec.final(kind, name, c.claim, c.allocated, prep)
                self._cdi.write(c.claim.uid, spec)
            except Exception as e:
                message = _driver_message(c.claim, e)
                self._log.warning(f"prepare failed: {message}", **logs.claim(c.claim), error=message)
                self._rollback(started)
                out[c.claim.uid] = ClaimOutcome(error=message)
                continue
            rec = replace(started, phase=Phase.COMPLETED, preparation=prep, result=result, cdi_spec=spec)
            self._records[c.claim.uid] = rec
            done.append(rec)

        try:
            self._checkpoint.save(self._records)  # phase 2: completed
        except OSError as e:
            for rec in done:
                self._records[rec.claim.uid] = replace(rec, phase=Phase.STARTED)
                self._rollback(self._records[rec.claim.uid])
                out[rec.claim.uid] = ClaimOutcome(error=f"{_label(rec.claim)}: cannot write checkpoint: {e}")
            self._save_best_effort()
            return out
        for rec in done:
            for r in rec.result:
                self._log.info(
                    f"prepared {_label(rec.claim)} device {r.device}",
                    **logs.claim(rec.claim),
                    device=r.device,
                    pool=r.pool,
                    cdi_ids=list(r.cdi_device_ids),
                )
            out[rec.claim.uid] = ClaimOutcome(devices=rec.result)
        return out

    def _devices_here(self) -> Mapping[str, Device]:
        """The driver's devices by name, the map rebuilt unless the driver answered with the very
        same Device objects (immutable) as last time: checking identity costs far less than the
        map for a driver with thousands of devices, which otherwise paid ~0.5 ms per batch."""
        devices = tuple(self._published())
        known = self._here
        if known is None or len(known[0]) != len(devices) or any(map(operator.is_not, known[0], devices)):
            self._here = known = (devices, {d.name: d for d in devices})
        return known[1]

    def _check(self, claim: ClaimRef, obj: Mapping[str, Any], here: Mapping[str, Device]) -> _Checked:
        """Everything that can be decided without side effects."""
        meta = obj.get("metadata") or {}
        got_uid = meta.get("uid")
        if got_uid != claim.uid:
            raise ClaimFailure(f"{_label(claim)}: got replaced, the API server has uid {got_uid!r}")
        allocation = (obj.get("status") or {}).get("allocation")
        if not isinstance(allocation, Mapping):
            raise ClaimFailure(f"{_label(claim)}: not allocated")
        devices = allocation.get("devices") or {}
        if not isinstance(devices, Mapping):
            raise ClaimFailure(f"{_label(claim)}: status.allocation.devices is not an object")
        results = devices.get("results") or []
        if not isinstance(results, list):
            raise ClaimFailure(f"{_label(claim)}: status.allocation.devices.results is not a list")
        allocated = tuple(
            _parse_result(claim, i, r)
            for i, r in enumerate(results)
            if isinstance(r, Mapping) and r.get("driver") == self.driver.name
        )
        if not allocated:
            raise ClaimFailure(f"{_label(claim)}: no device of driver {self.driver.name} is allocated")
        for a in allocated:
            if a.pool not in self.pools:
                raise ClaimFailure(
                    f"{_label(claim)}: device {a.device!r} is allocated from pool {a.pool!r}, which is "
                    f"not this node's ({', '.join(sorted(self.pools))})"
                )
            if a.device not in here:
                raise ClaimFailure(
                    f"{_label(claim)}: device {a.device!r} does not exist on node {self.node_name}"
                )
        self._check_conflicts(claim, allocated, here)
        configs = _parse_configs(claim, self.driver.name, devices.get("config") or [], allocated)
        return _Checked(claim, allocated, configs)

    def _check_conflicts(
        self, claim: ClaimRef, allocated: Sequence[AllocatedDevice], here: Mapping[str, Device]
    ) -> None:
        for a in allocated:
            if a.admin_access:
                continue  # admin access is meant to coexist with other users of the device
            shareable = here[a.device].allow_multiple_allocations
            for other in self._records.values():
                if other.claim.uid == claim.uid:
                    continue
                for b in other.allocated:
                    if b.admin_access or (b.pool, b.device) != (a.pool, a.device):
                        continue
                    if shareable and a.share_id and b.share_id and a.share_id != b.share_id:
                        continue
                    raise ClaimFailure(
                        f"{_label(claim)}: device {a.device!r} (pool {a.pool!r}) is already held by claim "
                        f"{other.claim.namespace}/{other.claim.name} (uid {other.claim.uid})"
                    )

    # --- unprepare ----------------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        req = _Request("unprepare", tuple(claims), {})
        self._submit(req)
        return req.unprepared

    def _unprepare_many(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        out: dict[str, str] = {}
        leaving: dict[str, ClaimRecord] = {}
        before: dict[str, ClaimRecord] = {}
        for claim in claims:
            if claim.uid in out or claim.uid in leaving:
                continue
            rec = self._records.get(claim.uid)
            if rec is None:
                self._log.debug(f"{_label(claim)}: not prepared here, nothing to do", **logs.claim(claim))
                out[claim.uid] = ""
                continue
            before[claim.uid] = rec
            # back to "started" (in transition) first: a crash from here on is finished on restart
            # by the rollback, so the driver never restores a half-released claim
            leaving[claim.uid] = replace(rec, phase=Phase.STARTED)
        if not leaving:
            return out
        if any(r.phase is Phase.COMPLETED for r in before.values()):
            self._records.update(leaving)
            try:
                self._checkpoint.save(self._records, intent=True)
            except OSError as e:
                self._records.update(before)
                for uid, rec in before.items():
                    out[uid] = f"{_label(rec.claim)}: cannot update checkpoint: {e}"
                return out
        released: list[ClaimRecord] = []
        for uid, rec in leaving.items():
            try:
                self.driver.unprepare(rec.claim, rec.known_preparation())
                self._cdi.remove(uid)
            except Exception as e:
                message = bounded(f"{_label(rec.claim)}: unprepare failed, devices stay reserved: {e}")
                self._log.error(message, **logs.claim(rec.claim), error=str(e))
                out[uid] = message
                continue
            del self._records[uid]
            released.append(rec)
        try:
            self._checkpoint.save(self._records)
        except OSError as e:
            for rec in released:
                self._records[rec.claim.uid] = rec  # still "started": undone again on restart
                out[rec.claim.uid] = f"{_label(rec.claim)}: cannot update checkpoint: {e}"
            return out
        for rec in released:
            out[rec.claim.uid] = ""
            for a in rec.allocated:
                self._log.info(
                    f"unprepared {_label(rec.claim)} device {a.device}",
                    **logs.claim(rec.claim),
                    device=a.device,
                    pool=a.pool,
                )
        return out

    # --- reconcile ----------------------------------------------------------------------------

    def reconcile(self) -> ReconcileReport:
        """Unprepare claims that are gone or no longer allocated to this node; retry rollbacks.

        GETs run outside the lock so an unreachable API server never blocks prepare; the first
        unreachable answer ends the round (keep everything, retry next time). Reads come from
        the API server's watch cache (no etcd read while nothing changed); an answer that would
        make us act is confirmed by a quorum read first. A claim counts as deleted only on the
        API server's own NotFound for it (`is_claim_not_found`), seen in two rounds in a row, and
        a round in which every claim (two or more) is NotFound is dropped whole: that is what a
        wiped or wrong cluster behind the same address says, not what users do.
        """
        with self._serialized():
            for rec in list(self._records.values()):
                if rec.phase is Phase.STARTED:
                    self._rollback(rec)
            # a record rebuilt from a spec that did not say which claim it is has no name to GET
            snapshot = [r for r in self._records.values() if r.phase is Phase.COMPLETED and r.claim.name]
            self._save_best_effort()
        report = ReconcileReport(unprepared=[], kept=[], unreachable=False)
        answers: list[tuple[ClaimRecord, Mapping[str, Any] | None]] = []  # None: NotFound
        for rec in snapshot:
            report.contacted = True
            try:
                answers.append((rec, self._reconcile_read(rec)))
            except Unusable as e:
                self._log.warning(f"reconcile: keeping {_label(rec.claim)}: {e}", **logs.claim(rec.claim))
                report.kept.append(rec.claim.uid)
            except ApiError as e:
                self._log.warning(
                    f"reconcile: API server unreachable, keeping every claim: {e}", error=str(e)
                )
                report.unreachable = True
                return report
        held = {rec.claim.uid for rec in snapshot}
        for uid in list(self._missing):
            if uid not in held:
                del self._missing[uid]
        gone = [rec for rec, obj in answers if obj is None]
        if len(gone) >= 2 and len(gone) == len(snapshot):
            self._log.warning(
                f"reconcile: the API server says none of the {len(gone)} prepared claims exists; "
                "not believing it this round, keeping every claim"
            )
            report.aborted = True
            report.kept.extend(rec.claim.uid for rec in gone)
            return report
        stale: list[tuple[ClaimRecord, str]] = []
        for rec, obj in answers:
            uid = rec.claim.uid
            if obj is None:
                rounds = self._missing.get(uid, 0) + 1
                if rounds >= DELETED_AFTER_ROUNDS:
                    stale.append((rec, f"deleted (NotFound in {rounds} rounds)"))
                else:
                    self._missing[uid] = rounds
                    report.suspected.append(uid)
                    self._log.info(
                        f"reconcile: {_label(rec.claim)} is not found; unprepared only if the next "
                        "round confirms it",
                        **logs.claim(rec.claim),
                    )
                continue
            self._missing.pop(uid, None)
            reason = self._stale_reason(rec, obj)
            if reason:
                stale.append((rec, reason))
            else:
                report.kept.append(uid)
        if stale:
            with self._serialized():
                for old, reason in stale:
                    claim: ClaimRef = old.claim
                    self._missing.pop(claim.uid, None)
                    if self._records.get(claim.uid) is not old:
                        continue  # changed meanwhile (unprepared or re-prepared): leave it
                    self._log.info(
                        f"reconcile: {_label(claim)} is {reason}; unpreparing", **logs.claim(claim)
                    )
                    if not self._unprepare_many([claim])[claim.uid]:
                        report.unprepared.append(claim.uid)
                self._metrics.prepared(self._count_completed())
        return report

    def _reconcile_read(self, rec: ClaimRecord) -> Mapping[str, Any] | None:
        """The claim from the watch cache, or (when that answer would make us act) from etcd;
        None when the API server says it does not exist."""
        ns, name = rec.claim.namespace, rec.claim.name
        try:
            obj: Mapping[str, Any] | None = self._source.get(ns, name, cached=True)
        except NotFound:
            obj = None
        if obj is not None and not self._stale_reason(rec, obj):
            return obj
        try:
            return self._source.get(ns, name)
        except NotFound:
            return None

    def _stale_reason(self, rec: ClaimRecord, obj: Mapping[str, Any]) -> str:
        if (obj.get("metadata") or {}).get("uid") != rec.claim.uid:
            return "deleted and re-created under the same name"
        allocation = (obj.get("status") or {}).get("allocation")
        if not isinstance(allocation, Mapping):
            return "no longer allocated"
        results = ((allocation.get("devices") or {}).get("results")) or []
        ours = {
            (r.get("pool"), r.get("device"))
            for r in results
            if isinstance(r, Mapping) and r.get("driver") == self.driver.name
        }
        if not any((a.pool, a.device) in ours for a in rec.allocated):
            return "no longer allocated to this node"
        return ""


def _stages(batch: Sequence[_Request]) -> list[tuple[str, list[_Request]]]:
    """The order in which a batch is served: runs of one operation, each served with one
    checkpoint write. Calls that share a claim are served in the order they arrived (a prepare
    and an unprepare of one claim that overlap must end as the later one says); calls that share
    none are concurrent, and unprepares go first so that the devices they free can be reused."""
    stages: list[tuple[str, list[_Request], set[str]]] = [("unprepare", [], set()), ("prepare", [], set())]
    for req in batch:
        uids = {c.uid for c in req.claims}
        after = max((i for i, (_, _, seen) in enumerate(stages) if seen & uids), default=0)
        at = next((i for i in range(after, len(stages)) if stages[i][0] == req.op), None)
        if at is None:
            stages.append((req.op, [], set()))
            at = len(stages) - 1
        stages[at][1].append(req)
        stages[at][2].update(uids)
    return [(op, requests) for op, requests, _ in stages if requests]


# --- parsing helpers (pure) ---------------------------------------------------------------------


def _check_ref(claim: ClaimRef) -> None:
    if not is_uid(claim.uid):
        raise ClaimFailure(f"{_label(claim)}: refusing a claim uid that is not a lowercase RFC 4122 UUID")
    if not is_dns_label(claim.namespace):
        raise ClaimFailure(f"{_label(claim)}: namespace is not a DNS label")
    if not is_dns_subdomain(claim.name):
        raise ClaimFailure(f"{_label(claim)}: name is not a DNS subdomain")


def _parse_result(claim: ClaimRef, index: int, r: Mapping[str, Any]) -> AllocatedDevice:
    where = f"{_label(claim)}: status.allocation.devices.results[{index}]"
    request, pool, device = r.get("request"), r.get("pool"), r.get("device")
    if not isinstance(request, str) or not is_request_name(request):
        raise ClaimFailure(f"{where}: request {request!r} is not a request name")
    if not isinstance(pool, str) or not pool:
        raise ClaimFailure(f"{where}: pool {pool!r} is not a pool name")
    if not isinstance(device, str) or not is_dns_label(device):
        raise ClaimFailure(f"{where}: device name {device!r} is not a DNS label; refusing")
    share_id = r.get("shareID")
    if share_id is not None and (not isinstance(share_id, str) or not is_uid(share_id)):
        raise ClaimFailure(f"{where}: shareID {share_id!r} is not a lowercase RFC 4122 UUID; refusing")
    consumed = r.get("consumedCapacity") or {}
    if not isinstance(consumed, Mapping):
        raise ClaimFailure(f"{where}: consumedCapacity is not an object")
    return AllocatedDevice(
        request=request,
        pool=pool,
        device=device,
        share_id=share_id,
        consumed_capacity={str(k): str(v) for k, v in consumed.items()},
        admin_access=r.get("adminAccess") is True,
    )


def _parse_configs(
    claim: ClaimRef, driver: str, entries: Any, allocated: Sequence[AllocatedDevice]
) -> tuple[OpaqueConfig, ...]:
    """Our opaque configs that apply to at least one of our results, class ones first."""
    if not isinstance(entries, list):
        raise ClaimFailure(f"{_label(claim)}: status.allocation.devices.config is not a list")
    ours: list[OpaqueConfig] = []
    for i, e in enumerate(entries):
        where = f"{_label(claim)}: status.allocation.devices.config[{i}]"
        if not isinstance(e, Mapping):
            raise ClaimFailure(f"{where}: is not an object")
        opaque = e.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        source = e.get("source")
        if source not in CONFIG_SOURCES:
            raise ClaimFailure(f"{where}: source {source!r} is not one of {', '.join(CONFIG_SOURCES)}")
        requests = e.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(x, str) for x in requests):
            raise ClaimFailure(f"{where}: requests must be a list of request names")
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            raise ClaimFailure(f"{where}: opaque.parameters must be a JSON object")
        cfg = OpaqueConfig(source=source, requests=tuple(requests), parameters=params)
        if not cfg.requests or any(
            r == a.request or r == main_request(a.request) for a in allocated for r in cfg.requests
        ):
            ours.append(cfg)
    ours.sort(key=lambda c: CONFIG_SOURCES.index(c.source))  # stable: class before claim
    return tuple(ours)


def _driver_message(claim: ClaimRef, e: BaseException) -> str:
    return bounded(_driver_text(claim, e))


def _driver_text(claim: ClaimRef, e: BaseException) -> str:
    if isinstance(e, PrepareError):
        text = str(e)
        # drivers' ConfigErrors already name the claim; do not say it twice
        return text if text.startswith("claim ") else f"{_label(claim)}: {text}"
    if isinstance(e, SpecError):
        return f"{_label(claim)}: driver produced an invalid CDI spec: {e}"
    if isinstance(e, TypeError | ValueError) and "JSON" in str(e):
        return f"{_label(claim)}: driver state is not JSON data: {e}"
    if isinstance(e, OSError):
        return f"{_label(claim)}: cannot write CDI spec: {e}"
    _log.exception(f"driver prepare crashed for {_label(claim)}", **logs.claim(claim))
    return f"{_label(claim)}: driver error: {type(e).__name__}: {e}"
