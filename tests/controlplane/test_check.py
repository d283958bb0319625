"""`topodra check` against the real API server and scheduler.

One node (tests/check_kit.py's synthetic machine) carries topodra's own slices beside slices shaped
as NVIDIA's GPU driver, dranet, the SR-IOV DRA driver, Intel's GPU driver and dra-driver-cpu
publish them. The control plane is this module's own: dra-driver-cpu's pcieRoot is a string list,
which the API server stores only with DRAListTypeAttributes (alpha, off in the shared one).

- the report read from the API names every gap and wrong value the shapes carry;
- its alignment table agrees with the real scheduler: for every pair of drivers, every level and
  every name the report tried, a claim with one device of each driver and that `matchAttribute`
  is allocated exactly when the report says the level is alignable through that name;
- `--watch` with the deploy/base/check.yaml ServiceAccount (its RBAC and nothing more) exports the
  metric and writes the Node Event `kubectl describe node` shows, and follows a fix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from tests.check_kit import (
    NVIDIA,
    SPEC,
    SRIOV,
    STALE_GPU,
    expected_findings,
    foreign_slices,
    manifest,
    topodra_slices,
)
from tests.conftest import REPO, skip_or_fail
from tests.controlplane.cluster import ControlPlane, api_resource, running_control_plane
from tests.controlplane.objects import eventually, pod_body
from tests.controlplane.processes import free_port
from tests.kit.machines import SynthTree, synth_builder

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

NODE = "check-node"
CHECK_MANIFEST = REPO / "deploy" / "base" / "check.yaml"
SA = "topodra-check"
SA_NAMESPACE = "topodra-system"


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    from tests.controlplane.binaries import GoMissing

    try:
        with running_control_plane(
            Path(tmp_path_factory.mktemp("check-cp")),
            driver_access=False,
            feature_gates={"DRAListTypeAttributes": True},
        ) as plane:
            yield plane
    except GoMissing as e:
        skip_or_fail(str(e))


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> SynthTree:
    return synth_builder(tmp_path_factory, "check-cp", {NODE: SPEC})(NODE)


@pytest.fixture(scope="module")
def node(cp: ControlPlane, machine: SynthTree) -> dict[str, str]:
    """The Node with every driver's slices; returns the names of the created slices by driver."""
    uid = cp.create_node(NODE, pods="500")
    slices = topodra_slices(machine.root, NODE, uid) + foreign_slices(manifest(machine.root), NODE, uid)
    api = api_resource(cp.dynamic, "ResourceSlice")
    names = {}
    for body in slices:
        created = api.create(body=body)
        names[body["spec"]["driver"]] = created.metadata.name
    return names


