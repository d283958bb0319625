"""Which prepared claims the API server says are gone from this node.

The kubelet unprepares what it prepared; reconcile is the safety net for claims it never will
(deleted while the driver was down, re-created under the same name, deallocated, allocated to
another node). A wrong "gone" releases what a running pod holds, so the answers that count are
narrow. Reads come from the API server's watch cache (`resourceVersion=0`: no etcd read while
nothing changes); an answer that would make us act is confirmed by a quorum read. A claim counts
as deleted only on the API server's own NotFound for it (kubeapi's `NotFound`, never a proxy's
404), seen in two rounds in a row, and a round in which every claim (two or more) is NotFound is
dropped whole: that is what a wiped or wrong cluster behind the same address says, not what users
do. The first unreachable answer ends the round: keep everything, retry next time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from topodra.common import logs
from topodra.common.kubeapi.claims import ClaimSource
from topodra.common.kubeapi.errors import ApiError, NotFound, Unusable
from topodra.common.runtime.checkpoint import ClaimRecord
from topodra.common.runtime.claims.check import label

DELETED_AFTER_ROUNDS = 2  # reconcile rounds in a row that must find a claim NotFound


@dataclass(slots=True)
class ReconcileReport:
    unprepared: list[str]
    kept: list[str]
    unreachable: bool
    suspected: list[str] = field(default_factory=list)  # NotFound once: unprepared if seen again
    aborted: bool = False  # every claim NotFound: round not believed
    contacted: bool = False  # the API server was asked at all (not when no claim is prepared)


def stale_reason(driver: str, rec: ClaimRecord, obj: Mapping[str, Any]) -> str:
    """Why the claim in `obj` no longer needs what `rec` holds here ("" when it does)."""
    if (obj.get("metadata") or {}).get("uid") != rec.claim.uid:
        return "deleted and re-created under the same name"
    allocation = (obj.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        return "no longer allocated"
    results = ((allocation.get("devices") or {}).get("results")) or []
    ours = {
        (r.get("pool"), r.get("device"))
        for r in results
        if isinstance(r, Mapping) and r.get("driver") == driver
    }
    if not any((a.pool, a.device) in ours for a in rec.allocated):
        return "no longer allocated to this node"
    return ""


class Judge:
    """Reads the claims of one round and says which are stale; remembers NotFound across rounds."""

    def __init__(self, source: ClaimSource, driver: str, log: Any) -> None:
        self._source = source
        self._driver = driver
        self._log = log
        self._missing: dict[str, int] = {}  # uid -> rounds in a row it was NotFound

    def forget(self, uid: str) -> None:
        self._missing.pop(uid, None)

    def round(
        self, snapshot: Sequence[ClaimRecord], report: ReconcileReport
    ) -> list[tuple[ClaimRecord, str]]:
        """The stale claims of `snapshot` with the reason; fills `report` with the rest."""
        answers: list[tuple[ClaimRecord, Mapping[str, Any] | None]] = []  # None: NotFound
        for rec in snapshot:
            report.contacted = True
            try:
                answers.append((rec, self._read(rec)))
            except Unusable as e:
                self._log.warning(f"reconcile: keeping {label(rec.claim)}: {e}", **logs.claim(rec.claim))
                report.kept.append(rec.claim.uid)
            except ApiError as e:
                self._log.warning(
                    f"reconcile: API server unreachable, keeping every claim: {e}", error=str(e)
                )
                report.unreachable = True
                return []
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
            return []
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
                        f"reconcile: {label(rec.claim)} is not found; unprepared only if the next "
                        "round confirms it",
                        **logs.claim(rec.claim),
                    )
                continue
            self._missing.pop(uid, None)
            reason = stale_reason(self._driver, rec, obj)
            if reason:
                stale.append((rec, reason))
            else:
                report.kept.append(uid)
        return stale

    def _read(self, rec: ClaimRecord) -> Mapping[str, Any] | None:
        """The claim from the watch cache, or (when that answer would make us act) from etcd;
        None when the API server says it does not exist."""
        ns, name = rec.claim.namespace, rec.claim.name
        try:
            obj: Mapping[str, Any] | None = self._source.get(ns, name, cached=True)
        except NotFound:
            obj = None
        if obj is not None and not stale_reason(self._driver, rec, obj):
            return obj
        try:
            return self._source.get(ns, name)
        except NotFound:
            return None
