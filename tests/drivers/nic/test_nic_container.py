"""A NIC claim through the real runtime path: ClaimManager writes the CDI spec with our hook,
podman + runc run a busybox container with it, the container sees the interface under the name
the claim asked for, and after unprepare the interface is back on the host.

The interface is a veth end made by the test (the peer waits, down, in a namespace of its own,
so no packet goes anywhere). The spec goes to the real /var/run/cdi (podman reads nothing else
here) under a fresh claim UID and is removed by unprepare.

Stand-in kept (podman, the driver object without a kubelet): the claim's status steps (Prepared,
Attached with the pod-side addresses, removed) are read between the calls, which the real kubelet
path (tests/node/workload.py: net1 in the Pod, back on the host after) cannot pause at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.claimstatus import KubeClaimStatusWriter
from topodra.common.runtime.driver import Health
from topodra.common.runtime.statusqueue import QueuedStatusWriter
from topodra.drivers.nic.devices import DRIVER, Selection
from topodra.drivers.nic.driver import NicDriver, NicOptions

from tests.container.podman import RUN_FLAGS, busybox_image, podman, run  # noqa: F401  (fixture)
from tests.drivers.nic.conftest import Links, allocated_claim, host_link, status_devices
from tests.kit.inventory import health, published_list
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
            rescan_interval=0.0,
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
        # the driver's next poll sees that no process is left in that namespace and brings the
        # interface home, while the claim stays prepared (a new sandbox would get it again)
        published = {d.name: d for d in published_list(driver)}
        link = host_link(host)
        assert link is not None and link["address"] == mac
        assert device in driver.held()
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


@pytest.mark.container
@pytest.mark.controlplane
def test_end_to_end_claim_from_the_api_server_into_a_running_container(
    busybox_image: str,  # noqa: F811
    links: Links,
    kube: tuple[Any, Any, str, str],
    tmp_path: Path,
) -> None:
    """The claim lives in the real kube-apiserver and is read, and its status written, with the
    NIC driver's node-bound token. While the container runs, the driver sees the interface in
    the pinned namespace and reports it Attached with the pod-side addresses."""
    cp, admin, ns, node = kube
    peer_ns = links.netns("p")
    host, peer = links.name("h0"), links.name("q0")
    mac = links.veth(host, peer, peer_ns)
    device = f"net-{host}"
    config = {
        "source": "FromClaim",
        "requests": [],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "nic.topodra.io/v1alpha1",
                "kind": "NicConfig",
                "interfaceName": "net7",
                "ips": ["192.0.2.45/24"],
            },
        },
    }
    ref = allocated_claim(admin, ns, node, [(DRIVER, device)], [config])
    token_client = cp.driver_client("nic", node)
    driver = NicDriver(
        NicOptions(
            node_name=node,
            selection=Selection(include_virtual=True, include_interfaces=(f"tdn{links.tag}*",)),
            hook_dir=tmp_path / "hooks",
            state_dir=tmp_path / "state",
            rescan_interval=0.0,
        )
    )
    status = QueuedStatusWriter(KubeClaimStatusWriter(token_client, DRIVER))
    driver.set_status_writer(status)
    m = ClaimManager(
        driver,
        node,
        KubeClaimSource(token_client),
        Checkpoint(tmp_path / "ckpt", DRIVER),
        CdiWriter(CDI_ROOT, cdi_kind(DRIVER)),
    )
    m.start()
    links.track_mount(str(tmp_path / "state" / "netns" / f"{ref.uid}_{device}"))
    name = f"tdn-{links.tag}"
    out = m.prepare([ref])[ref.uid]
    try:
        assert not out.error, out.error
        ids = [i for d in out.devices for i in d.cdi_device_ids]
        assert status.flush(30)
        (entry,) = status_devices(admin, ref)
        assert entry["conditions"][0]["reason"] == "Prepared"
        assert entry["networkData"] == {
            "interfaceName": "net7",
            "hardwareAddress": mac,
            "ips": ["192.0.2.45/24"],
        }

        args = ["run", "-d", "--name", name, *RUN_FLAGS[1:]]
        for i in ids:
            args += ["--device", i]
        started = podman(*args, busybox_image, "sleep", "120")
        assert started.returncode == 0, started.stderr
        seen = podman("exec", name, "ip", "-o", "link", "show", "net7")
        assert seen.returncode == 0 and mac in seen.stdout, seen.stdout + seen.stderr

        seen_health = health(driver)[device]  # looks into the pinned namespace
        assert seen_health.health is Health.UNHEALTHY, seen_health  # its peer is down
        assert seen_health.message.startswith("net7 (in pod): "), seen_health
        assert status.flush(30)
        (entry,) = status_devices(admin, ref)
        assert entry["conditions"][0]["reason"] == "Attached"
        assert entry["networkData"]["ips"] == ["192.0.2.45/24"]  # observed inside the pod
        assert device in {d.name for d in published_list(driver)}
        # a running pod keeps its interface: the orphan check leaves live namespaces alone
        still = podman("exec", name, "ip", "-o", "link", "show", "net7")
        assert still.returncode == 0 and mac in still.stdout
    finally:
        podman("rm", "-f", "-t", "0", name)
        result = m.unprepare([ref])
        m.close()
    assert result == {ref.uid: ""}
    link = host_link(host)
    assert link is not None and link["address"] == mac
    assert status.flush(30)
    assert status_devices(admin, ref) == []
