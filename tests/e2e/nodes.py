"""Simulated nodes for the end-to-end tier: a Node object, its own sysfs root, and real drivers.

A node here is what a cluster node is to topodra: a `Node` in the API server, a machine (a
synthetic tree from `topodra synth`, a captured tree, or this host's own `/`), and one
`topodra serve <kind>` process per driver, exactly as the DaemonSets run them. Each process
gets its own ServiceAccount token bound to the node (the RBAC + VAP in deploy/base pin a
driver's writes to its node and its driver name, so one `serve all` with one kubeconfig cannot
stand in for three DaemonSets). Per node: a kubelet root (the plugins' real unix sockets), a
state folder (checkpoints), a CDI folder, hook and NIC state folders, one log file per process.

A `KubeletClient` per driver registers the plugin the way the kubelet's plugin watcher does,
and stays connected for the node's lifetime (tests call `node.kubelet(kind)` to prepare).

    nodes = [SimNode(cp, NodeSpec("n1", root), workdir) ...]
    start_all(nodes)            # processes start in parallel; waits for sockets and slices
    ...
    stop_all(nodes)             # SIGTERM, checks each exited cleanly
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from topodra.common.runtime.checkpoint import newest

from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane, api_resource, driver_name
from tests.kit.children import dying_with_parent
from tests.kit.deployed import driver_env
from tests.kubelet.client import KubeletClient, watch_registry

KINDS = ("cpu", "accelerator", "nic")
HOST_CDI_ROOT = Path("/var/run/cdi")  # podman 4.3 reads /etc/cdi and /var/run/cdi, nothing else


class NodeFailed(AssertionError):
    """A driver process died or a node did not come up; the message carries the process log."""


@dataclass(frozen=True)
class NodeSpec:
    """What to run: `root` holds `sys/` (and `proc/`; a synthetic tree may hold `dev/`).

    `cdi_root` None: a folder of the node's own (enough unless a real container must read the
    specs, which only works from /var/run/cdi). `driver_args` adds flags per driver kind.
    """

    name: str
    root: Path
    kinds: tuple[str, ...] = KINDS
    driver_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    cdi_root: Path | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    description: str = ""


def synthetic_args(root: Path) -> dict[str, list[str]]:
    """Flags for a machine that is not this host: its CPUs do not exist here (no pinning hook,
    only TOPODRA_CPUS_* env) and its device nodes are `topodra synth --dev-nodes` stand-ins
    under root/dev (character devices with /dev/null's numbers, hence `exists`)."""
    args: dict[str, list[str]] = {"cpu": ["--cpu-pinning", "none"]}
    if (root / "dev").is_dir():
        args["accelerator"] = ["--accelerator-dev-root", str(root), "--accelerator-node-check", "exists"]
    return args


class DriverProcess:
    """One `topodra serve <kind>` for one node, its output in a log file; restartable."""

    def __init__(self, kind: str, argv: list[str], log_path: Path) -> None:
        self.kind = kind
        self.driver = driver_name(kind)
        self.argv = argv
        self.log_path = log_path
        self.returncodes: list[int] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._log = self.log_path.open("ab")
        self._log.write(f"\n===== {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            dying_with_parent(self.argv),
            cwd=REPO,
            env=os.environ | driver_env(self.kind),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise NodeFailed(f"{self.driver} exited with {self._proc.returncode}\n{self.tail()}")

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM (SIGKILL after `grace`); returns the exit status."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            code = proc.returncode
            self.returncodes.append(code)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"--- {self.driver}: no log yet"
        return "\n".join([f"--- {self.driver} ({self.log_path}), last {lines} lines:", *text[-lines:]])

    def log_records(self) -> list[dict[str, Any]]:
        """The structured (JSON) log lines so far."""
        out = []
        with contextlib.suppress(FileNotFoundError):
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        out.append(json.loads(line))
        return out


class SimNode:
    """One simulated node: see the module docstring. Create with `SimNode(cp, spec, workdir)`,
    then `start()` + `wait_ready()` (or `start_all`)."""

    def __init__(self, cp: ControlPlane, spec: NodeSpec, workdir: Path) -> None:
        self.cp = cp
        self.spec = spec
        self.name = spec.name
        self.root = spec.root
        self.workdir = workdir
        self.kubelet_root = workdir / "kubelet"
        self.state_dir = workdir / "state"
        self.cdi_root = spec.cdi_root or workdir / "cdi"
        self.hook_dir = workdir / "hooks"
        self.nic_state_dir = workdir / "nic-state"
        self.uid: str | None = None
        self.drivers: dict[str, DriverProcess] = {}
        self._kubelets: dict[str, KubeletClient] = {}
        self._expected: dict[str, list[str]] | None = None

    # ----- lifecycle ---------------------------------------------------------------------------

    def create(self) -> None:
        """The Node object and the per-driver credentials (TokenRequest bound to a driver pod)."""
        for d in (self.kubelet_root, self.state_dir, self.cdi_root, self.hook_dir, self.nic_state_dir):
            d.mkdir(parents=True, exist_ok=True)
        if "cpu" in self.spec.kinds and "none" not in self.spec.driver_args.get("cpu", ()):
            from topodra.drivers.cpu import pinning

            pinning.install_hook(self.hook_dir)
        self.uid = self.cp.create_node(self.name, labels=dict(self.spec.labels))
        for kind in self.spec.kinds:
            kubeconfig = self.cp.driver_kubeconfig(kind, self.name)
            self.drivers[kind] = DriverProcess(
                kind, self._argv(kind, kubeconfig), self.workdir / f"{kind}.log"
            )

    def _argv(self, kind: str, kubeconfig: Path) -> list[str]:
        argv = [sys.executable, "-m", "topodra.drivers.cli.main", "serve", kind]
        argv += ["--node-name", self.name, "--sysfs-root", str(self.root)]
        argv += ["--kubelet-root-dir", str(self.kubelet_root), "--state-dir", str(self.state_dir)]
        argv += ["--cdi-root", str(self.cdi_root), "--kubeconfig", str(kubeconfig)]
        return argv + self._driver_flags(kind)

    def _driver_flags(self, kind: str) -> list[str]:
        """The flags of driver `kind` (also what `topodra slices` must get to compute the same)."""
        flags: list[str] = []
        if kind == "cpu":
            flags += ["--cpu-hook-dir", str(self.hook_dir)]
        if kind == "nic":
            flags += ["--nic-hook-dir", str(self.hook_dir), "--nic-state-dir", str(self.nic_state_dir)]
        return flags + list(self.spec.driver_args.get(kind, ()))

    def start(self) -> None:
        if not self.drivers:
            self.create()
        for proc in self.drivers.values():
            proc.start()

    def check_alive(self) -> None:
        for proc in self.drivers.values():
            proc.check_alive()

    def wait_registered(self, timeout: float = 90.0) -> None:
        """Registers every driver with a kubelet client once its registration socket appears."""
        for kind, proc in self.drivers.items():
            if kind in self._kubelets:
                continue
            sock = self._poll(
                f"{proc.driver} registration socket on {self.name}",
                lambda p=proc: self._registration_socket(p.driver),  # type: ignore[misc]
                timeout,
            )
            client = KubeletClient()
            try:
                client.register(sock)
            except BaseException:
                client.close()
                raise
            self._kubelets[kind] = client

    def _registration_socket(self, driver: str) -> Path | None:
        registry = self.kubelet_root / "plugins_registry"
        if not registry.is_dir():
            return None
        found = [p for p in watch_registry(registry) if p.name.startswith(f"{driver}-")]
        return found[0] if found else None

    def kubelet(self, kind: str) -> KubeletClient:
        """The registered kubelet client of driver `kind` on this node."""
        return self._kubelets[kind]

    def prepare(self, claim: tuple[str, str, str], drivers: Iterable[str]) -> dict[str, Any]:
        """NodePrepareResources for one claim (namespace, name, uid) on each named driver, as
        the kubelet calls every driver that has results in the claim; answer per driver."""
        uid = claim[2]
        return {d: self.kubelet(_kind(d)).prepare([claim]).claims[uid] for d in sorted(set(drivers))}

    def unprepare(self, claim: tuple[str, str, str], drivers: Iterable[str]) -> dict[str, str]:
        """NodeUnprepareResources on each named driver; the error text per driver ('' = done)."""
        uid = claim[2]
        return {
            d: str(self.kubelet(_kind(d)).unprepare([claim]).claims[uid].error) for d in sorted(set(drivers))
        }

    def checkpoint_claims(self, kind: str) -> dict[str, Any]:
        """The claims recorded in the driver's checkpoint file (what it still holds)."""
        found = newest(self.state_dir, driver_name(kind))
        if found is None:
            assert self.state_dir.is_dir(), f"no state folder {self.state_dir}: the checkpoint is elsewhere"
            return {}
        claims: dict[str, Any] = found[1].get("claims") or {}
        return claims

    def stop(self, grace: float = 20.0) -> dict[str, int | None]:
        """Stops every process; returns exit status per driver kind."""
        for client in self._kubelets.values():
            client.close()
        self._kubelets.clear()
        return {kind: proc.stop(grace) for kind, proc in self.drivers.items()}

    def restart_driver(self, kind: str, timeout: float = 90.0) -> None:
        """Stops and starts one driver process (a DaemonSet pod restart) and re-registers it."""
        client = self._kubelets.pop(kind, None)
        if client is not None:
            client.close()
        self.drivers[kind].stop()
        self.drivers[kind].start()
        self.wait_registered(timeout)

    # ----- what the node should publish, and what it does ----------------------------------------

    def expected_devices(self) -> dict[str, list[str]]:
        """Device names per driver kind that `topodra slices` computes for this root with the
        same driver flags (one CLI run for all drivers; computed once)."""
        if self._expected is None:
            argv = [sys.executable, "-m", "topodra.drivers.cli.main", "slices", "--driver", "all"]
            argv += ["--sysfs-root", str(self.root), "--node-name", self.name, "--output", "json"]
            for kind in self.spec.kinds:
                argv += self._driver_flags(kind)
            out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
            if out.returncode != 0:
                raise NodeFailed(f"topodra slices for {self.name} failed ({out.returncode}):\n{out.stderr}")
            by_driver: dict[str, list[str]] = {driver_name(k): [] for k in self.spec.kinds}
            for item in json.loads(out.stdout)["items"]:
                drv = item["spec"]["driver"]
                if drv in by_driver:
                    by_driver[drv].extend(d["name"] for d in item["spec"].get("devices") or [])
            self._expected = {k: sorted(by_driver[driver_name(k)]) for k in self.spec.kinds}
        return self._expected

    def slices(self, kind: str | None = None, client: Any = None) -> list[dict[str, Any]]:
        """This node's ResourceSlices as the API server holds them (admin view)."""
        selector = f"spec.nodeName={self.name}"
        if kind is not None:
            selector += f",spec.driver={driver_name(kind)}"
        api = api_resource(client or self.cp.dynamic, "ResourceSlice")
        return [s.to_dict() for s in api.get(field_selector=selector).items]

    def published_devices(self) -> dict[str, list[str]]:
        """Device names per driver kind in this node's stored slices (complete pools only)."""
        by_driver: dict[str, list[dict[str, Any]]] = {}
        for s in self.slices():
            by_driver.setdefault(s["spec"]["driver"], []).append(s)
        out: dict[str, list[str]] = {}
        for kind in self.spec.kinds:
            items = by_driver.get(driver_name(kind), [])
            if not _complete_pool(items):
                continue
            out[kind] = sorted(d["name"] for s in items for d in s["spec"].get("devices") or [])
        return out

    def device_attributes(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(driver, device) -> attribute map with plain values, from the stored slices."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for s in self.slices():
            for d in s["spec"].get("devices") or []:
                attrs = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()}
                out[(s["spec"]["driver"], d["name"])] = attrs
        return out

    def wait_published(self, timeout: float = 90.0) -> float:
        """Waits until the stored slices hold exactly the expected devices; returns when (monotonic)."""
        expected = self.expected_devices()
        self._poll(f"slices of {self.name} to equal `topodra slices`",
                   lambda: self.published_devices() == expected, timeout)  # fmt: skip
        return time.monotonic()

    def wait_ready(self, timeout: float = 120.0) -> None:
        self.wait_registered(timeout)
        self.wait_published(timeout)

    def _poll(self, what: str, check: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise NodeFailed(f"timed out after {timeout:.0f} s waiting for {what}\n{self.logs()}")
            time.sleep(interval)

    def logs(self, lines: int = 30) -> str:
        return "\n".join(p.tail(lines) for p in self.drivers.values())


def _complete_pool(items: Sequence[dict[str, Any]]) -> bool:
    """All slices of the newest generation are there (what the scheduler waits for too)."""
    if not items:
        return False
    newest = max(int(s["spec"]["pool"]["generation"]) for s in items)
    current = [s for s in items if int(s["spec"]["pool"]["generation"]) == newest]
    return len(current) == int(current[0]["spec"]["pool"]["resourceSliceCount"]) == len(items)


def start_all(nodes: Sequence[SimNode], timeout: float = 180.0) -> float:
    """Creates and starts every node's processes at once, then waits for all; returns seconds."""
    began = time.monotonic()
    for node in nodes:
        node.create()
    for node in nodes:
        node.start()
    # `topodra slices` (the expectation) runs while the drivers start; two at a time (2 cores).
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda n: n.expected_devices(), nodes))
    for node in nodes:
        node.wait_ready(timeout)
    return time.monotonic() - began


def stop_all(nodes: Iterable[SimNode]) -> dict[str, dict[str, int | None]]:
    """Stops every node; returns exit status per node and driver kind."""
    nodes = list(nodes)
    with ThreadPoolExecutor(max(1, len(nodes))) as pool:
        codes = list(pool.map(lambda n: n.stop(), nodes))
    return {n.name: c for n, c in zip(nodes, codes, strict=True)}


def _kind(driver: str) -> str:
    """`nic.topodra.io` -> `nic`."""
    kind = driver.removesuffix(".topodra.io")
    if kind not in KINDS:
        raise ValueError(f"not a topodra driver: {driver}")
    return kind
