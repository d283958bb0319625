"""common/explain without a cluster: selectors in the DRA CEL environment, the fit search and what
it blames, pair levels. Its agreement with the real scheduler is tests/controlplane/test_explain.py."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from topodra.common.check.attrs import Value
from topodra.common.explain import fit, levels
from topodra.common.explain.inventory import Device, InUse, amount, in_use, node_inventory
from topodra.common.explain.selectors import evaluate
from topodra.drivers.cli.main import main

from hack.bench import fallback
from tests.kit.kubeconfig import write_kubeconfig

ACC, NIC, CPU = "accelerator.topodra.io", "nic.topodra.io", "cpu.topodra.io"


def dev(driver: str, name: str, **attrs: Any) -> Device:
    values = {}
    for k, v in attrs.items():
        key = {
            "switch": "topology.topodra.io/pcieSwitch",
            "leaf": "topology.topodra.io/pcieLeafSwitch",
            "root": "resource.kubernetes.io/pcieRoot",
            "numa": "resource.kubernetes.io/numaNode",
            "socket": "topology.topodra.io/socket",
            "bus": "resource.kubernetes.io/pciBusID",
        }.get(k, k)
        kind = "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "string"
        values[key] = Value(kind, v)
    values["topology.topodra.io/kind"] = Value("string", driver.split(".")[0])
    return Device(driver, "node-a", name, values, {}, False)


GPU = dev(
    ACC, "gpu-0", switch="s0", root="r0", numa=0, socket=0, bus="0000:08:00.0", **{f"{ACC}/type": "gpu"}
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('device.driver == "accelerator.topodra.io"', True),
        ('device.attributes["accelerator.topodra.io"].type == "gpu"', True),
        ('device.attributes["resource.kubernetes.io"].numaNode == 0.0', True),  # int == double
        ('device.attributes["resource.kubernetes.io"].numaNode in [1, 2]', False),
        ('has(device.attributes["vendor.example.com"].model)', False),  # a missing domain is empty
        ('"pcieSwitch" in device.attributes["topology.topodra.io"]', True),
        ('device.attributes["resource.kubernetes.io"].pciBusID.matches("^0000:08")', True),
        ('device.attributes["accelerator.topodra.io"].type.upperAscii() == "GPU"', True),  # strings ext
        ("device.allowMultipleAllocations", False),
    ],
)
def test_selectors_evaluate_as_the_scheduler_does(expression: str, expected: bool) -> None:
    assert evaluate(expression, GPU).matches is expected


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ('device.capacity["cpu.topodra.io"].cpu.compareTo(quantity("4")) >= 0', "device.capacity"),
        ('quantity("1") == quantity("1")', "quantity"),
        ('semver("1.2.3").isGreaterThan(semver("1.0.0"))', "semver"),
        ('device.attributes["resource.kubernetes.io"].model == "x"', "runtime error"),
        ("1 +", "does not compile"),
        ('device.driver + "x"', "not bool"),
    ],
)
def test_what_cannot_be_evaluated_is_named_never_guessed(expression: str, named: str) -> None:
    verdict = evaluate(expression, GPU)
    assert verdict.matches is None and named in verdict.reason


def test_a_version_attribute_is_not_guessed() -> None:
    d = Device(ACC, "p", "v", {f"{ACC}/driverVersion": Value("version", "1.2.3")}, {}, False)
    verdict = evaluate('device.attributes["accelerator.topodra.io"].driverVersion == "1.2.3"', d)
    assert verdict.matches is None and "version" in verdict.reason


CLASSES = {
    c: {"metadata": {"name": c}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{c}"'}}]}}
    for c in (ACC, NIC, CPU)
}


def machine() -> list[Device]:
    """Two accelerators and two NICs: one pair on a switch, one pair only on a NUMA node."""
    cpu = Device(
        CPU,
        "node-a",
        "numa-0",
        {"resource.kubernetes.io/numaNode": Value("int", 0)},
        {f"{CPU}/cpu": Fraction(8)},
        True,
    )
    return [
        dev(ACC, "gpu-0", switch="s0", root="r0", numa=0, socket=0, bus="0000:08:00.0"),
        dev(ACC, "gpu-1", switch="s1", root="r1", numa=0, socket=0, bus="0000:10:00.0"),
        cpu,
        dev(NIC, "nic-0", switch="s0", root="r0", numa=0, socket=0, bus="0000:09:00.0"),
        dev(NIC, "nic-1", root="r2", numa=0, socket=0, bus="0000:20:00.0"),
    ]


def test_best_locality_takes_the_levels_in_order_and_the_pairs_say_so() -> None:
    claim = fit.parse_claim({"spec": fallback.best_locality_spec(2)})
    verdict = fit.explain(claim, machine(), CLASSES, InUse())
    assert verdict.fits
    got = {r: d.name for r, d in verdict.assignment}
    assert got["accelerator-0/switch"] == "gpu-0" and got["nic-0/switch"] == "nic-0"
    assert got["accelerator-1/numa"] == "gpu-1" and got["nic-1/numa"] == "nic-1"
    pairs = {p.accelerator: (p.level, p.recorded) for p in levels.pairs(verdict.assignment)}
    assert pairs == {"gpu-0": ("switch", "switch"), "gpu-1": ("numa", "numa")}


def test_a_shared_nested_leaf_switch_is_its_own_level_and_the_pairing_prefers_it() -> None:
    """Leaf switch l0 below top switch s0 holds gpu-0 and nic-0; nic-1 is on leaf l1 of the same
    tree (PXB: level switch). With one level of switches (leaf = switch) the level stays switch."""
    gpu = dev(ACC, "gpu-0", switch="s0", leaf="l0", root="r0", numa=0)
    same_leaf = dev(NIC, "nic-0", switch="s0", leaf="l0", root="r0", numa=0)
    other_leaf = dev(NIC, "nic-1", switch="s0", leaf="l1", root="r0", numa=0)
    assert levels.level(gpu, same_leaf) == "leaf" and levels.level(gpu, other_leaf) == "switch"
    flat_gpu = dev(ACC, "gpu-2", switch="s2", leaf="s2", root="r2", numa=1)
    flat_nic = dev(NIC, "nic-2", switch="s2", leaf="s2", root="r2", numa=1)
    assert levels.level(flat_gpu, flat_nic) == "switch"
    got = levels.pairs([("a", gpu), ("n1", other_leaf), ("n0", same_leaf)])
    assert [(p.accelerator, p.nic, p.level) for p in got] == [("gpu-0", "nic-0", "leaf")]


def test_a_strict_claim_names_the_constraint_that_blocks_it() -> None:
    taken = InUse(devices={(ACC, "node-a", "gpu-0")})
    spec = {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": ACC}},
                {"name": "nic", "exactly": {"deviceClassName": NIC}},
            ],
            "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": "topology.topodra.io/pcieSwitch"}],
        }
    }
    verdict = fit.explain(fit.parse_claim({"spec": spec}), machine(), CLASSES, taken)
    assert not verdict.fits
    assert verdict.blocking == [
        "constraint #0 (matchAttribute topology.topodra.io/pcieSwitch over gpu, nic): "
        "without it the claim would fit"
    ]
    (gpu,) = [c for c in verdict.per_alternative if c.alternative.name == "gpu"]
    assert [d.name for d in gpu.devices] == ["gpu-1"] and gpu.ruled_out["held by another claim"] == 1


def test_short_requests_and_capacity_are_named() -> None:
    spec = {
        "devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": ACC, "count": 3}},
                {
                    "name": "cpus",
                    "exactly": {"deviceClassName": CPU, "capacity": {"requests": {f"{CPU}/cpu": "6"}}},
                },
            ]
        }
    }
    used = InUse(capacity={(CPU, "node-a", "numa-0"): {f"{CPU}/cpu": Fraction(4)}})
    verdict = fit.explain(fit.parse_claim({"spec": spec}), machine(), CLASSES, used)
    assert not verdict.fits
    assert any("request gpus: not enough devices" in b for b in verdict.blocking)
    (cpus,) = [c for c in verdict.per_alternative if c.alternative.name == "cpus"]
    assert cpus.ruled_out.get("only 4 of cpu.topodra.io/cpu free (6 asked)") == 1


def test_a_class_not_given_is_not_guessed() -> None:
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "other.example.com"}}]}}
    verdict = fit.explain(fit.parse_claim({"spec": spec}), machine(), CLASSES, InUse())
    (c,) = verdict.per_alternative
    assert not c.devices and sum(c.not_evaluated.values()) == len(machine())


def test_inventory_and_in_use_read_api_objects() -> None:
    slices = [
        {
            "spec": {
                "nodeName": "n",
                "driver": CPU,
                "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "numa-0",
                        "allowMultipleAllocations": True,
                        "capacity": {f"{CPU}/cpu": {"value": "112"}},
                    }
                ],
            }
        }
    ]
    node, devices, _ = node_inventory(slices, None)
    assert node == "n" and devices[0].shared and devices[0].capacity == {f"{CPU}/cpu": Fraction(112)}
    claims = [
        {
            "metadata": {"namespace": "a", "name": "x"},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "c", "driver": CPU, "pool": "n", "device": "numa-0", "shareID": "u1",
                             "consumedCapacity": {f"{CPU}/cpu": "4"}},
                            {"request": "g", "driver": ACC, "pool": "n", "device": "gpu-0"},
                        ]
                    }
                }
            },
        }
    ]  # fmt: skip
    used = in_use(claims, "n")
    assert used.devices == {(ACC, "n", "gpu-0")}
    assert used.capacity == {(CPU, "n", "numa-0"): {f"{CPU}/cpu": Fraction(4)}}
    assert in_use(claims, "n", skip=("a", "x")).devices == set()
    assert amount("1500m") == Fraction("1.5") and amount("2Gi") == 2 * 2**30 and amount("x") is None
    assert amount("1Pi") == 2**50 and amount("5n") == Fraction(5, 10**9)  # every suffix the API takes


def test_a_claim_that_is_not_one_is_an_error() -> None:
    with pytest.raises(fit.ClaimError):
        fit.parse_claim({"spec": {"devices": {"requests": [{"name": "x", "exactly": {}}]}}})
    with pytest.raises(fit.ClaimError):
        fit.parse_claim({"spec": {"devices": {"requests": [{"name": f"r{i}"} for i in range(40)]}}})


def _exactly(**body: Any) -> dict[str, Any]:
    return {"name": "a", "exactly": {"deviceClassName": ACC, **body}}


@pytest.mark.parametrize(
    ("requests", "constraints", "says"),
    [
        ([{"name": "a", "firstAvailable": {"name": "x"}}], None, "firstAvailable must be a list"),
        ([_exactly(capacity="4")], None, "capacity is not an object"),
        ([_exactly(selectors="x")], None, "selectors is not a list"),
        ([_exactly(count=33)], None, "count must be 1..32"),
        ([_exactly(allocationMode="Most")], None, "allocationMode"),
        ([_exactly(capacity={"requests": {"c": "1e99999"}})], None, r"larger than 10\^100"),
        ([], ["x"], "constraint #0 is not an object"),
        ([], [{"matchAttribute": "a", "requests": "ab"}], "constraint #0: requests must be a list"),
        ([], [{"matchAttribute": "a"}] * 33, "constraints must be a list of at most 32"),
    ],
)  # fmt: skip
def test_a_malformed_claim_is_a_claim_error_naming_the_field(
    requests: list[Any], constraints: list[Any] | None, says: str
) -> None:
    """A claim file may hold anything: each shape the API would refuse is named, never a crash."""
    devices: dict[str, Any] = {"requests": requests}
    if constraints is not None:
        devices["constraints"] = constraints
    with pytest.raises(fit.ClaimError, match=says):
        fit.parse_claim({"spec": {"devices": devices}})


def test_a_claim_never_holds_more_than_32_devices() -> None:
    """allocationMode All on 40 matching devices (one per core, say) is refused by the scheduler
    (32 results per claim): explain says so, and its search stays shallow on 2,000 devices."""
    many = [dev(ACC, f"gpu-{i:04d}") for i in range(40)]
    spec = {
        "devices": {
            "requests": [{"name": "all", "exactly": {"deviceClassName": ACC, "allocationMode": "All"}}]
        }
    }
    verdict = fit.explain(fit.parse_claim({"spec": spec}), many, CLASSES, InUse())
    assert not verdict.fits
    assert "more than 32 devices" in verdict.blocking[0]
    # a fallback that asks for fewer is taken instead, as the scheduler's subrequests are
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "firstAvailable": [
                        {"name": "all", "deviceClassName": ACC, "allocationMode": "All"},
                        {"name": "some", "deviceClassName": ACC, "count": 8},
                    ],
                }
            ]
        }
    }
    verdict = fit.explain(
        fit.parse_claim({"spec": spec}), [dev(ACC, f"g{i:04d}") for i in range(2000)], CLASSES, InUse()
    )
    assert verdict.fits and {r for r, _ in verdict.assignment} == {"gpus/some"}


def test_capacity_in_any_suffix_the_api_takes() -> None:
    big = Device(CPU, "node-a", "mem", {}, {f"{CPU}/memory": amount("1Pi") or Fraction(0)}, True)
    spec = {
        "devices": {
            "requests": [
                {
                    "name": "m",
                    "exactly": {"deviceClassName": CPU, "capacity": {"requests": {"memory": "1Ti"}}},
                }
            ]
        }
    }
    slices = [
        {
            "spec": {
                "nodeName": "n",
                "driver": CPU,
                "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "mem",
                        "allowMultipleAllocations": True,
                        "capacity": {"memory": {"value": "1Pi"}},
                    }
                ],
            }
        }
    ]
    _, devices, _ = node_inventory(slices, None)
    assert devices[0].capacity == big.capacity
    verdict = fit.explain(fit.parse_claim({"spec": spec}), devices, CLASSES, InUse())
    assert verdict.fits, verdict.blocking


def test_list_attributes_match_by_intersection() -> None:
    """A driver that publishes a list (dra-driver-cpu's pcieRoot) meets another device's value
    when they share one, as the scheduler compares them (tests/controlplane/test_check.py)."""
    root = "resource.kubernetes.io/pcieRoot"
    cpu = Device(CPU, "node-a", "cpu-0", {root: Value("strings", ("r0", "r1"))}, {}, False)
    gpu = Device(ACC, "node-a", "gpu-0", {root: Value("string", "r1")}, {}, False)
    spec = {
        "devices": {
            "requests": [
                {"name": "cpu", "exactly": {"deviceClassName": CPU}},
                {"name": "gpu", "exactly": {"deviceClassName": ACC}},
            ],
            "constraints": [{"matchAttribute": root}],
        }
    }
    assert fit.explain(fit.parse_claim({"spec": spec}), [cpu, gpu], CLASSES, InUse()).fits
    spec["devices"]["constraints"] = [{"distinctAttribute": root}]
    assert not fit.explain(fit.parse_claim({"spec": spec}), [cpu, gpu], CLASSES, InUse()).fits


def _unreachable_kubeconfig(tmp_path: Path) -> str:
    from tests.controlplane.processes import free_port

    return str(write_kubeconfig(tmp_path, f"https://127.0.0.1:{free_port()}"))


@pytest.mark.parametrize(
    "argv",
    [["explain", "--claim", "ml/train"], ["check", "--node", "n1"]],
)
def test_an_unreachable_api_server_is_exit_2_with_one_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--kubeconfig", _unreachable_kubeconfig(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if "note:" not in line] == [err[-1]]
    assert "the API server cannot be reached" in err[-1], err


@pytest.mark.parametrize("ref", ["ml", "ml/", "ml/a/../b", "ML/a", "ml/a b"])
def test_claim_must_be_namespace_slash_name(ref: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--claim becomes part of an API path: only DNS names pass."""
    with pytest.raises(SystemExit) as stopped:
        main(["explain", "--claim", ref])
    assert stopped.value.code == 2
    assert "is not NAMESPACE/NAME" in capsys.readouterr().err.splitlines()[0]


def test_explain_reads_files_and_stdin_without_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole command on files alone (slices on stdin, as `topodra slices | topodra explain`
    pipes them): no API server is asked, and claims in --in-use take capacity."""
    import io
    import json

    slices = {
        "kind": "ResourceSlice",
        "spec": {
            "nodeName": "n",
            "driver": CPU,
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": "numa-0", "allowMultipleAllocations": True, "capacity": {"cpu": {"value": "8"}}}
            ],
        },
    }
    claim = tmp_path / "claim.yaml"
    claim.write_text(
        json.dumps(
            {"kind": "ResourceClaim", "metadata": {"namespace": "a", "name": "me"}, "spec": {"devices": {
                "requests": [{"name": "c", "exactly": {
                    "deviceClassName": CPU, "capacity": {"requests": {"cpu": "6"}}}}]}}}
        )
    )  # fmt: skip
    classes = tmp_path / "classes.yaml"
    classes.write_text(json.dumps({"kind": "List", "items": [{"kind": "DeviceClass", **CLASSES[CPU]}]}))
    held = tmp_path / "in-use.yaml"
    held.write_text(
        json.dumps(
            {"kind": "ResourceClaim", "metadata": {"namespace": "b", "name": "other"}, "status": {
                "allocation": {"devices": {"results": [{"request": "c", "driver": CPU, "pool": "n",
                "device": "numa-0", "shareID": "u", "consumedCapacity": {"cpu": "4"}}]}}}}
        )
    )  # fmt: skip
    argv = ["explain", "--claim-file", str(claim), "--slices", "-", "--classes", str(classes), "-o", "json"]
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(slices)))
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(slices)))
    assert main([*argv, "--in-use", str(held)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] is False, report
    assert "only 4 of cpu.topodra.io/cpu free (6 asked)" in json.dumps(report), report


def test_an_unallocated_claim_is_explained_on_the_only_node_with_slices() -> None:
    """`explain --claim NS/NAME` of a Pending pod's claim names no node: on a one-node cluster
    that node is meant; with several, the one line names them (the API side of this is
    tests/controlplane/test_explain.py::test_a_pending_claim_without_node_names_the_nodes)."""
    from topodra.drivers.cli.explain import default_node

    assert default_node({"n1"}) == "n1"
    with pytest.raises(ValueError, match=r"name the node to explain it on with --node \(a, b\)"):
        default_node({"b", "a"})
    with pytest.raises(ValueError, match=r"n00, n01, .* n07 and 4 more"):
        default_node({f"n{i:02d}" for i in range(12)})
    with pytest.raises(ValueError, match="no node has ResourceSlices"):
        default_node(set())


@pytest.mark.parametrize("command", ["explain", "check"])
def test_a_person_s_kubeconfig_is_found_as_kubectl_finds_it(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --kubeconfig and no $KUBECONFIG: ~/.kube/config is read (it names a server nobody
    listens on, so the one line says so), not the in-cluster account a laptop does not have;
    $KUBECONFIG of several paths takes the first that exists."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(Path(_unreachable_kubeconfig(tmp_path)).read_text())
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = ["explain", "--claim", "ml/train"] if command == "explain" else ["check", "--node", "n1"]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert "the API server cannot be reached" in err and "in-cluster" not in err, err
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{home / '.kube' / 'config'}")
    assert main(argv) == 2
    assert "the API server cannot be reached" in capsys.readouterr().err.splitlines()[-1]
