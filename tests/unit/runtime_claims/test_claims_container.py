"""A CDI spec written by the claim core is consumed by a real runtime (podman + runc).

The specs go to the real /var/run/cdi (podman reads nothing else here), named after fresh claim
UIDs, and are removed again by unprepare.

Stand-in kept (podman): CDI edits no driver writes (mounts, generic hooks) reach a real runtime
only here; the drivers' own specs go through containerd in tests/node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind

from tests.container.podman import busybox_image, run  # noqa: F401  (fixture)
from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    NODE,
    HoldDriver,
    MemoryClaimStore,
    Result,
    claim_object,
    driver_config,
    new_uid,
)

CDI_ROOT = Path("/var/run/cdi")


@pytest.mark.container
def test_container_sees_the_claims_cdi_edits(busybox_image: str, tmp_path: Path) -> None:  # noqa: F811
    store = MemoryClaimStore()
    ref = store.put(
        claim_object(
            "ns1",
            "ctr",
            new_uid(),
            [Result("gpu/big", "dev-0"), Result("nic", "dev-1")],
            [driver_config(env=["FROM_CONFIG=hello world"])],
        )
    )
    driver = HoldDriver(tmp_path / "hw")
    m = ClaimManager(
        driver, NODE, store, Checkpoint(tmp_path / "state", DRIVER), CdiWriter(CDI_ROOT, cdi_kind(DRIVER))
    )
    m.start()
    out = m.prepare([ref])[ref.uid]
    try:
        assert not out.error
        ids = [i for d in out.devices for i in d.cdi_device_ids]
        script = (
            "env; stat -c '%n %t:%T %F' /dev/topodra-dev-0 /dev/topodra-dev-1; echo ok > /dev/topodra-dev-0"
        )
        res = run(busybox_image, ["sh", "-c", script], devices=ids)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert "TEST_DEVICE_DEV_0=gpu/big" in lines
        assert "TEST_DEVICE_DEV_1=nic" in lines
        assert "TEST_CLAIM=ns1/ctr" in lines  # claim-wide edits
        assert "FROM_CONFIG=hello world" in lines  # from the claim's opaque config
        assert f"TOPODRA_TEST_DEVICE_DEV_0={ref.uid}" in lines
        # hostPath /dev/null (char 1:3) appears under the container path
        assert "/dev/topodra-dev-0 1:3 character special file" in lines
        assert "/dev/topodra-dev-1 1:3 character special file" in lines

        # one request's device only: the other device's node is absent
        res = run(busybox_image, ["sh", "-c", "ls /dev"], devices=ids[:1])
        assert res.returncode == 0, res.stderr
        assert "topodra-dev-0" in res.stdout.split() and "topodra-dev-1" not in res.stdout.split()
    finally:
        assert m.unprepare([ref]) == {ref.uid: ""}
    assert not (CDI_ROOT / f"{DRIVER}-claim_{ref.uid}.json").exists()
    res = run(busybox_image, ["true"], devices=ids[:1])
    assert res.returncode != 0 and "unresolvable CDI devices" in res.stderr
