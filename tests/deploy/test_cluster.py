"""The deployment on a real kube-apiserver, scheduler and controller-manager (1.37, built from
source by the control-plane tier).

1. Server-side dry-run of everything kustomize and helm render, on the shared control plane:
   the API server's validation and admission accept every object and keep every field we set
   (a field dropped because a gate is off, or unknown to the server, shows as a missing path).
   A dry run, because a real DaemonSet there would adopt the driver-token pods the other tests'
   fixture creates (same labels) and replace them, invalidating their tokens.
2. On a control plane of its own: overlays/all applied for real; the DaemonSet controller makes
   one pod per driver for a new node, admitted at system-node-critical priority and bound to it
   (no kubelet runs them), and one of the node check, admitted as non-root. Then the examples
   for real, against the slices the drivers publish
   for the synthetic machine hack/kind-up.sh gives its first worker: the real scheduler
   allocates every claim, and hack/kind/check_alignment.py (what kind-e2e.sh runs) confirms each
   constraint from the allocation and the slices.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import kubernetes.client as k8s
import pytest
import yaml

from tests.conftest import REPO
from tests.controlplane.cluster import (
    FIELD_MANAGER,
    ControlPlane,
    api_resource,
    running_control_plane,
    unique_name,
)
from tests.controlplane.objects import eventually
from tests.deploy.render import DEPLOY, KINDS, OVERLAYS, Obj, Tools, example_files, load
from tests.deploy.test_rendered import NON_DEFAULT_VALUES, helm_only

pytestmark = [pytest.mark.controlplane]


def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_alignment", REPO / "hack" / "kind" / "check_alignment.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_alignment"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def dropped(sent: Any, got: Any, path: str = "") -> list[str]:
    """Paths of fields in `sent` that `got` lacks or changed (defaults the server adds are fine)."""
    if isinstance(sent, dict):
        if not isinstance(got, dict):
            return [path or "/"]
        return [
            p
            for k, v in sent.items()
            for p in (dropped(v, got[k], f"{path}/{k}") if k in got else [f"{path}/{k}"])
        ]
    if isinstance(sent, list):
        if not isinstance(got, list) or len(got) != len(sent):
            return [path]
        return [
            p for i, (a, b) in enumerate(zip(sent, got, strict=True)) for p in dropped(a, b, f"{path}/{i}")
        ]
    return [] if sent == got else [f"{path}: {sent!r} -> {got!r}"]


def apply(cp: ControlPlane, obj: Obj, namespace: str | None = None, *, dry_run: bool) -> dict[str, Any]:
    resource = cp.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    ns = (obj["metadata"].get("namespace") or namespace) if resource.namespaced else None
    kwargs: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
    out = resource.server_side_apply(
        body=obj, namespace=ns, field_manager=FIELD_MANAGER, force_conflicts=True, **kwargs
    )
    result: dict[str, Any] = out.to_dict()
    return result


def rendered(tools: Tools, tmp: Path) -> dict[str, list[Obj]]:
    out = {f"kustomize {o}": tools.kustomize_build(DEPLOY / "overlays" / o) for o in OVERLAYS}
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT_VALUES))
    out["helm defaults"] = tools.helm_template()
    out["helm non-default values"] = tools.helm_template("-f", str(values))
    out.update({f"helm {k} only": tools.helm_template(*helm_only(k)) for k in KINDS})
    return out


def test_server_accepts_everything_rendered(
    control_plane: ControlPlane, tools: Tools, tmp_path: Path
) -> None:
    problems: list[str] = []
    count = 0
    for source, objs in rendered(tools, tmp_path).items():
        for obj in objs:
            got = apply(control_plane, obj, dry_run=True)
            count += 1
            lost = dropped(obj, got)
            if lost:
                problems.append(f"{source}: {obj['kind']}/{obj['metadata']['name']}: {lost}")
    assert not problems, "\n".join(problems)
    assert count > 100


def test_server_keeps_every_field_of_the_examples(control_plane: ControlPlane) -> None:
    namespace = unique_name("examples")
    k8s.CoreV1Api(control_plane.admin).create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace))
    )
    for obj in load(example_files()):
        got = apply(control_plane, obj, namespace, dry_run=True)
        assert dropped(obj, got) == [], obj["metadata"]["name"]


# ----- a control plane of its own: real DaemonSets, real allocation -------------------------------


def publish_synthetic(cp: ControlPlane, node: str, uid: str, root: Path) -> dict[str, Any]:
    """The slices the three drivers would publish on `root`, written as the node's (by `topodra
    slices`, the publisher's own code); returns them as the API lists them."""
    cmd = [
        sys.executable,
        "-m",
        "topodra.drivers.cli.main",
        "slices",
        "--driver",
        "all",
        "--sysfs-root",
        str(root),
    ]
    cmd += ["--node-name", node, "--node-uid", uid, "--output", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    slices = api_resource(cp.dynamic, "ResourceSlice")
    for body in json.loads(out.stdout)["items"]:
        slices.create(body=body)
    listed: dict[str, Any] = slices.get(field_selector=f"spec.nodeName={node}").to_dict()
    assert {s["spec"]["driver"] for s in listed["items"]} == {f"{k}.topodra.io" for k in KINDS}
    return listed


@pytest.mark.slow
def test_daemonsets_schedule_and_examples_allocate_aligned(tools: Tools, tmp_path: Path) -> None:
    from topodra.common.synth import build, load_spec

    with running_control_plane(tmp_path / "cp") as cp:
        for obj in tools.kustomize_build(DEPLOY / "overlays" / "all"):
            apply(cp, obj, dry_run=False)
        node = "worker-a"
        uid = cp.create_node(node)
        core = k8s.CoreV1Api(cp.admin)

        def driver_pods() -> list[Any] | None:
            pods = core.list_namespaced_pod(
                "topodra-system", label_selector="app.kubernetes.io/component=kubelet-plugin"
            ).items
            bound = [p for p in pods if p.spec.node_name == node]
            return bound if len(bound) == len(KINDS) else None

        pods = eventually("one driver pod per DaemonSet bound to the node", driver_pods, timeout=60)

        def check_pod() -> list[Any] | None:
            pods = core.list_namespaced_pod(
                "topodra-system", label_selector="app.kubernetes.io/component=node-check"
            ).items
            return [p for p in pods if p.spec.node_name == node] or None

        (check,) = eventually("the node check's pod bound to the node", check_pod, timeout=60)
        assert check.spec.service_account_name == "topodra-check"
        assert check.spec.security_context.run_as_non_root is True  # admitted as non-root
        by_sa = {p.spec.service_account_name: p for p in pods}
        assert sorted(by_sa) == sorted(f"topodra-{k}-driver" for k in KINDS)
        for pod in pods:
            assert pod.spec.priority_class_name == "system-node-critical"
            assert pod.spec.priority == 2000001000  # resolved by the Priority admission plugin
        nic = by_sa["topodra-nic-driver"]
        assert nic.spec.host_network and nic.spec.host_pid

        machine = tmp_path / "machine"
        build(load_spec("2s-8acc-8nic"), machine)
        slices = publish_synthetic(cp, node, uid, machine)

        namespace = "topodra-examples"
        core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
        for obj in load(example_files()):
            apply(cp, obj, namespace, dry_run=False)
        claims_api = api_resource(cp.dynamic, "ResourceClaim")

        def allocated() -> dict[str, Any] | None:
            claims: dict[str, Any] = claims_api.get(namespace=namespace).to_dict()
            done = [c for c in claims["items"] if (c.get("status") or {}).get("allocation")]
            return claims if len(done) == 5 else None

        claims = eventually("the five example claims allocated by the scheduler", allocated, timeout=90)
        check = checker()
        findings = check.check(claims, slices)
        assert all(f.ok for f in findings), check.report(findings)
        constrained = [f for f in findings if f.text.startswith(("matchAttribute", "distinctAttribute"))]
        assert len(constrained) == 4  # numaNode, pcieRoot, pcieSwitch, distinct pcieRoot
        # the CPU part of an aligned claim really is 4 CPUs of one NUMA device
        numa = next(c for c in claims["items"] if c["metadata"]["name"].startswith("numa-aligned"))
        (cpu,) = [
            r for r in numa["status"]["allocation"]["devices"]["results"] if r["driver"] == "cpu.topodra.io"
        ]
        assert cpu["consumedCapacity"] == {"cpu.topodra.io/cpu": "4"} and cpu["device"].startswith("numa-")
        pods_api = core.list_namespaced_pod(namespace).items
        examples = {"numa-aligned", "pcieroot-aligned", "pcieswitch-aligned", "spread-distinct"}
        assert {p.metadata.name for p in pods_api if p.spec.node_name == node} == examples | {
            "baseline-count-only"
        }


def test_checker_catches_a_broken_constraint() -> None:
    """check_alignment.py can fail: the same claim with a mismatching or missing attribute."""
    check = checker()
    slices = {
        "items": [
            {
                "spec": {
                    "driver": "nic.topodra.io",
                    "pool": {"name": "p"},
                    "devices": [
                        {"name": "a", "attributes": {"resource.kubernetes.io/numaNode": {"int": 0}}},
                        {"name": "b", "attributes": {"resource.kubernetes.io/numaNode": {"int": 1}}},
                        {"name": "c", "attributes": {}},
                    ],
                }
            }
        ]
    }

    def claim(devs: list[str]) -> dict[str, Any]:
        results = [
            {"request": f"r{i}", "driver": "nic.topodra.io", "pool": "p", "device": d}
            for i, d in enumerate(devs)
        ]
        return {
            "metadata": {"namespace": "n", "name": "x"},
            "spec": {"devices": {"constraints": [{"matchAttribute": "resource.kubernetes.io/numaNode"}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }

    def ok(devs: list[str]) -> bool:
        return all(f.ok for f in check.check({"items": [claim(devs)]}, slices))

    assert ok(["a", "a"])
    assert not ok(["a", "b"])
    assert not ok(["a", "c"])
    assert not all(f.ok for f in check.check({"items": [{"metadata": {"name": "y"}, "spec": {}}]}, slices))
