"""One real Kubernetes node on this machine: control plane, containerd, CNI bridge, kubelet.

    with real_node_lock(), RealNode(run_dir, ...) as node:   # or node.start() ... node.stop()
        node.core.create_namespaced_pod(...)                  # a real Pod, really run

What lives where (everything under `run_dir`, which is a shared bind mount of itself so that
Bidirectional volumes work):

    cp/                 the control plane (API server on the node address, port 443)
    containerd/         containerd root, state, sockets, runc state, NRI socket and folders
    kubelet/            the kubelet's root dir (plugins_registry, plugins/<driver>, pods)
    cdi/                CDI specs (the drivers' /var/run/cdi)
    hooks/              host-side CDI hooks (the drivers' /opt/topodra/hooks)
    topodra/            the drivers' other host state (/var/lib/topodra)
    net.d/ cni-ipam/    the CNI configuration and host-local's leases
    podlogs/            container logs

Outside it, only what the programs hard-code: the kubelet's `/var/lib/kubelet/device-plugins`
and `/var/log/containers` symlinks, containerd's shim sockets in `/run/containerd/s`, plus the
kubelet's cgroups under kubelet.CGROUP_ROOT and the bridge. stop() removes all of them (the
folders only when this node created them), also after a failed start.

Only one real node can run on a machine (the hard-coded paths): real_node_lock() serializes.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import kubernetes.client as k8s
from kubernetes.client.exceptions import ApiException

from tests.controlplane.binaries import Binaries
from tests.controlplane.cluster import ControlPlane, NodeSupport
from tests.controlplane.processes import wait_until
from tests.node.binaries import NodeBinaries
from tests.node.containerd import SHIM_SOCKET_DIR, Containerd, ContainerdPaths
from tests.node.images import BuiltImage, busybox_image, pause_image
from tests.node.kubelet import CGROUP_ROOT, Kubelet, KubeletPaths
from tests.node.network import NodeNetwork, link_exists

LOCK_PATH = Path("/tmp/topodra-realnode.lock")
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CGROUP_FS = Path("/sys/fs/cgroup")
DEFAULT_NODE_NAME = "tdrn-node"


class NodeLockTimeout(RuntimeError):
    """Another real node holds the machine for longer than we wait."""


@contextlib.contextmanager
def real_node_lock(timeout: float = 3600.0, path: Path = LOCK_PATH) -> Iterator[None]:
    """Holds the machine-wide real-node lock; waits (up to `timeout`) while another session has it."""
    with path.open("a+") as f:
        deadline = time.monotonic() + timeout
        announced = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                f.seek(0)
                raise NodeLockTimeout(f"{path} still held after {timeout:.0f} s by: {f.read().strip()}")
            if not announced:
                f.seek(0)
                sys.stderr.write(f"\nreal node: waiting for {path} (held by: {f.read().strip()})\n")
                announced = True
            time.sleep(1.0)
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} ({' '.join(sys.argv)[:200]}) since {time.strftime('%H:%M:%S')}\n")
        f.flush()
        try:
            yield
        finally:
            f.seek(0)
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class RunPaths:
    base: Path

    @property
    def cp(self) -> Path:
        return self.base / "cp"

    @property
    def cdi(self) -> Path:
        return self.base / "cdi"

    @property
    def hooks(self) -> Path:
        return self.base / "hooks"

    @property
    def topodra_state(self) -> Path:
        return self.base / "topodra"

    @property
    def cni_conf(self) -> Path:
        return self.base / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.base / "cni-ipam"


class RealNode:
    """Brings the node up (start) and everything it started down again (stop)."""

    def __init__(
        self,
        run_dir: Path,
        cp_binaries: Binaries,
        binaries: NodeBinaries,
        network: NodeNetwork,
        *,
        name: str = DEFAULT_NODE_NAME,
    ) -> None:
        self.run_dir = run_dir
        self.paths = RunPaths(run_dir)
        self.binaries = binaries
        self.network = network
        self.name = name
        self.cp = ControlPlane(
            self.paths.cp,
            cp_binaries,
            node_support=NodeSupport(address=network.node_ip, service_range=network.service_range),
        )
        self.containerd = Containerd(ContainerdPaths(run_dir / "containerd"), binaries)
        self.kubelet = Kubelet(KubeletPaths(run_dir), binaries, name, network.node_ip)
        self.pause: BuiltImage | None = None
        self.busybox: BuiltImage | None = None
        self.timings: dict[str, float] = {}
        self._created: list[Path] = []  # hard-coded folders this node made (removed at stop)
        self._mounted_self = False
        self._started = False

    # ----- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> RealNode:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 180.0) -> None:
        began = time.monotonic()
        self._started = True
        try:
            self._prepare_host()
            self._timed("control plane", lambda: (self.cp.start(), self.cp.install_driver_access()))
            self._timed("images", self._build_images)
            self._timed("containerd", self._start_containerd)
            self._timed("kubelet", lambda: self._start_kubelet(timeout))
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began

    def _timed(self, what: str, step: Callable[[], object]) -> None:
        began = time.monotonic()
        step()
        self.timings[what] = time.monotonic() - began

    def _prepare_host(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for d in (self.paths.cdi, self.paths.hooks, self.paths.topodra_state, self.paths.cni_ipam):
            d.mkdir(parents=True, exist_ok=True)
        # A shared mount: the kubelet's and the NIC driver's Bidirectional volumes need one.
        _run("mount", "--bind", str(self.run_dir), str(self.run_dir))
        self._mounted_self = True
        _run("mount", "--make-rshared", str(self.run_dir))
        for path in (DEVICE_PLUGINS.parent, DEVICE_PLUGINS, CONTAINER_LOG_LINKS, SHIM_SOCKET_DIR.parent):
            if not path.exists():
                self._created.append(path)
        for hierarchy in _cgroup_hierarchies():
            (hierarchy / CGROUP_ROOT.lstrip("/")).mkdir(exist_ok=True)
        self.network.create()
        self.network.write_conf(self.paths.cni_conf, self.paths.cni_ipam)

    def _build_images(self) -> None:
        self.pause = pause_image(self.binaries.pause)
        self.busybox = busybox_image(self.binaries.busybox)

    def _start_containerd(self) -> None:
        assert self.pause is not None and self.busybox is not None
        self.containerd.write_config(
            cdi_dir=self.paths.cdi, cni_conf_dir=self.paths.cni_conf, sandbox_image=self.pause.name
        )
        self.containerd.start()
        present = set(self.containerd.images())
        for image in (self.pause, self.busybox):
            if image.name not in present:
                self.containerd.import_image(image.archive)

    def _start_kubelet(self, timeout: float) -> None:
        self.kubelet.configure(self.cp, self.containerd.endpoint)
        self.kubelet.start()
        self.wait_node_ready(timeout)

    def wait_node_ready(self, timeout: float = 120.0) -> None:
        """Ready and without the not-ready/unreachable taints (what lets the scheduler place Pods)."""
        core = k8s.CoreV1Api(self.cp.admin)

        def ready() -> bool:
            node = core.read_node(self.name)
            conds = {c.type: c.status for c in node.status.conditions or []}
            taints = [t.key for t in node.spec.taints or []]
            return conds.get("Ready") == "True" and not any(
                t.startswith("node.kubernetes.io/not-ready") or t.startswith("node.kubernetes.io/unreachable")
                for t in taints
            )

        wait_until(f"node {self.name} Ready", ready, timeout, alive=self._alive)

    def _alive(self) -> None:
        self.kubelet.process.check_alive()
        if not self.containerd.running:
            raise RuntimeError(f"containerd is not running\n{self.containerd.tail(30)}")

    def stop(self, *, keep_run_dir: bool = False) -> list[str]:
        """Tears down everything start() made, even a half-started node. Returns what went wrong."""
        if not self._started:
            return []
        self._started = False
        problems: list[str] = []

        def step(what: str, fn: Callable[[], object]) -> None:
            try:
                fn()
            except Exception as e:  # teardown goes on: leaving the rest behind would be worse
                problems.append(f"{what}: {e}")

        if self.kubelet.running and self.containerd.running:
            step("deleting pods", self._delete_all_pods)
        step("kubelet", self.kubelet.stop)
        step("containerd", self.containerd.stop)
        step("containers", self._kill_containers)
        step("shims", self._kill_shims)
        step("cgroups", _remove_cgroups)
        step("mounts", self._unmount_all)
        step("bridge", self.network.delete)
        step("hard-coded paths", self._clean_hardcoded)
        step("control plane", self.cp.stop)
        if not keep_run_dir:
            step("run folder", lambda: shutil.rmtree(self.run_dir))
        if problems:
            sys.stderr.write(f"\nreal node teardown: {problems}\n")
        return problems

    def simulate_reboot(self, hardware: Callable[[], object] | None = None, timeout: float = 180.0) -> float:
        """Everything a reboot loses, lost; then the node boots again. Returns the seconds taken.

        Lost: every process (kubelet, containerd, shims, containers), every mount under the run
        folder (pod volumes, network namespace pins, container root filesystems), the kubelet's
        cgroups, and the tmpfs folders: the CDI specs (/var/run/cdi) and containerd's state
        (/run/containerd). Kept, as on disk: the kubelet's root dir with its checkpoints, the
        drivers' checkpoints, containerd's root (images), the installed hooks, pod logs.
        `hardware` runs before boot: devices that disappeared with the namespaces (veths)
        come back as a physical device would.
        """
        began = time.monotonic()
        self.kubelet.stop(grace=0)
        self.containerd.stop(grace=0)
        self._kill_containers()
        self._kill_shims()
        _remove_cgroups()
        self._unmount_all(keep_self=True)
        for folder in (self.paths.cdi, self.containerd.paths.state, self.containerd.paths.runc_root):
            shutil.rmtree(folder, ignore_errors=True)
        self.paths.cdi.mkdir()
        for sock in (self.containerd.paths.socket, self.containerd.paths.nri_socket):
            sock.unlink(missing_ok=True)
        self._clean_hardcoded(keep_folders=True)
        for hierarchy in _cgroup_hierarchies():
            (hierarchy / CGROUP_ROOT.lstrip("/")).mkdir(exist_ok=True)
        if hardware is not None:
            hardware()
        self.containerd.start()
        self.kubelet.start()
        self.wait_node_ready(timeout)
        return time.monotonic() - began

    def leftovers(self) -> list[str]:
        """What a stopped node still left on the machine (empty after a clean stop())."""
        inside = [m for m in _mount_points() if m == str(self.run_dir) or m.startswith(f"{self.run_dir}/")]
        found = [f"mount {m}" for m in inside]
        if self.run_dir.exists():
            found.append(f"folder {self.run_dir}")
        if link_exists(self.network.bridge):
            found.append(f"bridge {self.network.bridge}")
        found += [f"cgroup {h / CGROUP_ROOT.lstrip('/')}" for h in _cgroup_hierarchies()
                  if (h / CGROUP_ROOT.lstrip("/")).exists()]  # fmt: skip
        found += [f"shim pid {pid}" for pid in self._shim_pids()]
        found += [f"folder {p}" for p in self._created if p.exists()]
        if CONTAINER_LOG_LINKS.is_dir():
            found += [f"log link {link}" for link in CONTAINER_LOG_LINKS.iterdir()
                      if link.is_symlink() and os.readlink(link).startswith(str(self.run_dir))]  # fmt: skip
        return found

    # ----- teardown steps ------------------------------------------------------------------------

    def delete_workloads(self, timeout: float = 90.0) -> list[str]:
        """Every Pod that no DaemonSet runs, deleted through the API and waited for while the
        drivers still run (the kubelet needs them to unprepare the Pods' claims). Returns the
        names of those still there after `timeout`."""
        core = k8s.CoreV1Api(self.cp.admin)

        def workloads() -> list[k8s.V1Pod]:
            return [
                p
                for p in core.list_pod_for_all_namespaces().items
                if not any(o.kind == "DaemonSet" for o in p.metadata.owner_references or [])
            ]

        for pod in workloads():
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and workloads():
            time.sleep(1.0)
        return [f"{p.metadata.namespace}/{p.metadata.name}" for p in workloads()]

    def _delete_all_pods(self, timeout: float = 90.0) -> None:
        """Through the API first, so the kubelet stops the containers and unprepares their claims:
        workloads while the drivers run, then the DaemonSets."""
        core = k8s.CoreV1Api(self.cp.admin)
        apps = k8s.AppsV1Api(self.cp.admin)
        self.delete_workloads(timeout)
        for ds in apps.list_daemon_set_for_all_namespaces().items:
            with contextlib.suppress(ApiException):
                apps.delete_namespaced_daemon_set(ds.metadata.name, ds.metadata.namespace)
        for pod in core.list_pod_for_all_namespaces().items:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and core.list_pod_for_all_namespaces().items:
            time.sleep(1.0)
        left = core.list_pod_for_all_namespaces().items
        for pod in left:
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        if left:
            raise RuntimeError(f"pods not gone after {timeout:.0f} s: {[p.metadata.name for p in left]}")

    def _kill_containers(self) -> None:
        """Containers outlive containerd (their shims keep them): kill them through runc's state."""
        root = self.containerd.paths.runc_root
        for ns_root in sorted(root.iterdir()) if root.is_dir() else []:
            listed = subprocess.run(
                [str(self.binaries.runc), "--root", str(ns_root), "list", "--quiet"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            for cid in listed.stdout.split():
                for args in (["kill", "--all", cid, "KILL"], ["delete", "--force", cid]):
                    subprocess.run(
                        [str(self.binaries.runc), "--root", str(ns_root), *args],
                        capture_output=True, timeout=30, check=False,
                    )  # fmt: skip

    def _shim_pids(self) -> list[int]:
        """The shims this node's containerd started (their -address is its socket)."""
        address = str(self.containerd.paths.socket).encode()
        mine = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address in argv:
                mine.append(int(proc.name))
        return mine

    def _kill_shims(self) -> None:
        mine = self._shim_pids()
        for pid in mine:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while mine and time.monotonic() < deadline:
            mine = [p for p in mine if Path(f"/proc/{p}").exists()]
            time.sleep(0.1)

    def _unmount_all(self, *, keep_self: bool = False) -> None:
        """Every mount under the run folder, deepest first, then the folder's own bind mount."""
        prefix = str(self.run_dir)
        mine = (
            (lambda m: m.startswith(prefix + "/"))
            if keep_self
            else (lambda m: m == prefix or m.startswith(prefix + "/"))
        )
        for attempt in range(3):
            points = sorted(
                (m for m in _mount_points() if mine(m)),
                key=lambda m: m.count("/"),
                reverse=True,
            )
            if not points:
                return
            for m in points:
                flags = ["-l"] if attempt else []
                subprocess.run(["umount", *flags, m], capture_output=True, timeout=30, check=False)
        left = [m for m in _mount_points() if mine(m)]
        if left:
            raise RuntimeError(f"still mounted: {left}")

    def _clean_hardcoded(self, *, keep_folders: bool = False) -> None:
        if CONTAINER_LOG_LINKS.is_dir():
            for link in CONTAINER_LOG_LINKS.iterdir():
                with contextlib.suppress(OSError):
                    if link.is_symlink() and os.readlink(link).startswith(str(self.run_dir)):
                        link.unlink()
        with contextlib.suppress(FileNotFoundError):
            (DEVICE_PLUGINS / "kubelet.sock").unlink()
        if SHIM_SOCKET_DIR.is_dir():
            for sock in SHIM_SOCKET_DIR.iterdir():
                # A shim socket whose shim is gone refuses connections; ours are all gone by now.
                if sock.is_socket() and not _socket_listening(sock):
                    sock.unlink(missing_ok=True)
        for path in [] if keep_folders else reversed(self._created):
            with contextlib.suppress(OSError):
                path.rmdir() if path != SHIM_SOCKET_DIR.parent else _rmdir_tree_if_empty(path)

    # ----- API helpers for tests -----------------------------------------------------------------

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.cp.admin)

    def pod_log(self, namespace: str, pod: str, container: str) -> str:
        """A container's log as the kubelet wrote it (all restarts, oldest first)."""
        texts = []
        for folder in sorted(self.kubelet.paths.pod_logs.glob(f"{namespace}_{pod}_*/{container}")):
            for f in sorted(folder.glob("*.log"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1):
                texts.append(_cri_log_text(f.read_text(errors="replace")))
        return "".join(texts)

    def logs(self, lines: int = 40) -> str:
        return "\n".join([self.kubelet.tail(lines), self.containerd.tail(lines), self.cp.logs(lines)])

    def describe(self) -> dict[str, Any]:
        return {
            "node": self.name,
            "server": self.cp.server,
            "kubeconfig": str(self.cp.kubeconfig),
            "nri_socket": str(self.containerd.paths.nri_socket),
            "containerd_socket": str(self.containerd.paths.socket),
            "timings": dict(self.timings),
        }


def _cri_log_text(raw: str) -> str:
    """CRI log lines are `<time> <stream> <F|P> <text>`; the text, joined as the program wrote it."""
    out = []
    for line in raw.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4:
            out.append(parts[3] + ("\n" if parts[2] == "F" else ""))
    return "".join(out)


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        points.append(fields[4].replace("\\040", " "))
    return points


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, the named systemd one, the unified one)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        if post.split()[0] in ("cgroup", "cgroup2"):
            out.append(Path(pre.split()[4]))
    return sorted(set(out))


def _remove_cgroups() -> None:
    """The kubelet's cgroup tree in every hierarchy: processes left in it killed, folders removed."""
    left: list[str] = []
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / CGROUP_ROOT.lstrip("/")
        if not top.is_dir():
            continue
        folders = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
        for folder in [*folders, top]:
            with contextlib.suppress(OSError):
                for pid in (folder / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(str(folder))
    if left:
        raise RuntimeError(f"cgroups not removed: {left[:5]}")


def _socket_listening(path: Path) -> bool:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True


def _rmdir_tree_if_empty(path: Path) -> None:
    """/run/containerd (made by us) with its empty `s` folder."""
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        sub.rmdir()
    path.rmdir()
