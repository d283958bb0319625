"""Who holds which CPUs, and how that is written into (and read back from) the checkpoint.

The driver is the last line of defence against giving one CPU to two claims: the scheduler
counts capacity, not CPU numbers, so only this table knows which CPUs are taken. It is rebuilt
after a restart from each completed claim's `Preparation.state`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topodra.common.topology.parse import parse_cpulist
from topodra.drivers.cpu.policy import fmt

STATE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Holding:
    """The CPUs one allocation result of one claim got."""

    claim_uid: str
    request: str
    pool: str
    device: str
    share_id: str | None
    cpus: tuple[int, ...]
    mems: tuple[int, ...] | None = None

    def key(self) -> tuple[str, str, str, str | None]:
        return (self.request, self.pool, self.device, self.share_id)


class Conflict(Exception):
    """A CPU is already someone else's."""


class Holdings:
    """Not thread-safe on its own: the driver calls it under its lock."""

    def __init__(self) -> None:
        self._by_claim: dict[str, tuple[Holding, ...]] = {}
        self._owner: dict[int, str] = {}

    def owner(self, cpu: int) -> str | None:
        return self._owner.get(cpu)

    def held(self) -> frozenset[int]:
        return frozenset(self._owner)

    def of_claim(self, claim_uid: str) -> tuple[Holding, ...]:
        return self._by_claim.get(claim_uid, ())

    def claims(self) -> dict[str, tuple[Holding, ...]]:
        return dict(self._by_claim)

    def set_claim(self, claim_uid: str, holdings: Sequence[Holding]) -> None:
        """Make `holdings` the claim's whole set (all or nothing); Conflict names the CPUs."""
        wanted: dict[int, Holding] = {}
        for h in holdings:
            if h.claim_uid != claim_uid:
                raise ValueError(f"holding of claim {h.claim_uid} given for claim {claim_uid}")
            for c in h.cpus:
                if c in wanted:
                    raise Conflict(f"CPU {c} would be given twice to claim {claim_uid}")
                wanted[c] = h
        taken = sorted(c for c in wanted if self._owner.get(c, claim_uid) != claim_uid)
        if taken:
            owners = sorted({self._owner[c] for c in taken})
            raise Conflict(f"CPUs {fmt(taken)} are held by claim(s) {', '.join(owners)}")
        self.release(claim_uid)
        for c in wanted:
            self._owner[c] = claim_uid
        if holdings:
            self._by_claim[claim_uid] = tuple(holdings)

    def release(self, claim_uid: str) -> tuple[Holding, ...]:
        gone = self._by_claim.pop(claim_uid, ())
        for h in gone:
            for c in h.cpus:
                if self._owner.get(c) == claim_uid:
                    del self._owner[c]
        return gone

    def clear(self) -> None:
        self._by_claim.clear()
        self._owner.clear()


# --- checkpoint state ---------------------------------------------------------------------------


def to_state(holdings: Iterable[Holding]) -> dict[str, Any]:
    results = []
    for h in holdings:
        entry: dict[str, Any] = {
            "request": h.request,
            "pool": h.pool,
            "device": h.device,
            "cpus": fmt(h.cpus),
        }
        if h.share_id:
            entry["shareID"] = h.share_id
        if h.mems is not None:
            entry["mems"] = fmt(h.mems)
        results.append(entry)
    return {"version": STATE_VERSION, "results": results}


class StateError(ValueError):
    pass


def _cpus(text: Any, what: str) -> tuple[int, ...]:
    parsed = parse_cpulist(text) if isinstance(text, str) else None
    if parsed is None:
        raise StateError(f"{what} is not a CPU list: {text!r}")
    return tuple(sorted(parsed))


def from_state(claim_uid: str, state: Mapping[str, Any]) -> tuple[Holding, ...]:
    """Holdings of one claim from its checkpointed state; StateError names what is wrong."""
    if not state:
        return ()
    if state.get("version") != STATE_VERSION:
        raise StateError(f"state version {state.get('version')!r} is not {STATE_VERSION}")
    results = state.get("results")
    if not isinstance(results, list):
        raise StateError("state has no results list")
    out = []
    for i, r in enumerate(results):
        if not isinstance(r, Mapping):
            raise StateError(f"results[{i}] is not an object")
        fields = {k: r.get(k) for k in ("request", "pool", "device")}
        for k, v in fields.items():
            if not isinstance(v, str) or not v:
                raise StateError(f"results[{i}].{k} is missing")
        share = r.get("shareID")
        mems = r.get("mems")
        out.append(
            Holding(
                claim_uid=claim_uid,
                request=str(fields["request"]),
                pool=str(fields["pool"]),
                device=str(fields["device"]),
                share_id=share if isinstance(share, str) and share else None,
                cpus=_cpus(r.get("cpus"), f"results[{i}].cpus"),
                mems=_cpus(mems, f"results[{i}].mems") if mems is not None else None,
            )
        )
    return tuple(out)
