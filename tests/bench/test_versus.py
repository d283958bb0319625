"""hack/bench-peer's table: medians of repeats, ratios topodra / peer, goals, the inspect summary.

The runner needs the control plane and Go for minutes, so its figures are built here the way it
builds them (the same functions over per-repeat samples), not run.
"""

from __future__ import annotations

from typing import Any

import pytest

from hack.bench import table, versus


def samples(ours: list[float], theirs: list[float], load: float = 2.0) -> dict[str, list[float]]:
    return {"topodra": ours, "peer": theirs, "load": [load] * (len(ours) + len(theirs))}


def comparison() -> dict[str, Any]:
    raw = {
        "p50_ms": samples([2.0, 9.0, 2.2], [2.0, 1.0, 2.0]),  # a noisy repeat does not move the median
        "cpu_ms": samples([1.0, 1.2, 1.1], [1.5, 1.4, 1.6], load=3.0),
        "rate_64": samples([300, 310, 290], [250, 260, 240]),
        "rss_mib": samples([40.0], [42.0]),
    }
    return {
        "measures": {k: versus.summarize(v) for k, v in raw.items()},
        "skipped": {"rate_64_held": "the machine has 128 core devices"},
    }


def test_summarize_takes_medians_and_divides_topodra_by_the_peer() -> None:
    s = versus.summarize(samples([2.0, 9.0, 2.2], [2.0, 1.0, 2.0], load=1.5))
    assert (s["topodra"], s["peer"], s["ratio"], s["load"], s["repeats"]) == (
        2.2,
        2.0,
        pytest.approx(1.1),
        1.5,
        3,
    )
    assert versus.summarize({"topodra": [1.0], "peer": []})["ratio"] is None


def test_rows_say_the_ratio_both_figures_the_load_and_a_missed_goal() -> None:
    rows = {r.figure: r for r in versus.comparison_lines("bench driver", comparison())}
    p50 = rows["bench driver: NodePrepareResources p50, one call at a time"]
    assert p50.value == "1.10x (2.20 vs 2.00 ms; load 2.00) not met" and p50.target == "<= 1.0x"
    cpu = rows["bench driver: plugin CPU per prepare+unprepare"]
    assert cpu.value == "0.73x (1.10 vs 1.50 ms; load 3.00)"  # met: no remark
    rate = rows["bench driver: throughput, 64 in flight, from nothing held"]
    assert rate.value == "1.20x (300 vs 250 claims/s; load 2.00) not met" and rate.target == ">= 1.5x"
    held = rows["bench driver: throughput, 64 in flight, 1000 claims held"]
    assert held.value == "n/a: the machine has 128 core devices"
    assert "bench driver: NodePrepareResources p99, one call at a time" not in rows  # not measured: no row
    assert [r.value for r in versus.comparison_lines("x", None)] == ["not run"]
    figures = {"hold": 300, "comparisons": {"bench": comparison()}}
    assert "bench driver: throughput, 64 in flight, 300 claims held" in {
        r.figure for r in versus.lines(figures)
    }
    assert versus.verdict(1.5, ">= 1.5x") == "met" and versus.verdict(1.01, "<= 1.0x") == "not met"
    # a miss that two digits would round onto the goal shows a third
    near = versus.summarize(samples([1562.0], [1043.0]))
    rate_m = next(m for m in versus.MEASURES if m.key == "rate_64")
    assert versus._value(near, rate_m) == "1.498x (1562 vs 1043 claims/s; load 2.00) not met"


def test_the_rounds_say_where_the_cpu_went_and_the_rate_a_free_plugin_could_reach() -> None:
    c = comparison()
    raw = {
        "rounds_cpu_plugin": samples([1.0, 1.1, 0.9], [2.0, 2.1, 1.9]),
        "rounds_cpu_kube-apiserver": samples([1.5, 1.6, 1.4], [1.5, 1.5, 1.5]),
        "rounds_cpu_etcd": samples([0.5, 0.4, 0.6], [0.5, 0.5, 0.5]),
    }
    c["measures"] |= {k: versus.summarize(v) for k, v in raw.items()}
    rows = {r.figure: r for r in versus.comparison_lines("bench driver", c, cpus=2)}
    api = rows["bench driver: CPU per claim in the 64-in-flight rounds from nothing held, kube-apiserver"]
    assert api.value == "1.50 ms in topodra's rounds, 1.50 ms in the peer's; load 2.00" and api.target == ""
    # no client figure taken: no row for it
    assert not any(f.endswith("the kubelet client (Go)") for f in rows)
    # 2 cores / (1.5 + 0.5) ms of the API server and etcd per claim = 1000 claims/s, the peer 250
    (ceiling,) = [r for f, r in rows.items() if "if topodra's plugin cost nothing" in f]
    assert ceiling.value == "4.00x (1000 vs 250 claims/s)" and ceiling.target == ">= 1.5x"
    # without the core count (an old figures file) there is no bound, and no made-up one
    assert not any("cost nothing" in r.figure for r in versus.comparison_lines("bench driver", c))
    figures = {"cpus": 2, "comparisons": {"bench": c}}
    assert any("cost nothing" in r.figure for r in versus.lines(figures))


