"""Immutable picture of one machine, as `discover()` reads it from a sysfs root.

Every type here is a frozen, slotted record (common/records.py: a dataclass without the import
cost on `topodra inspect`) holding tuples, so a `Topology` can be shared between threads and
cached without copies. CPU lists are sorted tuples of Linux CPU numbers;
unless a field says otherwise they hold *usable* CPUs only (online and with a `topology/` folder).
Packages and cores carry a stable `index` (ordered by lowest CPU) besides the kernel `id`, because
kernel ids repeat or are -1 on some machines: always refer to a package or core by its index.

Lookups on `Topology` (pure, no I/O):
- `usable_cpus()`                      sorted usable CPU numbers
- `cpu(n)`                             one `Cpu` (any cpuN folder) or None
- `package(index)`, `package_of_cpu(n)`
- `core_of_cpu(n)`, `smt_siblings(n)`  the CPUs sharing n's core (n included)
- `core_type(n)`                       "core"/"atom" on hybrid parts, else None
- `numa_node(id)`, `cpus_of_numa(id)`, `numa_of_cpu(n)`
- `package_of_numa(id)`                socket holding the node's CPUs (None: CPU-less or spanning)
- `distance(a, b)`                     SLIT distance between two NUMA nodes or None
- `pci(address)`                       one `PciFunction` (address normalised to lowercase)
- `package_of_pci(address)`            socket of a PCI function, via numa_node else local_cpus
- `pcie_root(name)`, `pcie_roots_local_to(cpus)`
- `caches_at(level)`, `l3_groups()`, `cache_of_cpu(n, level)`
- `device_nodes_of(address)`           drm/accel/vfio nodes of a PCI function
- `net(name)`, `nets_of_pci(address)`, `rdma(name)`, `rdma_of_pci(address)`
- `accelerators()`                     PCI functions the accelerator rules accept (classify.py)
"""

from __future__ import annotations

from topodra.common.records import field, record
from topodra.common.topology import classify, pciids

CpuList = tuple[int, ...]

_NETWORK_BASE_CLASS = 0x02
_BRIDGE_PCI_CLASS = 0x0604


@record
class DiscoveryWarning:
    """A file that could not be read or understood; discovery went on without it."""

    path: str  # path relative to the discovery root, e.g. "sys/devices/system/cpu/cpu3/online"
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@record
class Cpu:
    """One cpuN folder. Offline or topology-less CPUs are listed, but only usable ones join groups."""

    id: int
    online: bool
    usable: bool  # online and has a topology/ folder: the only CPUs other lists mention
    package: int | None  # index into Topology.packages
    package_id: int | None  # kernel physical_package_id (None for -1 / missing)
    die_id: int | None
    cluster_id: int | None
    core: int | None  # index into Topology.cores
    core_id: int | None  # kernel core_id
    numa_node: int | None
    core_type: str | None  # "core" / "atom" (devices/cpu_core, devices/cpu_atom) on hybrid parts


@record
class Package:
    """A socket: CPUs sharing one package mask."""

    index: int  # stable: packages ordered by lowest CPU
    id: int | None  # kernel physical_package_id, None when -1 or missing
    cpus: CpuList


@record
class Core:
    """CPUs sharing one core mask (SMT siblings); compute-unit halves are separate cores."""

    index: int  # stable: cores ordered by lowest CPU
    package: int | None  # index into Topology.packages (None: the kernel gave no package mask)
    id: int | None  # kernel core_id
    cpus: CpuList  # SMT siblings
    core_type: str | None = None


@record
class Cache:
    """One cache instance, shared by `cpus`."""

    level: int
    type: str  # "data" | "instruction" | "unified"
    id: int | None  # cache `id` file, often absent
    size_bytes: int | None
    cpus: CpuList
    line_size: int | None = None
    ways: int | None = None


@record
class NumaNode:
    """A NUMA node as sysfs lists it; CPU-less (memory only) and memory-less nodes included."""

    id: int
    cpus: CpuList  # usable CPUs of nodeN/cpumap (may overlap other nodes on buggy firmware)
    memory_bytes: int | None  # nodeN/meminfo MemTotal
    # SLIT row as (node id, distance) pairs; columns are the kernel's online nodes, which are not
    # always the nodeN folders present (a node can be hidden), hence pairs rather than a bare row
    distances: tuple[tuple[int, int], ...]
    all_cpus: CpuList = ()  # cpumap as written, offline CPUs included


