"""The placement study as a markdown table (pure: figures in, text out)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hack.bench.metrics import CostModel, percentile

Row = tuple[str, Callable[[Mapping[str, Any]], str]]


def pct(v: Any) -> str:
    return "n/a" if v is None else f"{100 * float(v):.0f} %"


def ms(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.0f} ms"


def _sizes(r: Mapping[str, Any]) -> str:
    placed, wanted = r["placed_by_size"], r["wanted_by_size"]
    return " / ".join(f"{placed[k]}/{wanted[k]}" for k in ("1", "2", "4", "8"))


def _machine(r: Mapping[str, Any], kind: str) -> str:
    """Allocated of total accelerators on one machine type; a kind ending in ':' means any of that source."""
    by = r.get("accelerators_by_machine", {})
    cells = [v for k, v in by.items() if (k.startswith(kind) if kind.endswith(":") else k == kind)]
    if not cells:
        return "n/a"
    return f"{sum(c[0] for c in cells)} of {sum(c[1] for c in cells)}"


def _levels(r: Mapping[str, Any]) -> str:
    got = r.get("pair_levels") or {}
    return " / ".join(str(got.get(k, 0)) for k in ("switch", "root", "NUMA", "socket", "cross-socket"))


def _claim_levels(r: Mapping[str, Any]) -> str:
    got = r.get("claim_levels") or {}
    return ", ".join(f"{k} {v}" for k, v in sorted(got.items(), key=lambda kv: -kv[1])) or "-"


def _size_latency(r: Mapping[str, Any], key: str) -> str:
    by = r.get("bound_ms_by_size", {})
    return (
        " / ".join(
            "-" if by.get(k, {}).get(key) is None else f"{by[k][key]:.0f}" for k in ("1", "2", "4", "8")
        )
        + " ms"
    )


ROWS: Sequence[Row] = (
    ("jobs placed (of jobs in the mix)", lambda r: f"{r['jobs_placed']} of {r['jobs']}"),
    ("placed by size 1 / 2 / 4 / 8 accelerators", _sizes),
    ("jobs submitted to the cluster", lambda r: str(r["jobs_submitted"])),
    ("accelerators allocated", lambda r: f"{r['accelerators_placed']} of {r['accelerators_total']}"),
    ("... on the synthetic 2s-8acc-8nic nodes", lambda r: _machine(r, "synth:2s-8acc-8nic")),
    ("... on the synthetic SNC-2 variant", lambda r: _machine(r, "synth:2s-8acc-8nic-snc2")),
    ("... on the captured 8-accelerator machine", lambda r: _machine(r, "captured:")),
    ("accelerator-NIC pairs (best pairing per job)", lambda r: str(r["pairs"])),
    ("pairs on one PCIe switch", lambda r: pct(r["aligned_switch"])),
    ("pairs on one root complex", lambda r: pct(r["aligned_root"])),
    ("pairs + job CPUs on one NUMA node", lambda r: pct(r["aligned_numa"])),
    ("pairs + job CPUs on one socket", lambda r: pct(r["aligned_socket"])),
    ("accelerator-NIC pairs crossing sockets", lambda r: str(r["pairs_cross_socket"])),
    (
        "... of them where the node had free same-socket pairs",
        lambda r: str(r.get("avoidable_cross_socket", "n/a")),
    ),
    ("pairs by level: switch / root / NUMA / socket / cross", lambda r: _levels(r)),
    ("fallback level the claims recorded (per accelerator)", lambda r: _claim_levels(r)),
    ("accelerators with no job CPU on their socket", lambda r: str(r["accelerators_cpu_remote"])),
    ("free accelerators / NICs at the end", lambda r: f"{r['free_accelerators']} / {r['free_nics']}"),
    (
        "stranded accelerators / NICs (aligned jobs)",
        lambda r: f"{r['stranded_accelerators_aligned']} / {r['stranded_nics_aligned']}",
    ),
    (
        "stranded accelerators / NICs (count-only jobs)",
        lambda r: f"{r['stranded_accelerators_count']} / {r['stranded_nics_count']}",
    ),
    ("pod create -> nodeName set, p50 / p99", lambda r: f"{ms(r['bound_p50_ms'])} / {ms(r['bound_p99_ms'])}"),
    ("nodeName p50 by job size 1 / 2 / 4 / 8", lambda r: _size_latency(r, "p50")),
    ("nodeName slowest by job size 1 / 2 / 4 / 8", lambda r: _size_latency(r, "max")),
    (
        "pod create -> claim allocated, p50 / p99",
        lambda r: f"{ms(r['allocated_p50_ms'])} / {ms(r['allocated_p99_ms'])}",
    ),
    (
        "pod create -> 'no room' verdict, p50 / p99",
        lambda r: f"{ms(r['unschedulable_p50_ms'])} / {ms(r['unschedulable_p99_ms'])}",
    ),
    ("jobs the allocator timed out on", lambda r: str(len(r.get("allocator_timeouts", [])))),
    (
        "MODEL: bytes/step over the socket link",
        lambda r: f"{r['model']['cross_socket_bytes_per_step'] / 2**30:.0f} GiB",
    ),
    ("MODEL: energy on the socket link per day", lambda r: f"{r['model']['kwh_per_day']:.2f} kWh"),
)


def table(results: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> str:
    head = "| | " + " | ".join(labels) + " |"
    sep = "|---|" + "---|" * len(labels)
    lines = [head, sep]
    for title, fmt in ROWS:
        lines.append(f"| {title} | " + " | ".join(fmt(r) for r in results) + " |")
    return "\n".join(lines)


def model_text(model: CostModel) -> str:
    return (
        "MODEL (assumptions, not measurements): each accelerator exchanges "
        f"{model.bytes_per_step / 2**30:.1f} GiB per training step with its NIC (about a ring "
        "all-reduce of 1 GiB of gradients); when the two sit on different sockets all of it crosses "
        f"the socket interconnect at {model.joules_per_byte / 8 * 1e12:.0f} pJ/bit; "
        f"{model.steps_per_second:g} step/s, 24 h a day. Only the interconnect's own energy is "
        "counted: not the lost bandwidth, the longer steps, nor traffic that stays in a socket but "
        "leaves its switch."
    )


def repeat_table(repeats: Sequence[Mapping[str, Any]]) -> str:
    """One row per seed, the scenarios side by side in each cell, then latency pooled over every seed."""
    arms = " / ".join("ABCDEFG"[i] for i in range(len(repeats[0]["results"]))) if repeats else "A / B"
    head = (
        f"| seed | jobs | placed {arms} | accelerators {arms} | pairs on one switch {arms} "
        f"| pairs crossing sockets {arms} | stranded accelerators {arms} "
        f"| nodeName p50 / p99 {arms.replace(' /', ';')} |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    pooled: dict[str, list[float]] = {}

    def ab(rs: Sequence[Mapping[str, Any]], fmt: Callable[[Mapping[str, Any]], str]) -> str:
        return " / ".join(fmt(r) for r in rs)

    for rep in repeats:
        rs = rep["results"]
        for r in rs:
            pooled.setdefault(r["scenario"], []).extend(r.get("latency_s", {}).get("bound", []))
        lat = "; ".join(f"{ms(r['bound_p50_ms'])} / {ms(r['bound_p99_ms'])}" for r in rs)
        cells = [
            str(rep["seed"]),
            str(rep["jobs"]),
            ab(rs, lambda r: str(r["jobs_placed"])),
            ab(rs, lambda r: str(r["accelerators_placed"])),
            ab(rs, lambda r: pct(r["aligned_switch"])),
            ab(rs, lambda r: str(r["pairs_cross_socket"])),
            ab(rs, lambda r: str(r["stranded_accelerators_aligned"])),
            lat,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    parts = []
    for scenario, samples in pooled.items():
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        p50_ms = None if p50 is None else p50 * 1000
        p99_ms = None if p99 is None else p99 * 1000
        parts.append(f"{scenario} p50 {ms(p50_ms)}, p99 {ms(p99_ms)} (n={len(samples)})")
    lines += ["", "Pod create -> nodeName set, pooled over every seed: " + "; ".join(parts) + "."]
    return "\n".join(lines)
