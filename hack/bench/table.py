"""The benchmark table: every figure of one `hack/bench/all` run, from the scripts' --json output.

Pure: a dict of parsed JSON per script in, rows out. A script that failed or was skipped gives
rows saying so, never a made-up number.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Row:
    area: str
    figure: str
    value: str
    target: str = ""
    source: str = ""


Figures = Mapping[str, Any]


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, Mapping) or p not in d:
            return None
        d = d[p]
    return d


def num(v: Any, fmt: str = ".1f", unit: str = "") -> str:
    if v is None or isinstance(v, bool) or not isinstance(v, int | float):
        return "n/a"
    return f"{v:{fmt}}{unit}"


def mib(v: Any) -> str:
    """A figure in MiB, or the text a script gave (e.g. 'not available: ...') as it is."""
    if isinstance(v, str):
        m = re.fullmatch(r"\s*([0-9.]+)\s*MiB\s*", v)
        return f"{float(m.group(1)):.1f} MiB" if m else v
    return num(v, ".1f", " MiB")


def p50_p99(p50: Any, p99: Any, fmt: str = ".2f") -> str:
    return f"{num(p50, fmt)} / {num(p99, fmt)} ms"


def discovery_rows(d: Figures | None) -> list[Row]:
    src = "hack/bench-discovery"
    if not d:
        return [Row("discovery", "discovery vs lstopo", "not run", source=src)]
    n = d.get("trees_total")

    def ratio(key: str) -> str:
        return num(d.get(key), ".2f", "x")

    within = f"{d.get('trees_inspect_within_2x_lstopo_wall')} / {d.get('trees_inspect_within_2x_lstopo_cpu')}"
    return [
        Row("discovery", f"`topodra inspect` / lstopo, geometric mean over {n} trees, wall time",
            ratio("inspect_over_lstopo_wall"), "<= 2x", src),
        Row("discovery", "the same in CPU time (user+sys)", ratio("inspect_over_lstopo_cpu"), "<= 2x", src),
        Row("discovery", "the same minus a bare interpreter start, wall time",
            ratio("inspect_minus_interpreter_over_lstopo_wall"), "", src),
        Row("discovery", "trees where inspect <= 2x lstopo (wall / CPU)", f"{within} of {n}", "", src),
        Row("discovery", "in-process discover() / lstopo, geometric mean, wall time",
            ratio("in_process_over_lstopo_wall"), "<= 1x", src),
    ]  # fmt: skip


def _prep(label: str, d: Any, target_p99: str) -> list[Row]:
    src = "hack/bench-prepare"
    lat = _get(d, "latency") or {}
    latency = p50_p99(lat.get("p50_ms"), lat.get("p99_ms"))
    rate = num(_get(d, "claims_per_s"), ".0f", " claims/s")
    client = _get(d, "client")
    if client:
        label += f", {client} kubelet client"
    rows = [
        Row("prepare", f"NodePrepareResources over gRPC, {label}: p50 / p99", latency, target_p99, src),
        Row("prepare", f"throughput over gRPC, {label}, 64 in flight", rate, ">= 500 claims/s", src),
    ]
    cpu = _get(d, "cpu_ms_per_claim") or {}
    if cpu:
        spent = " / ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
        rows.append(Row("prepare", f"CPU per prepare + unprepare, {label}", f"{spent} ms", "", src))
    return rows


def prepare_rows(d: Figures | None) -> list[Row]:
    src = "hack/bench-prepare"
    if not d:
        return [Row("prepare", "prepare latency and RSS", "not run", source=src)]
    rows = _prep("gRPC plane only", d.get("plane_only"), "")
    rows += _prep("claims from memory (no GET)", d.get("without_get"), "p99 <= 5 ms")
    if d.get("with_get"):
        rows += _prep("GET from a real kube-apiserver", d.get("with_get"), "p99 <= 10 ms")
    else:
        rows.append(Row("prepare", "with GET from a real kube-apiserver", "not run", source=src))
    one = mib(_get(d, "without_get", "rss_mib_one_driver"))
    rows.append(Row("RSS", "one bench driver process (runtime only)", one, "<= 60 MiB", src))
    three = mib(d.get("rss_mib_three_drivers"))
    rows.append(Row("RSS", "three bench drivers in one process", three, "<= 80 MiB", src))
    # as deployed (in-cluster config, the targets' case), then with --kubeconfig (its loader
    # brings yaml, requests and oauthlib)
    for key, how in (("rss_serve_in_cluster", "in-cluster"), ("rss_serve", "--kubeconfig")):
        serve = d.get(key) or {}
        for kind in ("cpu", "accelerator", "nic", "all"):
            what = (
                f"`topodra serve all` (three drivers, one process), {how}"
                if kind == "all"
                else f"`topodra serve {kind}` (real driver, host /sys, real API server), {how}"
            )
            value = mib(serve[kind]) if kind in serve else "not run"
            target = ("<= 80 MiB" if kind == "all" else "<= 60 MiB") if how == "in-cluster" else ""
            rows.append(Row("RSS", what, value, target, src))
    return rows


def claims_rows(mem: Figures | None, api: Figures | None) -> list[Row]:
    src = "hack/bench_claims.py"
    rows = []
    cases = (("claims from memory", mem, "p99 <= 5 ms"), ("GET from kube-apiserver", api, "p99 <= 10 ms"))
    for label, d, target in cases:
        if not d:
            rows.append(Row("prepare", f"claim core in-process, {label}", "not run", source=src))
            continue
        p = d.get("prepare_ms") or {}
        rounds = d.get("concurrent_claims_per_s") or []
        rate = num(statistics.median(rounds) if rounds else None, ".0f", " claims/s")
        what = f"claim core in-process (checkpoint + CDI writes with fsync), {label}: p50 / p99"
        rows.append(Row("prepare", what, p50_p99(p.get("p50"), p.get("p99")), target, src))
        what = f"claim core, 64 concurrent prepares, {label} (median of rounds)"
        rows.append(Row("prepare", what, rate, ">= 500 claims/s", src))
    return rows


def publish_rows(d: Figures | None) -> list[Row]:
    src = "hack/bench-publish"
    if not d:
        return [Row("publish", "publish time, idle writes, repair", "not run", source=src)]
    rows = []
    for label, r in d.items():
        if label == "idle" or not isinstance(r, Mapping):
            continue
        starts = r.get("start_s") or []
        first_writes = (r.get("start_writes") or [None])[0]
        start = num(statistics.median(starts) * 1000 if starts else None, ".0f", " ms")
        repair_s = r.get("repair_s")
        repair = num(repair_s * 1000 if isinstance(repair_s, int | float) else None, ".0f", " ms")
        slices = r.get("slices")
        rows += [
            Row("publish", f"{label}: start -> all {slices} slices accepted (median)", start, "", src),
            Row("publish", f"{label}: writes at start / on restart (adopt)",
                f"{first_writes} / {r.get('adopt_writes')}", "restart: 0", src),
            Row("repair", f"{label}: slice deleted by someone else, back in", repair, "< 5 s", src),
        ]  # fmt: skip
    idle = d.get("idle") or {}
    what = f"idle writes over {num(idle.get('seconds'), '.0f')} s"
    value = f"{idle.get('writes')} (=> {num(idle.get('writes_per_hour'), '.0f')} per hour)"
    rows.append(Row("publish", what, value, "0", src))
    return rows


def placement_rows(d: Figures | None) -> list[Row]:
    src = "hack/bench/placement.py"
    results = _get(d, "results") or []
    if len(results) < 2:
        return [Row("placement", "placement study", "not run", source=src)]

    def both(fmt: Callable[[Mapping[str, Any]], str]) -> str:
        return " / ".join(f"{'ABC'[i]} {fmt(r)}" for i, r in enumerate(results[:3]))

    def share(key: str) -> Callable[[Mapping[str, Any]], str]:
        return lambda r: "n/a" if r.get(key) is None else f"{100 * r[key]:.0f} %"

    def count(key: str) -> Callable[[Mapping[str, Any]], str]:
        return lambda r: str(r.get(key))

    def latency(r: Mapping[str, Any]) -> str:
        return p50_p99(r.get("bound_p50_ms"), r.get("bound_p99_ms"), ".0f")

    return [
        Row(
            "placement",
            "jobs placed (A count-only / B aligned / C best locality)",
            both(count("jobs_placed")),
            "",
            src,
        ),
        Row("placement", "accelerators allocated", both(count("accelerators_placed")), "", src),
        Row("placement", "accelerator-NIC pairs on one PCIe switch", both(share("aligned_switch")), "", src),
        Row(
            "placement", "accelerator-NIC pairs crossing sockets", both(count("pairs_cross_socket")), "", src
        ),
        Row("placement", "pod create -> nodeName set, p50 / p99", both(latency), "", src),
    ]


def peer_rows(d: Figures | None) -> list[Row]:
    """topodra against its Go peers (hack/bench-peer): ratio topodra / peer per row."""
    from hack.bench import versus

    return [Row("vs Go peer", r.figure, r.value, r.target, versus.SOURCE) for r in versus.lines(d)]


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| area | figure | value | target | from |", "|---|---|---|---|---|"]
    for r in rows:
        value = r.value.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r.area} | {r.figure} | {value} | {r.target} | `{r.source}` |")
    return "\n".join(lines)