@record
class PcieLink:
    """Negotiated and maximum PCIe link; None fields where the kernel reports no link."""

    current_speed: str | None  # e.g. "16.0 GT/s PCIe"
    current_width: int | None
    max_speed: str | None
    max_width: int | None


@record
class Sriov:
    """SR-IOV side of a function: a PF knows its VFs, a VF its PF."""

    total_vfs: int | None  # sriov_totalvfs (PF only)
    num_vfs: int | None  # sriov_numvfs (PF only)
    physfn: str | None  # PF address when this function is a VF
    virtfns: tuple[str, ...]  # VF addresses when this function is a PF

    @property
    def role(self) -> str | None:
        if self.physfn is not None:
            return "vf"
        if self.total_vfs or self.virtfns:
            return "pf"
        return None


@record
class DeviceNode:
    """A character device a container needs, as sysfs names it (the /dev path is conventional)."""

    kind: str  # "drm-render" | "drm-card" | "accel" | "vfio-group" | "vfio-device" | "uverbs" | ...
    name: str  # e.g. "renderD128"
    dev_path: str  # e.g. "/dev/dri/renderD128"
    major: int | None
    minor: int | None
    pci_address: str | None


@record
class PciFunction:
    """One PCI function and where it sits: root complex, bridge chain, switch."""

    address: str  # lowercase DDDD:BB:DD.F; 5+ hex digit domains (VMD) kept as they are
    class_code: int | None  # 24 bits: base class, subclass, prog-if
    vendor: int | None
    device: int | None
    subsystem_vendor: int | None
    subsystem_device: int | None
    numa_node: int | None  # None for -1
    local_cpus: CpuList  # restricted to CPUs that exist (cpuN folders) and are usable
    driver: str | None
    iommu_group: int | None
    sriov: Sriov | None
    link: PcieLink | None
    pcie_root: str | None  # docs/design/resourceslices.md: first component under devices/ (e.g. "pci0000:00")
    root_bus: str | None  # innermost pciDDDD:BB folder on the path (fixtures' `root`)
    # PCI-to-PCI bridges above it, root-most first; None when its place in the tree is unknown
    # (its bus entry is a plain folder found nowhere under devices/): unknown is not "on a root port"
    bridges: tuple[str, ...] | None
    pcie_switch: str | None  # second bridge when >= 3 bridges, else None
    sysfs_path: str  # resolved path relative to the root, e.g. "sys/devices/pci0000:00/0000:00:01.0"
    aer_fatal: tuple[tuple[str, int], ...] | None = None  # aer_dev_fatal counters
    device_nodes: tuple[DeviceNode, ...] = ()
    revision: int | None = None

    @property
    def class_hex(self) -> str | None:
        return None if self.class_code is None else f"0x{self.class_code:06x}"

    @property
    def vendor_hex(self) -> str | None:
        return None if self.vendor is None else f"0x{self.vendor:04x}"

    @property
    def device_hex(self) -> str | None:
        return None if self.device is None else f"0x{self.device:04x}"

    @property
    def base_class(self) -> int | None:
        return None if self.class_code is None else self.class_code >> 16

    @property
    def is_bridge(self) -> bool:
        return self.class_code is not None and self.class_code >> 8 == _BRIDGE_PCI_CLASS

    @property
    def pcie_leaf_switch(self) -> str | None:
        """The upstream port of the innermost switch above it: the chain's next-to-last bridge
        (the last is that switch's downstream port), under the same condition as `pcie_switch`.

        Two functions with the same leaf switch talk through one switch (nvidia-smi's PIX); two
        that share only `pcie_switch` cross nested switches (PXB). With one level of switches
        both are the same bridge. Like `pcie_switch` it reads the bridges below the root port as
        switch port pairs (upstream, downstream), as they are on GPU and NIC boards; a switch on
        the card itself (some AMD GPUs, DPUs) is a level of its own, so such a card is its own
        leaf, as nvidia-smi would call the path from it to a NIC on the board's switch PXB.
        """
        b = self.bridges
        return b[-2] if b is not None and len(b) >= 3 else None

    @property
    def nested_leaf_switch(self) -> str | None:
        """`pcie_leaf_switch` where it lies below the outermost switch, else None: what inspect
        and explain show as a level of its own (with one level of switches SW says it all)."""
        leaf = self.pcie_leaf_switch
        return leaf if leaf != self.pcie_switch else None

    @property
    def is_network(self) -> bool:
        return self.base_class == _NETWORK_BASE_CLASS

    @property
    def in_accelerator_class(self) -> bool:
        """In a class accelerators are found in; `Topology.accelerators()` gives the verdict."""
        return self.class_code is not None and classify.in_accelerator_class(self.class_code)

    @property
    def aer_fatal_total(self) -> int | None:
        if self.aer_fatal is None:
            return None
        for name, count in self.aer_fatal:
            if name.startswith("TOTAL"):
                return count
        return sum(count for _, count in self.aer_fatal)

    def product_name(self, ids_paths: tuple[str, ...] | None = None) -> str | None:
        """Human name from pci.ids when the system has it; lazily loaded, never required."""
        if self.vendor is None or self.device is None:
            return None
        name: str | None = pciids.lookup(self.vendor, self.device, ids_paths)
        return name


