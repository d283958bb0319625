"""`topodra slices` on every captured machine: the printed slices are valid ResourceSlices for the
1.34 and 1.37 schemas (kubernetes-validate --strict), and left-out devices are reported.

The CLI goes through the driver registry; `sample_driver` stands in for a driver here so these
checks do not depend on which real drivers exist yet. test_real_drivers_on_every_tree runs the
same checks through each real driver once it is registered.
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import kubernetes_validate
import pytest
import yaml
from topodra.drivers import registry
from topodra.drivers.cli.main import main

from tests.conftest import FixtureTrees, fixture_names

SAMPLE = "tests.unit.publisher.sample_driver"
# kubernetes-validate 1.37.0 bundles schemas 1.34-1.37; 1.37 is the newest it has.
SCHEMAS = ("1.34.0", "1.37.0")


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(["slices", *argv])
        except SystemExit as exit_:  # argparse refused a flag value
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def sample_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "KINDS", {"cpu": SAMPLE, "nic": SAMPLE})


def assert_valid(slices: list[dict[str, Any]], version: str) -> None:
    for obj in slices:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            raise AssertionError(f"{obj['metadata']['name']} invalid for {version}: {err}") from None


@pytest.mark.parametrize("name", fixture_names())
def test_slices_of_every_tree_validate_for_1_34_and_1_37(
    name: str, fixture_trees: FixtureTrees, sample_registry: None
) -> None:
    root = str(fixture_trees.root(name))
    for version in ("1.34", "1.37"):
        code, out, err = run_cli("--driver", "cpu", "--sysfs-root", root, "--node-name", "node-1",
                                 "--output", "json", "--kubernetes-version", version)  # fmt: skip
        assert code in (0, 3), err
        slices = json.loads(out)["items"]
        assert slices and all(s["kind"] == "ResourceSlice" for s in slices)
        assert_valid(slices, f"{version}.0")
        for line in err.splitlines():  # every omission names the device and the rule
            assert re.search(r"device '[^']*'.*: [a-z-]+: .*\(dropped-", line), line
        assert (code == 3) == bool(err.strip())


def test_invalid_standard_attributes_are_reported_not_published(
    fixture_trees: FixtureTrees, sample_registry: None
) -> None:
    """This tree has a 32-bit PCI domain (10000:...), which the pciBusID rule rejects."""
    name = "hwloc--2pa-pcidomain32bits"
    if name not in fixture_names():
        pytest.skip(f"{name} not captured here")
    code, out, err = run_cli(
        "--driver", "cpu", "--sysfs-root", str(fixture_trees.root(name)), "--output", "json"
    )
    assert code == 3
    assert "attribute-standard-format" in err and "resource.kubernetes.io/pciBusID" in err
    published = [d for s in json.loads(out)["items"] for d in s["spec"].get("devices", [])]
    assert all(
        "resource.kubernetes.io/pciBusID" not in d.get("attributes", {})
        or re.fullmatch(r"[0-9a-f]{4}:.*", d["attributes"]["resource.kubernetes.io/pciBusID"]["string"])
        for d in published
    )


def test_yaml_and_json_print_the_same_slices(fixture_trees: FixtureTrees, sample_registry: None) -> None:
    root = str(fixture_trees.root(fixture_names()[0]))
    _, as_json, _ = run_cli("--driver", "all", "--sysfs-root", root, "--node-name", "n", "--output", "json")
    _, as_yaml, _ = run_cli("--driver", "all", "--sysfs-root", root, "--node-name", "n", "--output", "yaml")
    assert json.loads(as_json) == yaml.safe_load(as_yaml)
    assert (
        len({s["spec"]["driver"] for s in json.loads(as_json)["items"]}) == 1
    )  # both kinds map to the sample


def test_node_uid_and_driver_flags(fixture_trees: FixtureTrees, sample_registry: None) -> None:
    root = str(fixture_trees.root(fixture_names()[0]))
    code, out, _ = run_cli("--driver", "cpu", "--sysfs-root", root, "--node-name", "worker-7",
                           "--node-uid", "1234", "--sample-limit", "0", "--output", "json")  # fmt: skip
    (only,) = json.loads(out)["items"]
    assert code == 0
    assert only["spec"]["devices"] == [] and only["spec"]["nodeName"] == "worker-7"
    assert only["metadata"]["ownerReferences"][0]["uid"] == "1234"
    assert only["metadata"]["name"] == "00000-sample.topodra.io-worker-7"
    assert "generateName" not in only["metadata"]  # kubectl apply refuses generateName


def test_bad_input_is_a_clear_error(tmp_path: Any, sample_registry: None) -> None:
    code, _, err = run_cli("--driver", "cpu", "--sysfs-root", str(tmp_path / "nope"))
    assert code == 2 and "no such folder" in err
    code, _, err = run_cli("--driver", "cpu", "--sysfs-root", "/", "--node-name", "Bad_Node")
    assert code == 2 and "not a valid node name" in err


def _real_kinds() -> list[str]:
    kinds = []
    for kind in ("cpu", "accelerator", "nic"):
        try:
            if hasattr(registry.module(kind), "create"):
                kinds.append(kind)
        except ImportError:
            pass
    return kinds


@pytest.mark.parametrize("name", fixture_names())
def test_real_drivers_on_every_tree(name: str, fixture_trees: FixtureTrees) -> None:
    kinds = _real_kinds()
    if not kinds:
        pytest.skip("no real driver registered yet")
    root = str(fixture_trees.root(name))
    for kind in kinds:
        for version in ("1.34", "1.37"):
            code, out, err = run_cli("--driver", kind, "--sysfs-root", root, "--node-name", "node-1",
                                     "--output", "json", "--kubernetes-version", version)  # fmt: skip
            assert code in (0, 3), f"{kind}: {err}"
            assert_valid(json.loads(out)["items"], f"{version}.0")
