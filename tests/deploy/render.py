"""The deployment as objects: plain manifests, `kustomize build` and `helm template` output.

helm and kustomize are the real tools, built from their Go modules by hack/build-tools.sh
(cached by version, like the control plane). Objects are compared as parsed YAML keyed by
(apiVersion, kind, namespace, name): order, comments and formatting do not matter, every field
does.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO

DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "topodra"
BUILD_TOOLS = REPO / "hack" / "build-tools.sh"
KINDS = ("cpu", "accelerator", "nic")
NAMESPACE = "topodra-system"  # kustomize base's; helm renders into the release's namespace
# Labels Helm's conventions add to every object and kustomize's objects do not have.
RELEASE_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)
OVERLAYS = ("all", "cpu", "accelerator", "nic", "kind")

Obj = dict[str, Any]
Key = tuple[str, str, str | None, str]


class ToolsUnavailable(RuntimeError):
    """No Go toolchain: helm and kustomize cannot be built here."""


@dataclass(frozen=True)
class Tools:
    helm: Path
    kustomize: Path

    def kustomize_build(self, path: Path) -> list[Obj]:
        return parse(_run([str(self.kustomize), "build", str(path)]))

    def helm_template(self, *args: str, chart: Path = CHART) -> list[Obj]:
        """`helm template topodra CHART ARGS`, in namespace topodra-system unless ARGS name one
        (the release's namespace is where the chart puts its objects, as `helm install -n`)."""
        namespace = [] if {"-n", "--namespace"} & set(args) else ["--namespace", NAMESPACE]
        return parse(_run([str(self.helm), "template", "topodra", str(chart), *namespace, *args]))


def ensure_tools(timeout: float = 1800.0) -> Tools:
    if shutil.which("go") is None:
        raise ToolsUnavailable("Go is not installed: helm and kustomize are built from their Go modules")
    done = subprocess.run(
        ["bash", str(BUILD_TOOLS)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_TOOLS} exited {done.returncode}:\n{done.stderr[-3000:]}")
    paths = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Tools(helm=Path(paths["helm"]), kustomize=Path(paths["kustomize"]))


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def parse(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def load(paths: Iterable[Path]) -> list[Obj]:
    """Objects of plain manifest files; kustomization files are not objects."""
    out: list[Obj] = []
    for path in paths:
        out += [d for d in parse(path.read_text()) if d.get("kind") not in ("Kustomization", "Component")]
    return out


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


def by_key(objs: Iterable[Obj]) -> dict[Key, Obj]:
    out: dict[Key, Obj] = {}
    for obj in objs:
        k = key(obj)
        assert k not in out, f"{k} appears twice"
        out[k] = obj
    return out


def without_release_labels(obj: Obj) -> Obj:
    """`obj` without RELEASE_LABELS (on the object and on a pod template): what kustomize has."""
    out: Obj = json.loads(json.dumps(obj))
    metas = [out.get("metadata", {}), out.get("spec", {}).get("template", {}).get("metadata", {})]
    for meta in metas:
        labels = meta.get("labels")
        if labels:
            for label in RELEASE_LABELS:
                labels.pop(label, None)
    return out


def base_file(name: str) -> Path:
    return DEPLOY / "base" / name


def example_files() -> list[Path]:
    return sorted(p for p in (DEPLOY / "examples").glob("*.yaml") if p.name != "kustomization.yaml")


def daemonsets(objs: Iterable[Obj]) -> dict[str, Obj]:
    """The drivers' DaemonSets by driver kind (cpu/accelerator/nic), from their ServiceAccount
    name (topodra-<kind>-driver); the node check's DaemonSet is not a driver (see `is_check`)."""
    out: dict[str, Obj] = {}
    for obj in objs:
        if obj["kind"] == "DaemonSet":
            sa = obj["spec"]["template"]["spec"]["serviceAccountName"]
            if sa.endswith("-driver"):
                out[sa.removeprefix("topodra-").removesuffix("-driver")] = obj
    return out


CHECK = "topodra-check"


def is_check(obj: Obj) -> bool:
    """An object of the node check (deploy/base/check.yaml): named topodra-check[-...]."""
    name: str = obj["metadata"]["name"]
    return name == CHECK or name.startswith(f"{CHECK}-")


def check_daemonset(objs: Iterable[Obj]) -> Obj | None:
    found = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == CHECK]
    assert len(found) <= 1
    return found[0] if found else None


def driver_container(ds: Obj) -> Obj:
    (container,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "driver"]
    found: Obj = container
    return found


# What the downward API gives a pod on a sample node, for expanding $(VAR) in arguments.
SAMPLE_FIELDS = {
    "spec.nodeName": "node-a",
    "status.hostIP": "192.0.2.10",
    "status.podIP": "192.0.2.10",
    "metadata.uid": "0b6f7e2c-5d1a-4c3e-9f00-000000000001",
}


def container_args(container: Obj) -> list[str]:
    """The container's args as the kubelet passes them: $(VAR) of its env expanded ($$ is $),
    fieldRef values from SAMPLE_FIELDS; an undefined $(VAR) stays as written, as the kubelet
    leaves it."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "fieldRef" in e.get("valueFrom", {}):
            env[e["name"]] = SAMPLE_FIELDS[e["valueFrom"]["fieldRef"]["fieldPath"]]
    pattern = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")

    def one(m: re.Match[str]) -> str:
        if m[0] == "$$":
            return "$"
        return env.get(m[1], m[0])

    return [pattern.sub(one, a) for a in container.get("args", [])]
