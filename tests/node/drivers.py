"""The three drivers on the real node, installed as deploy/ installs them.

`kustomize build deploy/overlays/all` (the real tool), the DaemonSets running the image of this
checkout (tests/node/images.py) under the name the manifests give, applied server-side. Two
kinds of change are made to the rendered objects, both because of where this node is, not
what the manifests say:

- host folders: the node keeps the kubelet's root dir, /var/run/cdi, /opt/topodra/hooks and
  /var/lib/topodra under its run folder, so those prefixes are rewritten in the pod templates
  (host paths, mount paths and flags alike: the kubelet and the runtime see the same paths the
  drivers write);
- devices this machine lacks: the accelerator and NIC drivers read a synthetic machine
  (tests/node/machine.json, `topodra synth`) whose device nodes exist (mknod with the numbers
  sysfs names) and whose NICs' netdevs are veths on the host with the synthetic names and MACs.
  The CPU driver reads the host's own /sys and pins real CPUs.

Everything else (RBAC, the admission policy, DeviceClasses, securityContexts, probes, update
strategies, the install-hooks init container) is used as rendered.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO
from tests.controlplane.cluster import FIELD_MANAGER, api_resource
from tests.controlplane.processes import wait_until
from tests.deploy.render import DEPLOY, Tools, daemonsets
from tests.node.images import normalize_reference, topodra_image
from tests.node.network import link_exists
from tests.node.node import RealNode

MACHINE_SPEC = REPO / "tests" / "node" / "machine.json"
NAMESPACE = "topodra-system"
KINDS = ("cpu", "accelerator", "nic")
EXAMPLE_BUSYBOX = "docker.io/library/busybox:1.36"  # what deploy/examples' Pods run
# The node's folders the manifests name, and where this node keeps them (under its run folder).
HOST_FOLDERS = {
    "/var/lib/kubelet": "kubelet",
    "/var/run/cdi": "cdi",
    "/opt/topodra/hooks": "hooks",
    "/var/lib/topodra": "topodra",
    "/var/run/nri": "containerd/nri",  # the CPU driver's NRI socket folder: containerd's here
}


@dataclass(frozen=True)
class Synthetic:
    """The synthetic machine the accelerator and NIC drivers read."""

    root: Path
    manifest: dict[str, Any]

    @property
    def nics(self) -> list[dict[str, Any]]:
        return [n for n in self.manifest["net"] if n["kind"] == "pci"]

    @property
    def device_nodes(self) -> list[dict[str, Any]]:
        return list(self.manifest["device_nodes"])


def _rewrite(value: str, mapping: Mapping[str, str]) -> str:
    """A path (or a --flag=path) under one of the known host folders, moved to the node's."""
    for old, new in mapping.items():
        for lead in ("", "="):
            at = value.find(lead + old) if lead else (0 if value.startswith(old) else -1)
            if at < 0:
                continue
            start = at + len(lead)
            end = start + len(old)
            if end == len(value) or value[end] == "/":
                return value[:start] + new + value[end:]
    return value