def test_ghw_is_compared_only_on_trees_it_read_and_lstopo_on_all() -> None:
    rows = [
        {"tree": "a", "ghw_errors": {}, "topodra_wall": 0.04, "ghw_wall": 0.05, "lstopo_wall": 0.01,
         "topodra_cpu": 0.03, "ghw_cpu": 0.03, "lstopo_cpu": 0.01},
        {"tree": "b", "ghw_errors": {"topology": "no /proc/cpuinfo"}, "topodra_wall": 0.04, "ghw_wall": 0.001,
         "lstopo_wall": 0.02, "topodra_cpu": 0.03, "ghw_cpu": 0.001, "lstopo_cpu": 0.01},
    ]  # fmt: skip
    got = versus.inspect_summary(rows)
    assert got["ghw"]["trees"] == 1 and got["ghw"]["gmean_wall"] == pytest.approx(0.8)
    assert got["ghw"]["within_wall"] == 1
    assert got["lstopo"]["trees"] == 2 and got["lstopo"]["gmean_wall"] == pytest.approx((4 * 2) ** 0.5)
    assert got["lstopo"]["worst"] == {"tree": "a", "ratio": pytest.approx(4.0)}
    assert got["lstopo"]["within_wall"] == 1
    lines = versus.inspect_lines({"trees": rows, "load": 1.25, **got})
    assert lines[0].value.startswith("0.80x wall, 1.00x CPU (geometric mean of 1 trees; 1 of 1 within")
    assert lines[1].value.endswith("worst 4.00x on a; load 1.25)") and lines[1].target == "<= 2x"
    assert versus.inspect_summary(rows, have_lstopo=False)["lstopo"]["why"].startswith("lstopo-no-graphics")


def test_the_benchmark_table_carries_the_peer_rows() -> None:
    figures = {"comparisons": {"bench": comparison()}}
    rows = table.peer_rows(figures)
    assert {r.area for r in rows} == {"vs Go peer"} and {r.source for r in rows} == {"hack/bench-peer"}
    assert any(r.value.startswith("0.73x") for r in rows)
    assert "| vs Go peer |" in table.markdown(rows)
    assert [r.value for r in table.peer_rows(None)] == ["not run"]


def test_ghw_apart_on_trees_where_it_found_cores_and_the_interpreter_floor() -> None:
    rows = [
        {"tree": "a", "ghw_errors": {}, "ghw_cores": 8, "topodra_wall": 0.04, "ghw_wall": 0.02,
         "lstopo_wall": 0.01, "python_wall": 0.015, "topodra_cpu": 0.04, "ghw_cpu": 0.02,
         "lstopo_cpu": 0.01, "python_cpu": 0.015},
        {"tree": "b", "ghw_errors": {}, "ghw_cores": 0, "topodra_wall": 0.05, "ghw_wall": 0.005,
         "lstopo_wall": 0.005, "python_wall": 0.015, "topodra_cpu": 0.05, "ghw_cpu": 0.005,
         "lstopo_cpu": 0.005, "python_cpu": 0.015},
    ]  # fmt: skip
    got = versus.inspect_summary(rows)
    assert got["ghw"]["trees"] == 2 and got["ghw"]["gmean_wall"] == pytest.approx((2 * 10) ** 0.5)
    assert got["ghw"]["described"]["trees"] == 1
    assert got["ghw"]["described"]["gmean_wall"] == pytest.approx(2.0)
    assert got["ghw"]["floor"]["gmean_wall"] == pytest.approx((0.75 * 3) ** 0.5)
    assert got["lstopo"]["floor"]["gmean_cpu"] == pytest.approx((1.5 * 3) ** 0.5)
    assert "described" not in got["lstopo"]
    figures = [line.figure for line in versus.inspect_lines({"trees": rows, "load": 2.0, **got})]
    assert figures == [
        "`topodra inspect` whole process / ghw (Go)",
        "`topodra inspect` whole process / ghw (Go), trees where ghw found CPU cores",
        "bare interpreter start (`python -c pass`) / ghw (Go)",
        "`topodra inspect` whole process / lstopo",
        "bare interpreter start (`python -c pass`) / lstopo",
    ]
    none = [dict(r, ghw_cores=0) for r in rows]
    assert versus.inspect_summary(none)["ghw"]["described"]["why"].startswith("ghw found CPU cores in none")


def test_the_floor_of_lstopos_own_reads_is_a_row_against_lstopo_only() -> None:
    rows = [
        {"tree": "a", "ghw_errors": {}, "topodra_wall": 0.04, "ghw_wall": 0.02, "lstopo_wall": 0.01,
         "python_wall": 0.015, "reads_wall": 0.025, "topodra_cpu": 0.04, "ghw_cpu": 0.02,
         "lstopo_cpu": 0.01, "python_cpu": 0.015, "reads_cpu": 0.02},
        {"tree": "b", "ghw_errors": {}, "topodra_wall": 0.05, "ghw_wall": 0.005, "lstopo_wall": 0.01,
         "python_wall": 0.015, "reads_wall": 0.016, "topodra_cpu": 0.05, "ghw_cpu": 0.005,
         "lstopo_cpu": 0.01, "python_cpu": 0.015, "reads_cpu": 0.016},
    ]  # fmt: skip
    got = versus.inspect_summary(rows)
    assert "reads_floor" not in got["ghw"]
    reads = got["lstopo"]["reads_floor"]
    assert reads["gmean_wall"] == pytest.approx((2.5 * 1.6) ** 0.5) and reads["within_wall"] == 1
    assert reads["gmean_cpu"] == pytest.approx((2.0 * 1.6) ** 0.5)
    (line,) = [x for x in versus.inspect_lines({"trees": rows, **got}) if "file reads" in x.figure]
    assert line.value.startswith("2.00x wall, 1.79x CPU (geometric mean over the same 2 trees, 1 within")
    assert line.target == "<= 2x"
    # a run without strace has no reads on some tree: no row rather than a partial mean
    del rows[1]["reads_wall"]
    assert "reads_floor" not in versus.inspect_summary(rows)["lstopo"]
