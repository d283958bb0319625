"""Proof that a prepared claim really pins: a real container (podman + runc) started with the CDI
spec that the real runtime path wrote runs on exactly the allocated CPUs.

The driver runs on this machine's own sysfs; the ClaimManager writes the claim's spec into
/var/run/cdi (where podman looks); runc runs the shipped cpuset.sh as a createRuntime hook on the
host; inside, the container reads /proc/self/status. Only the claim GET is a stand-in.

Stand-in kept (podman, the Python kubelet client's claim store): CPU policies and a hook made to
fail are configurations the real-node tier's DaemonSet does not run; the real kubelet + containerd
path is tests/node.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.topology import discover
from topodra.drivers.cpu.driver import CpuDriver
from topodra.drivers.cpu.options import CpuOptions

from tests.container.podman import busybox_image, run  # noqa: F401  (busybox_image is a fixture)
from tests.drivers.cpu.kit import NODE, ClaimStore, Result, claim_object, cpu_config, hook_dir

CDI_ROOT = Path("/var/run/cdi")
STATUS = "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status; env | grep '^TOPODRA_CPUS_' | sort"


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[ClaimManager, ClaimStore]]:
    topo = discover("/")
    if "numa-0" not in {g.name for g in CpuDriver(topo, CpuOptions(), Path("/")).groups.values()}:
        pytest.skip("this machine has no NUMA node 0")
    if len(topo.cpus_of_numa(0)) < 2:
        pytest.skip("needs at least 2 CPUs in NUMA node 0 to tell pinned from unpinned")
    driver = CpuDriver(topo, CpuOptions(hook_dir=hook_dir(tmp_path)), Path("/"))
    store = ClaimStore()
    m = ClaimManager(
        driver,
        NODE,
        store,
        Checkpoint(tmp_path / "state", driver.name),
        CdiWriter(CDI_ROOT, cdi_kind(driver.name)),
    )
    m.start()
    yield m, store
    for uid, record in m.prepared().items():  # never leave specs behind in the host's CDI folder
        m.unprepare([record.claim])
        assert CdiWriter(CDI_ROOT, cdi_kind(driver.name)).read(uid) is None
    m.close()


def status(out: str) -> dict[str, str]:
    """'Cpus_allowed_list:\t1' and 'KEY=value' lines as one mapping."""
    seen = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=") if line.startswith("TOPODRA_") else line.partition(":")
        if sep:
            seen[key] = value.strip()
    return seen


def baseline(image: str) -> dict[str, str]:
    out = run(image, ["sh", "-c", STATUS])
    assert out.returncode in (0, 1), out.stderr  # grep exits 1 when no TOPODRA env exists
    return status(out.stdout)


@pytest.mark.container
def test_container_runs_on_the_allocated_cpu(
    manager: tuple[ClaimManager, ClaimStore],
    busybox_image: str,  # noqa: F811
) -> None:
    m, store = manager
    before = baseline(busybox_image)
    assert before["Cpus_allowed_list"] != "1", "an unpinned container must not already be on CPU 1 only"
    claim = store.put(claim_object("pinned", [Result("numa-0", 1)], [cpu_config(cpus="1")]))
    outcome = m.prepare([claim])[claim.uid]
    assert not outcome.error, outcome.error
    (device,) = outcome.devices
    out = run(busybox_image, ["sh", "-c", STATUS], devices=list(device.cdi_device_ids))
    assert out.returncode == 0, out.stderr
    seen = status(out.stdout)
    assert seen["Cpus_allowed_list"] == "1"
    assert seen["Mems_allowed_list"] == "0"
    token = claim.uid.upper().replace("-", "_")
    assert seen[f"TOPODRA_CPUS_{token}"] == "1"


@pytest.mark.container
def test_policy_choice_and_two_claims_add_up(
    manager: tuple[ClaimManager, ClaimStore],
    busybox_image: str,  # noqa: F811
) -> None:
    m, store = manager
    first = store.put(claim_object("first", [Result("numa-0", 1)]))
    second = store.put(claim_object("second", [Result("numa-0", 1)]))
    got = m.prepare([first, second])
    assert not got[first.uid].error and not got[second.uid].error
    ids = [i for uid in (first.uid, second.uid) for d in got[uid].devices for i in d.cdi_device_ids]
    only_first = run(busybox_image, ["sh", "-c", STATUS], devices=ids[:1])
    assert only_first.returncode == 0, only_first.stderr
    assert status(only_first.stdout)["Cpus_allowed_list"] == "0"  # policy: lowest free CPU
    only_second = run(busybox_image, ["sh", "-c", STATUS], devices=ids[1:])
    assert status(only_second.stdout)["Cpus_allowed_list"] == "1"  # never the first claim's CPU
    both = run(busybox_image, ["sh", "-c", STATUS], devices=ids)
    assert both.returncode == 0, both.stderr
    assert status(both.stdout)["Cpus_allowed_list"] == "0-1"  # both hooks pin to the union


@pytest.mark.container
def test_failing_hook_fails_the_container(
    manager: tuple[ClaimManager, ClaimStore],
    busybox_image: str,  # noqa: F811
) -> None:
    """A CPU the container's parent cgroup does not have cannot be pinned: the container must not
    start (rather than run unpinned)."""
    m, store = manager
    claim = store.put(claim_object("doomed", [Result("numa-0", 1)], [cpu_config(cpus="1")]))
    outcome = m.prepare([claim])[claim.uid]
    assert not outcome.error, outcome.error
    writer = CdiWriter(CDI_ROOT, cdi_kind("cpu.topodra.io"))
    spec = writer.read(claim.uid)
    assert spec is not None
    (hook,) = spec["devices"][0]["containerEdits"]["hooks"]
    hook["args"][1] = "999"  # a CPU this host does not have
    writer.write(claim.uid, spec)
    out = run(busybox_image, ["true"], devices=list(outcome.devices[0].cdi_device_ids))
    assert out.returncode != 0
    assert "topodra cpuset hook" in out.stderr
