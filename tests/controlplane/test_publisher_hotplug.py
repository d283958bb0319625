"""Hot-plug end to end: a device that comes or goes reaches the ResourceSlices on the real
kube-apiserver through the inventory's uevent path, with no periodic scan in between (every
inventory here polls once an hour, so only a uevent can explain the change).

Two sources of uevents, both real sockets:
- a PCI accelerator added to and removed from a synthetic sysfs tree, announced the way udevd
  announces processed events (tests/kit/uevents.py: the libudev netlink message on the kernel's
  uevent socket, group 2), to an inventory listening as it does on a node where udevd runs;
- a veth pair the test creates on this machine: the kernel's own uevent, to an inventory
  listening as it does where no udevd runs (the driver pod's default here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from topodra.common.inventory import DevicesTo, Inventory
from topodra.common.inventory.triggers import open_monitor
from topodra.common.kubeapi.slices import KubeSliceApi
from topodra.common.publisher.publisher import SlicePublisher
from topodra.drivers.accelerator.driver import AcceleratorDriver
from topodra.drivers.accelerator.options import AcceleratorOptions
from topodra.drivers.nic.devices import Selection
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.conftest import skip_or_fail
from tests.controlplane.cluster import ControlPlane, unique_name
from tests.kit import uevents
from tests.kit.inventory import wait_for
from tests.kit.machines import synth_builder

pytestmark = pytest.mark.controlplane

HOUR = 3600.0
GPU = "0000:41:00.0"  # one of the four accelerators of the 1s-4acc machine


@pytest.fixture
def running() -> Iterator[list[Any]]:
    """Inventories and publishers to stop at the end, whatever happens."""
    made: list[Any] = []
    yield made
    for thing in reversed(made):
        thing.stop()


def serve(
    cp: ControlPlane, kind: str, driver: Any, made: list[Any], open_monitor: Callable[..., Any]
) -> tuple[Inventory, str]:
    """The inventory -> publisher path of `topodra serve`, with the driver's own credentials."""
    node = unique_name("hotplug")
    cp.create_node(node)
    publisher = SlicePublisher(KubeSliceApi(cp.driver_client(kind, node)), driver.name, node)
    inventory = Inventory(driver, open_monitor=open_monitor)
    inventory.subscribe(DevicesTo(publisher.set_devices))
    made.append(publisher)
    made.append(inventory)
    publisher.start()
    inventory.start()
    return inventory, node


def published(cp: ControlPlane, driver: str, node: str) -> set[str]:
    items, _ = KubeSliceApi(cp.api_client()).list_slices(f"spec.driver={driver},spec.nodeName={node}")
    return {d["name"] for o in items for d in o["spec"].get("devices", [])}


def no_periodic_scan(inventory: Inventory) -> None:
    assert inventory.polls == 0 and inventory.scans["signature"] == 0, inventory.scans


# --- a PCI accelerator in a synthetic tree -------------------------------------------------------


@pytest.fixture
def machine(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    root = tmp_path / "machine"
    shutil.copytree(synth_builder(tmp_path_factory, "hotplug")("1s-4acc").root, root, symlinks=True)
    return root


def udevd_events_or_skip() -> None:
    """Sending as udevd needs CAP_NET_ADMIN; without it there is no real path to test."""
    try:
        uevents.send("change", "/devices/virtual/topodra-probe", "topodra-probe")
    except PermissionError as e:
        skip_or_fail(f"cannot multicast uevents here (needs CAP_NET_ADMIN): {e}")


def test_an_accelerator_plugged_and_unplugged_reaches_the_slices_by_uevent(
    control_plane: ControlPlane, machine: Path, running: list[Any]
) -> None:
    udevd_events_or_skip()
    bus_link = machine / "sys/bus/pci/devices" / GPU
    devpath = "/" + os.path.relpath(bus_link.resolve(), machine / "sys")
    target = os.readlink(bus_link)
    bus_link.unlink()  # the machine starts without it
    driver = AcceleratorDriver(AcceleratorOptions(sysfs_root=machine, rescan_interval=HOUR))
    inventory, node = serve(
        control_plane, "accelerator", driver, running, partial(open_monitor, source="udev")
    )
    assert inventory.udev_active
    name = "pci-" + GPU.replace(":", "-").replace(".", "-")
    wait_for(lambda: len(published(control_plane, driver.name, node)) == 3, "the first three accelerators")
    assert name not in published(control_plane, driver.name, node)

    began = time.monotonic()
    bus_link.symlink_to(target)  # plugged
    uevents.send("add", devpath, "pci", PCI_SLOT_NAME=GPU)
    wait_for(lambda: name in published(control_plane, driver.name, node), "the new accelerator published")
    print(f"plugged: on the server {time.monotonic() - began:.2f} s after the uevent")
    no_periodic_scan(inventory)
    assert inventory.scans["uevent"] >= 1

    bus_link.unlink()  # pulled
    uevents.send("remove", devpath, "pci", PCI_SLOT_NAME=GPU)
    wait_for(lambda: name not in published(control_plane, driver.name, node), "the accelerator gone")
    no_periodic_scan(inventory)
    assert inventory.scans["uevent"] >= 2


# --- a NIC that appears on this machine ----------------------------------------------------------


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=15)


def veth_or_skip(name: str) -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        skip_or_fail("creating a veth pair needs root and iproute2")
    out = ip("link", "add", name, "type", "veth", "peer", "name", name + "p", check=False)
    if out.returncode != 0:
        skip_or_fail(f"cannot create veth pairs here: {out.stderr.strip()}")


def kernel_monitor(subsystems: Sequence[str]) -> Any:
    return open_monitor(subsystems, source="kernel")


def test_a_nic_that_appears_is_published_without_restarting_the_driver(
    control_plane: ControlPlane, tmp_path: Path, running: list[Any]
) -> None:
    prefix = f"shp{uuid.uuid4().hex[:6]}"  # this test's links only: other tests make veths too
    selection = Selection(include_virtual=True, include_interfaces=(f"{prefix}*",))
    driver = NicDriver(
        NicOptions(selection=selection, state_dir=tmp_path / "state", hook_dir=tmp_path, rescan_interval=HOUR)
    )
    inventory, node = serve(control_plane, "nic", driver, running, kernel_monitor)
    if not inventory.udev_active:
        skip_or_fail("no kernel uevent socket in this environment")
    wait_for(lambda: inventory.snapshot().generation > 0, "the first scan")
    assert published(control_plane, driver.name, node) == set()
    host = prefix + "a"
    try:
        veth_or_skip(host)
        wait_for(lambda: f"net-{host}" in published(control_plane, driver.name, node), "the veth published")
        no_periodic_scan(inventory)
        assert inventory.scans["uevent"] >= 1
    finally:
        ip("link", "del", host, check=False)
    wait_for(lambda: f"net-{host}" not in published(control_plane, driver.name, node), "the veth gone")
    no_periodic_scan(inventory)
