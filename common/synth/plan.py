"""From a declared machine to every concrete number the kernel would show.

The plan is the machine as a reader should find it: CPU numbers, cache instances, NUMA nodes,
PCI addresses (bus numbers assigned depth-first like firmware does), IOMMU groups, interface
names, DRM/accel minors and RDMA device names. Rendering (render_*.py) only formats it, and
the manifest written beside the tree is this plan, so tests compare a reader against what was
declared rather than against the files themselves.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from topodra.common.synth.reader import SpecError
from topodra.common.synth.spec import (
    CoreType,
    DevicePort,
    EmptyPort,
    LinkSpec,
    MachineSpec,
    PciIds,
    PortItem,
    Profile,
    RootSpec,
    SwitchPort,
)

CACHE_TYPES = {"l1d": "Data", "l1i": "Instruction", "l2": "Unified", "l3": "Unified"}
DRM_MAJOR = 226
ACCEL_MAJOR = 261
UVERBS_MAJOR = 231
UVERBS_MINOR_BASE = 192
VFIO_GROUP_MAJOR = 243  # dynamic on real kernels; one plausible value
VFIO_DEV_MAJOR = 511
ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772


@dataclass(frozen=True)
class Cpu:
    id: int
    socket: int
    die: int
    node: int
    core: int  # global core index, one per core_cpus group
    core_id: int  # the kernel's core_id: index within the package
    thread: int
    online: bool
    kind: str | None
    base_mhz: int
    max_mhz: int
    apicid: int
    caches: tuple[int, ...]  # indexes into Plan.caches: L1d, L1i, L2, L3


@dataclass(frozen=True)
class Cache:
    index: int  # position under cpuN/cache/indexK
    level: int
    type: str
    id: int
    size_kib: int
    ways: int
    cpus: tuple[int, ...]  # every CPU sharing it, offline ones included


@dataclass(frozen=True)
class Core:
    index: int
    socket: int
    die: int
    node: int
    core_id: int
    kind: str | None
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class Node:
    id: int
    socket: int
    cpus: tuple[int, ...]
    memory_kib: int
    distances: tuple[int, ...]


@dataclass
class Function:
    """One PCI function, bridges included."""

    domain: int
    bus: int
    dev: int
    fn: int
    parent_dir: str  # sysfs folder holding this function's folder, relative to the output root
    role: str  # integrated | root_port | switch_upstream | switch_downstream | pci_bridge | endpoint | vf
    root: str  # pciDDDD:BB
    class_code: int
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    revision: int
    pcie_type: int | None  # PCIe capability port type; None for conventional PCI
    link: LinkSpec | None  # negotiated link; None: no link (conventional, or a VF's reserved registers)
    max_link: LinkSpec | None
    numa_node: int | None
    bridges: tuple[str, ...]  # PCI-to-PCI bridges above it, root-most first
    profile: Profile | None = None
    driver: str | None = None
    secondary: int | None = None
    subordinate: int | None = None
    multifunction: bool = False
    iommu_group: int = -1
    local_cpus: tuple[int, ...] = ()
    pf: str | None = None
    vf_index: int | None = None
    vfs: list[str] = field(default_factory=list)
    sriov_total: int = 0
    sriov_offset: int = 0
    sriov_stride: int = 0
    sriov_vf_device: int = 0
    netdevs: list[str] = field(default_factory=list)
    rdma: str | None = None
    uverbs: int | None = None
    drm_card: int | None = None
    drm_render: int | None = None
    accel: int | None = None
    vfio_dev: int | None = None
    link_up: bool = True
    uplink: bool = False
    names: tuple[str, ...] = ()
    vendor_driver: bool = True  # bound to its profile's driver, so the driver's interfaces exist

    @property
    def bdf(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.dev:02x}.{self.fn:x}"

    @property
    def dir(self) -> str:
        return f"{self.parent_dir}/{self.bdf}"

    @property
    def is_bridge(self) -> bool:
        return self.secondary is not None

    @property
    def kind(self) -> str:
        if self.is_bridge:
            return "bridge"
        return self.profile.kind if self.profile is not None else "other"

    @property
    def pcie_switch(self) -> str | None:
        # discovery's rule: the upstream port of the outermost switch is the chain's second bridge
        return self.bridges[1] if len(self.bridges) >= 3 else None

    def sort_key(self) -> tuple[int, int, int, int]:
        return (self.domain, self.bus, self.dev, self.fn)


@dataclass(frozen=True)
class Netdev:
    name: str
    ifindex: int
    address: str
    mtu: int
    speed: int  # Mb/s; -1 when the link is down or the interface has no speed
    up: bool
    carrier: bool
    type: int
    kind: str  # pci | loopback | bridge | dummy
    function: str | None
    dir: str
    uplink: bool
    dev_port: int
    link_layer: str | None


@dataclass(frozen=True)
class Rdma:
    name: str
    function: str
    uverbs: int
    node_guid: str
    link_layer: str
    rate: str
    active: bool
    netdev: str | None
    hca_type: str
    fw_ver: str
    board_id: str


@dataclass
class Plan:
    spec: MachineSpec
    nr_cpu_ids: int
    cpus: list[Cpu]
    cores: list[Core]
    caches: list[Cache]
    nodes: list[Node]
    functions: list[Function]
    netdevs: list[Netdev]
    rdma: list[Rdma]
    roots: list[tuple[str, int | None, tuple[int, ...]]]  # (pciDDDD:BB, numa node, local cpus)
    _by_bdf: dict[str, Function] = field(default_factory=dict, repr=False, compare=False)

    @property
    def online(self) -> list[int]:
        return [c.id for c in self.cpus if c.online]

    def function(self, bdf: str) -> Function:
        if len(self._by_bdf) != len(self.functions):
            self._by_bdf = {f.bdf: f for f in self.functions}
        return self._by_bdf[bdf]

    @property
    def uplink(self) -> Netdev | None:
        return next((n for n in self.netdevs if n.uplink), None)


def make_plan(spec: MachineSpec) -> Plan:
    cpus, cores, caches = _plan_cpus(spec)
    nodes = _plan_nodes(spec, cpus)
    nr = spec.cpu.possible_cpus or len(cpus)
    online = tuple(c.id for c in cpus if c.online)
    node_cpus = {n.id: tuple(c for c in n.cpus if cpus[c].online) for n in nodes}
    functions, roots = _PciPlanner(spec, node_cpus, online).run()
    netdevs, rdma = _plan_net(spec, functions)
    return Plan(
        spec=spec,
        nr_cpu_ids=nr,
        cpus=cpus,
        cores=cores,
        caches=caches,
        nodes=nodes,
        functions=functions,
        netdevs=netdevs,
        rdma=rdma,
        roots=roots,
    )


# ---------------------------------------------------------------- CPUs and caches


def _plan_cpus(spec: MachineSpec) -> tuple[list[Cpu], list[Core], list[Cache]]:
    cpu = spec.cpu
    per_socket: list[tuple[CoreType, int]] = []  # (type, index within its type block)
    for t in cpu.core_types:
        per_socket.extend((t, i) for i in range(t.cores_per_socket))
    cores_per_socket = len(per_socket)
    per_die = cores_per_socket // cpu.dies_per_socket
    per_node = cores_per_socket // cpu.numa_nodes_per_socket
    max_threads = max(t.threads for t in cpu.core_types)
    smt_bits = (max_threads - 1).bit_length()
    core_bits = (cores_per_socket - 1).bit_length()

    # cache instances, numbered per level across the machine
    caches: list[Cache] = []
    l2_of: dict[tuple[int, int], int] = {}
    l3_of: dict[tuple[int, int], int] = {}
    l2_count = 0
    l3_count = 0
    for s in range(cpu.sockets):
        block_start = 0
        for t in cpu.core_types:
            assert t.l2.cores is not None
            for i in range(t.cores_per_socket):
                if i % t.l2.cores == 0:
                    l2_count += 1
                l2_of[(s, block_start + i)] = l2_count - 1
            block_start += t.cores_per_socket
        for k in range(cores_per_socket):
            group = _l3_group(spec, k, per_die, per_node)
            key = (s, group)
            if key not in l3_of:
                l3_of[key] = l3_count
                l3_count += 1
            l3_of[(s, -1 - k)] = l3_of[key]

    _check_nesting(spec, l2_of, l3_of, cores_per_socket, per_die, per_node)

    slots = [
        (s, k, th)
        for s in range(cpu.sockets)
        for k in range(cores_per_socket)
        for th in range(per_socket[k][0].threads)
    ]
    if cpu.smt_numbering == "spread":
        slots.sort(key=lambda x: (x[2], x[0], x[1]))
    ids = {slot: n for n, slot in enumerate(slots)}
    offline = set(cpu.offline_cpus)

    core_cpus: dict[tuple[int, int], list[int]] = {}
    for (s, k, _th), n in ids.items():
        core_cpus.setdefault((s, k), []).append(n)
    l1_members: dict[int, list[int]] = {}
    l2_members: dict[int, list[int]] = {}
    l3_members: dict[int, list[int]] = {}
    for (s, k, _th), n in ids.items():
        l1_members.setdefault(s * cores_per_socket + k, []).append(n)
        l2_members.setdefault(l2_of[(s, k)], []).append(n)
        l3_members.setdefault(l3_of[(s, -1 - k)], []).append(n)

    def add(
        level_key: str, level: int, index: int, ident: int, size: int, ways: int, members: list[int]
    ) -> int:
        caches.append(Cache(index, level, CACHE_TYPES[level_key], ident, size, ways, tuple(sorted(members))))
        return len(caches) - 1

    l1d_at: dict[int, int] = {}
    l1i_at: dict[int, int] = {}
    l2_at: dict[int, int] = {}
    l3_at: dict[int, int] = {}
    for s in range(cpu.sockets):
        for k in range(cores_per_socket):
            t = per_socket[k][0]
            g = s * cores_per_socket + k
            l1d_at[g] = add("l1d", 1, 0, g, t.l1d.size_kib, t.l1d.ways, l1_members[g])
            l1i_at[g] = add("l1i", 1, 1, g, t.l1i.size_kib, t.l1i.ways, l1_members[g])
            l2 = l2_of[(s, k)]
            if l2 not in l2_at:
                l2_at[l2] = add("l2", 2, 2, l2, t.l2.size_kib, t.l2.ways, l2_members[l2])
            l3 = l3_of[(s, -1 - k)]
            if l3 not in l3_at:
                l3_at[l3] = add("l3", 3, 3, l3, cpu.l3.size_kib, cpu.l3.ways, l3_members[l3])

    cpus: list[Cpu] = []
    for (s, k, th), n in sorted(ids.items(), key=lambda x: x[1]):
        g = s * cores_per_socket + k
        cpus.append(
            Cpu(
                id=n,
                socket=s,
                die=k // per_die,
                node=s * cpu.numa_nodes_per_socket + k // per_node,
                core=g,
                core_id=k,
                thread=th,
                online=n not in offline,
                kind=per_socket[k][0].kind,
                base_mhz=per_socket[k][0].base_mhz,
                max_mhz=per_socket[k][0].max_mhz,
                apicid=(s << (core_bits + smt_bits)) | (k << smt_bits) | th,
                caches=(l1d_at[g], l1i_at[g], l2_at[l2_of[(s, k)]], l3_at[l3_of[(s, -1 - k)]]),
            )
        )
    cores = [
        Core(
            index=s * cores_per_socket + k,
            socket=s,
            die=k // per_die,
            node=s * cpu.numa_nodes_per_socket + k // per_node,
            core_id=k,
            kind=per_socket[k][0].kind,
            cpus=tuple(sorted(core_cpus[(s, k)])),
        )
        for s in range(cpu.sockets)
        for k in range(cores_per_socket)
    ]
    return cpus, cores, caches


def _check_nesting(
    spec: MachineSpec,
    l2_of: dict[tuple[int, int], int],
    l3_of: dict[tuple[int, int], int],
    cores: int,
    per_die: int,
    per_node: int,
) -> None:
    """Dies, NUMA nodes, L2 and L3 groups must nest: a cache that straddles a die is no real machine."""
    groups: dict[str, list[int]] = {
        "die": [k // per_die for k in range(cores)],
        "NUMA node": [k // per_node for k in range(cores)],
        "L2": [l2_of[(0, k)] for k in range(cores)],
        "L3": [l3_of[(0, -1 - k)] for k in range(cores)],
    }
    members = {
        name: [frozenset(k for k in range(cores) if ids[k] == g) for g in sorted(set(ids))]
        for name, ids in groups.items()
    }
    names = list(members)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for x in members[a]:
                for y in members[b]:
                    if x & y and not (x <= y or y <= x):
                        raise SpecError(
                            f"cpu: the {a} of cores {min(x)}-{max(x)} and the {b} of cores {min(y)}-{max(y)} "
                            "(in each socket) overlap without one holding the other"
                        )


def _l3_group(spec: MachineSpec, k: int, per_die: int, per_node: int) -> int:
    l3 = spec.cpu.l3
    if l3.cores is not None:
        cores: int = l3.cores
        return k // cores
    if l3.scope == "die":
        return k // per_die
    if l3.scope == "numa_node":
        return k // per_node
    return 0


def _plan_nodes(spec: MachineSpec, cpus: list[Cpu]) -> list[Node]:
    count = spec.cpu.sockets * spec.cpu.numa_nodes_per_socket
    mem = spec.memory
    nodes = []
    for n in range(count):
        socket = n // spec.cpu.numa_nodes_per_socket
        if mem.matrix is not None:
            row = mem.matrix[n]
        else:
            row = tuple(
                mem.local
                if m == n
                else mem.same_socket
                if m // spec.cpu.numa_nodes_per_socket == socket
                else mem.remote
                for m in range(count)
            )
        mib = mem.per_node_mib[n] if len(mem.per_node_mib) > 1 else mem.per_node_mib[0]
        nodes.append(
            Node(
                id=n,
                socket=socket,
                cpus=tuple(c.id for c in cpus if c.node == n),
                memory_kib=mib * 1024,
                distances=row,
            )
        )
    return nodes


# ---------------------------------------------------------------- PCI


class _PciPlanner:
    def __init__(
        self, spec: MachineSpec, node_cpus: dict[int, tuple[int, ...]], online: tuple[int, ...]
    ) -> None:
        self.spec = spec
        self.node_cpus = node_cpus
        self.online = online
        self.functions: list[Function] = []
        self.last_bus = 0
        self.domain = 0

    def run(self) -> tuple[list[Function], list[tuple[str, int | None, tuple[int, ...]]]]:
        next_bus: dict[int, int] = {}
        roots = []
        for i, root in enumerate(self.spec.roots):
            start = next_bus.get(root.domain, 0)
            bus = root.bus if root.bus is not None else start
            if bus < start:
                raise SpecError(f"pci.roots[{i}].bus: {bus:#04x} overlaps the buses of the root before it")
            if bus > 255:
                raise SpecError(
                    f"pci.roots[{i}]: domain {root.domain:04x} has no bus numbers left; "
                    "put roots in another domain"
                )
            name = f"pci{root.domain:04x}:{bus:02x}"
            cpus = self.node_cpus[root.numa_node] if root.numa_node is not None else self.online
            roots.append((name, root.numa_node, cpus))
            self._root(root, bus, name, f"pci.roots[{i}]")
            next_bus[root.domain] = self.last_bus + 1
        self.functions.sort(key=Function.sort_key)
        seen: set[str] = set()
        for f in self.functions:
            if f.bdf in seen:
                raise SpecError(f"pci: two functions at {f.bdf}")
            seen.add(f.bdf)
        self._iommu_groups()
        self._minors()
        return self.functions, roots

    # -- bus numbers

    def _take_bus(self, where: str) -> int:
        self.last_bus += 1
        if self.last_bus > 255:
            raise SpecError(
                f"{where}: domain {self.domain:04x} ran out of bus numbers; put roots in another domain"
            )
        return self.last_bus

    def _root(self, root: RootSpec, bus: int, name: str, where: str) -> None:
        self.domain = root.domain
        self.last_bus = bus
        self.root = root
        self.root_name = name
        root_dir = f"sys/devices/{name}"
        devno = 0
        for dev in root.integrated:
            pcie = 9 if dev.profile.link is not None else None  # 9: root complex integrated endpoint
            self._endpoint(dev, bus, devno, root_dir, (), where, pcie_type=pcie, role="integrated")
            devno += 1
        for item in root.ports:
            port = self._bridge(
                bus, devno, 0, root_dir, (), "root_port", root.root_port, 4, self._link_of(item, where)
            )
            devno += 1
            self._below(item, port, where)

    def _link_of(self, item: PortItem, where: str) -> LinkSpec | None:
        if isinstance(item, SwitchPort):
            return item.link
        if isinstance(item, DevicePort):
            link = item.profile.link
            if item.profile.behind_bridge is not None:
                return link or LinkSpec(2, 1)
            if link is None:
                raise SpecError(
                    f"{where}: profile {item.profile.name} is conventional PCI; "
                    "give it behind_bridge or put it in integrated"
                )
            return link
        return None

    def _bridge(
        self,
        bus: int,
        dev: int,
        fn: int,
        parent_dir: str,
        bridges: tuple[str, ...],
        role: str,
        ids: PciIds,
        pcie_type: int | None,
        link: LinkSpec | None,
    ) -> Function:
        f = Function(
            domain=self.domain,
            bus=bus,
            dev=dev,
            fn=fn,
            parent_dir=parent_dir,
            role=role,
            root=self.root_name,
            class_code=0x060400,
            vendor=ids.vendor,
            device=ids.device,
            subsystem_vendor=ids.vendor if role != "pci_bridge" else 0,
            subsystem_device=0,
            revision=0x04 if role == "root_port" else 0x01,
            pcie_type=pcie_type,
            link=link,
            max_link=link if link is not None else (LinkSpec(5, 16) if pcie_type is not None else None),
            numa_node=self.root.numa_node,
            bridges=bridges,
            driver="pcieport" if role in ("root_port", "switch_upstream", "switch_downstream") else None,
        )
        self.functions.append(f)
        return f

    def _below(self, item: PortItem, port: Function, where: str) -> None:
        sec = self._take_bus(where)
        port.secondary = sec
        chain = (*port.bridges, port.bdf)
        if isinstance(item, EmptyPort):
            pass
        elif isinstance(item, SwitchPort):
            up = self._bridge(sec, 0, 0, port.dir, chain, "switch_upstream", item.ids, 5, item.link)
            internal = self._take_bus(where)
            up.secondary = internal
            for j, sub in enumerate(item.ports):
                down = self._bridge(
                    internal,
                    j,
                    0,
                    up.dir,
                    (*chain, up.bdf),
                    "switch_downstream",
                    item.ids,
                    6,
                    self._link_of(sub, where),
                )
                self._below(sub, down, where)
            up.subordinate = self.last_bus
        else:
            bb = item.profile.behind_bridge
            if bb is not None:
                bridge = self._bridge(
                    sec, 0, 0, port.dir, chain, "pci_bridge", bb, 7, item.profile.link or LinkSpec(2, 1)
                )
                inner = self._take_bus(where)
                bridge.secondary = inner
                bridge.subordinate = inner
                self._endpoint(
                    item, inner, 0, bridge.dir, (*chain, bridge.bdf), where, pcie_type=None, role="endpoint"
                )
            else:
                self._endpoint(item, sec, 0, port.dir, chain, where, pcie_type=0, role="endpoint")
        port.subordinate = self.last_bus

    def _endpoint(
        self,
        item: DevicePort,
        bus: int,
        dev: int,
        parent_dir: str,
        bridges: tuple[str, ...],
        where: str,
        *,
        pcie_type: int | None,
        role: str,
    ) -> None:
        p = item.profile
        link = p.link if pcie_type == 0 else None  # RCiEPs and conventional functions have no link
        pfs = []
        for fn in range(p.functions):
            f = Function(
                domain=self.domain,
                bus=bus,
                dev=dev,
                fn=fn,
                parent_dir=parent_dir,
                role=role,
                root=self.root_name,
                class_code=p.class_code,
                vendor=p.vendor,
                device=p.device,
                subsystem_vendor=p.subsystem_vendor,
                subsystem_device=p.subsystem_device,
                revision=p.revision,
                pcie_type=pcie_type,
                link=link,
                max_link=link,
                numa_node=self.root.numa_node,
                bridges=bridges,
                profile=p,
                driver=(item.driver or None) if item.driver is not None else p.driver,
                vendor_driver=item.driver is None or item.driver == p.driver,
                multifunction=p.functions > 1,
                link_up=item.link_up,
                uplink=item.uplink and fn == 0,
                names=item.names[fn : fn + 1],
            )
            self.functions.append(f)
            pfs.append(f)
        sriov = p.sriov
        if sriov is None:
            return
        num = item.num_vfs if item.num_vfs is not None else sriov.num_vfs
        base = (dev << 3) + 0  # devfn of function 0
        for pf in pfs:
            first = sriov.offset + pf.fn * sriov.total_vfs * sriov.stride
            pf.sriov_total = sriov.total_vfs
            pf.sriov_offset = first - pf.fn
            pf.sriov_stride = sriov.stride
            pf.sriov_vf_device = sriov.vf_device
            for i in range(num):
                devfn = base + first + i * sriov.stride
                vf_bus = bus + (devfn >> 8)
                while self.last_bus < vf_bus:
                    self._take_bus(where)
                devfn &= 0xFF
                vf = Function(
                    domain=self.domain,
                    bus=vf_bus,
                    dev=devfn >> 3,
                    fn=devfn & 7,
                    parent_dir=parent_dir,
                    role="vf",
                    root=self.root_name,
                    class_code=p.class_code,
                    vendor=p.vendor,
                    device=sriov.vf_device,
                    subsystem_vendor=p.subsystem_vendor,
                    subsystem_device=p.subsystem_device,
                    revision=p.revision,
                    pcie_type=0,
                    link=None,
                    max_link=None,
                    numa_node=self.root.numa_node,
                    bridges=bridges,
                    profile=p,
                    driver=sriov.vf_driver,
                    pf=pf.bdf,
                    vf_index=i,
                    link_up=item.link_up,
                )
                pf.vfs.append(vf.bdf)
                self.functions.append(vf)

    # -- numbering that follows the finished tree

    def _iommu_groups(self) -> None:
        group_of: dict[str, int] = {}
        role = {f.bdf: f.role for f in self.functions}
        next_group = 0
        for f in self.functions:
            # functions behind a PCIe-to-PCI bridge share its group: the IOMMU sees the bridge's requester id
            alias = next((b for b in f.bridges if role[b] == "pci_bridge"), None)
            if alias is not None and alias in group_of:
                f.iommu_group = group_of[alias]
            else:
                f.iommu_group = next_group
                next_group += 1
            group_of[f.bdf] = f.iommu_group
            f.local_cpus = self.node_cpus[f.numa_node] if f.numa_node is not None else self.online

    def _minors(self) -> None:
        card = 0
        render = 0
        accel = 0
        vfio = 0
        for f in self.functions:
            if f.driver == "vfio-pci":
                f.vfio_dev = vfio
                vfio += 1
            if f.profile is None or f.role == "vf" or not f.vendor_driver:
                continue
            if f.profile.drm_card:
                f.drm_card = card
                card += 1
            if f.profile.drm_render:
                f.drm_render = 128 + render
                render += 1
            if f.profile.accel:
                f.accel = accel
                accel += 1
        if card > 64 or render > 64:
            raise SpecError(
                f"pci: {max(card, render)} DRM devices, the kernel numbers at most 64 (use accel nodes)"
            )


# ---------------------------------------------------------------- network


RATES = {
    400000: "400 Gb/sec (4X NDR)",
    200000: "200 Gb/sec (4X HDR)",
    100000: "100 Gb/sec (4X EDR)",
    56000: "56 Gb/sec (4X FDR)",
    50000: "50 Gb/sec (2X HDR)",
    40000: "40 Gb/sec (4X QDR)",
    25000: "25 Gb/sec (1X EDR)",
    10000: "10 Gb/sec (1X QDR)",
}


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(parts).encode()).digest()


def _mac(oui: str, hostname: str, bdf: str, taken: set[str]) -> str:
    salt = 0
    while True:
        tail = _digest(hostname, bdf, str(salt))[:3]
        mac = oui + ":" + ":".join(f"{b:02x}" for b in tail)
        if mac not in taken:
            taken.add(mac)
            return mac
        salt += 1


def _derived_name(f: Function, link_layer: str, pf_name: str | None) -> str:
    if f.pf is not None and pf_name is not None:
        name = f"{pf_name}v{f.vf_index}"
    else:
        prefix = "ib" if link_layer == "infiniband" else "en"
        domain = f"P{f.domain}" if f.domain else ""
        name = f"{prefix}{domain}p{f.bus}s{f.dev}f{f.fn}"
    return name


def _plan_net(spec: MachineSpec, functions: list[Function]) -> tuple[list[Netdev], list[Rdma]]:
    hostname = spec.hostname
    macs: set[str] = set()
    netdevs: list[Netdev] = [
        Netdev(
            name="lo",
            ifindex=1,
            address="00:00:00:00:00:00",
            mtu=65536,
            speed=-1,
            up=True,
            carrier=True,
            type=ARPHRD_LOOPBACK,
            kind="loopback",
            function=None,
            dir="sys/devices/virtual/net/lo",
            uplink=False,
            dev_port=0,
            link_layer=None,
        )
    ]
    names: set[str] = {"lo"}
    uplinks = [f for f in functions if f.uplink]
    if len(uplinks) > 1:
        raise SpecError(f"network: more than one uplink ({', '.join(f.bdf for f in uplinks)})")
    # PFs first, then VFs, each in address order: the order drivers probe them in
    ordered = [f for f in functions if f.role != "vf"] + [f for f in functions if f.role == "vf"]
    pf_name: dict[str, str] = {}
    for f in ordered:
        p = f.profile
        if (
            p is None
            or p.net is None
            or not f.vendor_driver
            or (f.role == "vf" and not (p.sriov and p.sriov.vf_net))
        ):
            continue
        net = p.net
        name = f.names[0] if f.names else _derived_name(f, net.link_layer, pf_name.get(f.pf or ""))
        if len(name) > 15:
            name = f"eth{len(netdevs) - 1}"
        if name in names:
            raise SpecError(f"network: two interfaces named {name!r} (the second at {f.bdf})")
        names.add(name)
        pf_name[f.bdf] = name
        if net.link_layer == "infiniband":
            guid = _digest(hostname, f.bdf, "guid")[:3]
            port_guid = bytes.fromhex(net.mac_oui.replace(":", "")) + b"\x03\x00" + guid
            address = "00:00:10:87:fe:80:00:00:00:00:00:00:" + ":".join(f"{b:02x}" for b in port_guid)
        else:
            address = _mac(net.mac_oui, hostname, f.bdf, macs)
        f.netdevs.append(name)
        netdevs.append(
            Netdev(
                name=name,
                ifindex=len(netdevs) + 1,
                address=address,
                mtu=net.mtu,
                speed=net.speed_mbps if f.link_up else -1,
                up=f.link_up,
                carrier=f.link_up,
                type=ARPHRD_INFINIBAND if net.link_layer == "infiniband" else ARPHRD_ETHER,
                kind="pci",
                function=f.bdf,
                dir=f"{f.dir}/net/{name}",
                uplink=f.uplink,
                dev_port=0,
                link_layer=net.link_layer,
            )
        )
    for v in spec.network.virtual:
        if v.name in names:
            raise SpecError(f"network.virtual: interface {v.name!r} exists already")
        names.add(v.name)
        netdevs.append(
            Netdev(
                name=v.name,
                ifindex=len(netdevs) + 1,
                address=_mac("02:42:ac", hostname, v.name, macs),
                mtu=1500,
                speed=-1,
                up=v.up,
                carrier=v.up,
                type=ARPHRD_ETHER,
                kind=v.kind,
                function=None,
                dir=f"sys/devices/virtual/net/{v.name}",
                uplink=False,
                dev_port=0,
                link_layer=None,
            )
        )
    rdma: list[Rdma] = []
    counters: dict[str, int] = {}
    netdev_of = {n.function: n for n in netdevs if n.function}
    for f in ordered:
        p = f.profile
        if (
            p is None
            or not f.vendor_driver
            or p.rdma is None
            or p.net is None
            or (f.role == "vf" and not (p.sriov and p.sriov.vf_rdma))
        ):
            continue
        n = counters.get(p.rdma.name_prefix, 0)
        counters[p.rdma.name_prefix] = n + 1
        name = f"{p.rdma.name_prefix}{n}"
        f.rdma = name
        f.uverbs = len(rdma)
        guid = _digest(hostname, f.bdf, "guid")[:3]
        oui = p.net.mac_oui.replace(":", "")
        node_guid = f"{oui[0:4]}:{oui[4:6]}03:00{guid[0]:02x}:{guid[1]:02x}{guid[2]:02x}"
        nd = netdev_of.get(f.bdf)
        rdma.append(
            Rdma(
                name=name,
                function=f.bdf,
                uverbs=len(rdma),
                node_guid=node_guid,
                link_layer="InfiniBand" if p.net.link_layer == "infiniband" else "Ethernet",
                rate=RATES.get(p.net.speed_mbps, f"{p.net.speed_mbps // 1000} Gb/sec (1X)"),
                active=f.link_up,
                netdev=nd.name if nd else None,
                hca_type=p.rdma.hca_type,
                fw_ver=p.rdma.fw_ver,
                board_id=p.rdma.board_id,
            )
        )
    return netdevs, rdma
