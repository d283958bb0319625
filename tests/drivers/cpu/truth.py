"""What the CPU devices of a machine must be, derived from an independent description of it.

The captured trees come with `*.expected.json` (checked against hwloc), synthetic trees with
`synth-manifest.json` (the declared machine); both list usable CPUs, packages, NUMA nodes, cores
and caches. The checks here rebuild the device layout from that description alone, and compute
the list form of numaNode (docs/design/resourceslices.md) straight from the sysfs files the way
the upstream helper reads them, so the driver is never only compared with its own topology library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate.utils as kv
from topodra.common.device import Device
from topodra.common.publisher.build import build_desired
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu.options import CpuOptions


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


class Machine:
    """The independent description, with the lookups the checks need."""

    def __init__(self, desc: Mapping[str, Any], reserved: frozenset[int] = frozenset()) -> None:
        self.usable = sorted(set(desc["cpus"]) - reserved)
        usable = set(self.usable)
        # packages ordered by lowest CPU: the index the driver publishes as the socket
        pkgs = sorted((sorted(set(p["cpus"]) & set(desc["cpus"])) for p in desc["packages"]), key=min)
        self.package_of = {c: i for i, cpus in enumerate(pkgs) for c in cpus}
        self.node_of: dict[int, int] = {}
        for n in sorted(desc["numa"], key=lambda n: n["id"]):
            for c in n["cpus"]:
                if c in usable:
                    self.node_of.setdefault(c, n["id"])
        self.cores = [sorted(set(k["cpus"]) & set(desc["cpus"])) for k in desc["cores"]]
        self.cores = [k for k in self.cores if k]
        l3 = [c for c in desc["caches"] if c["level"] == 3 and c["type"] != "Instruction"]
        l3.sort(key=lambda c: sorted(c["cpus"]))
        ids = [c.get("id") for c in l3]
        use_ids = None not in ids and len(set(ids)) == len(ids)
        self.l3_of: dict[int, str] = {}
        for i, c in enumerate(l3):
            for cpu in c["cpus"]:
                self.l3_of.setdefault(cpu, str(c["id"]) if use_ids else str(i))

    def core_of(self, cpu: int) -> list[int]:
        for k in self.cores:
            if cpu in k:
                return k
        return [cpu]

    def numa_groups(self) -> dict[str, list[int]]:
        """Device name -> CPUs, for the default layout."""
        out: dict[str, list[int]] = {}
        for c in self.usable:
            node = self.node_of.get(c)
            name = f"numa-{node}" if node is not None else f"socket-{self.package_of[c]}"
            out.setdefault(name, []).append(c)
        return out


def one(values: Sequence[int]) -> int | None:
    found = set(values)
    return found.pop() if len(found) == 1 else None


def check_device_truth(dev: Device, cpus: Sequence[int], m: Machine, options: CpuOptions) -> None:
    a = dev.attributes
    where = f"device {dev.name}"
    assert dev.capacity[layout.CAPACITY].value == str(len(cpus)), where
    assert a[layout.CPU_COUNT] == len(cpus), where
    node = one([m.node_of.get(c, -1) for c in cpus])
    if node is not None and node >= 0:
        got = a[layout.NUMA_NODE]
        assert (got[0] if isinstance(got, tuple) else got) == node, where
    else:
        assert layout.NUMA_NODE not in a, where
    socket = one([m.package_of[c] for c in cpus])
    assert a.get(layout.SOCKET) == socket, where
    threads = max(len(set(m.core_of(c)) & set(cpus)) for c in cpus)
    assert a[layout.THREADS_PER_CORE] == threads and a[layout.SMT] == (threads > 1), where
    caches = sorted({m.l3_of[c] for c in cpus if c in m.l3_of}, key=lambda s: (len(s), s))
    if caches:
        want: object = tuple(caches) if options.list_attributes else ",".join(caches)
        assert a[layout.L3_CACHE] == want, where
    else:
        assert layout.L3_CACHE not in a, where


def check_machine(root: Path, desc: Mapping[str, Any], devs: Sequence[Device], options: CpuOptions) -> None:
    """Layout, capacities and attributes against the description; numaNode lists against sysfs."""
    m = Machine(desc, options.reserved)
    by_name = {d.name: d for d in devs}
    assert len(by_name) == len(devs), "device names are unique"
    total = sum(int(d.capacity[layout.CAPACITY].value) for d in devs)
    assert total == len(m.usable), "capacities sum to the usable CPUs minus the reserved ones"
    if options.granularity == "core":
        seen: set[int] = set()
        for d in devs:
            assert not d.allow_multiple_allocations and d.capacity[layout.CAPACITY].request_policy is None
            text = d.attributes[layout.CPUS]
            assert isinstance(text, str)
            cpus = sorted(c for c in m.usable if c in _expand(text))
            assert cpus == sorted(_expand(text)), f"{d.name}: only usable, unreserved CPUs"
            core = set(m.core_of(cpus[0])) - options.reserved
            assert set(cpus) == core, f"{d.name} is one whole core: {core}"
            seen.update(cpus)
            check_device_truth(d, cpus, m, options)
        assert sorted(seen) == m.usable
        return
    expected = m.numa_groups()
    assert sorted(by_name) == sorted(expected)
    for name, cpus in expected.items():
        d = by_name[name]
        assert d.allow_multiple_allocations
        policy = d.capacity[layout.CAPACITY].request_policy
        assert policy is not None and policy.default == "1" and policy.min == "1"
        check_device_truth(d, cpus, m, options)
        node = m.node_of.get(cpus[0])
        if options.list_attributes and node is not None:
            assert d.attributes[layout.NUMA_NODE] == upstream_numa_list(root, node, m), name


def _expand(text: str) -> list[int]:
    out: list[int] = []
    text = text.strip("\x00 \t\r\n")  # captured files may carry trailing NULs
    if not text:
        return out
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def upstream_numa_list(root: Path, node: int, m: Machine) -> tuple[int, ...]:
    """The list-form rule read literally from the files: distance row, min distance, socket of
    each candidate from the first CPU of its cpulist, candidates on a known other socket dropped, [N] on any
    read failure. The one deliberate difference from upstream: a socket is the package as the
    kernel's masks (and hwloc) group CPUs, from the description, not `physical_package_id`."""
    base = root / "sys/devices/system/node"

    def text(path: Path) -> str:
        return path.read_text().strip("\x00 \t\r\n")

    try:
        row = [int(v) for v in text(base / f"node{node}/distance").split()]
    except (OSError, ValueError):
        return (node,)
    folders = sorted(int(p.name[4:]) for p in base.glob("node[0-9]*"))
    ids = folders
    if len(folders) != len(row) and (base / "online").exists():
        ids = _expand(text(base / "online"))
    if len(ids) != len(row):
        return (node,)
    others = [(k, d) for k, d in zip(ids, row, strict=True) if k != node]
    if not others:
        return (node,)
    nearest = min(d for _, d in others)

    class Failed(Exception):
        pass

    def socket(k: int) -> int | None:
        folder = base / f"node{k}"
        try:
            listed = (folder / "cpulist").exists()
            cpus = _expand(text(folder / "cpulist")) if listed else _mask(text(folder / "cpumap"))
        except OSError as e:
            raise Failed from e
        if not cpus:
            return None  # a CPU-less node: socket unknown, kept
        if cpus[0] not in m.package_of:
            raise Failed  # its first CPU is offline: no topology to read
        return m.package_of[cpus[0]]

    try:
        own = socket(node)
        near = []
        for k, d in others:
            if d != nearest:
                continue
            theirs = socket(k)
            if theirs is not None and own is not None and theirs != own:
                continue
            near.append(k)
    except Failed:
        return (node,)
    return (node, *sorted(near))


def _mask(text: str) -> list[int]:
    value = int(text.replace(",", ""), 16) if text else 0
    return [i for i in range(value.bit_length()) if value >> i & 1]


def check_valid(devs: Sequence[Device], options: CpuOptions, node: str = "node-a") -> None:
    """The publisher's validation leaves nothing out and the API schema accepts every slice."""
    desired = build_desired(layout.DRIVER, node, None, devs)
    assert desired.problems == (), [str(p) for p in desired.problems]
    versions = ["1.37.0"] if options.list_attributes else ["1.34.0", "1.37.0"]
    for obj in desired.slices:
        for version in versions:
            kv.validate(obj, version, strict=True)
