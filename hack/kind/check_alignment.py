#!/usr/bin/env python3
"""Checks that allocated ResourceClaims keep their constraints, from what the cluster says.

For every claim it reads the allocation (driver, pool, device per request) and looks the devices
up in the ResourceSlices, then checks each constraint the claim asked for: `matchAttribute`
means one value across the devices of the covered requests, `distinctAttribute` pairwise
different values. This is the scheduler's promise seen from the outside, so hack/kind-e2e.sh can
show a person that the aligned examples really landed on aligned devices (and the count-only
baseline, having no constraint, did not have to).

Stdlib only (runs with any python3 next to kubectl):

    kubectl get resourceclaims -n NS -o json > claims.json
    kubectl get resourceslices -o json > slices.json
    python3 hack/kind/check_alignment.py claims.json slices.json [--expect N]

Exit status 0 when every claim is allocated (at least N of them, if given) and keeps its
constraints; 1 otherwise. One line per claim and constraint on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Value = int | str | bool
DeviceKey = tuple[str, str, str]  # driver, pool, device


@dataclass(frozen=True)
class Finding:
    claim: str
    ok: bool
    text: str


def attribute_index(slices: Mapping[str, Any]) -> dict[DeviceKey, dict[str, Value]]:
    """Attributes of every published device by (driver, pool, device), with qualified keys.

    Unqualified attribute names belong to the driver's own domain (the API's rule), so they are
    stored under `<driver>/<name>` as a claim would name them."""
    out: dict[DeviceKey, dict[str, Value]] = {}
    for item in slices.get("items") or []:
        spec = item.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for dev in spec.get("devices") or []:
            attrs: dict[str, Value] = {}
            for name, typed in (dev.get("attributes") or {}).items():
                key = name if "/" in name else f"{driver}/{name}"
                for kind in ("int", "string", "bool", "version"):
                    if kind in typed:
                        attrs[key] = typed[kind]
            out[(driver, pool, dev.get("name", ""))] = attrs
    return out


def covered(request: str, names: Sequence[str]) -> bool:
    """A result for `req` or `req/sub` is covered by a constraint listing `req` (or all, if empty)."""
    return not names or any(request == n or request.startswith(n + "/") for n in names)


def check_claim(claim: Mapping[str, Any], index: Mapping[DeviceKey, Mapping[str, Value]]) -> list[Finding]:
    meta = claim.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return [Finding(name, False, "not allocated")]
    results = (allocation.get("devices") or {}).get("results") or []
    devices = ", ".join(f"{r['request']}={r['device']}" for r in results)
    findings = [Finding(name, True, f"allocated: {devices}")]
    constraints = ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []
    for c in constraints:
        names = c.get("requests") or []
        attr = c.get("matchAttribute") or c.get("distinctAttribute")
        mode = "matchAttribute" if "matchAttribute" in c else "distinctAttribute"
        values: list[tuple[str, Value | None]] = []
        for r in results:
            if covered(r["request"], names):
                attrs = index.get((r["driver"], r["pool"], r["device"]))
                values.append((r["device"], None if attrs is None else attrs.get(attr)))
        findings.append(_judge(name, mode, str(attr), values))
    return findings


def _judge(claim: str, mode: str, attr: str, values: Sequence[tuple[str, Value | None]]) -> Finding:
    shown = ", ".join(f"{d}={v!r}" for d, v in values)
    missing = [d for d, v in values if v is None]
    if missing:
        return Finding(claim, False, f"{mode} {attr}: no such attribute on {', '.join(missing)}")
    distinct = {json.dumps(v) for _, v in values}
    ok = len(distinct) <= 1 if mode == "matchAttribute" else len(distinct) == len(values)
    return Finding(claim, ok, f"{mode} {attr}: {shown}")


def check(claims: Mapping[str, Any], slices: Mapping[str, Any]) -> list[Finding]:
    index = attribute_index(slices)
    out: list[Finding] = []
    for claim in claims.get("items") or []:
        out.extend(check_claim(claim, index))
    return out


def report(findings: Iterable[Finding]) -> str:
    return "\n".join(f"{'ok  ' if f.ok else 'FAIL'} {f.claim}: {f.text}" for f in findings)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("claims", type=Path, help="kubectl get resourceclaims -o json")
    ap.add_argument("slices", type=Path, help="kubectl get resourceslices -o json")
    ap.add_argument("--expect", type=int, default=0, help="fail unless at least this many claims exist")
    args = ap.parse_args(argv)
    claims = json.loads(args.claims.read_text())
    findings = check(claims, json.loads(args.slices.read_text()))
    print(report(findings))
    count = len(claims.get("items") or [])
    if count < args.expect:
        print(f"FAIL expected at least {args.expect} claims, found {count}")
        return 1
    return 0 if all(f.ok for f in findings) else 1


if __name__ == "__main__":
    sys.exit(main())
