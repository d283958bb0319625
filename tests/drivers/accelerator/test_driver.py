"""The accelerator driver object: prepare (checked host nodes, CDI edits, env), unprepare, restore,
health transitions and taints, allocated devices retained after removal.

Hardware events that cannot happen on this machine (a GPU falling off the bus, a driver unbind,
AER fatal errors) are produced in a private copy of a synthetic sysfs tree by changing its files
the way the kernel does. Device nodes are real character devices made with mknod (conftest).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from topodra.common.device import Device
from topodra.common.inventory import Inventory
from topodra.common.runtime.config import ConfigError
from topodra.common.runtime.driver import (
    AllocatedDevice,
    Health,
    OpaqueConfig,
    Preparation,
    PrepareError,
)
from topodra.drivers.accelerator.devices import DRIVER
from topodra.drivers.accelerator.driver import ENV, AcceleratorDriver
from topodra.drivers.accelerator.options import AcceleratorOptions

from tests.drivers.accelerator.conftest import add_vfio_groups, fn_dir, make_node
from tests.kit.claims import claim_ref as claim
from tests.kit.inventory import health, no_uevents, published_list, wait_for

TAINT_KEY = f"{DRIVER}/unhealthy"  # the inventory's default for a driver's taints

NODE = "node-a"
GPU0, GPU1 = "pci-0000-01-00-0", "pci-0000-06-00-0"  # gpu-box: MI210s on their own roots


def alloc(device: str, request: str = "gpu", admin: bool = False) -> AllocatedDevice:
    return AllocatedDevice(request, NODE, device, admin_access=admin)


def driver_for(root: Path, dev: Path | None, **kw: Any) -> AcceleratorDriver:
    return AcceleratorDriver(
        AcceleratorOptions(
            sysfs_root=root, node_name=NODE, dev_root=dev or Path("/"), rescan_interval=0.0, **kw
        )
    )


def nodes_of(prep: Preparation) -> dict[str, list[tuple[str, str | None, int | None, int | None]]]:
    out = {
        d.device: [(n.path, n.host_path, n.major, n.minor) for n in d.edits.device_nodes]
        for d in prep.devices
    }
    out["<claim>"] = [(n.path, n.host_path, n.major, n.minor) for n in prep.claim_edits.device_nodes]
    return out


# --- prepare ------------------------------------------------------------------------------------


def test_prepare_hands_out_the_checked_nodes_and_names_the_addresses(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    d = driver_for(root, dev)
    ref = claim()
    prep = d.prepare(ref, [alloc(GPU1, "a"), alloc(GPU0, "b")], [])
    got = nodes_of(prep)
    assert got[GPU1] == [
        ("/dev/dri/renderD129", str(dev / "dev/dri/renderD129"), 226, 129),
        ("/dev/dri/card2", str(dev / "dev/dri/card2"), 226, 2),
    ]
    assert got[GPU0][0] == ("/dev/dri/renderD128", str(dev / "dev/dri/renderD128"), 226, 128)
    assert got["<claim>"] == []
    assert all(n.type == "c" for p in prep.devices for n in p.edits.device_nodes)
    assert prep.claim_edits.env == (f"{ENV}=0000:06:00.0,0000:01:00.0",)
    assert [p.request for p in prep.devices] == ["a", "b"]
    assert d.held() == {GPU0: ref, GPU1: ref}
    assert prep.state["devices"][GPU0]["address"] == "0000:01:00.0"


def test_host_nodes_must_be_the_devices_sysfs_names(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    d = driver_for(root, dev)
    make_node(dev, "/dev/dri/renderD128", 226, 129)  # a stale node: another GPU's numbers
    with pytest.raises(PrepareError, match=r"renderD128 is character device 226:129, but sysfs says 226:128"):
        d.prepare(claim(), [alloc(GPU0)], [])
    (dev / "dev/dri/renderD128").unlink()
    (dev / "dev/dri/renderD128").write_text("not a node")
    with pytest.raises(PrepareError, match="renderD128 is not a character device"):
        d.prepare(claim(), [alloc(GPU0)], [])
    (dev / "dev/dri/renderD128").unlink()
    with pytest.raises(
        PrepareError, match=r"device pci-0000-01-00-0 \(0000:01:00.0\): .*renderD128 is missing"
    ):
        d.prepare(claim(), [alloc(GPU0)], [])
    assert d.held() == {}  # nothing recorded for a refused claim
    # stand-in nodes (a synthetic machine's 1:3) pass only when asked for
    make_node(dev, "/dev/dri/renderD128", 1, 3)
    loose = driver_for(root, dev, node_check="exists")
    prep = loose.prepare(claim(), [alloc(GPU0)], [])
    assert nodes_of(prep)[GPU0][0] == ("/dev/dri/renderD128", str(dev / "dev/dri/renderD128"), 1, 3)


def test_nodes_under_slash_carry_no_host_path(tree: Callable[[str], Path]) -> None:
    """With the default dev root the host path is the path (cdiVersion stays below 0.5.0)."""
    root = tree("gpu-box")
    d = driver_for(root, None)
    acc = d.accelerators()[GPU0]
    from topodra.common.cdi import hostnodes
    from topodra.common.cdi.hostnodes import Node

    null = hostnodes.resolve(Node("/dev/null", 1, 3), Path("/"))
    assert null is not None and null.host_path is None and (null.major, null.minor) == (1, 3)
    with pytest.raises(hostnodes.NodeError, match="/dev/dri/renderD128 is missing on the host"):
        hostnodes.resolve(acc.nodes[0], Path("/"))


def test_nvidia_gpus_get_minor_ctl_and_uvm_nodes(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    d = driver_for(root, dev)
    gpus = sorted(a.name for a in d.accelerators().values() if a.driver == "nvidia")
    prep = d.prepare(claim(), [alloc(gpus[0]), alloc(gpus[1], "b")], [])
    got = nodes_of(prep)
    assert [p for p, *_ in got[gpus[0]]] == ["/dev/dri/renderD130", "/dev/dri/card3", "/dev/nvidia0"]
    assert [p for p, *_ in got[gpus[1]]] == ["/dev/dri/renderD131", "/dev/dri/card4", "/dev/nvidia1"]
    # nvidia-uvm is optional: this host has none, so the claim goes without it
    assert [(p, ma, mi) for p, _, ma, mi in got["<claim>"]] == [("/dev/nvidiactl", 195, 255)]
    # once nvidia-uvm is loaded (proc/devices names its major), its nodes must match that major
    (root / "proc/devices").write_text(
        "Character devices:\n195 nvidia-frontend\n510 nvidia-uvm\n\nBlock devices:\n"
    )
    make_node(dev, "/dev/nvidia-uvm", 510, 0)
    make_node(dev, "/dev/nvidia-uvm-tools", 511, 1)
    with pytest.raises(
        PrepareError, match="nvidia-uvm-tools is character device 511:1, but sysfs says 510:1"
    ):
        d.prepare(claim(), [alloc(gpus[2])], [])
    make_node(dev, "/dev/nvidia-uvm-tools", 510, 1)
    prep = d.prepare(claim(), [alloc(gpus[2])], [])
    assert [p for p, *_ in nodes_of(prep)["<claim>"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]


def test_an_nvidia_gpu_without_a_known_minor_is_refused(tree: Callable[[str], Path], tmp_path: Path) -> None:
    root = tree("gpu-box")
    shutil.rmtree(root / "proc/driver/nvidia")
    d = driver_for(root, tmp_path, taint_unhealthy=True)
    name = next(a.name for a in d.accelerators().values() if a.driver == "nvidia")
    with pytest.raises(PrepareError, match=r"information gives no Device Minor"):
        d.prepare(claim(), [alloc(name)], [])
    # and the scheduler is told: unhealthy, tainted, while the AMD GPUs are fine
    h = health(d)
    assert h[name].health is Health.UNHEALTHY and h[name].message.startswith(
        "cannot be prepared: bound to nvidia"
    )
    assert h[GPU0].health is Health.HEALTHY
    taints = {x.name: [(t.key, t.value) for t in x.taints] for x in published_list(d)}
    assert taints[name] == [(TAINT_KEY, "CannotPrepare")] and taints[GPU0] == []


def test_vfio_functions_get_group_device_and_container_nodes(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("acc-vfs")
    groups = add_vfio_groups(root)
    dev = dev_root(root)
    d = driver_for(root, dev)
    vfs = ["pci-0000-03-00-1", "pci-0000-03-00-2"]
    prep = d.prepare(claim(), [alloc(vfs[0]), alloc(vfs[1], "b")], [])
    got = nodes_of(prep)
    g1, g2 = groups["0000:03:00.1"], groups["0000:03:00.2"]
    assert [p for p, *_ in got[vfs[0]]] == [f"/dev/vfio/{g1}", "/dev/vfio/devices/vfio0"]
    assert [p for p, *_ in got[vfs[1]]] == [f"/dev/vfio/{g2}", "/dev/vfio/devices/vfio1"]
    assert got["<claim>"] == [("/dev/vfio/vfio", str(dev / "dev/vfio/vfio"), 10, 196)]
    assert prep.claim_edits.env == (f"{ENV}=0000:03:00.1,0000:03:00.2",)


def test_two_claims_never_share_a_vfio_group(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    """Two VFs in one IOMMU group (a device without ACS): the group's node opens both, so
    while one claim holds one of them, another claim is refused the other. One claim may have
    both (it gets the node once)."""
    root = tree("acc-vfs")
    fns = root / "sys/bus/pci/devices"
    (fns / "0000:03:00.2/iommu_group").unlink()
    (fns / "0000:03:00.2/iommu_group").symlink_to(os.readlink(fns / "0000:03:00.1/iommu_group"))
    group = add_vfio_groups(root)["0000:03:00.1"]
    d = driver_for(root, dev_root(root))
    vfs = ["pci-0000-03-00-1", "pci-0000-03-00-2"]
    first = claim("first")
    held = d.prepare(first, [alloc(vfs[0])], [])
    with pytest.raises(
        PrepareError,
        match=f"device {vfs[1]} \\(0000:03:00.2\\) is in the IOMMU group of {vfs[0]} of claim ns1/first "
        f"\\(/dev/vfio/{group}\\): whoever opens the group reaches both",
    ):
        d.prepare(claim("second"), [alloc(vfs[1])], [])
    assert d.held() == {vfs[0]: first}
    d.unprepare(first, held)
    both = d.prepare(claim("both"), [alloc(vfs[0]), alloc(vfs[1], "b")], [])
    assert next(p for p, *_ in nodes_of(both)[vfs[0]]) == f"/dev/vfio/{group}"


def test_bad_claims_are_refused_with_the_reason(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    d = driver_for(root, dev)
    with pytest.raises(PrepareError, match="device pci-0000-99-00-0 is not an accelerator here"):
        d.prepare(claim(), [alloc("pci-0000-99-00-0")], [])
    nic = "pci-0000-04-00-1"  # a NIC of this machine: not ours
    with pytest.raises(PrepareError, match=f"device {nic} is not an accelerator here"):
        d.prepare(claim(), [alloc(nic)], [])
    cfg = OpaqueConfig("FromClaim", (), {"apiVersion": "accelerator.topodra.io/v1alpha1", "kind": "X"})
    with pytest.raises(
        ConfigError, match=r"config FromClaim #0: accelerator.topodra.io takes no opaque parameters"
    ):
        d.prepare(claim(), [alloc(GPU0)], [cfg])
    first = claim("first")
    d.prepare(first, [alloc(GPU0)], [])
    with pytest.raises(PrepareError, match="device pci-0000-01-00-0 is held by claim ns1/first"):
        d.prepare(claim("second"), [alloc(GPU0)], [])
    # admin access (monitoring) may look at a held device; it holds nothing itself
    admin = d.prepare(claim("monitor"), [alloc(GPU0, admin=True)], [])
    assert admin.devices[0].edits.device_nodes
    assert d.held() == {GPU0: first}
    # the same claim again (kubelet retries) is fine
    d.prepare(first, [alloc(GPU0)], [])


def test_unbound_device_is_refused_and_unhealthy(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    d = driver_for(root, dev, taint_unhealthy=True)
    assert health(d)[GPU0].health is Health.HEALTHY
    unbind(root, "0000:01:00.0")
    h = health(d)[GPU0]
    assert h.health is Health.UNHEALTHY and h.message == "kernel driver amdgpu unbound"
    published = {x.name: x for x in published_list(d)}
    assert [(t.key, t.value, t.effect) for t in published[GPU0].taints] == [
        (TAINT_KEY, "DriverUnbound", "NoSchedule")
    ]
    assert f"{DRIVER}/kernelDriver" not in published[GPU0].attributes
    with pytest.raises(PrepareError, match="no kernel driver is bound"):
        d.prepare(claim(), [alloc(GPU0)], [])


def unbind(root: Path, bdf: str) -> None:
    """What unbinding amdgpu does to sysfs: the driver link and its DRM nodes go."""
    d = fn_dir(root, bdf)
    (d / "driver").unlink()
    for node in list((d / "drm").iterdir()):
        (root / "sys/class/drm" / node.name).unlink()
    shutil.rmtree(d / "drm")


def rebind(root: Path, bdf: str, driver: str) -> None:
    d = fn_dir(root, bdf)
    os.symlink(os.path.relpath(root / "sys/bus/pci/drivers" / driver, d), d / "driver")


# --- health -------------------------------------------------------------------------------------


def test_unbind_rebind_is_seen_at_once_and_the_device_stays_published(tree: Callable[[str], Path]) -> None:
    """A display-class GPU loses its render node with its driver; it must show up unhealthy,
    not vanish, and come back healthy on rebind without waiting for a full rescan."""
    root = tree("gpu-box")
    d = AcceleratorDriver(AcceleratorOptions(sysfs_root=root, rescan_interval=3600.0, taint_unhealthy=True))
    assert {x.name for x in published_list(d)} >= {GPU0}
    unbind(root, "0000:01:00.0")
    assert GPU0 in {x.name for x in published_list(d)}
    assert health(d)[GPU0].health is Health.UNHEALTHY
    rebind(root, "0000:01:00.0", "amdgpu")
    assert health(d)[GPU0].health is Health.HEALTHY
    dev = {x.name: x for x in published_list(d)}[GPU0]
    assert not dev.taints and dev.attributes[f"{DRIVER}/kernelDriver"] == "amdgpu"


def set_fatal(root: Path, bdf: str, total: int) -> None:
    path = fn_dir(root, bdf) / "aer_dev_fatal"
    lines = [line for line in path.read_text().splitlines() if not line.startswith("TOTAL_ERR_FATAL")]
    path.write_text("\n".join([*lines, f"TOTAL_ERR_FATAL {total}"]) + "\n")


def test_rising_aer_fatal_counters_are_unhealthy_until_the_device_is_new(tree: Callable[[str], Path]) -> None:
    root = tree("gpu-box")
    set_fatal(root, "0000:01:00.0", 2)  # errors before we started are the baseline, not news
    d = driver_for(root, None, taint_unhealthy=True)
    assert health(d)[GPU0].health is Health.HEALTHY
    set_fatal(root, "0000:01:00.0", 3)
    h = health(d)[GPU0]
    assert h.health is Health.UNHEALTHY
    assert h.message == "PCIe AER: 1 fatal error(s) since first seen (TOTAL_ERR_FATAL 2 -> 3)"
    assert health(d)[GPU0].health is Health.UNHEALTHY  # the counter never drops: it stays
    tainted = {x.name: x for x in published_list(d)}[GPU0]
    assert [(t.key, t.value) for t in tainted.taints] == [(TAINT_KEY, "AERFatal")]
    assert health(d)[GPU1].health is Health.HEALTHY
    set_fatal(root, "0000:01:00.0", 0)  # re-enumerated: a new device, counting from 0
    assert health(d)[GPU0].health is Health.HEALTHY
    set_fatal(root, "0000:01:00.0", 1)
    assert health(d)[GPU0].health is Health.UNHEALTHY


def remove_function(root: Path, bdf: str) -> None:
    """A GPU off the bus: the kernel drops its folder, bus entry and class links."""
    d = fn_dir(root, bdf)
    for cls in ("drm", "accel"):
        for node in list((d / cls).iterdir()) if (d / cls).is_dir() else []:
            (root / "sys/class" / cls / node.name).unlink(missing_ok=True)
    (root / "sys/bus/pci/devices" / bdf).unlink()
    shutil.rmtree(d)


def test_a_removed_device_vanishes_unless_allocated(
    tree: Callable[[str], Path], dev_root: Callable[[Path], Path]
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    d = driver_for(root, dev, taint_unhealthy=True)
    before = {x.name: x for x in published_list(d)}
    ref = claim()
    prep = d.prepare(ref, [alloc(GPU0)], [])
    remove_function(root, "0000:01:00.0")
    remove_function(root, "0000:06:00.0")
    published = {x.name: x for x in published_list(d)}
    assert GPU1 not in published  # nobody holds it: gone with the hardware
    assert published[GPU0].attributes == before[GPU0].attributes  # last attributes, kept
    assert published[GPU0].capacity == before[GPU0].capacity
    assert [(t.key, t.value) for t in published[GPU0].taints] == [(TAINT_KEY, "DeviceRemoved")]
    h = health(d)
    assert h[GPU0].health is Health.UNHEALTHY and h[GPU0].message.startswith("device removed")
    assert GPU1 not in h
    with pytest.raises(PrepareError, match="was removed from this node"):
        d.prepare(claim("late"), [alloc(GPU0)], [])

    # a restarted driver learns the allocation from the checkpointed state and keeps publishing it
    again = driver_for(root, dev, taint_unhealthy=True)
    again.restore({ref: prep})
    assert again.held() == {GPU0: ref}
    kept = {x.name: x for x in published_list(again)}[GPU0]
    assert Device(kept.name, kept.attributes, kept.capacity) == Device(
        GPU0, before[GPU0].attributes, before[GPU0].capacity
    )

    again.unprepare(ref, prep)
    assert again.held() == {}
    assert GPU0 not in {x.name for x in published_list(again)}
    again.unprepare(ref, prep)  # already released: still fine


def test_restore_skips_unreadable_entries(tree: Callable[[str], Path]) -> None:
    root = tree("gpu-box")
    d = driver_for(root, None)
    good, bad = claim("good"), claim("bad")
    ok = Preparation(
        devices=(),
        state={"devices": {GPU0: {"address": "0000:01:00.0", "held": True, "device": {"name": GPU0}}}},
    )
    broken = Preparation(devices=(), state={"devices": {GPU1: {"held": True, "device": "garbage"}}})
    d.restore({good: ok, bad: broken, claim("odd"): Preparation(devices=(), state={"devices": [1, 2]})})
    assert d.held() == {GPU0: good}


def test_an_unchanged_machine_is_not_rediscovered_and_a_change_is(tree: Callable[[str], Path]) -> None:
    """The inventory polls the listings and driver links the driver declares; a scan (a full
    discovery) runs only when they changed. uevents are off here, so polling is all there is."""
    root = tree("gpu-box")
    calls: list[str] = []

    def counting(path: str) -> Any:
        from topodra.common.topology import discover

        calls.append(path)
        return discover(path)

    d = AcceleratorDriver(AcceleratorOptions(sysfs_root=root, rescan_interval=0.02), discover_fn=counting)
    inventory = Inventory(d, open_monitor=no_uevents)
    inventory.start()
    try:
        polls = inventory.polls
        wait_for(lambda: inventory.polls >= polls + 5, "five polls")
        assert len(calls) == 1 and inventory.scans == {"start": 1}
        (root / "sys/class/drm/renderD200").symlink_to("nowhere")  # a new DRM node somewhere
        wait_for(lambda: inventory.scans["signature"] == 1, "a scan after the DRM listing changed")
        assert len(calls) == 2
        unbind(root, "0000:01:00.0")  # a driver link and a render node go

        def unhealthy() -> bool:
            gpu0 = inventory.snapshot().health_of(GPU0)
            return gpu0 is not None and gpu0.health is Health.UNHEALTHY

        wait_for(lambda: len(calls) > 2 and unhealthy(), "a scan, and GPU0 unhealthy, after the unbind")
    finally:
        inventory.stop()


def test_dev_root_must_be_absolute_and_node_check_known() -> None:
    from topodra.drivers.accelerator.options import OptionError

    with pytest.raises(OptionError, match="--accelerator-dev-root must be an absolute path"):
        AcceleratorOptions(dev_root=Path("dev"))
    with pytest.raises(OptionError, match="--accelerator-node-check must be one of strict, exists"):
        AcceleratorOptions(node_check="lax")
