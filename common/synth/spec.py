"""The declared machine: typed, validated data parsed from a spec's JSON.

Parsing is separate from planning (plan.py) so that every rule about what a person may write
lives here, with errors naming the field; planning then only derives numbers.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from topodra.common.synth.reader import Obj, SpecError, check_int, fail

SPEC_VERSION = 1
PCIE_GENS = (1, 2, 3, 4, 5, 6)
LINK_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
CORE_KINDS = ("core", "atom")
L3_SCOPES = ("socket", "die", "numa_node")
KINDS = ("accelerator", "nic", "storage", "display", "other")


@dataclass(frozen=True)
class CacheSpec:
    size_kib: int
    ways: int
    # cores sharing one instance (L2 on Atom modules); None for L3 means `scope` decides
    cores: int | None = None
    scope: str | None = None


@dataclass(frozen=True)
class CoreType:
    kind: str | None  # "core"/"atom" on hybrid parts; None on homogeneous ones
    cores_per_socket: int
    threads: int
    l1d: CacheSpec
    l1i: CacheSpec
    l2: CacheSpec
    base_mhz: int
    max_mhz: int


@dataclass(frozen=True)
class CpuSpec:
    vendor: str
    model_name: str
    family: int
    model: int
    stepping: int
    mhz: int
    sockets: int
    dies_per_socket: int
    numa_nodes_per_socket: int
    core_types: tuple[CoreType, ...]
    l3: CacheSpec
    smt_numbering: str  # "spread": siblings at +N (x86 servers); "adjacent": siblings consecutive
    offline_cpus: tuple[int, ...]
    possible_cpus: int | None
    cpu0_hotpluggable: bool

    @property
    def hybrid(self) -> bool:
        return any(t.kind is not None for t in self.core_types)


@dataclass(frozen=True)
class MemorySpec:
    per_node_mib: tuple[int, ...]  # one value for all nodes, or one per node
    local: int
    same_socket: int
    remote: int
    matrix: tuple[tuple[int, ...], ...] | None


@dataclass(frozen=True)
class LinkSpec:
    gen: int
    width: int


@dataclass(frozen=True)
class PciIds:
    vendor: int
    device: int


@dataclass(frozen=True)
class NetSpec:
    speed_mbps: int
    mtu: int
    link_layer: str  # "ethernet" or "infiniband"
    mac_oui: str


@dataclass(frozen=True)
class RdmaSpec:
    name_prefix: str
    hca_type: str
    fw_ver: str
    board_id: str


@dataclass(frozen=True)
class SriovSpec:
    total_vfs: int
    num_vfs: int
    vf_device: int
    offset: int
    stride: int
    vf_driver: str | None
    vf_rdma: bool
    vf_net: bool


@dataclass(frozen=True)
class Profile:
    """What one kind of PCI card looks like; instances in the tree refer to it by name."""

    name: str
    kind: str
    class_code: int  # 24 bits: base, sub, prog-if
    vendor: int
    device: int
    subsystem_vendor: int
    subsystem_device: int
    revision: int
    driver: str | None
    link: LinkSpec | None  # None: conventional PCI (no PCIe capability)
    functions: int
    drm_card: bool
    drm_render: bool
    accel: bool
    net: NetSpec | None
    rdma: RdmaSpec | None
    sriov: SriovSpec | None
    behind_bridge: PciIds | None
    model: str | None
    vram_bytes: int | None
    files: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DevicePort:
    profile: Profile
    names: tuple[str, ...]  # netdev names per function; empty: derived from the address
    uplink: bool
    link_up: bool
    num_vfs: int | None
    # the bound driver when it is not the profile's own (e.g. "vfio-pci" for passthrough, "" for
    # none): the vendor driver's interfaces (netdevs, RDMA, DRM/accel nodes) are then absent
    driver: str | None = None


@dataclass(frozen=True)
class SwitchPort:
    ids: PciIds
    link: LinkSpec
    ports: tuple[PortItem, ...]


@dataclass(frozen=True)
class EmptyPort:
    pass


PortItem = DevicePort | SwitchPort | EmptyPort


@dataclass(frozen=True)
class RootSpec:
    domain: int
    bus: int | None
    numa_node: int | None
    root_port: PciIds
    integrated: tuple[DevicePort, ...]
    ports: tuple[PortItem, ...]


@dataclass(frozen=True)
class VirtualNet:
    name: str
    kind: str  # "bridge", "dummy"
    up: bool
    ipv4: ipaddress.IPv4Interface | None


@dataclass(frozen=True)
class NetworkSpec:
    uplink_ipv4: ipaddress.IPv4Interface
    gateway_ipv4: ipaddress.IPv4Address
    gateway_ipv6: ipaddress.IPv6Address | None
    virtual: tuple[VirtualNet, ...]


@dataclass(frozen=True)
class MachineSpec:
    name: str
    description: str
    hostname: str
    dmi: tuple[tuple[str, str], ...]
    cpu: CpuSpec
    memory: MemorySpec
    roots: tuple[RootSpec, ...]
    network: NetworkSpec
    source: dict[str, Any] = field(compare=False, repr=False)


def parse_spec(data: object, *, default_name: str | None = None) -> MachineSpec:
    """Validate a spec (already decoded from JSON); raises SpecError naming the bad field."""
    top = Obj(data, "")
    version = top.number("version", SPEC_VERSION, lo=1)
    if version != SPEC_VERSION:
        fail("version", f"this topodra reads spec version {SPEC_VERSION}, not {version}")
    name = top.text("name", default_name)
    if not name:
        fail("name", "is required")
    description = top.text("description", "") or ""
    hostname = top.text("hostname", name) or name
    dmi = _dmi(top.child("dmi"), name)
    cpu_obj = top.child("cpu")
    if cpu_obj is None:
        fail("cpu", "is required")
    cpu = _cpu(cpu_obj)
    nodes = cpu.sockets * cpu.numa_nodes_per_socket
    memory = _memory(top.child("memory") or Obj({}, "memory"), cpu, nodes)
    roots = _pci(top.child("pci") or Obj({}, "pci"), nodes)
    network = _network(top.child("network") or Obj({}, "network"))
    top.done()
    assert isinstance(data, dict)
    return MachineSpec(
        name=name,
        description=description,
        hostname=hostname,
        dmi=dmi,
        cpu=cpu,
        memory=memory,
        roots=roots,
        network=network,
        source=data,
    )


def load_spec_text(text: str, *, default_name: str | None = None, origin: str = "spec") -> MachineSpec:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{origin}: not JSON: {exc}") from None
    try:
        return parse_spec(data, default_name=default_name)
    except SpecError as exc:
        raise SpecError(f"{origin}: {exc}") from None


# ---------------------------------------------------------------- machine-level sections


def _dmi(obj: Obj | None, name: str) -> tuple[tuple[str, str], ...]:
    values = {"sys_vendor": "topodra", "product_name": f"synthetic {name}", "board_vendor": "topodra"}
    if obj is not None:
        for key in list(obj.keys()):
            value = obj.text(key)
            if value is None or "\n" in value or "/" in key:
                fail(obj.at(key), "must be a one-line string")
            values[key] = value
        obj.done()
    return tuple(sorted(values.items()))


def _cache(obj: Obj | None, path: str, default: CacheSpec | None, *, l3: bool = False) -> CacheSpec:
    if obj is None:
        if default is None:
            raise SpecError(f"{path}: is required")
        return default
    base = default or CacheSpec(size_kib=0, ways=8)
    size = obj.number("size_kib", base.size_kib or None, lo=1)
    ways = obj.number("ways", base.ways, lo=1, hi=64)
    cores = obj.opt_number("cores", lo=1)
    scope = obj.text("scope") if l3 else None
    obj.done()
    if l3:
        if cores is not None and scope is not None:
            fail(path, "give either cores (per instance) or scope, not both")
        if scope is not None and scope not in L3_SCOPES:
            fail(obj.at("scope"), f"must be one of {', '.join(L3_SCOPES)}, not {scope!r}")
        if cores is None and scope is None:
            cores, scope = base.cores, base.scope or "socket"
    elif cores is None:
        cores = base.cores or 1
    if size * 1024 % (64 * ways):
        fail(path, f"{size} KiB is not a whole number of {ways}-way sets of 64-byte lines")
    return CacheSpec(size_kib=size, ways=ways, cores=cores, scope=scope)


DEFAULT_L1D = CacheSpec(48, 12, cores=1)
DEFAULT_L1I = CacheSpec(32, 8, cores=1)
DEFAULT_L2 = CacheSpec(2048, 16, cores=1)


def _cpu(obj: Obj) -> CpuSpec:
    sockets = obj.number("sockets", 1, lo=1, hi=64)
    dies = obj.number("dies_per_socket", 1, lo=1, hi=64)
    nodes = obj.number("numa_nodes_per_socket", 1, lo=1, hi=64)
    caches = obj.child("caches") or Obj({}, obj.at("caches"))
    l1d = _cache(caches.child("l1d"), caches.at("l1d"), DEFAULT_L1D)
    l1i = _cache(caches.child("l1i"), caches.at("l1i"), DEFAULT_L1I)
    l2 = _cache(caches.child("l2"), caches.at("l2"), DEFAULT_L2)
    l3 = _cache(caches.child("l3"), caches.at("l3"), CacheSpec(32768, 16, None, "socket"), l3=True)
    caches.done()
    base_mhz = obj.number("mhz", 2000, lo=1)
    max_mhz = obj.number("max_mhz", base_mhz, lo=base_mhz)
    types_raw = obj.items("core_types")
    if types_raw:
        if obj.has("cores_per_socket") or obj.has("threads_per_core"):
            fail(
                obj.at("core_types"), "replaces cores_per_socket and threads_per_core; give one or the other"
            )
        core_types = []
        for i, raw in enumerate(types_raw):
            t = Obj(raw, f"{obj.at('core_types')}[{i}]")
            kind = t.choice("type", CORE_KINDS, "core")
            tc = t.child("caches") or Obj({}, t.at("caches"))
            core_types.append(
                CoreType(
                    kind=kind,
                    cores_per_socket=t.number("cores", lo=1, hi=1024),
                    threads=t.number("threads", 1, lo=1, hi=8),
                    l1d=_cache(tc.child("l1d"), tc.at("l1d"), l1d),
                    l1i=_cache(tc.child("l1i"), tc.at("l1i"), l1i),
                    l2=_cache(tc.child("l2"), tc.at("l2"), l2),
                    base_mhz=(tb := t.number("base_mhz", base_mhz, lo=1)),
                    max_mhz=t.number("max_mhz", max(max_mhz, tb), lo=tb),
                )
            )
            tc.done()
            t.done()
        if len({t.kind for t in core_types}) != len(core_types):
            fail(obj.at("core_types"), "each type (core, atom) may appear once")
    else:
        core_types = [
            CoreType(
                kind=None,
                cores_per_socket=obj.number("cores_per_socket", 4, lo=1, hi=1024),
                threads=obj.number("threads_per_core", 1, lo=1, hi=8),
                l1d=l1d,
                l1i=l1i,
                l2=l2,
                base_mhz=base_mhz,
                max_mhz=max_mhz,
            )
        ]
    cores = sum(t.cores_per_socket for t in core_types)
    for divisor, what in ((dies, "dies_per_socket"), (nodes, "numa_nodes_per_socket")):
        if cores % divisor:
            fail(obj.at(what), f"{cores} cores per socket do not split evenly into {divisor}")
    for ct in core_types:
        assert ct.l2.cores is not None
        if ct.cores_per_socket % ct.l2.cores:
            fail(
                obj.at("caches.l2.cores"),
                f"{ct.cores_per_socket} cores do not split into L2 groups of {ct.l2.cores}",
            )
    if l3.cores is not None and cores % l3.cores:
        fail(caches.at("l3.cores"), f"{cores} cores per socket do not split into L3 groups of {l3.cores}")
    total = sockets * sum(t.cores_per_socket * t.threads for t in core_types)
    offline = tuple(
        sorted(set(check_int(c, obj.at("offline_cpus"), lo=0) for c in obj.items("offline_cpus")))
    )
    if offline and offline[-1] >= total:
        fail(obj.at("offline_cpus"), f"cpu{offline[-1]} does not exist (the machine has {total} CPUs)")
    if len(offline) == total:
        fail(obj.at("offline_cpus"), "at least one CPU must stay online")
    possible = obj.opt_number("possible_cpus", lo=total, hi=8192)
    spec = CpuSpec(
        vendor=obj.text("vendor", "GenuineIntel") or "GenuineIntel",
        model_name=obj.text("model_name", "Synthetic CPU") or "Synthetic CPU",
        family=obj.number("family", 6, lo=0),
        model=obj.number("model", 143, lo=0),
        stepping=obj.number("stepping", 8, lo=0),
        mhz=base_mhz,
        sockets=sockets,
        dies_per_socket=dies,
        numa_nodes_per_socket=nodes,
        core_types=tuple(core_types),
        l3=l3,
        smt_numbering=obj.choice("smt_numbering", ("spread", "adjacent"), "spread"),
        offline_cpus=offline,
        possible_cpus=possible,
        cpu0_hotpluggable=obj.flag("cpu0_hotpluggable", False) or 0 in offline,
    )
    obj.done()
    return spec


def _memory(obj: Obj, cpu: CpuSpec, nodes: int) -> MemorySpec:
    raw = obj.raw("per_node_mib")
    if raw is None:
        per_node: tuple[int, ...] = (65536,)
    elif isinstance(raw, list):
        per_node = tuple(check_int(v, f"{obj.at('per_node_mib')}[{i}]", lo=1) for i, v in enumerate(raw))
        if len(per_node) != nodes:
            fail(obj.at("per_node_mib"), f"lists {len(per_node)} nodes but the machine has {nodes}")
    else:
        per_node = (check_int(raw, obj.at("per_node_mib"), lo=1),)
    dist_raw = obj.raw("distances")
    matrix: tuple[tuple[int, ...], ...] | None = None
    local, same, remote = 10, 12 if cpu.numa_nodes_per_socket > 1 else 11, 21
    if isinstance(dist_raw, list):
        rows = []
        for i, row in enumerate(dist_raw):
            if not isinstance(row, list) or len(row) != nodes:
                fail(f"{obj.at('distances')}[{i}]", f"must be a list of {nodes} numbers")
            rows.append(tuple(check_int(v, f"{obj.at('distances')}[{i}]", lo=10, hi=254) for v in row))
        if len(rows) != nodes:
            fail(obj.at("distances"), f"must have {nodes} rows, one per NUMA node")
        for i in range(nodes):
            if rows[i][i] != 10:
                fail(f"{obj.at('distances')}[{i}][{i}]", "a node's distance to itself is 10")
        matrix = tuple(rows)
    elif dist_raw is not None:
        d = Obj(dist_raw, obj.at("distances"))
        local = d.number("local", 10, lo=10, hi=10)
        same = d.number("same_socket", same, lo=11, hi=254)
        remote = d.number("remote", remote, lo=11, hi=254)
        d.done()
    obj.done()
    return MemorySpec(per_node_mib=per_node, local=local, same_socket=same, remote=remote, matrix=matrix)


def _network(obj: Obj) -> NetworkSpec:
    def iface(key: str, default: str) -> ipaddress.IPv4Interface:
        text = obj.text(key, default) or default
        try:
            return ipaddress.IPv4Interface(text)
        except ValueError:
            raise SpecError(
                f"{obj.at(key)}: must be an IPv4 address with prefix like 10.0.0.5/24, not {text!r}"
            ) from None

    uplink = iface("uplink_ipv4", "192.168.10.20/24")
    if uplink.network.prefixlen > 30:
        fail(
            obj.at("uplink_ipv4"),
            f"needs a prefix length that leaves room for a gateway, like {uplink.ip}/24",
        )
    gw_text = obj.text("gateway_ipv4") or str(next(iter(uplink.network.hosts())))
    try:
        gateway = ipaddress.IPv4Address(gw_text)
    except ValueError:
        fail(obj.at("gateway_ipv4"), f"must be an IPv4 address, not {gw_text!r}")
    if gateway not in uplink.network:
        fail(obj.at("gateway_ipv4"), f"{gateway} is not in the uplink's network {uplink.network}")
    gw6_text = obj.text("gateway_ipv6", "fe80::1")
    try:
        gateway6 = ipaddress.IPv6Address(gw6_text) if gw6_text else None
    except ValueError:
        fail(obj.at("gateway_ipv6"), f"must be an IPv6 address, not {gw6_text!r}")
    virtual = []
    for i, raw in enumerate(obj.items("virtual")):
        v = Obj(raw, f"{obj.at('virtual')}[{i}]")
        name = _ifname(v.req_text("name"), v.at("name"))
        if name == "lo":
            fail(v.at("name"), "lo is always present")
        ip_text = v.text("ipv4")
        try:
            ip = ipaddress.IPv4Interface(ip_text) if ip_text else None
        except ValueError:
            fail(v.at("ipv4"), f"must be an IPv4 address with prefix, not {ip_text!r}")
        virtual.append(
            VirtualNet(
                name=name,
                kind=v.choice("kind", ("bridge", "dummy"), "bridge"),
                up=v.flag("up", True),
                ipv4=ip,
            )
        )
        v.done()
    obj.done()
    return NetworkSpec(
        uplink_ipv4=uplink, gateway_ipv4=gateway, gateway_ipv6=gateway6, virtual=tuple(virtual)
    )


def _ifname(name: str, path: str) -> str:
    # the kernel's rule (dev_valid_name): 1-15 bytes, no '/', ':' or whitespace, not . or ..
    if not 0 < len(name.encode()) <= 15 or name in (".", "..") or any(c in name for c in "/: \t\n"):
        fail(path, f"{name!r} is not a valid interface name (1-15 characters, no '/', ':' or spaces)")
    return name


# ---------------------------------------------------------------- PCI


def builtin_profiles() -> dict[str, Any]:
    text = resources.files("topodra.common.synth").joinpath("profiles.json").read_text()
    profiles: dict[str, Any] = json.loads(text)["profiles"]
    return profiles


def _pci(obj: Obj, nodes: int) -> tuple[RootSpec, ...]:
    defaults = obj.child("defaults") or Obj({}, obj.at("defaults"))
    root_port = _ids(defaults.child("root_port"), PciIds(0x8086, 0x352A))
    switch_ids = _ids(defaults.child("switch"), PciIds(0x1000, 0xC030))
    defaults.done()
    local_raw = obj.raw("profiles") or {}
    if not isinstance(local_raw, dict):
        fail(obj.at("profiles"), "must be an object of name: profile")
    resolver = _Profiles(builtin_profiles(), local_raw, obj.at("profiles"))
    for name in sorted(local_raw):  # an unused profile with a typo is still a typo
        resolver.get(name, f"{obj.at('profiles')}.{name}")
    roots: list[RootSpec] = []
    for i, raw in enumerate(obj.items("roots")):
        r = Obj(raw, f"{obj.at('roots')}[{i}]")
        repeat = r.number("repeat", 1, lo=1, hi=256)
        numa = r.raw("numa_node")
        if numa is not None:
            numa = check_int(numa, r.at("numa_node"), lo=0)
            if numa >= nodes:
                fail(r.at("numa_node"), f"node {numa} does not exist (the machine has {nodes})")
        bus = r.opt_number("bus", lo=0, hi=255)
        if bus is not None and repeat > 1:
            fail(r.at("bus"), "cannot be fixed on a repeated root")
        rp = _ids(r.child("root_port"), root_port)
        integrated = tuple(
            _device(Obj(item, f"{r.at('integrated')}[{j}]"), resolver)
            for j, item in enumerate(r.items("integrated"))
        )
        for j, dev in enumerate(integrated):
            if dev.profile.sriov is not None or dev.profile.behind_bridge is not None:
                fail(
                    f"{r.at('integrated')}[{j}]",
                    "an integrated function cannot have SR-IOV or a bridge in front",
                )
        ports = _ports(r, "ports", resolver, switch_ids)
        if len(integrated) + len(ports) > 32:
            fail(r.at("ports"), "a PCI bus holds at most 32 devices (integrated + ports)")
        root = RootSpec(
            domain=r.hexid("domain", 0, bits=32),
            bus=bus,
            numa_node=numa,
            root_port=rp,
            integrated=integrated,
            ports=ports,
        )
        r.done()
        roots.extend([root] * repeat)
    obj.done()
    return tuple(roots)


def _ids(obj: Obj | None, default: PciIds) -> PciIds:
    if obj is None:
        return default
    ids = PciIds(obj.hexid("vendor", default.vendor), obj.hexid("device", default.device))
    obj.done()
    return ids


def _link(obj: Obj | None, path: str, default: LinkSpec | None) -> LinkSpec | None:
    if obj is None:
        return default
    gen = obj.number("gen", lo=1, hi=PCIE_GENS[-1])
    width = obj.number("width", lo=1, hi=32)
    if width not in LINK_WIDTHS:
        fail(obj.at("width"), f"must be one of {', '.join(map(str, LINK_WIDTHS))}")
    obj.done()
    return LinkSpec(gen, width)


def _ports(parent: Obj, key: str, resolver: _Profiles, switch_ids: PciIds) -> tuple[PortItem, ...]:
    items: list[PortItem] = []
    for i, raw in enumerate(parent.items(key)):
        p = Obj(raw, f"{parent.at(key)}[{i}]")
        repeat = p.number("repeat", 1, lo=1, hi=32)
        item: PortItem
        if p.has("switch"):
            s = p.child("switch")
            assert s is not None
            ids = _ids(s.child("ids"), switch_ids)
            link = _link(s.child("link"), s.at("link"), LinkSpec(5, 16))
            assert link is not None
            ports = _ports(s, "ports", resolver, switch_ids)
            if not ports:
                fail(s.at("ports"), "a switch needs at least one downstream port")
            if len(ports) > 32:
                fail(s.at("ports"), "a switch has at most 32 downstream ports")
            s.done()
            item = SwitchPort(ids=ids, link=link, ports=ports)
        elif p.flag("empty", False):
            item = EmptyPort()
        elif p.has("device"):
            item = _device(p, resolver)
        else:
            fail(p.path, "needs one of device, switch or empty")
        p.done()
        if repeat > 1 and isinstance(item, DevicePort) and (item.names or item.uplink):
            fail(p.path, "a repeated device cannot carry fixed names or the uplink")
        items.extend([item] * repeat)
    return tuple(items)


def _device(p: Obj, resolver: _Profiles) -> DevicePort:
    name = p.req_text("device")
    profile = resolver.get(name, p.at("device"))
    names_raw = p.raw("name")
    names: tuple[str, ...]
    if isinstance(names_raw, str):
        names = (names_raw,)
    elif isinstance(names_raw, list):
        names = tuple(n if isinstance(n, str) else fail(p.at("name"), "must list strings") for n in names_raw)
    elif names_raw is None:
        names = ()
    else:
        fail(p.at("name"), "must be an interface name or a list of them")
    for n in names:
        _ifname(n, p.at("name"))
    if names and profile.net is None:
        fail(p.at("name"), f"profile {profile.name} has no network interface to name")
    if len(names) > profile.functions:
        fail(
            p.at("name"),
            f"profile {profile.name} has {profile.functions} function(s), {len(names)} names given",
        )
    uplink = p.flag("uplink", False)
    if uplink and profile.net is None:
        fail(p.at("uplink"), f"profile {profile.name} is not a NIC")
    num_vfs = p.opt_number("num_vfs", lo=0)
    if num_vfs is not None:
        if profile.sriov is None:
            fail(p.at("num_vfs"), f"profile {profile.name} has no SR-IOV")
        elif num_vfs > profile.sriov.total_vfs:
            fail(
                p.at("num_vfs"),
                f"more than the {profile.sriov.total_vfs} VFs profile {profile.name} supports",
            )
    driver = p.text("driver")
    if driver is not None and driver != profile.driver and (names or uplink):
        fail(
            p.at("driver"),
            f"with driver {driver or 'none'} the {profile.name} has no interfaces to name or route",
        )
    return DevicePort(
        profile=profile,
        names=names,
        uplink=uplink,
        link_up=p.flag("link_up", True),
        num_vfs=num_vfs,
        driver=driver,
    )


class _Profiles:
    """Resolves profile names: the spec's own first, then the built-in catalog; `extends` merges."""

    def __init__(self, builtin: dict[str, Any], local: dict[str, Any], path: str) -> None:
        self._builtin = builtin
        self._local = local
        self._path = path
        self._done: dict[str, Profile] = {}

    def get(self, name: str, path: str) -> Profile:
        if name not in self._done:
            self._done[name] = _profile(name, self._merged(name, path, ()), f"{self._path}.{name}")
        return self._done[name]

    def _merged(self, name: str, path: str, chain: tuple[str, ...]) -> dict[str, Any]:
        if name in chain:
            fail(path, f"profile {name!r} extends itself ({' -> '.join((*chain, name))})")
        if name in self._local and name not in chain:
            raw, where = self._local[name], f"{self._path}.{name}"
        elif name in self._builtin:
            raw, where = self._builtin[name], f"built-in profile {name}"
        else:
            known = sorted(set(self._local) | set(self._builtin))
            fail(path, f"no profile named {name!r} (known: {', '.join(known)})")
        if not isinstance(raw, dict):
            fail(where, "must be an object")
        base_name = raw.get("extends")
        if base_name is None:
            return copy.deepcopy(raw)
        if not isinstance(base_name, str):
            fail(f"{where}.extends", "must be a profile name")
        # a local profile may extend the built-in one of the same name
        if base_name == name:
            if name not in self._builtin:
                fail(f"{where}.extends", f"no built-in profile {name!r} to extend")
            base = copy.deepcopy(self._builtin[name])
        else:
            base = self._merged(base_name, f"{where}.extends", (*chain, name))
        merged = _deep_merge(base, {k: v for k, v in raw.items() if k != "extends"})
        return merged


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _profile(name: str, raw: dict[str, Any], path: str) -> Profile:
    p = Obj(raw, path)
    kind = p.choice("kind", KINDS, "other")
    class_code = p.hexid("class", bits=24)
    if class_code >> 8 == 0x0604:
        fail(p.at("class"), "bridges are declared with switch or behind_bridge, not as device profiles")
    functions = p.number("functions", 1, lo=1, hi=8)
    net = None
    n = p.child("net")
    if n is not None:
        layer = n.choice("link_layer", ("ethernet", "infiniband"), "ethernet")
        oui = (n.text("mac_oui", "02:00:00") or "02:00:00").lower()
        parts = oui.split(":")
        if len(parts) != 3 or not all(len(x) == 2 and all(c in "0123456789abcdef" for c in x) for x in parts):
            fail(n.at("mac_oui"), f"must be three hex bytes like b8:ce:f6, not {oui!r}")
        net = NetSpec(
            speed_mbps=n.number("speed_mbps", 100000, lo=10),
            mtu=n.number("mtu", 4092 if layer == "infiniband" else 1500, lo=68, hi=65535),
            link_layer=layer,
            mac_oui=oui,
        )
        n.done()
    rdma = None
    r = p.child("rdma")
    if r is not None:
        rdma = RdmaSpec(
            name_prefix=r.text("name_prefix", "rdma") or "rdma",
            hca_type=r.text("hca_type", "") or "",
            fw_ver=r.text("fw_ver", "1.0.0") or "1.0.0",
            board_id=r.text("board_id", "") or "",
        )
        r.done()
        if net is None:
            fail(p.at("rdma"), "an RDMA device needs net (its port's link layer and speed)")
    sriov = None
    s = p.child("sriov")
    if s is not None:
        total = s.number("total_vfs", lo=1, hi=2048)
        sriov = SriovSpec(
            total_vfs=total,
            num_vfs=s.number("num_vfs", 0, lo=0, hi=total),
            vf_device=s.hexid("vf_device"),
            offset=s.number("offset", functions, lo=1, hi=255),
            stride=s.number("stride", 1, lo=1, hi=255),
            vf_driver=s.text("vf_driver", p.text("driver")),
            vf_rdma=s.flag("vf_rdma", rdma is not None),
            vf_net=s.flag("vf_net", net is not None),
        )
        s.done()
        if sriov.vf_rdma and rdma is None:
            fail(s.at("vf_rdma"), "VFs cannot have RDMA when the PF has none")
        if sriov.vf_net and net is None:
            fail(s.at("vf_net"), "VFs cannot have netdevs when the PF has none")
    drm = p.child("drm")
    card = render = False
    if drm is not None:
        card = drm.flag("card", True)
        render = drm.flag("render", True)
        drm.done()
    bb = p.child("behind_bridge")
    files_raw = p.raw("files") or {}
    if not isinstance(files_raw, dict):
        fail(p.at("files"), "must be an object of relative path: content")
    files = []
    for rel, content in sorted(files_raw.items()):
        if not isinstance(content, str) or rel.startswith("/") or ".." in rel.split("/"):
            fail(f"{p.at('files')}.{rel}", "must map a relative path inside the device to a string")
        files.append((rel, content))
    vendor = p.hexid("vendor")
    device = p.hexid("device")
    profile = Profile(
        name=name,
        kind=kind,
        class_code=class_code,
        vendor=vendor,
        device=device,
        subsystem_vendor=p.hexid("subsystem_vendor", vendor),
        subsystem_device=p.hexid("subsystem_device", 0),
        revision=p.hexid("revision", 0, bits=8),
        driver=p.text("driver"),
        link=_link(p.child("link"), p.at("link"), LinkSpec(3, 8)),
        functions=functions,
        drm_card=card,
        drm_render=render,
        accel=p.flag("accel", False),
        net=net,
        rdma=rdma,
        sriov=sriov,
        behind_bridge=_ids(bb, PciIds(0, 0)) if bb is not None else None,
        model=p.text("model"),
        vram_bytes=p.opt_number("vram_bytes", lo=1),
        files=tuple(files),
    )
    if p.raw("conventional_pci"):
        profile = Profile(**{**profile.__dict__, "link": None})
    p.done()
    if profile.behind_bridge is not None and profile.behind_bridge.vendor == 0:
        fail(p.at("behind_bridge"), "needs vendor and device of the bridge")
    return profile
