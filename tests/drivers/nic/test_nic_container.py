"""A NIC claim through the real runtime path: ClaimManager writes the CDI spec with our hook,
podman + runc run a busybox container with it, the container sees the interface under the name
the claim asked for, and after unprepare the interface is back on the host.

The interface is a veth end made by the test (the peer waits, down, in a namespace of its own,
so no packet goes anywhere). The spec goes to the real /var/run/cdi (podman reads nothing else
here) under a fresh claim UID and is removed by unprepare.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.drivers.nic.devices import DRIVER, Selection
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.container.podman import busybox_image, run  # noqa: F401  (fixture)
from tests.drivers.nic.conftest import Links, host_link
from tests.unit.runtime_claims.claimkit import NODE, MemoryClaimStore, Result, claim_object, new_uid

CDI_ROOT = Path("/var/run/cdi")


def nic_claim(device: str, **params: object) -> dict[str, object]:
    config = {
        "source": "FromClaim",
        "requests": [],
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": "nic.topodra.io/v1alpha1", "kind": "NicConfig", **params},
        },
    }
    return claim_object("ns1", "nic", new_uid(), [Result("nic", device, driver=DRIVER)], [config])


@pytest.mark.container
def test_pod_gets_the_veth_under_the_requested_name_and_unprepare_returns_it(
    busybox_image: str,  # noqa: F811
    links: Links,
    tmp_path: Path,
) -> None:
    peer_ns = links.netns("p")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    device = f"net-{host}"
    driver = NicDriver(
        NicOptions(
            node_name=NODE,
            selection=Selection(include_virtual=True, include_interfaces=(f"tdn{links.tag}*",)),
            hook_dir=tmp_path / "hooks",
            state_dir=tmp_path / "state",
        )
    )
    store = MemoryClaimStore()
    ref = store.put(nic_claim(device, interfaceName="net1", ips=["192.0.2.44/24"]))
    m = ClaimManager(
        driver, NODE, store, Checkpoint(tmp_path / "ckpt", DRIVER), CdiWriter(CDI_ROOT, cdi_kind(DRIVER))
    )
    m.start()
    spec_file = CDI_ROOT / f"{DRIVER}-claim_{ref.uid}.json"
    links.track_mount(str(tmp_path / "state" / "netns" / f"{ref.uid}_{device}"))
    out = m.prepare([ref])[ref.uid]
    unprepared = False
    try:
        assert not out.error, out.error
        ids = [i for d in out.devices for i in d.cdi_device_ids]
        assert spec_file.exists()
        assert host_link(host) is not None  # prepare moved nothing: the pod does not exist yet

        script = "ip -o link show; ip -o addr show dev net1; env"
        res = run(busybox_image, ["sh", "-c", script], devices=ids)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        net1 = [line for line in lines if ": net1" in line and "link/ether" in line]
        assert net1, res.stdout
        assert mac in net1[0]
        assert any("inet 192.0.2.44/24" in line for line in lines), res.stdout
        assert f"TOPODRA_NIC_{device.upper().replace('-', '_')}_INTERFACE=net1" in lines

        # the container is gone; the interface waits in the pinned namespace, not on the host
        assert host_link(host) is None
        # and the slice still shows the device with its host attributes
        published = {d.name: d for d in driver.devices()}
        assert published[device].attributes[f"{DRIVER}/macAddress"] == mac
        assert published[device].attributes[f"{DRIVER}/interfaceName"] == host

        assert m.unprepare([ref]) == {ref.uid: ""}
        unprepared = True
        link = host_link(host)
        assert link is not None, "the interface did not come back to the host"
        assert link["address"] == mac
        assert not spec_file.exists()
        assert not (tmp_path / "state" / "netns" / f"{ref.uid}_{device}").exists()
        assert device not in driver.held()
    finally:
        if not unprepared:
            m.unprepare([ref])
        m.close()
