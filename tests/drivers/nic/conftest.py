"""Fixtures for the NIC driver: synthetic machines, and real veth pairs / network namespaces.

Everything the netns fixtures create is named `tdn<hex>...` (≤15 bytes) and removed again even
when the test fails. No test sends traffic: links in test namespaces stay without carrier or
are only brought up towards a peer that is down.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from topodra.common.runtime.driver import ClaimRef
from topodra.common.synth import shipped_spec_names

from tests.conftest import skip_or_fail
from tests.kit.claims import Result, claim_object, create_allocated
from tests.kit.machines import SynthTree, synth_builder

SYNTH_NAMES = shipped_spec_names()


@pytest.fixture(scope="session")
def synth_machine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], SynthTree]:
    """Builds a shipped synthetic machine once per session (the 300-VF one takes ~15 s)."""
    return synth_builder(tmp_path_factory, "nic-synth")


# --- real links ---------------------------------------------------------------------------------


def vf_rdma(manifest: dict[str, Any]) -> dict[str, Any]:
    """A synthetic plan's first RDMA device on an SR-IOV VF (its PF, with VFs enabled, is not
    published by default)."""
    vfs = {p["bdf"] for p in manifest["pci"] if p.get("physfn")}
    rdma: dict[str, Any] = next(r for r in manifest["rdma"] if r["pci"] in vfs)
    return rdma


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=15)


def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespace tests need root"
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        return "iproute2 and nsenter are needed"
    probe = f"tdn{uuid.uuid4().hex[:6]}p"
    out = _ip("link", "add", probe, "type", "veth", "peer", "name", probe + "q", check=False)
    if out.returncode != 0:
        return f"cannot create veth pairs here: {out.stderr.strip()}"
    _ip("link", "del", probe, check=False)
    return None


@dataclass
class Links:
    """Creates veth pairs and namespaces for one test and removes every one of them."""

    tag: str
    namespaces: list[str]
    links: list[str]
    mounts: list[str]
    prefix: str = "tdn"  # what every name starts with (another test module may use its own)

    def name(self, suffix: str) -> str:
        n = f"{self.prefix}{self.tag}{suffix}"
        assert len(n) <= 15, n
        return n

    def netns(self, suffix: str = "n") -> str:
        ns = self.name(suffix)
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        return ns

    def veth(self, host: str, peer: str, peer_netns: str | None = None) -> str:
        """A veth pair; `peer` goes into `peer_netns` when given. Returns the host end's MAC."""
        _ip("link", "add", host, "type", "veth", "peer", "name", peer)
        self.links.append(host)
        if peer_netns:
            _ip("link", "set", peer, "netns", peer_netns)
        return Path(f"/sys/class/net/{host}/address").read_text().strip()

    def bridge(self, name: str) -> None:
        """An empty Linux bridge (ports join it with `ip link set PORT master NAME`)."""
        _ip("link", "add", name, "type", "bridge")
        self.links.append(name)

    def track_mount(self, path: str) -> None:
        self.mounts.append(path)

    def cleanup(self) -> None:
        for m in self.mounts:
            subprocess.run(["umount", m], capture_output=True, check=False)
        # a link may have been renamed by the code under test: find ours by prefix
        out = _ip("-j", "link", "show", check=False)
        for e in json.loads(out.stdout or "[]"):
            if str(e.get("ifname", "")).startswith(f"{self.prefix}{self.tag}"):
                _ip("link", "del", e["ifname"], check=False)
        for ns in self.namespaces:
            _ip("netns", "del", ns, check=False)


def make_links(prefix: str = "tdn") -> Iterator[Links]:
    reason = netns_unavailable()
    if reason:
        skip_or_fail(reason)
    made = Links(uuid.uuid4().hex[:5], [], [], [], prefix)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def links() -> Iterator[Links]:
    yield from make_links()


def host_link(name: str) -> dict[str, Any] | None:
    out = _ip("-j", "link", "show", "dev", name, check=False)
    if out.returncode != 0:
        return None
    data: list[dict[str, Any]] = json.loads(out.stdout)
    return data[0] if data else None


def netns_links(ns: str) -> dict[str, dict[str, Any]]:
    out = _ip("-n", ns, "-j", "link", "show")
    return {e["ifname"]: e for e in json.loads(out.stdout)}


@contextlib.contextmanager
def process_in(ns: str) -> Iterator[int]:
    """A sleeping process inside `ns` (stands in for a container's init) -> its pid."""
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"])
    try:
        # `ip netns exec` execs sleep in place once it has joined the namespace
        for _ in range(100):
            try:
                if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == os.stat(f"/run/netns/{ns}").st_ino:
                    break
            except OSError:
                pass
            subprocess.run(["sleep", "0.02"], check=False)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


# --- the control-plane tier -----------------------------------------------------------------------

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceclaims"


@pytest.fixture(scope="module")
def kube(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any, str, str]]:
    """(control plane, admin ApiClient, namespace, node name) for this module."""
    try:
        cp = request.getfixturevalue("control_plane")
    except pytest.FixtureLookupError:
        pytest.skip("the control_plane fixture (tests/controlplane) is not available")
    api = cp.api_client()
    ns = f"nic-{uuid.uuid4().hex[:8]}"
    node = f"nic-node-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    cp.create_node(node)
    yield cp, api, ns, node
    client.CoreV1Api(api).delete_namespace(ns)
    client.CoreV1Api(api).delete_node(node)


def allocated_claim(
    api: Any, ns: str, node: str, devices: list[tuple[str, str]], config: Sequence[dict[str, Any]] = ()
) -> ClaimRef:
    """A claim allocated (as the scheduler would, via the status subresource) to `node`;
    `devices` = (driver, device) pairs, `config` = allocation config entries."""
    results = [Result("nic", dev, node, drv) for drv, dev in devices]
    name = f"c-{uuid.uuid4().hex[:8]}"
    obj = claim_object(ns, name, "", results, config, device_class="nic.topodra.io", node=node)
    return create_allocated(api, obj)


def status_devices(api: Any, ref: ClaimRef) -> list[dict[str, Any]]:
    obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, ref.namespace, PLURAL, ref.name
    )
    devices: list[dict[str, Any]] = (obj.get("status") or {}).get("devices") or []
    return devices