@record
class PcieRoot:
    """A PCIe root complex (the value of resource.kubernetes.io/pcieRoot) and its CPU affinity."""

    name: str  # "pciDDDD:BB", as under sys/devices
    cpus: CpuList  # cpulistaffinity of its root bus, else the union of its devices' local_cpus
    numa_node: int | None  # the one numa_node its devices agree on, else None


@record
class RdmaDevice:
    """An RDMA device (sys/class/infiniband) with the character devices a container needs."""

    name: str  # e.g. "mlx5_0"
    pci_address: str | None
    net_interfaces: tuple[str, ...]
    device_nodes: tuple[DeviceNode, ...]  # uverbs/umad/issm
    node_guid: str | None = None


@record
class NetInterface:
    """A network interface, tied to the nearest PCI function above it when it has one."""

    name: str
    pci_address: str | None  # nearest PCI function above it; None for virtual interfaces
    mac: str | None
    mtu: int | None
    speed_mbps: int | None  # None when unknown or down (-1)
    operstate: str | None
    carrier: bool | None
    rdma_devices: tuple[str, ...]
    sriov_role: str | None  # "pf" | "vf" | None (of its PCI function)
    is_virtual: bool  # under sys/devices/virtual
    ifindex: int | None = None
    sysfs_path: str = ""
    # How it is stacked with other interfaces of the host (sysfs `master` and `upper_*` links):
    # the bond, bridge, team, VRF or OVS datapath it is a port of, and the interfaces built on
    # top of it (VLANs, macvlans, its master). The NIC driver withholds such an interface.
    master: str | None = None
    uppers: tuple[str, ...] = ()


