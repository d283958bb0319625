"""A tiny builder for hand-made sysfs trees, so each trap gets a tree of a few files.

Paths are relative to the tree root (the folder that contains `sys/`). Links are written
relative, like the kernel's, unless a test asks for something odd on purpose.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"


def mask(cpus: Iterable[int], words: int = 1) -> str:
    """Kernel bitmap text for a CPU set: 32-bit hex words, most significant first."""
    value = 0
    for c in cpus:
        value |= 1 << c
    words = max(words, (value.bit_length() + 31) // 32, 1)
    return ",".join(f"{(value >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


def cpulist(cpus: Iterable[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


class Tree:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, rel: str) -> Path:
        return self.root / rel

    def file(self, rel: str, content: str | bytes) -> Tree:
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = content if isinstance(content, bytes) else (content + "\n").encode()
        p.write_bytes(data)
        return self

    def mkdir(self, rel: str) -> Tree:
        self.path(rel).mkdir(parents=True, exist_ok=True)
        return self

    def link(self, rel: str, target_rel: str, *, trailing_slash: bool = False) -> Tree:
        """A relative symlink at `rel` pointing to root-relative `target_rel`."""
        p = self.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(self.root / target_rel, p.parent)
        os.symlink(target + ("/" if trailing_slash else ""), p)
        return self

    # --- CPUs -----------------------------------------------------------------------------
    def cpu(
        self,
        n: int,
        *,
        package: int | None,
        core: int | None,
        package_cpus: Iterable[int] | None,
        core_cpus: Iterable[int] | None,
        online: bool | None = True,
        old_names: bool = False,
        die: int | None = None,
    ) -> Tree:
        base = f"{CPU}/cpu{n}"
        self.mkdir(f"{base}/topology")
        if online is not None:
            self.file(f"{base}/online", "1" if online else "0")
        t = f"{base}/topology"
        if package is not None:
            self.file(f"{t}/physical_package_id", str(package))
        if core is not None:
            self.file(f"{t}/core_id", str(core))
        if die is not None:
            self.file(f"{t}/die_id", str(die))
        old = ("core_siblings", "thread_siblings")
        pkg_name, core_name = old if old_names else ("package_cpus", "core_cpus")
        if package_cpus is not None:
            self.file(f"{t}/{pkg_name}", mask(package_cpus))
        if core_cpus is not None:
            self.file(f"{t}/{core_name}", mask(core_cpus))
        return self

    def cache(
        self,
        n: int,
        index: int,
        *,
        level: int,
        type_: str,
        size: str,
        shared: Iterable[int] | None,
        id_: int | None = None,
    ) -> Tree:
        d = f"{CPU}/cpu{n}/cache/index{index}"
        self.file(f"{d}/level", str(level))
        self.file(f"{d}/type", type_)
        self.file(f"{d}/size", size)
        self.file(f"{d}/shared_cpu_map", "" if shared is None else mask(shared))
        if id_ is not None:
            self.file(f"{d}/id", str(id_))
        return self

    def simple_cpus(self, count: int, *, packages: int = 1, threads: int = 1) -> Tree:
        """`count` CPUs split evenly in packages, consecutive CPUs being SMT siblings."""
        per_pkg = count // packages
        for n in range(count):
            p = n // per_pkg
            core = (n % per_pkg) // threads
            first = n - n % threads
            self.cpu(
                n,
                package=p,
                core=core,
                package_cpus=range(p * per_pkg, (p + 1) * per_pkg),
                core_cpus=range(first, first + threads),
            )
        return self

    def node(
        self, n: int, cpus: Iterable[int], mem_kb: int | None = 1048576, distance: str | None = None
    ) -> Tree:
        d = f"{NODE}/node{n}"
        self.file(f"{d}/cpumap", mask(cpus))
        if mem_kb is not None:
            self.file(f"{d}/meminfo", f"Node {n} MemTotal:       {mem_kb} kB\nNode {n} MemFree:  1 kB")
        if distance is not None:
            self.file(f"{d}/distance", distance)
        return self

    # --- PCI ------------------------------------------------------------------------------
    def pci(
        self,
        path: str,
        *,
        class_: str = "0x020000",
        vendor: str = "0x8086",
        device: str = "0x1521",
        numa: str | None = "-1",
        local_cpus: str | None = None,
        driver: str | None = None,
        bus_link: bool = True,
        trailing_slash: bool = False,
    ) -> str:
        """A PCI function at `path` under sys/devices ("pci0000:00/0000:00:01.0/..."); returns its dir."""
        d = f"sys/devices/{path}"
        name = path.rsplit("/", 1)[-1]
        self.file(f"{d}/class", class_)
        self.file(f"{d}/vendor", vendor)
        self.file(f"{d}/device", device)
        self.file(f"{d}/subsystem_vendor", vendor)
        self.file(f"{d}/subsystem_device", "0x0001")
        if numa is not None:
            self.file(f"{d}/numa_node", numa)
        if local_cpus is not None:
            self.file(f"{d}/local_cpus", local_cpus)
        if driver is not None:
            self.link(f"{d}/driver", f"sys/bus/pci/drivers/{driver}")
        if bus_link:
            self.link(f"sys/bus/pci/devices/{name}", d, trailing_slash=trailing_slash)
        return d

    def netdev(
        self, device_dir: str, name: str, *, mac: str = "00:11:22:33:44:55", speed: str = "10000"
    ) -> str:
        d = f"{device_dir}/net/{name}"
        self.file(f"{d}/address", mac)
        self.file(f"{d}/mtu", "1500")
        self.file(f"{d}/speed", speed)
        self.file(f"{d}/operstate", "up")
        self.file(f"{d}/carrier", "1")
        self.link(f"sys/class/net/{name}", d)
        return d

    def rdma(
        self, device_dir: str, name: str, guid: str, *, uverbs: str = "uverbs0", dev: str = "231:192"
    ) -> str:
        """An RDMA device of the function at `device_dir` with its verbs character device."""
        ib = f"{device_dir}/infiniband/{name}"
        self.file(f"{ib}/node_guid", guid)
        self.link(f"sys/class/infiniband/{name}", ib)
        uv = f"{device_dir}/infiniband_verbs/{uverbs}"
        self.file(f"{uv}/ibdev", name).file(f"{uv}/dev", dev)
        self.link(f"sys/class/infiniband_verbs/{uverbs}", uv)
        return ib


def basic_machine(root: Path, *, cpus: int = 4, packages: int = 1, threads: int = 1) -> Tree:
    """A sane machine to start from: CPUs, one NUMA node per package, L1/L2 per core, L3 per package."""
    t = Tree(root).simple_cpus(cpus, packages=packages, threads=threads)
    per_pkg = cpus // packages
    for n in range(cpus):
        first = n - n % threads
        core = range(first, first + threads)
        p = n // per_pkg
        pkg = range(p * per_pkg, (p + 1) * per_pkg)
        t.cache(n, 0, level=1, type_="Data", size="32K", shared=core, id_=n // threads)
        t.cache(n, 1, level=1, type_="Instruction", size="32K", shared=core, id_=n // threads)
        t.cache(n, 2, level=2, type_="Unified", size="1024K", shared=core, id_=n // threads)
        t.cache(n, 3, level=3, type_="Unified", size="16384K", shared=pkg, id_=p)
    for p in range(packages):
        row = " ".join("10" if j == p else "21" for j in range(packages))
        t.node(p, range(p * per_pkg, (p + 1) * per_pkg), distance=row)
    t.file(f"{CPU}/online", f"0-{cpus - 1}")
    return t
