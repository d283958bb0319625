"""An accelerator claim through the real runtime path: the ClaimManager writes the claim's CDI
spec, podman + runc start a busybox container with its CDI ids, and the container sees exactly
the allocated accelerators' device nodes (with the numbers sysfs gives) and TOPODRA_ACCELERATORS.

The machine is synthetic (gpu-box: two MI210s, three H100s); its device nodes are real character
devices made with mknod under a temporary dev root, with the majors sysfs names (226 DRM, 195
NVIDIA), which no driver owns on this host: opening one inside the container gets ENXIO, so
nothing is touched. The spec goes to the real /var/run/cdi (podman reads nothing else here)
under a fresh claim UID and is removed by unprepare. Only the claim GET is a stand-in.

Stand-in kept (podman): a two-vendor machine and a device node replaced between prepare and start,
which the real-node tier's one synthetic machine does not have; the real kubelet + containerd path
is tests/node.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.drivers.accelerator.devices import DRIVER
from topodra.drivers.accelerator.driver import AcceleratorDriver
from topodra.drivers.accelerator.options import AcceleratorOptions

from tests.container.podman import busybox_image, run  # noqa: F401  (fixture)
from tests.unit.runtime_claims.claimkit import NODE, MemoryClaimStore, Result, claim_object, new_uid

CDI_ROOT = Path("/var/run/cdi")
SHOW = "for f in /dev/dri/* /dev/nvidia*; do stat -c '%n %F %t:%T' $f; done; env | grep '^TOPODRA_' | sort"
MI210, H100 = "pci-0000-06-00-0", "pci-0000-0b-00-0"  # gpu-box


def seen(out: str) -> dict[str, str]:
    """'/dev/dri/renderD129 character special file e2:81' lines -> path: 'major:minor' (decimal)."""
    nodes = {}
    for line in out.splitlines():
        if line.startswith("/dev/") and "character special file" in line:
            path, numbers = line.split()[0], line.split()[-1]
            major, minor = (int(x, 16) for x in numbers.split(":"))
            nodes[path] = f"{major}:{minor}"
    return nodes


@pytest.mark.container
def test_container_sees_the_allocated_nodes_and_addresses(
    busybox_image: str,  # noqa: F811
    tree: Callable[[str], Path],
    dev_root: Callable[[Path], Path],
    tmp_path: Path,
) -> None:
    root = tree("gpu-box")
    dev = dev_root(root)
    driver = AcceleratorDriver(AcceleratorOptions(sysfs_root=root, node_name=NODE, dev_root=dev))
    store = MemoryClaimStore()
    results = [Result("big", H100, driver=DRIVER), Result("small", MI210, driver=DRIVER)]
    ref = store.put(claim_object("ns1", "gpus", new_uid(), results))
    m = ClaimManager(
        driver, NODE, store, Checkpoint(tmp_path / "ckpt", DRIVER), CdiWriter(CDI_ROOT, cdi_kind(DRIVER))
    )
    m.start()
    spec_file = CDI_ROOT / f"{DRIVER}-claim_{ref.uid}.json"
    out = m.prepare([ref])[ref.uid]
    released = False
    try:
        assert not out.error, out.error
        assert spec_file.exists()
        ids = [i for d in out.devices for i in d.cdi_device_ids]
        res = run(busybox_image, ["sh", "-c", SHOW], devices=ids)
        assert res.returncode == 0, res.stderr
        nodes = seen(res.stdout)
        assert nodes == {
            "/dev/dri/renderD131": "226:131",  # the H100's render and card nodes
            "/dev/dri/card4": "226:4",
            "/dev/nvidia1": "195:1",  # its NVIDIA minor (proc/driver/nvidia/gpus/.../information)
            "/dev/nvidiactl": "195:255",
            "/dev/dri/renderD129": "226:129",  # the MI210's
            "/dev/dri/card2": "226:2",
        }, res.stdout
        assert "TOPODRA_ACCELERATORS=0000:0b:00.0,0000:06:00.0" in res.stdout.splitlines()

        # only one request's CDI id: that device's nodes; the claim-wide env and nvidiactl stay
        small = next(d for d in out.devices if d.device == MI210)
        res = run(busybox_image, ["sh", "-c", SHOW], devices=list(small.cdi_device_ids))
        assert res.returncode == 0, res.stderr
        assert set(seen(res.stdout)) == {"/dev/dri/renderD129", "/dev/dri/card2", "/dev/nvidiactl"}

        assert m.unprepare([ref]) == {ref.uid: ""}
        released = True
        assert not spec_file.exists()
        assert driver.held() == {}
    finally:
        if not released:
            m.unprepare([ref])
        m.close()


@pytest.mark.container
def test_a_stale_host_node_stops_the_claim_before_any_container(
    busybox_image: str,  # noqa: F811
    tree: Callable[[str], Path],
    dev_root: Callable[[Path], Path],
    tmp_path: Path,
) -> None:
    """A render node whose numbers are not the GPU's (left over from another boot) fails the
    claim with the reason; no spec is written, so no container can get the wrong device."""
    from tests.drivers.accelerator.conftest import make_node

    root = tree("gpu-box")
    dev = dev_root(root)
    make_node(dev, "/dev/dri/renderD129", 226, 131)
    driver = AcceleratorDriver(AcceleratorOptions(sysfs_root=root, node_name=NODE, dev_root=dev))
    store = MemoryClaimStore()
    ref = store.put(claim_object("ns1", "stale", new_uid(), [Result("gpu", MI210, driver=DRIVER)]))
    m = ClaimManager(
        driver, NODE, store, Checkpoint(tmp_path / "ckpt", DRIVER), CdiWriter(CDI_ROOT, cdi_kind(DRIVER))
    )
    m.start()
    try:
        out = m.prepare([ref])[ref.uid]
        assert "renderD129 is character device 226:131, but sysfs says 226:129" in out.error
        assert not (CDI_ROOT / f"{DRIVER}-claim_{ref.uid}.json").exists()
        assert driver.held() == {}
    finally:
        m.close()
