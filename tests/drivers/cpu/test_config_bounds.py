"""A tenant's CPU list costs the CPU driver what the node's CPUs cost, not what its text says.

`cpus: "0-1048576"` is nine characters of a claim's opaque config and, expanded, a million
CPUs. Each case runs the real CpuDriver.prepare in a child process (so a regression costs that
child, not the test run) under an address-space limit, with tracemalloc measuring what the
prepare call allocated at its peak. The bound (2 MiB) is far above what refusing a 4096-character
string costs and far below what expanding one million-CPU range costs (about 60 MiB traced);
the child also reports the error, which must name the claim and the field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import FixtureTrees
from tests.drivers.cpu.kit import hook_dir

TREE = "hwloc--32intel64-2p8co2t+8ve"  # CPUs 0-31
PEAK_BOUND = 2 << 20

_CHILD = textwrap.dedent(
    """
    import json, resource, sys, tracemalloc
    from pathlib import Path
    from topodra.common.runtime.driver import ClaimRef, PrepareError
    from topodra.common.topology import discover
    from topodra.drivers.cpu.driver import CpuDriver
    from topodra.drivers.cpu.options import CpuOptions
    from tests.drivers.cpu.kit import Result, cpu_config

    root, hooks, cpus = sys.argv[1], sys.argv[2], sys.argv[3]
    driver = CpuDriver(discover(root), CpuOptions(hook_dir=Path(hooks)), Path(root))
    # room for the refusal, none for a million-CPU set per range
    with open("/proc/self/status") as f:
        vm = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + (768 << 20), vm + (768 << 20)))
    claim = ClaimRef("tenant", "greedy", "3f1c2a5e-0000-4000-8000-000000000001")
    tracemalloc.start()
    try:
        driver.prepare(claim, [Result("numa-0", 2).allocated()], [cpu_config(cpus=cpus)])
        error = None
    except PrepareError as e:
        error = str(e)
    except MemoryError:
        error = "MemoryError"
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(json.dumps({"error": error, "peak": peak, "held": sorted(driver.holdings())}))
    """
)


def _ranges_of(width: int, length: int) -> str:
    """Disjoint ranges of `width` CPUs each, as many as fit in `length` characters."""
    parts: list[str] = []
    start = 0
    while True:
        part = f"{start}-{start + width - 1}"
        if len(",".join([*parts, part])) > length:
            return ",".join(parts)
        parts.append(part)
        start += width


def _prepare_in_child(root: Path, hooks: Path, cpus: str) -> dict[str, object]:
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(hooks), cpus],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=repo,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("cpus", "what"),
    [
        pytest.param(text, what, id=what.replace(" ", "-"))
        for text, what in [
            ("0-1048576", "one range past the node's CPUs"),
            (_ranges_of(1 << 20, 4096), "4096 characters of million-CPU ranges"),
            (",".join(["0-31"] * 819), "4096 characters naming all 32 CPUs 819 times"),
            ("31-1048576", "a range that starts on the node"),
            ("0,4294967296", "a CPU number past 32 bits"),
        ]
    ],
)
def test_hostile_cpu_lists_are_refused_before_they_cost_memory(
    fixture_trees: FixtureTrees, tmp_path: Path, cpus: str, what: str
) -> None:
    assert len(cpus) <= 4096, what  # the config field's own length limit lets all of these in
    out = _prepare_in_child(fixture_trees.root(TREE), hook_dir(tmp_path), cpus)
    error = str(out["error"])
    peak = int(str(out["peak"]))
    assert peak < PEAK_BOUND, f"{what}: prepare allocated {peak / 2**20:.1f} MiB at its peak ({error[:80]})"
    assert error.startswith("claim tenant/greedy: config FromClaim #0, field 'cpus': "), (what, error)
    assert "of CPUs 0-31 of this node" in error, (what, error)
    assert len(error) < 400, (what, len(error))  # the list is quoted only in part
    assert out["held"] == [], what


def test_a_list_within_the_node_still_works(fixture_trees: FixtureTrees, tmp_path: Path) -> None:
    out = _prepare_in_child(fixture_trees.root(TREE), hook_dir(tmp_path), "5,21")
    assert out["error"] is None
    assert len(list(out["held"])) == 1  # type: ignore[call-overload]
    assert int(str(out["peak"])) < PEAK_BOUND