@record
class Topology:
    """The whole machine. Lookups are pure and cheap; see the module docstring for the list."""

    cpus: tuple[Cpu, ...]  # every cpuN folder, sorted by id
    packages: tuple[Package, ...]
    cores: tuple[Core, ...]
    caches: tuple[Cache, ...]  # one entry per cache instance
    numa_nodes: tuple[NumaNode, ...]  # as sysfs lists them, sorted by id
    pci_devices: tuple[PciFunction, ...]  # sorted by address
    pcie_roots: tuple[PcieRoot, ...]
    net_interfaces: tuple[NetInterface, ...]
    rdma_devices: tuple[RdmaDevice, ...]
    warnings: tuple[DiscoveryWarning, ...]
    _by_pci: dict[str, PciFunction] = field(init=False, repr=False, compare=False)
    _by_cpu: dict[int, Cpu] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Index once: drivers look functions and CPUs up in loops.
        object.__setattr__(self, "_by_pci", {p.address: p for p in self.pci_devices})
        object.__setattr__(self, "_by_cpu", {c.id: c for c in self.cpus})

    # --- CPUs -------------------------------------------------------------------------------
    def usable_cpus(self) -> CpuList:
        return tuple(c.id for c in self.cpus if c.usable)

    def cpu(self, n: int) -> Cpu | None:
        return self._by_cpu.get(n)

    def package(self, index: int) -> Package | None:
        return self.packages[index] if 0 <= index < len(self.packages) else None

    def package_of_cpu(self, n: int) -> Package | None:
        c = self.cpu(n)
        return None if c is None or c.package is None else self.packages[c.package]

    def core_of_cpu(self, n: int) -> Core | None:
        c = self.cpu(n)
        return None if c is None or c.core is None else self.cores[c.core]

    def smt_siblings(self, n: int) -> CpuList:
        core = self.core_of_cpu(n)
        return core.cpus if core is not None else ()

    def core_type(self, n: int) -> str | None:
        c = self.cpu(n)
        return None if c is None else c.core_type

    # --- NUMA -------------------------------------------------------------------------------
    def numa_node(self, node_id: int) -> NumaNode | None:
        for n in self.numa_nodes:
            if n.id == node_id:
                return n
        return None

    def cpus_of_numa(self, node_id: int) -> CpuList:
        n = self.numa_node(node_id)
        return n.cpus if n is not None else ()

    def numa_of_cpu(self, n: int) -> int | None:
        c = self.cpu(n)
        return None if c is None else c.numa_node

    def package_of_numa(self, node_id: int) -> Package | None:
        return self._package_of_cpus(self.cpus_of_numa(node_id))

    def distance(self, a: int, b: int) -> int | None:
        na = self.numa_node(a)
        if na is None:
            return None
        for node, d in na.distances:
            if node == b:
                return d
        return None

    def _package_of_cpus(self, cpus: CpuList) -> Package | None:
        """The one package holding all of `cpus`, None when empty or spanning packages."""
        found: set[int] = set()
        for n in cpus:
            c = self.cpu(n)
            if c is not None and c.package is not None:
                found.add(c.package)
        return self.packages[found.pop()] if len(found) == 1 else None

    # --- PCI --------------------------------------------------------------------------------
    def pci(self, address: str) -> PciFunction | None:
        return self._by_pci.get(address.lower())

    def package_of_pci(self, address: str) -> Package | None:
        p = self.pci(address)
        if p is None:
            return None
        if p.numa_node is not None:
            pkg = self.package_of_numa(p.numa_node)
            if pkg is not None:
                return pkg
        return self._package_of_cpus(p.local_cpus)

    def pcie_root(self, name: str) -> PcieRoot | None:
        for r in self.pcie_roots:
            if r.name == name:
                return r
        return None

    def pcie_roots_local_to(self, cpus: CpuList | frozenset[int] | set[int]) -> tuple[str, ...]:
        """Roots whose known affinity overlaps `cpus`.

        An affinity that covers every usable CPU on a machine with several packages or NUMA nodes
        says nothing (VMs, firmware without _PXM), so such roots are local to nobody.
        """
        wanted = set(cpus)
        every = set(self.usable_cpus())
        multi = len(self.packages) > 1 or len(self.numa_nodes) > 1
        out = []
        for r in self.pcie_roots:
            aff = set(r.cpus)
            if not aff or (multi and aff >= every):
                continue
            if aff & wanted:
                out.append(r.name)
        return tuple(out)

    def device_nodes_of(self, address: str) -> tuple[DeviceNode, ...]:
        p = self.pci(address)
        return p.device_nodes if p is not None else ()

    def accelerators(self) -> tuple[PciFunction, ...]:
        return tuple(p for p in self.pci_devices if classify.is_accelerator(self, p))

    # --- caches -----------------------------------------------------------------------------
    def caches_at(self, level: int) -> tuple[Cache, ...]:
        return tuple(c for c in self.caches if c.level == level)

    def l3_groups(self) -> tuple[Cache, ...]:
        return tuple(c for c in self.caches if c.level == 3 and c.type != "instruction")

    def cache_of_cpu(self, n: int, level: int, type_: str = "unified") -> Cache | None:
        for c in self.caches:
            if c.level == level and c.type == type_ and n in c.cpus:
                return c
        return None

    # --- network ----------------------------------------------------------------------------
    def net(self, name: str) -> NetInterface | None:
        for i in self.net_interfaces:
            if i.name == name:
                return i
        return None

    def nets_of_pci(self, address: str) -> tuple[NetInterface, ...]:
        a = address.lower()
        return tuple(i for i in self.net_interfaces if i.pci_address == a)

    def rdma(self, name: str) -> RdmaDevice | None:
        for r in self.rdma_devices:
            if r.name == name:
                return r
        return None

    def rdma_of_pci(self, address: str) -> tuple[RdmaDevice, ...]:
        a = address.lower()
        return tuple(r for r in self.rdma_devices if r.pci_address == a)
