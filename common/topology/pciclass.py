"""Names of PCI device classes, from the class code alone (no pci.ids needed).

The codes are the PCI-SIG's class code assignments (base class, subclass, and for a few the
programming interface that changes what the device is, such as NVMe). Names are kept short
enough for one column of `topodra inspect`; an unknown subclass falls back to its base class.
"""

from __future__ import annotations

BASE: dict[int, str] = {
    0x00: "Unclassified device",
    0x01: "Mass storage controller",
    0x02: "Network controller",
    0x03: "Display controller",
    0x04: "Multimedia controller",
    0x05: "Memory controller",
    0x06: "Bridge",
    0x07: "Communication controller",
    0x08: "System peripheral",
    0x09: "Input device controller",
    0x0A: "Docking station",
    0x0B: "Processor",
    0x0C: "Serial bus controller",
    0x0D: "Wireless controller",
    0x0E: "Intelligent controller",
    0x0F: "Satellite communications controller",
    0x10: "Encryption controller",
    0x11: "Signal processing controller",
    0x12: "Processing accelerator",
    0x13: "Non-essential instrumentation",
    0x40: "Co-processor",
    0xFF: "Unassigned class",
}

SUB: dict[int, str] = {
    0x0100: "SCSI storage controller",
    0x0101: "IDE interface",
    0x0104: "RAID bus controller",
    0x0105: "ATA controller",
    0x0106: "SATA controller",
    0x0107: "SAS controller",
    0x0108: "Non-volatile memory controller",
    0x0200: "Ethernet controller",
    0x0207: "InfiniBand controller",
    0x0208: "Fabric controller",
    0x0300: "VGA compatible controller",
    0x0301: "XGA compatible controller",
    0x0302: "3D controller",
    0x0401: "Audio controller",
    0x0403: "Audio device",
    0x0500: "RAM memory",
    0x0502: "CXL memory device",
    0x0600: "Host bridge",
    0x0601: "ISA bridge",
    0x0604: "PCI bridge",
    0x0609: "Semi-transparent PCI bridge",
    0x0700: "Serial controller",
    0x0806: "IOMMU",
    0x0880: "System peripheral",
    0x0B40: "Co-processor",
    0x0C03: "USB controller",
    0x0C05: "SMBus",
    0x0C07: "IPMI interface",
    0x1200: "Processing accelerator",
    0x1201: "SNIA smart data accelerator",
}

# (class >> 8, prog-if) where the interface names the device better than the subclass
PROG_IF: dict[tuple[int, int], str] = {
    (0x0108, 0x02): "NVMe controller",
    (0x0106, 0x01): "SATA controller (AHCI)",
    (0x0C03, 0x30): "USB controller (xHCI)",
}


def class_name(class_code: int | None) -> str:
    """'Ethernet controller' for 0x020000; 'class ?' when the kernel gave none."""
    if class_code is None:
        return "class ?"
    sub, prog_if = class_code >> 8, class_code & 0xFF
    return (
        PROG_IF.get((sub, prog_if))
        or SUB.get(sub)
        or BASE.get(class_code >> 16)
        or f"class 0x{class_code:06x}"
    )
