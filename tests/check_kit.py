"""A synthetic node for `topodra check` tests, and slices shaped as other drivers publish them.

The machine (`SPEC`): two sockets, one NUMA node each; four PCIe switches each holding an H100 and
a ConnectX-7 with two VFs; two Intel Flex 170 GPUs on root ports of socket 1 (a local profile:
Intel ids on the MI210's shape); one ConnectX-7 with two VFs on a root complex that firmware
gave no NUMA node (numa_node -1); an onboard uplink NIC; a virtual bridge.

The vendor shapes are written here from the drivers' public attribute documentation and source,
as they stood when this was written (values are computed from the synthetic machine's manifest,
i.e. what `topodra synth` declared, never from topodra's discovery):

- `gpu.nvidia.com` (NVIDIA DRA driver for GPUs, its attribute reference):
  bare `type`, `uuid`, `productName`, `brand`, `architecture`, `cudaComputeCapability`,
  `driverVersion`; `resource.kubernetes.io/pciBusID`, `pcieRoot`, and `numaNode` when known. No
  switch. Plus one GPU that fell off the bus (its pciBusID names no function of the machine),
  which a driver keeps publishing until it rescans.
- `dra.net` (kubernetes-sigs/dranet): device `pci-<address>` per PCI netdev, `<ifName>` for
  virtual ones; `dra.net/ifName`, `dra.net/pciAddress`, `dra.net/mac`, `dra.net/mtu`,
  `dra.net/numaNode` (only when known), `dra.net/rdma`, `dra.net/sriov`, `dra.net/virtual`,
  `resource.kubernetes.io/pcieRoot`. No pciBusID, no standard numaNode.
- `sriovnetwork.k8snetworkplumbingwg.io` (k8snetworkplumbingwg/dra-driver-sriov, pkg/consts):
  one device per VF named after its address; `<driver>/pciAddress`, `PFName`, `vfID`,
  `pfPciAddress`, `vendor`, `deviceID`, `resource.kubernetes.io/pciBusID` (the VF),
  `resource.kubernetes.io/pcieRoot` (the PF's), and NUMA as the compatibility name
  `dra.net/numaNode`, parsed from the PF's numa_node: -1 when the kernel does not know it.
- `gpu.intel.com` (intel/intel-resource-drivers-for-kubernetes, kubelet-gpu-plugin): device
  `<address with dashes>-<device id>`; bare `model`, `family`, `driver`, `sriov`, `pciId` (the
  PCI device id), `pciAddress`, `health`, `pciRoot` (the root's bus only, deprecated);
  `resource.kubernetes.io/pcieRoot` and `pciBusID`. No NUMA attribute at all.
- `dra.cpu` (kubernetes-sigs/dra-driver-cpu, grouped by NUMA node, `--expose-pcie-roots`):
  `cpudevnuma000`...; `dra.cpu/numCPUs`, `numaNodeID`, `socketID`, `smtEnabled`, the
  compatibility `dra.net/numaNode`, `resource.kubernetes.io/numaNode`, and
  `resource.kubernetes.io/pcieRoot` as a string *list* of the roots local to the node's CPUs
  (needs DRAListTypeAttributes); consumable `dra.cpu/cpu` capacity.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

NVIDIA = "gpu.nvidia.com"
DRANET = "dra.net"
SRIOV = "sriovnetwork.k8snetworkplumbingwg.io"
INTEL = "gpu.intel.com"
DRACPU = "dra.cpu"
FOREIGN = (NVIDIA, DRANET, SRIOV, INTEL, DRACPU)
TOPODRA = ("cpu.topodra.io", "accelerator.topodra.io", "nic.topodra.io")
STALE_GPU = "0000:ff:00.0"  # a GPU that fell off the bus: the NVIDIA shape still lists it

SPEC: dict[str, Any] = {
    "version": 1,
    "name": "check-node",
    "description": "topodra check test node: GPUs and NICs of several vendors' drivers",
    "cpu": {
        "vendor": "GenuineIntel",
        "model_name": "Intel(R) Xeon(R) Platinum 8480C",
        "family": 6,
        "model": 143,
        "stepping": 8,
        "mhz": 2000,
        "sockets": 2,
        "cores_per_socket": 4,
        "threads_per_core": 2,
        "caches": {
            "l1d": {"size_kib": 48, "ways": 12},
            "l1i": {"size_kib": 32, "ways": 8},
            "l2": {"size_kib": 2048, "ways": 16},
            "l3": {"size_kib": 61440, "ways": 15, "scope": "socket"},
        },
    },
    "memory": {"per_node_mib": 65536},
    "pci": {
        "profiles": {
            "flex170": {
                "extends": "mi210",
                "vendor": "0x8086",
                "device": "0x56c0",
                "subsystem_vendor": "0x8086",
                "subsystem_device": "0x4905",
                "driver": "i915",
                "model": "Intel Data Center GPU Flex 170",
            }
        },
        "roots": [
            {
                "numa_node": 0,
                "integrated": [{"device": "spr-iio"}],
                "ports": [{"device": "cx6dx", "name": ["eno1", "eno2"], "uplink": True}],
            },
            {
                "numa_node": 0,
                "repeat": 2,
                "integrated": [{"device": "spr-iio"}],
                "ports": [{"switch": {"ports": [{"device": "h100-sxm"}, {"device": "cx7", "num_vfs": 2}]}}],
            },
            {
                "numa_node": 1,
                "repeat": 2,
                "integrated": [{"device": "spr-iio"}],
                "ports": [{"switch": {"ports": [{"device": "h100-sxm"}, {"device": "cx7", "num_vfs": 2}]}}],
            },
            {
                "numa_node": 1,
                "integrated": [{"device": "spr-iio"}],
                "ports": [{"device": "flex170", "repeat": 2}],
            },
            {"bus": 224, "integrated": [{"device": "spr-iio"}], "ports": [{"device": "cx7", "num_vfs": 2}]},
        ],
    },
    "network": {
        "uplink_ipv4": "10.0.0.11/24",
        "virtual": [{"name": "cni0", "kind": "bridge", "ipv4": "10.244.0.1/24"}],
    },
}

FindingKey = tuple[str, str, str, str, str]  # driver, device, attribute (short), code, severity


def manifest(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "synth-manifest.json").read_text())
    return data


def _s(v: str) -> dict[str, str]:
    return {"string": v}


def _i(v: int) -> dict[str, int]:
    return {"int": v}


def _b(v: bool) -> dict[str, bool]:
    return {"bool": v}


def _pci(m: dict[str, Any], vendor: str, device: str | None = None) -> list[dict[str, Any]]:
    return [
        p
        for p in m["pci"]
        if p["vendor"] == vendor and (device is None or p["device"] == device) and p["kind"] != "bridge"
    ]


def _dashes(bdf: str) -> str:
    return bdf.replace(":", "-").replace(".", "-")


def nvidia_devices(m: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    gpus = [p for p in _pci(m, "10de") if p["kind"] == "accelerator"]
    for i, p in enumerate(gpus):
        attrs: dict[str, Any] = {
            "type": _s("gpu"),
            "uuid": _s(f"GPU-{i:08x}-5a5f-aa66-7660-471eed407181"),
            "productName": _s("NVIDIA H100 80GB HBM3"),
            "brand": _s("Nvidia"),
            "architecture": _s("Hopper"),
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "580.126.20"},
            "resource.kubernetes.io/pciBusID": _s(p["bdf"]),
            "resource.kubernetes.io/pcieRoot": _s(p["root"]),
        }
        if p["numa"] is not None:
            attrs["resource.kubernetes.io/numaNode"] = _i(p["numa"])
        out.append({"name": f"gpu-{i}", "attributes": attrs, "capacity": {"memory": {"value": "80Gi"}}})
    stale = dict(out[0]["attributes"])
    stale["resource.kubernetes.io/pciBusID"] = _s(STALE_GPU)
    stale["uuid"] = _s("GPU-deadbeef-5a5f-aa66-7660-471eed407181")
    out.append({"name": f"gpu-{len(gpus)}", "attributes": stale, "capacity": {"memory": {"value": "80Gi"}}})
    return out


def dranet_devices(m: dict[str, Any]) -> list[dict[str, Any]]:
    by_pci = {p["bdf"]: p for p in m["pci"]}
    out = []
    for n in m["net"]:
        if n["kind"] == "loopback" or n["uplink"]:
            continue
        attrs: dict[str, Any] = {
            "dra.net/ifName": _s(n["name"]),
            "dra.net/mac": _s(n["mac"]),
            "dra.net/mtu": _i(n["mtu"]),
        }
        if n["pci"] is None:
            attrs["dra.net/virtual"] = _b(True)
            out.append({"name": n["name"], "attributes": attrs})
            continue
        p = by_pci[n["pci"]]
        attrs.update(
            {
                "dra.net/pciAddress": _s(p["bdf"]),
                "dra.net/rdma": _b(p["rdma"] is not None),
                "dra.net/sriov": _b(p["physfn"] is not None),
                "dra.net/virtual": _b(False),
                "dra.net/pciVendor": _s("Mellanox Technologies"),
                "resource.kubernetes.io/pcieRoot": _s(p["root"]),
            }
        )
        if p["numa"] is not None:
            attrs["dra.net/numaNode"] = _i(p["numa"])
        out.append({"name": f"pci-{_dashes(p['bdf'])}", "attributes": attrs})
    return out


def sriov_devices(m: dict[str, Any]) -> list[dict[str, Any]]:
    by_pci = {p["bdf"]: p for p in m["pci"]}
    netdev = {n["pci"]: n["name"] for n in m["net"] if n["pci"]}
    out = []
    for vf in m["pci"]:
        if vf["physfn"] is None:
            continue
        pf = by_pci[vf["physfn"]]
        attrs = {
            f"{SRIOV}/pciAddress": _s(vf["bdf"]),
            f"{SRIOV}/PFName": _s(netdev.get(pf["bdf"], "")),
            f"{SRIOV}/EswitchMode": _s("legacy"),
            f"{SRIOV}/vendor": _s(vf["vendor"]),
            f"{SRIOV}/deviceID": _s(vf["device"]),
            f"{SRIOV}/pfDeviceID": _s(pf["device"]),
            f"{SRIOV}/vfID": _i(pf["virtfns"].index(vf["bdf"])),
            f"{SRIOV}/pfPciAddress": _s(pf["bdf"]),
            f"{SRIOV}/linkType": _s("ether"),
            "resource.kubernetes.io/pciBusID": _s(vf["bdf"]),
            "resource.kubernetes.io/pcieRoot": _s(pf["root"]),
            # strconv.ParseInt of the PF's numa_node file: "-1" when the kernel does not know
            "dra.net/numaNode": _i(pf["numa"] if pf["numa"] is not None else -1),
        }
        out.append({"name": _dashes(vf["bdf"]), "attributes": attrs})
    return out


def intel_devices(m: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in _pci(m, "8086", "56c0"):
        attrs = {
            "model": _s("Flex 170"),
            "family": _s("Data Center Flex"),
            "driver": _s("i915"),
            "sriov": _b(False),
            "pciId": _s("0x56c0"),
            "pciAddress": _s(p["bdf"]),
            "health": _s("Healthy"),
            "pciRoot": _s(p["root"].split(":")[1]),
            "resource.kubernetes.io/pcieRoot": _s(p["root"]),
            "resource.kubernetes.io/pciBusID": _s(p["bdf"]),
        }
        capacity = {"memory": {"value": "16384Mi"}, "millicores": {"value": "1000"}}
        out.append({"name": f"{_dashes(p['bdf'])}-0x56c0", "attributes": attrs, "capacity": capacity})
    return out


def dracpu_devices(m: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for node in m["numa"]:
        roots = sorted({p["root"] for p in m["pci"] if p["numa"] == node["id"]})
        attrs = {
            "dra.cpu/numCPUs": _i(len(node["cpus"])),
            "dra.cpu/numaNodeID": _i(node["id"]),
            "dra.cpu/socketID": _i(node["package"]),
            "dra.cpu/smtEnabled": _b(True),
            "dra.net/numaNode": _i(node["id"]),
            "resource.kubernetes.io/numaNode": _i(node["id"]),
            "resource.kubernetes.io/pcieRoot": {"strings": roots},
        }
        out.append(
            {
                "name": f"cpudevnuma{node['id']:03d}",
                "attributes": attrs,
                "capacity": {"dra.cpu/cpu": {"value": str(len(node["cpus"]))}},
                "allowMultipleAllocations": True,
            }
        )
    return out


SHAPES = {
    NVIDIA: nvidia_devices,
    DRANET: dranet_devices,
    SRIOV: sriov_devices,
    INTEL: intel_devices,
    DRACPU: dracpu_devices,
}


def foreign_slices(m: dict[str, Any], node: str, node_uid: str | None = None) -> list[dict[str, Any]]:
    """One slice per foreign driver, as each would publish on `node`."""
    out = []
    for driver, shape in SHAPES.items():
        meta: dict[str, Any] = {"generateName": f"00000-{driver}-{node}-"}
        if node_uid:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
            ]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": meta,
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": shape(m),
                },
            }
        )
    return out


def topodra_slices(
    root: Path, node: str, node_uid: str | None = None, extra: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """What `topodra slices --driver all` prints for the machine (the publisher's own code)."""
    from topodra.common.inventory import Inventory
    from topodra.common.publisher.build import build_desired
    from topodra.drivers import registry
    from topodra.drivers.cli.main import build_parser

    argv = ["slices", "--driver", "all", "--sysfs-root", str(root), "--node-name", node, *extra]
    args = build_parser("slices").parse_args(argv)
    common = registry.CommonOptions(sysfs_root=root, node_name=node, args=args)
    out: list[dict[str, Any]] = []
    for kind in registry.KINDS:
        driver = registry.create(kind, common)
        desired = build_desired(driver.name, node, node_uid, Inventory(driver).refresh().devices)
        out.extend(desired.slices)
    return out


def expected_findings(m: dict[str, Any]) -> set[FindingKey]:
    """Every gap and wrong value the shapes carry, from the manifest."""
    by_pci = {p["bdf"]: p for p in m["pci"]}
    out: set[FindingKey] = set()
    gpus = [p for p in m["pci"] if p["vendor"] == "10de" and p["kind"] == "accelerator"]
    out.add((NVIDIA, f"gpu-{len(gpus)}", "pciBusID", "wrong", "error"))  # the one off the bus
    for n in m["net"]:
        if n["pci"] is None or n["uplink"]:
            continue
        name = "pci-" + n["pci"].replace(":", "-").replace(".", "-")
        out.add((DRANET, name, "pciBusID", "missing", "warning"))  # only dra.net/pciAddress
        if by_pci[n["pci"]]["numa"] is not None:
            out.add((DRANET, name, "numaNode", "missing", "warning"))  # only dra.net/numaNode
    for vf in m["pci"]:
        if vf["physfn"] is None:
            continue
        name = vf["bdf"].replace(":", "-").replace(".", "-")
        if by_pci[vf["physfn"]]["numa"] is None:
            out.add((SRIOV, name, "dra.net/numaNode", "malformed", "error"))  # -1
        else:
            out.add((SRIOV, name, "numaNode", "missing", "warning"))
    for p in m["pci"]:
        if p["vendor"] == "8086" and p["device"] == "56c0":
            name = p["bdf"].replace(":", "-").replace(".", "-") + "-0x56c0"
            out.add((INTEL, name, "numaNode", "missing", "warning"))  # no NUMA at all
    for node in m["numa"]:
        out.add((DRACPU, f"cpudevnuma{node['id']:03d}", "pcieRoot", "list-form", "warning"))
    return out


def report_findings(report: Any, severities: tuple[str, ...] = ("error", "warning")) -> set[FindingKey]:
    """(driver, device, attribute, code, severity) of the report's findings, standard names short."""
    short = {
        "resource.kubernetes.io/pciBusID": "pciBusID",
        "resource.kubernetes.io/pcieRoot": "pcieRoot",
        "resource.kubernetes.io/numaNode": "numaNode",
    }
    return {
        (drv, dev, short.get(f.attribute, f.attribute), f.code, f.severity)
        for drv, dev, f in report.findings()
        if f.severity in severities
    }