def check(
    cp: ControlPlane, root: Path, *args: str, kubeconfig: Path | None = None
) -> tuple[int, dict[str, Any]]:
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "check", "--node", NODE]
    argv += ["--kubeconfig", str(kubeconfig or cp.kubeconfig), "--sysfs-root", str(root), "-o", "json", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.stdout, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, doc


def findings_of(doc: dict[str, Any]) -> set[tuple[str, str, str, str, str]]:
    short = {f"resource.kubernetes.io/{n}": n for n in ("pciBusID", "pcieRoot", "numaNode")}
    return {
        (f["driver"], f["device"], short.get(f["attribute"], f["attribute"]), f["code"], f["severity"])
        for f in doc["findings"]
        if f["severity"] in ("error", "warning")
    }


def test_report_from_the_api_names_every_gap_and_wrong_value(
    cp: ControlPlane, machine: SynthTree, node: dict[str, str]
) -> None:
    rc, doc = check(cp, machine.root)
    assert rc == 1  # a GPU off the bus, VFs with NUMA -1
    assert findings_of(doc) == expected_findings(manifest(machine.root))
    assert {d["driver"] for d in doc["drivers"]} == set(node)
    # the CPU driver's pcieRoot list came back from the server as a list: named, not rejected
    dracpu = next(d for d in doc["drivers"] if d["driver"] == "dra.cpu")
    assert dracpu["attributes"]["pcieRoot"] == {"list-form": 2}


def test_alignment_agrees_with_the_scheduler(
    cp: ControlPlane, machine: SynthTree, node: dict[str, str]
) -> None:
    """Admin-access requests (namespace label resource.kubernetes.io/admin-access) may take devices
    other claims hold, so every claim is decided on its own constraint, not on what the others took."""
    _, doc = check(cp, machine.root)
    ns = "check-align"
    core = api_resource(cp.dynamic, "Namespace", "v1")
    core.create(body={"metadata": {"name": ns, "labels": {"resource.kubernetes.io/admin-access": "true"}}})
    classes = api_resource(cp.dynamic, "DeviceClass")
    for driver in node:
        classes.create(
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": f"check-{driver}"},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
            }
        )
    claims, pods = api_resource(cp.dynamic, "ResourceClaim"), api_resource(cp.dynamic, "Pod", "v1")
    cases: dict[str, tuple[str, str, str, str, bool]] = {}
    for i, pair in enumerate(doc["alignment"]):
        a, b = pair["drivers"]
        for level, result in pair["levels"].items():
            for j, key in enumerate(result["keys"]):
                name = f"p{i}-{level}-{j}"
                cases[name] = (a, b, level, key["key"], key["pairs"] > 0)
                request = [
                    {"name": r, "exactly": {"deviceClassName": f"check-{d}", "adminAccess": True}}
                    for r, d in (("a", a), ("b", b))
                ]
                claims.create(
                    namespace=ns,
                    body={
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {"name": name},
                        "spec": {
                            "devices": {
                                "requests": request,
                                "constraints": [{"requests": ["a", "b"], "matchAttribute": key["key"]}],
                            }
                        },
                    },
                )
                body = pod_body(
                    name, [{"name": "c", "resourceClaimName": name}], {"kubernetes.io/hostname": NODE}
                )
                pods.create(namespace=ns, body=body)
    assert len(cases) >= 4 * len(doc["alignment"])

    def decided() -> dict[str, bool] | None:
        out = {}
        for pod in pods.get(namespace=ns).to_dict()["items"]:
            name = pod["metadata"]["name"]
            if pod["spec"].get("nodeName"):
                out[name] = True
            elif any(
                c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                for c in (pod.get("status") or {}).get("conditions") or []
            ):
                out[name] = False
        return out if len(out) == len(cases) else None

    scheduled = eventually(f"the scheduler deciding {len(cases)} pods", decided, timeout=300)
    wrong = {
        name: (
            a,
            b,
            level,
            key,
            f"report: {'yes' if says else 'no'}; scheduler: {'allocated' if scheduled[name] else 'did not'}",
        )
        for name, (a, b, level, key, says) in cases.items()
        if scheduled[name] != says
    }
    assert wrong == {}
    assert any(scheduled.values()) and not all(scheduled.values())
    # the allocated claims really hold one device of each driver
    for name, (a, b, *_rest) in cases.items():
        if scheduled[name]:
            results = claims.get(namespace=ns, name=name).to_dict()["status"]["allocation"]["devices"][
                "results"
            ]
            assert sorted(r["driver"] for r in results) == sorted([a, b])