def _walk(obj: Any, fn: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _walk(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk(v, fn) for v in obj]
    if isinstance(obj, str):
        return fn(obj)
    return obj


def localize(
    objs: Iterable[dict[str, Any]], run_dir: Path, synthetic_root: Path | None
) -> list[dict[str, Any]]:
    """The rendered objects with the node's folders and the synthetic machine (see module doc)."""
    mapping = {old: str(run_dir / new) for old, new in HOST_FOLDERS.items()}
    out = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        if obj["kind"] == "DaemonSet":
            obj["spec"]["template"] = _walk(obj["spec"]["template"], lambda s: _rewrite(s, mapping))
        out.append(obj)
    for kind, ds in daemonsets(out).items():
        if synthetic_root is not None and kind in ("accelerator", "nic"):
            _use_synthetic(ds, kind, synthetic_root)
    return out


def _use_synthetic(ds: dict[str, Any], kind: str, root: Path) -> None:
    pod = ds["spec"]["template"]["spec"]
    (driver,) = [c for c in pod["containers"] if c["name"] == "driver"]
    driver["args"].append(f"--sysfs-root={root}")
    if kind == "accelerator":
        driver["args"].append(f"--accelerator-dev-root={root}")
    driver["volumeMounts"].append({"name": "synthetic-machine", "mountPath": str(root), "readOnly": True})
    pod["volumes"].append({"name": "synthetic-machine", "hostPath": {"path": str(root), "type": "Directory"}})


def synthesize(root: Path, hostname: str) -> Synthetic:
    """`topodra synth` of the tier's machine, with real device nodes (mknod, sysfs numbers)."""
    cmd = [sys.executable, "-m", "topodra.drivers.cli.main", "synth", "--spec", str(MACHINE_SPEC)]
    cmd += ["--dest", str(root), "--hostname", hostname, "--force"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"topodra synth failed: {done.stderr}")
    manifest = json.loads((root / "synth-manifest.json").read_text())
    for node in manifest["device_nodes"]:
        major, minor = (int(x) for x in node["dev"].split(":"))
        path = root / node["path"].lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.mknod(path, 0o600 | 0o020000, os.makedev(major, minor))
    return Synthetic(root, manifest)


def add_host_nics(syn: Synthetic, *, only_missing: bool = False) -> list[str]:
    """A veth on the host per synthetic NIC (its name and MAC); the peer is `<name>p`.
    only_missing: leave the ones that are there (a veth that went with a namespace comes back)."""
    made = []
    for nic in syn.nics:
        name = nic["name"]
        if link_exists(name):
            if only_missing:
                continue
            subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30, check=False)
        if link_exists(f"{name}p"):
            subprocess.run(["ip", "link", "del", f"{name}p"], capture_output=True, timeout=30, check=False)
        ip = ["ip", "link", "add", name, "address", nic["mac"], "type", "veth", "peer", "name", f"{name}p"]
        subprocess.run(ip, capture_output=True, text=True, timeout=30, check=True)
        subprocess.run(["ip", "link", "set", f"{name}p", "up"], capture_output=True, timeout=30, check=True)
        made.append(name)
    return made


def delete_host_nics(syn: Synthetic) -> None:
    for nic in syn.nics:
        for name in (nic["name"], f"{nic['name']}p"):
            if link_exists(name):
                subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30, check=False)


def render(tools: Tools, run_dir: Path, synthetic_root: Path | None) -> list[dict[str, Any]]:
    return localize(tools.kustomize_build(DEPLOY / "overlays" / "all"), run_dir, synthetic_root)


def driver_image_reference(objs: Iterable[dict[str, Any]]) -> str:
    """The one image every driver container and init container of the DaemonSets names."""
    pods = [ds["spec"]["template"]["spec"] for ds in daemonsets(objs).values()]
    refs = {c["image"] for pod in pods for c in pod["containers"] + pod.get("initContainers", [])}
    if len(refs) != 1:
        raise AssertionError(f"the DaemonSets name more than one image: {sorted(refs)}")
    return refs.pop()


def apply(node: RealNode, objs: Iterable[dict[str, Any]]) -> None:
    """Server-side apply, Namespaces and cluster-scoped objects first."""
    ordered = sorted(objs, key=lambda o: (o["kind"] != "Namespace", o["kind"] in ("DaemonSet",)))
    for obj in ordered:
        resource = node.cp.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = obj["metadata"].get("namespace") if resource.namespaced else None
        resource.server_side_apply(body=obj, namespace=ns, field_manager=FIELD_MANAGER, force_conflicts=True)


