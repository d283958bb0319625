"""`topodra slices | kubectl apply --dry-run=server -f -` against the real kube-apiserver.

There is no kubectl binary in this environment, so the test does what kubectl does with the
stream, through the API: it reads the output as kubectl's decoder does (a YAML stream whose
`kind: List` documents are unpacked into their items), refuses what `kubectl apply` refuses
before sending (an object without `metadata.name`: apply cannot use generateName), and sends
each object as both kinds of apply send it: a dry-run create (client-side apply of a new
object) and a dry-run server-side apply patch (`--server-side`). The real server validates
every field, name and limit there.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane
from tests.kit.machines import synth_builder

pytestmark = pytest.mark.controlplane


def kubectl_objects(stream: str) -> list[dict[str, Any]]:
    """The objects kubectl would send for `stream` (its List unpacking, its apply precheck)."""
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(stream):
        if not doc:
            continue
        items = doc["items"] if doc.get("kind") == "List" else [doc]
        for obj in items:
            assert obj.get("metadata", {}).get("name"), (
                f"kubectl apply needs metadata.name: {obj['metadata']}"
            )
            out.append(obj)
    return out


def slices_output(root: Path, *flags: str) -> str:
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "slices", "--driver", "all"]
    argv += ["--sysfs-root", str(root), "--node-name", "apply-check-1", *flags]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_slices_output_is_accepted_by_the_apiservers_dry_run(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory, fmt: str
) -> None:
    root = synth_builder(tmp_path_factory, "apply")("2s-8acc-8nic").root
    objs = kubectl_objects(slices_output(root, "--output", fmt))
    assert {o["spec"]["driver"] for o in objs} == {
        "cpu.topodra.io",
        "accelerator.topodra.io",
        "nic.topodra.io",
    }
    slices = control_plane.dynamic.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    for obj in objs:
        created = slices.create(body=obj, dry_run="All").to_dict()
        assert created["metadata"]["name"] == obj["metadata"]["name"]
        assert created["spec"]["devices"] == obj["spec"]["devices"], "the server dropped or changed a field"
        applied = control_plane.dynamic.server_side_apply(
            slices, body=obj, field_manager="kubectl", dry_run="All"
        ).to_dict()
        assert applied["spec"]["devices"] == obj["spec"]["devices"]
    # nothing was written: it was a dry run
    listed = slices.get(field_selector="spec.nodeName=apply-check-1").to_dict()
    assert listed["items"] == []


def test_the_check_can_fail(control_plane: ControlPlane) -> None:
    """What the CLI printed before (generateName) is refused by kubectl's precheck, and a
    device the server rejects is refused by the dry run: both sides of the check bite."""
    with pytest.raises(AssertionError, match=r"metadata\.name"):
        kubectl_objects(yaml.safe_dump({"kind": "List", "items": [{"metadata": {"generateName": "x-"}}]}))
    slices = control_plane.dynamic.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice")
    bad = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "apply-check-bad"},
        "spec": {
            "driver": "cpu.topodra.io",
            "nodeName": "apply-check-1",
            "pool": {"name": "apply-check-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "Not_A_DNS_Label"}],
        },
    }
    with pytest.raises(ApiException) as err:
        slices.create(body=bad, dry_run="All")
    assert err.value.status == 422
