"""Whether a claim fits a node, searched in the scheduler's order, and what stops it when not.

The search mirrors the allocator of kube-scheduler 1.37 (docs/design/prioritized-placement.md):
requests in the order written, a request's subrequests in order, a request's devices as
combinations in the node's device order, constraints checked as each device is added, the
first full assignment wins. It is bounded (MAX_STEPS): past that it says it gave up, as the
scheduler would after its Filter timeout. When the claim does not fit, each request's candidate
count and each constraint are examined: a constraint without which the claim would fit is named
as the one that blocks it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from topodra.common.check.attrs import Value
from topodra.common.explain.inventory import Device, InUse, show_amount
from topodra.common.explain.selectors import evaluate, selectors_of
from topodra.common.publisher import quantity

MAX_STEPS = 200_000
# The API's limits per claim (docs/design/prioritized-placement.md): requests, subrequests per
# request, constraints, and devices allocated to one claim.
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_CONSTRAINTS = 32
MAX_RESULTS = 32


class ClaimError(ValueError):
    """The claim cannot be read (a field of the wrong type, too many requests, ...)."""


@dataclass(frozen=True, slots=True)
class Alternative:
    """A request without subrequests, or one subrequest of a request."""

    request: str
    sub: str | None
    device_class: str
    selectors: tuple[str, ...]
    count: int | None  # None: allocationMode All
    capacity: Mapping[str, Fraction]

    @property
    def name(self) -> str:
        return self.request if self.sub is None else f"{self.request}/{self.sub}"


@dataclass(frozen=True, slots=True)
class Constraint:
    index: int
    requests: tuple[str, ...]  # empty: every request
    attribute: str
    distinct: bool

    def covers(self, alt: Alternative) -> bool:
        return not self.requests or alt.request in self.requests or alt.name in self.requests

    def describe(self) -> str:
        what = "distinctAttribute" if self.distinct else "matchAttribute"
        over = ", ".join(self.requests) if self.requests else "all requests"
        return f"constraint #{self.index} ({what} {self.attribute} over {over})"


@dataclass(frozen=True, slots=True)
class Claim:
    requests: tuple[tuple[str, tuple[Alternative, ...]], ...]
    constraints: tuple[Constraint, ...]


def parse_claim(obj: Mapping[str, Any]) -> Claim:
    """A ResourceClaim, a ResourceClaimTemplate or a bare claim spec -> Claim; ClaimError naming
    the field for anything the API would not have accepted (a file may hold anything)."""
    spec: Any = obj.get("spec", obj)
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = _mapping(spec, "spec").get("spec", {})
    devices = _mapping(_mapping(spec, "spec").get("devices"), "spec.devices")
    raw_requests = _list(devices.get("requests"), "spec.devices.requests", MAX_REQUESTS)
    requests = []
    for r in raw_requests:
        if not isinstance(r, Mapping) or not isinstance(r.get("name"), str):
            raise ClaimError("a request without a name")
        if r.get("firstAvailable"):
            subs = _list(r["firstAvailable"], f"request {r['name']}: firstAvailable", MAX_SUBREQUESTS)
            alts = tuple(_alternative(r["name"], s, _mapping(s, "a subrequest").get("name")) for s in subs)
        else:
            alts = (_alternative(r["name"], r.get("exactly") or {}, None),)
        requests.append((r["name"], alts))
    constraints = []
    for i, c in enumerate(_list(devices.get("constraints"), "spec.devices.constraints", MAX_CONSTRAINTS)):
        c = _mapping(c, f"constraint #{i}")
        attr = c.get("matchAttribute") or c.get("distinctAttribute")
        if not isinstance(attr, str):
            raise ClaimError(f"constraint #{i}: neither matchAttribute nor distinctAttribute")
        names = _list(c.get("requests"), f"constraint #{i}: requests", MAX_REQUESTS * (1 + MAX_SUBREQUESTS))
        constraints.append(Constraint(i, tuple(str(n) for n in names), attr, "distinctAttribute" in c))
    return Claim(tuple(requests), tuple(constraints))


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ClaimError(f"{what} is not an object")
    return value


def _list(value: Any, what: str, most: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > most:
        raise ClaimError(f"{what} must be a list of at most {most}")
    return value


def _alternative(request: str, body: Mapping[str, Any], sub: Any) -> Alternative:
    if not isinstance(body, Mapping) or not isinstance(body.get("deviceClassName"), str):
        raise ClaimError(f"request {request}{'/' + str(sub) if sub else ''}: no deviceClassName")
    mode = body.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ClaimError(
            f"request {request}: allocationMode {str(mode)[:40]!r} is neither ExactCount nor All"
        )
    count = body.get("count", 1)
    if mode == "ExactCount" and (
        not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_RESULTS
    ):
        raise ClaimError(f"request {request}: count must be 1..{MAX_RESULTS}")
    if not isinstance(body.get("selectors"), (list, type(None))):
        raise ClaimError(f"request {request}: selectors is not a list")
    capacity = {}
    asked = _mapping(
        _mapping(body.get("capacity"), f"request {request}: capacity").get("requests"), "requests"
    )
    for name, amount in asked.items():
        try:
            capacity[str(name)] = quantity.parse(str(amount))
        except quantity.QuantityError as err:
            raise ClaimError(f"request {request}: capacity {name}: {err}") from None
    return Alternative(
        request,
        str(sub) if sub is not None else None,
        body["deviceClassName"],
        tuple(selectors_of(body)),
        None if mode == "All" else int(count),
        capacity,
    )


# ----- candidates ------------------------------------------------------------------------------


@dataclass
class Candidates:
    alternative: Alternative
    devices: list[Device] = field(default_factory=list)
    ruled_out: dict[str, int] = field(default_factory=dict)  # reason -> how many devices
    not_evaluated: dict[str, int] = field(default_factory=dict)  # expression: reason -> devices

    def note(self, table: dict[str, int], reason: str) -> None:
        table[reason] = table.get(reason, 0) + 1


def candidates(
    alt: Alternative, devices: Sequence[Device], classes: Mapping[str, Mapping[str, Any]], used: InUse
) -> Candidates:
    out = Candidates(alt)
    cls = classes.get(alt.device_class)
    class_selectors = selectors_of(cls.get("spec") or {}) if cls is not None else None
    for d in devices:
        if class_selectors is None:
            out.note(out.not_evaluated, f"DeviceClass {alt.device_class} not given: its selectors unknown")
            continue
        ok, why = _all(class_selectors, d, f"DeviceClass {alt.device_class} selector")
        if ok is not True:
            out.note(out.ruled_out if ok is False else out.not_evaluated, why)
            continue
        ok, why = _all(alt.selectors, d, "request selector")
        if ok is not True:
            out.note(out.ruled_out if ok is False else out.not_evaluated, why)
            continue
        if d.id in used.devices:
            out.note(out.ruled_out, "held by another claim")
            continue
        short = _short_of_capacity(alt, d, used)
        if short:
            out.note(out.ruled_out, short)
            continue
        out.devices.append(d)
    return out


def _all(selectors: Sequence[str], device: Device, what: str) -> tuple[bool | None, str]:
    """(True, ""), (False, which selector said no) or (None, why one could not be evaluated)."""
    for i, expr in enumerate(selectors):
        if not expr:
            return None, f"{what} #{i} is not CEL"
        v = evaluate(expr, device)
        if v.matches is None:
            return None, f"{what} #{i} ({expr[:80]}): {v.reason}"
        if not v.matches:
            return False, f"{what} #{i} is false ({expr[:80]})"
    return True, ""


def _short_of_capacity(alt: Alternative, d: Device, used: InUse) -> str:
    taken = used.capacity.get(d.id, {})
    if taken and not d.shared:
        return "held by another claim"
    for name, want in alt.capacity.items():
        qualified = name if "/" in name else f"{d.driver}/{name}"
        have = d.capacity.get(qualified)
        if have is None:
            return f"no capacity {qualified}"
        free = have - taken.get(qualified, Fraction(0))
        if want > free:
            return f"only {show_amount(free)} of {qualified} free ({show_amount(want)} asked)"
    return ""


# ----- the search ------------------------------------------------------------------------------


@dataclass
class Search:
    claim: Claim
    cands: Mapping[str, Candidates]  # alternative name -> candidates
    used: InUse = field(default_factory=InUse)  # what other claims hold
    skip: frozenset[int] = frozenset()  # constraint indexes left out
    steps: int = 0
    gave_up: bool = False
    over_limit: bool = False  # an alternative was left out: more than MAX_RESULTS devices
    chosen: list[tuple[Alternative, Device]] = field(default_factory=list)
    taken: dict[tuple[str, str, str], dict[str, Fraction]] = field(default_factory=dict)

    def run(self) -> list[tuple[Alternative, Device]] | None:
        try:
            return list(self.chosen) if self._request(0) else None
        except _GiveUp:
            self.gave_up = True
            return None

    def _request(self, i: int) -> bool:
        if i == len(self.claim.requests):
            return True
        _, alts = self.claim.requests[i]
        for alt in alts:
            pool = self.cands[alt.name].devices
            need = len(pool) if alt.count is None else alt.count
            if need == 0 or need > len(pool):
                continue
            if len(self.chosen) + need > MAX_RESULTS:  # the scheduler refuses such a claim
                self.over_limit = True
                continue
            if self._pick(alt, pool, need, 0, i):
                return True
        return False

    def _pick(self, alt: Alternative, pool: Sequence[Device], need: int, start: int, i: int) -> bool:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _GiveUp
        if need == 0:
            return self._request(i + 1)
        for j in range(start, len(pool) - need + 1):
            d = pool[j]
            if not self._can_take(alt, d) or not self._constraints_hold(alt, d):
                continue
            self._take(alt, d)
            if self._pick(alt, pool, need - 1, j + 1, i):
                return True
            self._give_back(alt, d)
        return False

    def _can_take(self, alt: Alternative, d: Device) -> bool:
        if d.id not in self.taken:
            return True
        if not d.shared:
            return False
        held = self.used.capacity.get(d.id, {})
        return all(
            self.taken[d.id].get(_q(n, d), Fraction(0)) + want
            <= d.capacity.get(_q(n, d), Fraction(0)) - held.get(_q(n, d), Fraction(0))
            for n, want in alt.capacity.items()
        )

    def _take(self, alt: Alternative, d: Device) -> None:
        t = self.taken.setdefault(d.id, {})
        for n, want in alt.capacity.items():
            t[_q(n, d)] = t.get(_q(n, d), Fraction(0)) + want
        self.chosen.append((alt, d))

    def _give_back(self, alt: Alternative, d: Device) -> None:
        self.chosen.pop()
        for n, want in alt.capacity.items():
            self.taken[d.id][_q(n, d)] -= want
        if not any(x.id == d.id for _, x in self.chosen):
            del self.taken[d.id]

    def _constraints_hold(self, alt: Alternative, d: Device) -> bool:
        for c in self.claim.constraints:
            if c.index in self.skip or not c.covers(alt):
                continue
            value = d.attr(c.attribute)
            if value is None or value.kind == "invalid":
                return False
            others = [x.attr(c.attribute) for a, x in self.chosen if c.covers(a)]
            if c.distinct and any(o is not None and _meets([o, value]) for o in others):
                return False
            if not c.distinct and not _meets([*others, value]):
                return False
        return True


class _GiveUp(Exception):
    pass


def _q(name: str, d: Device) -> str:
    return name if "/" in name else f"{d.driver}/{name}"


def _meets(values: Sequence[Value | None]) -> bool:
    """Whether values are the same to the scheduler: one type (an int never meets a string),
    and a value in common (one value each for scalars; lists meet by intersection, as
    common/check/align.py has it and tests/controlplane/test_check.py proves on the scheduler)."""
    if any(v is None for v in values):
        return False
    present = [v for v in values if v is not None]
    common = set(present[0].items)
    for v in present[1:]:
        if v.base != present[0].base:
            return False
        common &= set(v.items)
    return bool(common)


# ----- the verdict -----------------------------------------------------------------------------


@dataclass
class Verdict:
    fits: bool
    gave_up: bool
    steps: int
    assignment: list[tuple[str, Device]]  # (request or request/subrequest, device)
    blocking: list[str]  # what stops the claim, one sentence each
    per_alternative: list[Candidates]


def explain(
    claim: Claim, devices: Sequence[Device], classes: Mapping[str, Mapping[str, Any]], used: InUse
) -> Verdict:
    cands = {alt.name: candidates(alt, devices, classes, used) for _, alts in claim.requests for alt in alts}
    search = Search(claim, cands, used)
    found = search.run()
    if found is not None:
        return Verdict(True, False, search.steps, [(a.name, d) for a, d in found], [], list(cands.values()))
    blocking: list[str] = []
    for name, alts in claim.requests:
        counts = [(a, len(cands[a.name].devices)) for a in alts]
        if all(a.count is not None and n < a.count for a, n in counts) or all(n == 0 for _, n in counts):
            have = ", ".join(
                f"{a.name}: {n} of {a.count if a.count is not None else 'all'}" for a, n in counts
            )
            blocking.append(f"request {name}: not enough devices could match ({have} needed)")
    if not blocking and not search.gave_up:
        for c in claim.constraints:
            trial = Search(claim, cands, used, skip=frozenset({c.index}))
            if trial.run() is not None:
                blocking.append(f"{c.describe()}: without it the claim would fit")
        if not blocking and claim.constraints:
            trial = Search(claim, cands, used, skip=frozenset(c.index for c in claim.constraints))
            if trial.run() is not None:
                blocking.append("the constraints together (no single one alone) rule out every choice")
            else:
                blocking.append("not enough devices for the requests together")
        elif not blocking:
            blocking.append("not enough devices for the requests together")
    if search.over_limit:
        blocking.insert(
            0, f"the claim would hold more than {MAX_RESULTS} devices (the API's limit per claim)"
        )
    if search.gave_up:
        blocking.append(f"search gave up after {MAX_STEPS} steps (the scheduler may time out on it too)")
    return Verdict(False, search.gave_up, search.steps, [], blocking, list(cands.values()))


def is_allocated(claim_obj: Mapping[str, Any]) -> bool:
    status = claim_obj.get("status")
    return isinstance(status, Mapping) and bool(status.get("allocation"))


def allocated(claim_obj: Mapping[str, Any]) -> list[tuple[str, str, str, str]] | None:
    """(request, driver, pool, device) of an allocated claim's results; None when not allocated."""
    if not is_allocated(claim_obj):
        return None
    alloc = _mapping(claim_obj["status"]["allocation"], "status.allocation")
    results = _list(
        _mapping(alloc.get("devices"), "status.allocation.devices").get("results"), "results", 1024
    )
    return [
        (str(r.get("request")), str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in (_mapping(r, "an allocation result") for r in results)
    ]


def iter_results(
    results: Sequence[tuple[str, str, str, str]], devices: Sequence[Device]
) -> Iterator[tuple[str, Device]]:
    by_id = {d.id: d for d in devices}
    for request, driver, pool, name in results:
        d = by_id.get((driver, pool, name))
        if d is not None:
            yield request, d
