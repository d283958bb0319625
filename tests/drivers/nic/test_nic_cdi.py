"""The CDI specs of both netdev paths, read by the reference CDI library.

podman 4.3 here reads cdiVersion ≤ 0.5.0, so the netDevices path (1.1.0) cannot run in a
container on this machine. What can be proven is what containerd and CRI-O would do with the
spec: `cdicheck` (Go, tags.cncf.io/container-device-interface v1.1.2, the library both use)
loads the claim's spec file as written by the claim core and injects its devices into an OCI
spec. The netDevices entry must come out as OCI `linux.netDevices`, the pin hook as a
createRuntime hook; the hook path's spec must stay readable by old runtimes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.drivers.nic.devices import DRIVER
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.conftest import skip_or_fail
from tests.drivers.nic.conftest import SynthTree, vf_rdma
from tests.unit.runtime_claims.claimkit import NODE, MemoryClaimStore, Result, claim_object, new_uid

CHECKER = Path(__file__).parent / "cdicheck"


@pytest.fixture(scope="session")
def cdicheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        skip_or_fail("Go is not installed (needed to build the CDI reference checker)")
        raise AssertionError("unreachable")
    out = tmp_path_factory.mktemp("cdicheck") / "cdicheck"
    env = {**os.environ, "CGO_ENABLED": "0"}
    done = subprocess.run(
        [go, "build", "-o", str(out), "."], cwd=CHECKER, capture_output=True, text=True, env=env, timeout=600
    )
    if done.returncode != 0:
        skip_or_fail(f"cannot build cdicheck (Go module proxy unreachable?): {done.stderr[-800:]}")
    return out


def prepare_with(
    mode: str, root: Path, tmp_path: Path, device: str, **params: object
) -> tuple[ClaimManager, Path, list[str], Any]:
    d = NicDriver(
        NicOptions(
            sysfs_root=str(root),
            node_name=NODE,
            netdev_mode=mode,
            hook_dir=tmp_path / "hooks",
            state_dir=tmp_path / "state",
        )
    )
    store = MemoryClaimStore()
    config = {
        "source": "FromClaim",
        "requests": [],
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": "nic.topodra.io/v1alpha1", "kind": "NicConfig", **params},
        },
    }
    ref = store.put(claim_object("ns1", "nic", new_uid(), [Result("nic", device, driver=DRIVER)], [config]))
    cdi = tmp_path / "cdi"
    m = ClaimManager(d, NODE, store, Checkpoint(tmp_path / "ckpt", DRIVER), CdiWriter(cdi, cdi_kind(DRIVER)))
    m.start()
    out = m.prepare([ref])[ref.uid]
    assert not out.error, out.error
    return m, cdi, [i for dev in out.devices for i in dev.cdi_device_ids], ref


def inject(checker: Path, cdi: Path, ids: list[str]) -> dict[str, Any]:
    done = subprocess.run([str(checker), str(cdi), *ids], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    spec: dict[str, Any] = json.loads(done.stdout)
    return spec


@pytest.fixture
def machine(synth_machine: Callable[[str], SynthTree]) -> SynthTree:
    return synth_machine("2s-snc2")


def test_cdi_netdevices_spec_is_accepted_and_becomes_oci_netdevices(
    cdicheck: Path, machine: SynthTree, tmp_path: Path
) -> None:
    m = machine.manifest
    eno2 = next(n for n in m["net"] if n["name"] == "eno2")
    device = "pci-" + eno2["pci"].replace(":", "-").replace(".", "-")
    mgr, cdi, ids, ref = prepare_with("cdi", machine.root, tmp_path, device, interfaceName="net1")
    try:
        (spec_file,) = cdi.glob("*.json")
        assert json.loads(spec_file.read_text())["cdiVersion"] == "1.1.0"
        oci = inject(cdicheck, cdi, ids)
        assert oci["linux"]["netDevices"] == {"eno2": {"name": "net1"}}
        (hook,) = oci["hooks"]["createRuntime"]
        assert hook["path"] == str(tmp_path / "hooks" / "netdev.sh")
        assert hook["args"][:2] == ["netdev.sh", "pin"]
        assert f"TOPODRA_NIC_{device.upper().replace('-', '_')}_INTERFACE=net1" in oci["process"]["env"]
    finally:
        assert mgr.unprepare([ref]) == {ref.uid: ""}


def test_hook_path_spec_stays_old_runtime_friendly_and_carries_rdma_nodes(
    cdicheck: Path, machine: SynthTree, tmp_path: Path
) -> None:
    rdma = vf_rdma(machine.manifest)
    device = "pci-" + rdma["pci"].replace(":", "-").replace(".", "-")
    mgr, cdi, ids, ref = prepare_with("hook", machine.root, tmp_path, device, interfaceName="ib9")
    try:
        (spec_file,) = cdi.glob("*.json")
        assert json.loads(spec_file.read_text())["cdiVersion"] in ("0.3.0", "0.5.0")  # podman 4.3: ≤ 0.5.0
        oci = inject(cdicheck, cdi, ids)
        assert "netDevices" not in oci["linux"]
        (hook,) = oci["hooks"]["createRuntime"]
        assert hook["args"][:2] == ["netdev.sh", "attach"]
        assert hook["args"][hook["args"].index("--name") + 1] == "ib9"
        # the driver publishes from a synthetic machine: the hook reads the same tree, not /sys
        assert hook["env"] == [f"TOPODRA_HOOK_SYSFS={machine.root.resolve() / 'sys'}"]
        major, minor = (
            (machine.root / f"sys/class/infiniband_verbs/{rdma['uverbs']}/dev").read_text().split(":")
        )
        nodes = {d["path"]: d for d in oci["linux"]["devices"]}
        uverbs = nodes[f"/dev/infiniband/{rdma['uverbs']}"]
        assert (uverbs["type"], uverbs["major"], uverbs["minor"]) == ("c", int(major), int(minor))
        allowed = oci["linux"]["resources"]["devices"]
        assert any(
            a["allow"] and a.get("major") == int(major) and a.get("minor") == int(minor) for a in allowed
        )
    finally:
        assert mgr.unprepare([ref]) == {ref.uid: ""}