def _metric(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("topodra_check_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def _node_events(cp: ControlPlane) -> list[dict[str, Any]]:
    """As `kubectl describe node` finds them: involvedObject kind, name and uid (the node's name)."""
    selector = f"involvedObject.kind=Node,involvedObject.name={NODE},involvedObject.uid={NODE}"
    events = api_resource(cp.dynamic, "Event", "v1").get(namespace="", field_selector=selector)
    items: list[dict[str, Any]] = events.to_dict()["items"]
    return items


def test_watch_exports_the_metric_and_writes_node_events(
    cp: ControlPlane, machine: SynthTree, node: dict[str, str], tmp_path: Path
) -> None:
    api_resource(cp.dynamic, "Namespace", "v1").create(body={"metadata": {"name": SA_NAMESPACE}})
    rbac = [d for d in yaml.safe_load_all(CHECK_MANIFEST.read_text()) if d and d["kind"] != "DaemonSet"]
    rbac_file = tmp_path / "check-rbac.yaml"
    rbac_file.write_text(yaml.safe_dump_all(rbac))
    cp.apply_manifests([rbac_file])
    token = cp.service_account_token(SA, SA_NAMESPACE)
    kubeconfig = tmp_path / "check.kubeconfig"
    cp.write_kubeconfig(kubeconfig, SA, {"token": token})

    def allowed() -> bool:  # RBAC reaches the authorizer's cache asynchronously
        try:
            api_resource(cp.token_client(token), "ResourceSlice").get(field_selector=f"spec.nodeName={NODE}")
            return True
        except ApiException:
            return False

    eventually("the check's RBAC", allowed)
    port = free_port()
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "check", "--watch", "--node", NODE]
    argv += ["--kubeconfig", str(kubeconfig), "--sysfs-root", str(machine.root)]
    argv += ["--metrics-address", f"127.0.0.1:{port}", "--interval", "5"]
    log = (tmp_path / "watch.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NODE_NAME": ""})
    try:

        def metric(name: str, value: float) -> bool:
            try:
                return _metric(port).get(name) == value
            except OSError:
                return False

        eventually("topodra_check_disagrees 1", lambda: metric("topodra_check_disagrees", 1.0), timeout=60)
        got = _metric(port)
        assert got['topodra_check_findings{driver="gpu.nvidia.com",severity="error"}'] == 1.0
        assert got['topodra_check_findings{driver="cpu.topodra.io",severity="error"}'] == 0.0
        wrong = eventually(
            "a TopologyAttributesWrong Event on the Node",
            lambda: [e for e in _node_events(cp) if e["reason"] == "TopologyAttributesWrong"],
        )
        assert wrong[0]["type"] == "Warning"
        assert f"{NVIDIA} gpu-4" in wrong[0]["message"] and STALE_GPU in wrong[0]["message"]
        assert "dra.net/numaNode" in wrong[0]["message"]

        # the fix: the GPU driver rescans, the SR-IOV driver stops publishing -1 (here: goes away)
        slices = api_resource(cp.dynamic, "ResourceSlice")
        slices.delete(name=node[SRIOV])
        gpu = slices.get(name=node[NVIDIA]).to_dict()
        gpu["spec"]["devices"] = [
            d
            for d in gpu["spec"]["devices"]
            if d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] != STALE_GPU
        ]
        slices.replace(body=gpu)
        eventually("topodra_check_disagrees 0", lambda: metric("topodra_check_disagrees", 0.0), timeout=30)
        agree = eventually(
            "a TopologyAttributesAgree Event",
            lambda: [e for e in _node_events(cp) if e["reason"] == "TopologyAttributesAgree"],
        )
        assert agree[0]["type"] == "Normal"
        assert (
            len([e for e in _node_events(cp) if e["reason"] == "TopologyAttributesWrong"]) == 1
        )  # not repeated
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        log.close()
    assert rc == 0, (tmp_path / "watch.log").read_text()[-3000:]


def test_the_check_account_may_do_nothing_else(cp: ControlPlane, node: dict[str, str]) -> None:
    """Least privilege: no slice writes, no Events outside `default`, no claims, no nodes."""
    deadline = time.monotonic() + 30
    while True:
        try:
            token = cp.service_account_token(SA, SA_NAMESPACE)
            break
        except ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    client = cp.token_client(token)
    denied = []
    probe_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": "x-"},
        "spec": {
            "driver": "x.example.com",
            "nodeName": NODE,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
        },
    }
    probe_event = {
        "metadata": {"generateName": "x-"},
        "involvedObject": {"kind": "Node", "name": NODE},
        "reason": "X",
        "message": "x",
    }
    events = api_resource(client, "Event", "v1")
    attempts = [
        (
            "create a slice",
            lambda: api_resource(client, "ResourceSlice").create(body=probe_slice, dry_run="All"),
        ),
        (
            "an Event in kube-system",
            lambda: events.create(namespace="kube-system", body=probe_event, dry_run="All"),
        ),
        ("list claims", lambda: api_resource(client, "ResourceClaim").get()),
        ("get the node", lambda: api_resource(client, "Node", "v1").get(name=NODE)),
    ]
    for what, call in attempts:
        try:
            call()
        except ApiException as e:
            if e.status == 403:
                denied.append(what)
    assert denied == [what for what, _ in attempts]