class Drivers:
    """The installed drivers: objects as applied, the synthetic machine, and waiting helpers."""

    def __init__(self, node: RealNode, tools: Tools, *, synthetic: bool = True) -> None:
        self.node = node
        self.tools = tools
        self.use_synthetic = synthetic  # False: accelerator and NIC drivers read the host's /sys
        self.synthetic: Synthetic | None = None
        self.objects: list[dict[str, Any]] = []
        self.image = ""
        self.timings: dict[str, float] = {}

    @property
    def synthetic_root(self) -> Path:
        return self.node.run_dir / "synth"

    def install(self, timeout: float = 300.0) -> None:
        began = time.monotonic()
        if self.use_synthetic:
            self.synthetic = synthesize(self.synthetic_root, self.node.name)
            add_host_nics(self.synthetic)
        root = self.synthetic_root if self.use_synthetic else None
        self.objects = render(self.tools, self.node.run_dir, root)
        self.image = normalize_reference(driver_image_reference(self.objects))
        t = time.monotonic()
        built = topodra_image(self.image)
        self.timings["image"] = time.monotonic() - t
        t = time.monotonic()
        self.node.containerd.import_image(built.archive)
        assert self.node.busybox is not None
        self._tag(self.node.busybox.name, EXAMPLE_BUSYBOX)
        self.timings["import"] = time.monotonic() - t
        t = time.monotonic()
        apply(self.node, self.objects)
        self.wait_ready(timeout)
        self.timings["rollout"] = time.monotonic() - t
        self.timings["total"] = time.monotonic() - began

    def _tag(self, source: str, target: str) -> None:
        if target in self.node.containerd.images():
            return
        done = self.node.containerd.ctr("images", "tag", source, target)
        if done.returncode != 0:
            raise RuntimeError(f"ctr images tag {source} {target}: {done.stderr.strip()}")

    def uninstall(self) -> None:
        """Workload Pods first (their claims need the drivers to be released), then the DaemonSets."""
        if self.node.kubelet.running and self.node.containerd.running:
            left = self.node.delete_workloads()
            if left:
                sys.stderr.write(f"\nreal node: pods still there before the drivers go: {left}\n")
        apps = k8s.AppsV1Api(self.node.cp.admin)
        for ds in daemonsets(self.objects).values():
            with _ignore_404():
                apps.delete_namespaced_daemon_set(ds["metadata"]["name"], NAMESPACE)
        if self.synthetic is not None:
            delete_host_nics(self.synthetic)

    def daemonset(self, kind: str) -> dict[str, Any]:
        return daemonsets(self.objects)[kind]

    def wait_ready(self, timeout: float = 300.0, kinds: Iterable[str] = KINDS) -> None:
        """Every DaemonSet rolled out with its pod Ready, every driver's slices published."""
        apps = k8s.AppsV1Api(self.node.cp.admin)
        for kind in kinds:
            name = self.daemonset(kind)["metadata"]["name"]

            def ready(name: str = name) -> bool:
                ds = apps.read_namespaced_daemon_set(name, NAMESPACE)
                st = ds.status
                return bool(
                    st.desired_number_scheduled == 1
                    and st.number_ready == 1
                    and (st.updated_number_scheduled or 0) == 1
                    and (st.observed_generation or 0) >= ds.metadata.generation
                    and (st.number_available or 0) == 1
                    and (st.number_unavailable or 0) == 0
                )

            wait_until(f"DaemonSet {name}", ready, timeout, alive=self.node._alive)
            wait_until(
                f"{kind} ResourceSlices", lambda k=kind: bool(self.slices(k)), timeout, alive=self.node._alive
            )

    def slices(self, kind: str) -> list[dict[str, Any]]:
        res = api_resource(self.node.cp.dynamic, "ResourceSlice")
        items = res.get(field_selector=f"spec.nodeName={self.node.name}").to_dict()["items"]
        return [s for s in items if s["spec"]["driver"] == f"{kind}.topodra.io"]

    def devices(self, kind: str) -> list[dict[str, Any]]:
        return [d for s in self.slices(kind) for d in s["spec"].get("devices", [])]

    def pods(self, kind: str) -> list[k8s.V1Pod]:
        label = self.daemonset(kind)["spec"]["selector"]["matchLabels"]
        selector = ",".join(f"{k}={v}" for k, v in label.items())
        return list(self.node.core.list_namespaced_pod(NAMESPACE, label_selector=selector).items)

    def log(self, kind: str) -> str:
        if kind not in daemonsets(self.objects):
            return f"(no {kind} DaemonSet applied)"
        return "\n".join(self.node.pod_log(NAMESPACE, p.metadata.name, "driver") for p in self.pods(kind))


