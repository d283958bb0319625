"""`topology.topodra.io/kind`: one value per driver on every device it publishes.

The fallback claim templates (deploy/examples/best-locality-*.yaml) tie the fallback level of
their accelerator request to that of their NIC request with a `matchAttribute` on this key,
which must fail for an accelerator next to a NIC and hold among accelerators or among NICs. So
every device of a driver carries it, with its driver's value, including the NIC driver's
virtual interfaces and the CPU driver's per-core devices.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from topodra.common import pciattrs
from topodra.common.synth import build, load_spec
from topodra.drivers import registry
from topodra.drivers.cli.main import build_parser

from tests.kit.inventory import published_list

EXPECTED = {"cpu.topodra.io": "cpu", "accelerator.topodra.io": "accelerator", "nic.topodra.io": "nic"}


def published(root: Path, extra: list[str]) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for kind in registry.KINDS:
        argv = ["serve", kind, "--sysfs-root", str(root), "--node-name", "n", *extra]
        args = build_parser("serve").parse_args(argv)
        driver = registry.create(kind, registry.CommonOptions(sysfs_root=root, node_name="n", args=args))
        out[driver.name] = [d.to_api() for d in published_list(driver)]
    return out


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kind")
    build(load_spec("2s-8acc-8nic"), root)
    return root


@pytest.mark.parametrize(
    "extra", [[], ["--nic-include-virtual", "--cpu-device-granularity=core"]], ids=["default", "virtual+core"]
)
def test_every_device_carries_its_drivers_kind(machine: Path, extra: list[str]) -> None:
    devices = published(machine, extra)
    assert set(devices) == set(EXPECTED)
    for driver, devs in devices.items():
        assert devs, driver
        for d in devs:
            attrs = d.get("attributes", {})
            assert attrs.get(pciattrs.KIND) == {"string": EXPECTED[driver]}, (driver, d["name"])
    if extra:  # the flags really brought the other device shapes
        assert any(str(d["name"]).startswith("net-") for d in devices["nic.topodra.io"])
        assert any(str(d["name"]).startswith("core-") for d in devices["cpu.topodra.io"])
