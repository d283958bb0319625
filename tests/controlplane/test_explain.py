"""`topodra explain` against the real kube-scheduler's verdicts on the placement study's claims.

Each claim (count-only A, strict B, best-locality C; 1 to 8 accelerators) is explained by the
real command (`topodra explain --claim NS/NAME --node N -o json`, reading slices, classes and
other claims from the API server) while its pod is pending, then the scheduler decides. Where
the scheduler allocates, explain must have found a fit (and for C the same fallback level);
where it reports no room, explain must say it does not fit and name what blocks it: a constraint
when the devices are there but cannot be lined up, a request when devices are short. Allocated
claims are explained again and every accelerator's pair level must match its devices.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from topodra.common.synth import build, load_spec, load_spec_text

from hack.bench.workload import ALIGNED, BEST, COUNT_ONLY, Job, claim_body
from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane, api_resource
from tests.controlplane.test_fallback import LEVELS_MACHINE, Node, namespace, submit  # noqa: F401

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]


def explain(cp: ControlPlane, ns: str, claim: str, node: str) -> tuple[int, dict[str, Any]]:
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "explain", "--claim", f"{ns}/{claim}"]
    argv += ["--node", node, "--kubeconfig", str(cp.kubeconfig), "-o", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


def spec_of(job: Job, scenario: str) -> dict[str, Any]:
    spec: dict[str, Any] = claim_body(job, scenario)["spec"]
    return spec


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    levels = tmp_path_factory.mktemp("levels")
    build(load_spec_text(json.dumps(LEVELS_MACHINE)), levels)
    out["levels"] = levels
    hgx = tmp_path_factory.mktemp("hgx")
    build(load_spec("2s-8acc-8nic"), hgx)
    out["hgx"] = hgx
    return out


# (scenario, accelerators, what the scheduler should say: True allocates, False no room)
LEVELS_SEQUENCE = (
    (ALIGNED, 1, True),  # the switch pair
    (ALIGNED, 1, False),  # devices free, none on one switch: the switch constraint blocks
    (BEST, 1, True),  # falls back to the root pair
    (COUNT_ONLY, 2, True),
    (BEST, 2, False),  # one accelerator left: a request is short
    (COUNT_ONLY, 1, True),
    (COUNT_ONLY, 1, False),
)
HGX_SEQUENCE = (
    (BEST, 4, True),
    (ALIGNED, 2, True),
    (BEST, 4, False),
    (BEST, 2, True),
    (ALIGNED, 1, False),
    (BEST, 8, False),
)


@pytest.mark.parametrize(("machine", "sequence"), [("levels", LEVELS_SEQUENCE), ("hgx", HGX_SEQUENCE)])
def test_explain_agrees_with_the_scheduler(
    control_plane: ControlPlane,
    namespace: str,  # noqa: F811
    roots: dict[str, Path],
    machine: str,
    sequence: tuple[tuple[str, int, bool], ...],
) -> None:
    node = Node(control_plane, roots[machine], f"explain-{machine}")
    claims = api_resource(control_plane.dynamic, "ResourceClaim")
    for i, (scenario, k, fits) in enumerate(sequence):
        name = f"{node.name}-{i}"
        # explained first (no pod yet: nothing can change under it), then given to the scheduler
        claims.create(
            namespace=namespace, body={"metadata": {"name": name}, "spec": spec_of(Job(i, k), scenario)}
        )
        code, before = explain(control_plane, namespace, name, node.name)
        claims.delete(namespace=namespace, name=name)
        results = submit(control_plane, namespace, node, name, spec_of(Job(i, k), scenario))
        assert (results is not None) == fits, f"{name}: the scheduler's verdict changed"
        assert before["fits"] is fits and code == (0 if fits else 1), (name, before)
        if not fits:
            assert before["blocking"], name
            said = " ".join(before["blocking"])
            if scenario == ALIGNED and (machine, i) == ("levels", 1):
                assert "constraint #0" in said and "pcieSwitch" in said, said
            else:
                assert "not enough devices" in said, said
            continue
        assert results is not None
        if scenario == BEST:  # explain's search took the fallback levels the scheduler took
            recorded = sorted(r["request"] for r in results if r["driver"] != "cpu.topodra.io")
            predicted = sorted(r["request"] for r in before["would_get"] if r["driver"] != "cpu.topodra.io")
            assert recorded == predicted, name
        code, after = explain(control_plane, namespace, name, node.name)
        assert code == 0 and after["allocated"] is True
        assert len(after["pairs"]) == k
        for p in after["pairs"]:
            acc = next(r for r in results if r["device"] == p["accelerator"])
            nic = next(r for r in results if r["device"] == p["nic"]) if p["nic"] else None
            assert nic is not None
            want = "none"
            for level, key in (
                ("switch", "topology.topodra.io/pcieSwitch"),
                ("root", "resource.kubernetes.io/pcieRoot"),
                ("numa", "resource.kubernetes.io/numaNode"),
                ("socket", "topology.topodra.io/socket"),
            ):
                a = node.attr(acc, key)
                if a is not None and a == node.attr(nic, key):
                    want = level
                    break
            assert p["level"] == want, (name, p)


def test_a_pending_claim_without_node_names_the_nodes(
    control_plane: ControlPlane,
    namespace: str,  # noqa: F811
    roots: dict[str, Path],
) -> None:
    """The README's `topodra explain --claim NS/NAME` on a claim no pod got yet: with several
    nodes publishing slices, one line names them and asks for --node, instead of a refusal that
    does not say which nodes there are; with --node it is explained there."""
    node = Node(control_plane, roots["levels"], "explain-pending")
    Node(control_plane, roots["levels"], "explain-pending")  # two nodes at least, whatever ran before
    claims = api_resource(control_plane.dynamic, "ResourceClaim")
    claims.create(
        namespace=namespace, body={"metadata": {"name": "pending"}, "spec": spec_of(Job(0, 1), BEST)}
    )
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "explain", "--claim", f"{namespace}/pending"]
    argv += ["--kubeconfig", str(control_plane.kubeconfig)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert "name the node to explain it on with --node (" in line, line
    assert node.name in line or "more)" in line, line
    done = subprocess.run(
        [*argv, "--node", node.name, "-o", "json"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["node"] == node.name