class _ignore_404:
    def __enter__(self) -> None:
        return None

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: object) -> bool:
        return isinstance(ev, ApiException) and ev.status == 404


def image_tools_missing() -> str | None:
    """Why the drivers' image cannot be made here, or None."""
    import shutil

    if shutil.which("mmdebstrap") is None:
        return "mmdebstrap is not installed (Debian: apt-get install mmdebstrap): it makes the drivers' image"
    return None


# ----- what the lifecycle tests do to a driver -------------------------------------------------------


def _pod_ready(pod: k8s.V1Pod) -> bool:
    return bool(
        pod.status.phase == "Running"
        and pod.status.container_statuses
        and all(c.ready for c in pod.status.container_statuses)
    )


def restart_driver(drivers: Drivers, kind: str, timeout: float = 180.0) -> str:
    """Deletes the driver's pod (as a node drain or a crash would) and waits for its successor to be
    Ready; returns the new pod's UID."""
    (old,) = drivers.pods(kind)
    drivers.node.core.delete_namespaced_pod(old.metadata.name, NAMESPACE, grace_period_seconds=5)

    def replaced() -> bool:
        pods = drivers.pods(kind)
        return len(pods) == 1 and pods[0].metadata.uid != old.metadata.uid and _pod_ready(pods[0])

    wait_until(f"{kind} driver pod replaced", replaced, timeout, alive=drivers.node._alive)
    return str(drivers.pods(kind)[0].metadata.uid)


def take_down(drivers: Drivers, kind: str, timeout: float = 120.0) -> None:
    """The DaemonSet stays, its pod goes (a nodeSelector no node matches): the driver is down."""
    name = drivers.daemonset(kind)["metadata"]["name"]
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"topodra.io/tier-driver-down": "true"}}}}}
    k8s.AppsV1Api(drivers.node.cp.admin).patch_namespaced_daemon_set(name, NAMESPACE, patch)
    wait_until(f"{kind} driver gone", lambda: not drivers.pods(kind), timeout, alive=drivers.node._alive)


def bring_up(drivers: Drivers, kind: str, timeout: float = 180.0) -> None:
    name = drivers.daemonset(kind)["metadata"]["name"]
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"topodra.io/tier-driver-down": None}}}}}
    k8s.AppsV1Api(drivers.node.cp.admin).patch_namespaced_daemon_set(name, NAMESPACE, patch)
    drivers.wait_ready(timeout, kinds=[kind])


def roll(drivers: Drivers, kind: str, timeout: float = 240.0) -> list[str]:
    """A rolling update (a pod-template change, as `kubectl rollout restart` makes); waits until
    it is done and returns the UIDs of every driver pod seen while it ran, oldest first."""
    name = drivers.daemonset(kind)["metadata"]["name"]
    seen = [p.metadata.uid for p in drivers.pods(kind)]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    patch = {"spec": {"template": {"metadata": {"annotations": {"topodra.io/tier-restarted-at": stamp}}}}}
    apps = k8s.AppsV1Api(drivers.node.cp.admin)
    generation = apps.patch_namespaced_daemon_set(name, NAMESPACE, patch).metadata.generation

    def done() -> bool:
        for p in drivers.pods(kind):
            if p.metadata.uid not in seen:
                seen.append(p.metadata.uid)
        ds = apps.read_namespaced_daemon_set(name, NAMESPACE)
        pods = drivers.pods(kind)
        return bool(
            (ds.status.observed_generation or 0) >= generation
            and ds.status.updated_number_scheduled == 1
            and len(pods) == 1
            and pods[0].metadata.uid != seen[0]
            and _pod_ready(pods[0])
        )

    wait_until(f"{kind} rollout", done, timeout, alive=drivers.node._alive)
    drivers.wait_ready(timeout, kinds=[kind])
    return seen
