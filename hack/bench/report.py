"""The placement study as a markdown table (pure: figures in, text out)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hack.bench.metrics import CostModel

Row = tuple[str, Callable[[Mapping[str, Any]], str]]


def pct(v: Any) -> str:
    return "n/a" if v is None else f"{100 * float(v):.0f} %"


def ms(v: Any) -> str:
    return "n/a" if v is None else f"{float(v):.0f} ms"


def _sizes(r: Mapping[str, Any]) -> str:
    placed, wanted = r["placed_by_size"], r["wanted_by_size"]
    return " / ".join(f"{placed[k]}/{wanted[k]}" for k in ("1", "2", "4", "8"))


ROWS: Sequence[Row] = (
    ("jobs placed (of jobs in the mix)", lambda r: f"{r['jobs_placed']} of {r['jobs']}"),
    ("placed by size 1 / 2 / 4 / 8 accelerators", _sizes),
    ("jobs submitted to the cluster", lambda r: str(r["jobs_submitted"])),
    ("accelerators allocated", lambda r: f"{r['accelerators_placed']} of {r['accelerators_total']}"),
    ("accelerator-NIC pairs (best pairing per job)", lambda r: str(r["pairs"])),
    ("pairs on one PCIe switch", lambda r: pct(r["aligned_switch"])),
    ("pairs on one root complex", lambda r: pct(r["aligned_root"])),
    ("pairs + job CPUs on one NUMA node", lambda r: pct(r["aligned_numa"])),
    ("pairs + job CPUs on one socket", lambda r: pct(r["aligned_socket"])),
    ("accelerator-NIC pairs crossing sockets", lambda r: str(r["pairs_cross_socket"])),
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
    (
        "pod create -> claim allocated, p50 / p99",
        lambda r: f"{ms(r['allocated_p50_ms'])} / {ms(r['allocated_p99_ms'])}",
    ),
    (
        "pod create -> 'no room' verdict, p50 / p99",
        lambda r: f"{ms(r['unschedulable_p50_ms'])} / {ms(r['unschedulable_p99_ms'])}",
    ),
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
