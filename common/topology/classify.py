"""Which PCI functions are accelerators: the vendor-neutral class rules and a console-adapter table.

One place for the rules, because two readers need the same answer: `topodra inspect` (its
accelerator list and locality matrix) and the accelerator driver (what it publishes). The driver
adds the operator's include/exclude ids on top (drivers/accelerator/selection.py); nothing here
knows about flags. Pure and import-light: only the standard library, so the inspect path stays
cheap.

The rules:
- 0x12xxxx processing accelerators (Gaudi, Ponte Vecchio tiles, FPGA cards that say so),
  0x0302 3D controllers (data-centre GPUs without display), 0x0b40 co-processors (NEC Vector
  Engine): always accelerators.
- Other display controllers (0x03xx: VGA, "display controller"): only with a compute interface,
  i.e. a DRM render node or an accel node, or a driver whose own node is the interface (vfio-pci:
  the VFIO group; nvidia: /dev/nvidiaN). A display adapter with only a card node is a screen.
- Display adapters of the console table below never are, whatever nodes they have.
- An SR-IOV VF of a function the rules accept is accepted too (a VF bound to nothing yet, or to
  vfio-pci, has no render node of its own).
"""

from __future__ import annotations

from topodra.common.records import record

TYPE_CHECKING = False  # not typing's: importing typing costs milliseconds on the inspect path
if TYPE_CHECKING:  # model.py imports this module: its types are only needed for annotations
    from topodra.common.topology.model import PciFunction, Topology

PROCESSING_ACCELERATOR_BASE = 0x12
DISPLAY_BASE = 0x03
THREE_D_CONTROLLER = 0x0302
COPROCESSOR = 0x0B40
COMPUTE_NODE_KINDS = frozenset({"drm-render", "accel"})
DRIVERS_WITH_OWN_NODES = frozenset({"vfio-pci", "nvidia"})


@record
class ConsoleAdapter:
    vendor: int
    device: int | None  # None: every display function of the vendor
    why: str


# Display adapters that drive a console, sit on a BMC, or are emulated by a hypervisor. They
# are matched only among display-class functions (0x03xx): the same vendors make other things
# (Microsoft's own accelerators, VMware's NICs), which these rules must not hide.
CONSOLE_ADAPTERS: tuple[ConsoleAdapter, ...] = (
    ConsoleAdapter(0x1A03, None, "ASPEED BMC graphics (AST2x00 on server boards)"),
    ConsoleAdapter(0x102B, None, "Matrox G200 BMC/console graphics (server boards)"),
    ConsoleAdapter(0x1013, None, "Cirrus Logic VGA (QEMU's emulated -vga cirrus)"),
    ConsoleAdapter(0x1AF4, None, "virtio-gpu (emulated; has a render node with virgl)"),
    ConsoleAdapter(0x1B36, None, "QEMU QXL / bochs-display / ramfb (emulated)"),
    ConsoleAdapter(0x1234, None, "Bochs/QEMU standard VGA, also Xen's (emulated)"),
    ConsoleAdapter(0x15AD, None, "VMware SVGA (emulated; vmwgfx has a render node)"),
    ConsoleAdapter(0x1414, None, "Hyper-V synthetic video (emulated)"),
    ConsoleAdapter(0x80EE, 0xBEEF, "VirtualBox VGA (emulated)"),
    ConsoleAdapter(0x5333, 0x8811, "S3 Trio VGA (emulated by Hyper-V generation 1 VMs)"),
)


def in_accelerator_class(class_code: int) -> bool:
    """The classes accelerators are found in (display, 0x12, 0x0b40): where discovery looks for
    DRM/accel nodes and the driver writes a verdict. Not a verdict: a BMC's VGA is in one."""
    return class_code >> 16 in (DISPLAY_BASE, PROCESSING_ACCELERATOR_BASE) or class_code >> 8 == COPROCESSOR


def console_adapter(fn: PciFunction) -> ConsoleAdapter | None:
    if fn.base_class != DISPLAY_BASE or fn.vendor is None:
        return None
    for entry in CONSOLE_ADAPTERS:
        if entry.vendor == fn.vendor and entry.device in (None, fn.device):
            return entry
    return None


def kind_of(fn: PciFunction) -> str:
    """What sort of accelerator the class says it is (the driver's `type` attribute)."""
    if fn.class_code is None:
        return "other"
    if fn.base_class == PROCESSING_ACCELERATOR_BASE:
        return "accelerator"
    if fn.class_code >> 8 == COPROCESSOR:
        return "coprocessor"
    if fn.base_class == DISPLAY_BASE:
        return "gpu"
    return "other"


def class_rule(topo: Topology, fn: PciFunction, depth: int = 0) -> tuple[bool, str]:
    """The verdict of the rules above and why; `topo` answers a VF's question about its PF."""
    if fn.class_code is None or fn.vendor is None:
        return False, "class or vendor unreadable"
    sub = fn.class_code >> 8
    if fn.base_class == PROCESSING_ACCELERATOR_BASE:
        return True, "processing accelerator (class 0x12)"
    if sub == COPROCESSOR:
        return True, "co-processor (class 0x0b40)"
    if fn.base_class != DISPLAY_BASE:
        return False, f"class {fn.class_hex} is not an accelerator class"
    console = console_adapter(fn)
    if console is not None:
        return False, f"console/BMC/emulated display adapter: {console.why}"
    if sub == THREE_D_CONTROLLER:
        return True, "3D controller (class 0x0302)"
    if any(n.kind in COMPUTE_NODE_KINDS for n in fn.device_nodes):
        return True, "display controller with a render or accel node"
    if fn.driver in DRIVERS_WITH_OWN_NODES:
        return True, f"display controller bound to {fn.driver}"
    physfn = fn.sriov.physfn if fn.sriov is not None else None
    if physfn is not None and depth == 0:
        pf = topo.pci(physfn)
        if pf is not None and class_rule(topo, pf, depth + 1)[0]:
            return True, f"SR-IOV VF of accelerator {physfn}"
    return False, "display controller without a compute interface (no render or accel node)"


def is_accelerator(topo: Topology, fn: PciFunction) -> bool:
    return class_rule(topo, fn)[0]
