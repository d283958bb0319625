"""The benchmark table reads what the scripts write with --json.

Two scripts are cheap enough to run here for real (so a renamed key fails this test); the others
need the control plane for minutes, so their shape is written out as they print it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hack.bench import table
from hack.bench.report import repeat_table
from tests.conftest import FIXTURES, REPO, skip_or_fail


def run_json(tmp_path: Path, *argv: str) -> Any:
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, *argv, "--json", str(out)], cwd=REPO, check=True, capture_output=True)
    return json.loads(out.read_text())


def test_claims_rows_from_a_real_run(tmp_path: Path) -> None:
    figures = run_json(tmp_path, "hack/bench_claims.py", "-n", "30")
    rows = table.claims_rows(figures, None)
    values = {r.figure: r.value for r in rows}
    mem = next(v for k, v in values.items() if "from memory: p50" in k)
    assert mem.endswith(" ms") and "n/a" not in mem
    assert any(r.value == "not run" and "kube-apiserver" in r.figure for r in rows)
    rate = next(r.value for r in rows if "concurrent" in r.figure and "memory" in r.figure)
    assert rate.endswith("claims/s") and float(rate.split()[0]) > 0


def test_discovery_rows_from_a_real_run(tmp_path: Path) -> None:
    if not (FIXTURES / "hwloc--2amd64-2n.tar.xz").is_file():
        skip_or_fail(f"no captured trees in {FIXTURES}")
    figures = run_json(tmp_path, "hack/bench-discovery", "--runs", "1", "hwloc--2amd64-2n")
    rows = table.discovery_rows(figures)
    assert "over 1 trees" in rows[0].figure
    ratio = rows[0].value
    assert ratio.endswith("x") and float(ratio[:-1]) > 0
    assert rows[3].value.endswith("of 1")


def test_missing_steps_say_not_run() -> None:
    for rows in (
        table.discovery_rows(None),
        table.prepare_rows(None),
        table.publish_rows(None),
        table.placement_rows(None),
        table.claims_rows(None, None),
    ):
        assert rows and all(r.value == "not run" for r in rows)


PREPARE = {
    "claims": 500,
    "plane_only": {"latency": {"p50_ms": 0.5, "p99_ms": 3.9}, "claims_per_s": 1900.0},
    "without_get": {
        "client": "go",
        "latency": {"p50_ms": 2.0, "p99_ms": 4.0},
        "claims_per_s": 600.0,
        "rss_mib_one_driver": 52.3,
    },
    "rss_mib_three_drivers": 59.1,
    "with_get": {
        "latency": {"p50_ms": 3.0, "p99_ms": 9.0},
        "claims_per_s": 510.0,
        "cpu_ms_per_claim": {"plugin": 1.5, "kube-apiserver": 2.25, "etcd": 0.7},
    },
    "rss_serve_in_cluster": {
        "cpu": "41.0 MiB",
        "accelerator": "not available: boom",
        "nic": "40.5 MiB",
        "all": "60.2 MiB",
    },
    "rss_serve": {"cpu": "48.0 MiB"},
}


def test_prepare_rows() -> None:
    rows = {r.figure: r for r in table.prepare_rows(PREPARE)}
    p = rows["NodePrepareResources over gRPC, claims from memory (no GET), go kubelet client: p50 / p99"]
    assert (p.value, p.target) == ("2.00 / 4.00 ms", "p99 <= 5 ms")
    assert "NodePrepareResources over gRPC, gRPC plane only: p50 / p99" in rows  # no client named
    cpu = rows["CPU per prepare + unprepare, GET from a real kube-apiserver"]
    assert cpu.value == "plugin 1.50 / kube-apiserver 2.25 / etcd 0.70 ms"
    serve = [r for r in rows.values() if r.figure.startswith("`topodra serve")]
    in_cluster = [(r.value, r.target) for r in serve if r.figure.endswith("in-cluster")]
    assert in_cluster == [
        ("41.0 MiB", "<= 60 MiB"),
        ("not available: boom", "<= 60 MiB"),
        ("40.5 MiB", "<= 60 MiB"),
        ("60.2 MiB", "<= 80 MiB"),
    ]
    kubeconfig = [(r.value, r.target) for r in serve if r.figure.endswith("--kubeconfig")]
    assert kubeconfig == [("48.0 MiB", ""), ("not run", ""), ("not run", ""), ("not run", "")]
    assert rows["three bench drivers in one process"].value == "59.1 MiB"


def test_publish_rows() -> None:
    d = {
        "256-CPU node": {
            "slices": 2,
            "start_s": [1.2, 1.4, 1.3],
            "start_writes": [2, 2, 2],
            "adopt_writes": 0,
            "repair_s": 1.35,
        },
        "idle": {"seconds": 30.0, "writes": 0, "writes_per_hour": 0.0, "unchanged": True},
    }
    rows = table.publish_rows(d)
    values = [r.value for r in rows]
    assert values == ["1300 ms", "2 / 0", "1350 ms", "0 (=> 0 per hour)"]
    assert [r.area for r in rows] == ["publish", "publish", "repair", "publish"]


def _result(scenario: str, placed: int, switch: float, bound: list[float]) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "jobs_placed": placed,
        "accelerators_placed": 2 * placed,
        "aligned_switch": switch,
        "pairs_cross_socket": 3,
        "stranded_accelerators_aligned": 4,
        "bound_p50_ms": 40.0,
        "bound_p99_ms": 90.0,
        "latency_s": {"bound": bound},
    }


def test_placement_rows_and_repeat_table() -> None:
    a = _result("count-only", 52, 0.49, [0.01, 0.02])
    b = _result("aligned", 50, 1.0, [0.03])
    rows = table.placement_rows({"results": [a, b]})
    assert rows[0].value == "A 52 / B 50"
    assert rows[2].value == "A 49 % / B 100 %"
    text = repeat_table([{"seed": 7, "jobs": 74, "results": [a, b]}])
    assert "| 7 | 74 | 52 / 50 | 104 / 100 | 49 % / 100 % | 3 / 3 | 4 / 4 |" in text
    assert "count-only p50 10 ms, p99 20 ms (n=2)" in text and "aligned p50 30 ms" in text


@pytest.mark.parametrize(("raw", "shown"), [(12.345, "12.3 MiB"), ("45 MiB", "45.0 MiB"), (None, "n/a")])
def test_mib(raw: Any, shown: str) -> None:
    assert table.mib(raw) == shown


def test_markdown_escapes_pipes() -> None:
    text = table.markdown([table.Row("a", "b", "x | y", "t", "s")])
    assert "x \\| y" in text and text.count("\n") == 2


def test_placement_table_separates_machine_types() -> None:
    from hack.bench.report import table as placement_table

    r = _result("count-only", 1, 0.5, [])
    r.update(
        {
            "jobs": 2,
            "placed_by_size": {"1": 1, "2": 0, "4": 0, "8": 0},
            "wanted_by_size": {"1": 1, "2": 1, "4": 0, "8": 0},
            "jobs_submitted": 2,
            "accelerators_total": 24,
            "pairs": 1,
            "aligned_root": 0.5,
            "aligned_numa": 0.5,
            "aligned_socket": 1.0,
            "accelerators_cpu_remote": 0,
            "free_accelerators": 22,
            "free_nics": 20,
            "stranded_nics_aligned": 1,
            "stranded_accelerators_count": 0,
            "stranded_nics_count": 0,
            "allocated_p50_ms": 1.0,
            "allocated_p99_ms": 2.0,
            "unschedulable_p50_ms": None,
            "unschedulable_p99_ms": None,
            "bound_ms_by_size": {"1": {"p50": 12.0, "max": 15.0}, "2": {"p50": None, "max": None}},
            "accelerators_by_machine": {
                "synth:2s-8acc-8nic": [1, 8],
                "synth:2s-8acc-8nic-snc2": [0, 8],
                "captured:hwloc--x": [1, 8],
            },
            "model": {"cross_socket_bytes_per_step": 0.0, "kwh_per_day": 0.0},
        }
    )
    text = placement_table([r], ["A"])
    assert "| ... on the synthetic 2s-8acc-8nic nodes | 1 of 8 |" in text
    assert "| ... on the synthetic SNC-2 variant | 0 of 8 |" in text
    assert "| ... on the captured 8-accelerator machine | 1 of 8 |" in text
    assert "| nodeName p50 by job size 1 / 2 / 4 / 8 | 12 / - / - / - ms |" in text
