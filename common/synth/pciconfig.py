"""The first 256 bytes of a PCI function's configuration space.

Readers such as hwloc take bridge bus ranges, header types and the negotiated PCIe link from
`config` rather than from the sysfs attributes, so the bytes must agree with everything else.
"""

from __future__ import annotations

import struct

from topodra.common.synth.plan import Function

CAP_PCIE = 0x10
CAP_OFFSET = 0x40
STATUS_CAP_LIST = 0x0010


def config_space(f: Function) -> bytes:
    cfg = bytearray(256)
    vendor, device = (
        (0xFFFF, 0xFFFF) if f.role == "vf" else (f.vendor, f.device)
    )  # a VF's ids read as all ones
    struct.pack_into("<HH", cfg, 0x00, vendor, device)
    struct.pack_into(
        "<HH",
        cfg,
        0x04,
        0x0546 if f.role != "vf" else 0x0000,
        STATUS_CAP_LIST if f.pcie_type is not None else 0,
    )
    cfg[0x08] = f.revision
    cfg[0x09] = f.class_code & 0xFF
    cfg[0x0A] = (f.class_code >> 8) & 0xFF
    cfg[0x0B] = (f.class_code >> 16) & 0xFF
    cfg[0x0C] = 0x10  # cache line size, in dwords
    header = 0x01 if f.is_bridge else 0x00
    if f.multifunction and f.fn == 0:
        header |= 0x80
    cfg[0x0E] = header
    if f.is_bridge:
        assert f.secondary is not None and f.subordinate is not None
        cfg[0x18] = f.bus
        cfg[0x19] = f.secondary
        cfg[0x1A] = f.subordinate
    else:
        struct.pack_into("<HH", cfg, 0x2C, f.subsystem_vendor, f.subsystem_device)
    if f.pcie_type is not None:
        cfg[0x34] = CAP_OFFSET
        _pcie_capability(cfg, f)
    return bytes(cfg)


def _pcie_capability(cfg: bytearray, f: Function) -> None:
    assert f.pcie_type is not None
    cfg[CAP_OFFSET] = CAP_PCIE
    cfg[CAP_OFFSET + 1] = 0x00  # last capability in the list
    struct.pack_into("<H", cfg, CAP_OFFSET + 0x02, 0x0002 | (f.pcie_type << 4))  # version 2, port type
    struct.pack_into("<I", cfg, CAP_OFFSET + 0x04, 0x00008FE2)  # device capabilities (FLR, 512-byte payload)
    struct.pack_into("<HH", cfg, CAP_OFFSET + 0x08, 0x2930, 0x0000)  # device control / status
    link_cap = 0
    link_status = 0
    if f.max_link is not None:
        link_cap = f.max_link.gen | (f.max_link.width << 4)
    if f.link is not None:
        link_status = f.link.gen | (f.link.width << 4)
    if f.role == "vf":
        link_cap = link_status = 0  # reserved for VFs
    struct.pack_into("<I", cfg, CAP_OFFSET + 0x0C, link_cap)
    struct.pack_into("<HH", cfg, CAP_OFFSET + 0x10, 0x0040, link_status)  # link control: common clock
