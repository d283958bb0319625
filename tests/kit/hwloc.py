"""Debian's hwloc (lstopo-no-graphics) as an independent reader of a sysfs tree.

Nothing in topodra parses these trees for the tests that use this: `run` gives lstopo's XML,
`parse` its object tree (for the synthetic machines' own checks), `view` a summary in our terms
(for discovery's cross-check on captured machines). The x86 component is switched off
(HWLOC_COMPONENTS=-x86): it runs CPUID on the test machine and would mix the host CPU's model
and caches into the tree being read.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

LSTOPO = "lstopo-no-graphics"
_CACHE_TYPES = {"0": "unified", "1": "data", "2": "instruction"}


def available() -> bool:
    return shutil.which(LSTOPO) is not None


def run(root: Path, *, disallowed: bool = False) -> tuple[str, str]:
    """lstopo's XML for the tree and its stderr; `disallowed` keeps CPUs the tree marks offline."""
    env = {**os.environ, "HWLOC_FSROOT": str(root), "HWLOC_COMPONENTS": "-x86"}
    env.pop("HWLOC_XMLFILE", None)
    args = [LSTOPO, "--of", "xml", "--whole-io", *(["--disallowed"] if disallowed else []), "-"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout, out.stderr


def parse_cpuset(text: str | None) -> frozenset[int]:
    """hwloc bitmaps: comma-separated 32-bit hex words, most significant first
    (`0x000000ff,0xffffffff`; an empty word is zero)."""
    value = 0
    for word in (text or "").split(","):
        value = (value << 32) | int(word.removeprefix("0x") or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


@dataclass
class HwObj:
    type: str
    attrs: dict[str, str]
    parent: HwObj | None
    children: list[HwObj] = field(default_factory=list)
    infos: dict[str, str] = field(default_factory=dict)

    @property
    def cpuset(self) -> frozenset[int]:
        return parse_cpuset(self.attrs.get("cpuset"))

    def ancestors(self) -> list[HwObj]:
        out = []
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out


@dataclass
class HwTopology:
    objects: list[HwObj]
    distances: dict[str, tuple[list[int], list[int]]]  # name -> (os indexes, values row-major)
    cpukinds: list[tuple[frozenset[int], dict[str, str]]]

    def of(self, kind: str) -> list[HwObj]:
        return [o for o in self.objects if o.type == kind]

    def pci(self) -> dict[str, HwObj]:
        return {o.attrs["pci_busid"]: o for o in self.objects if "pci_busid" in o.attrs}


def parse(text: str) -> HwTopology:
    root = ET.fromstring(text)
    objects: list[HwObj] = []

    def walk(elem: ET.Element, parent: HwObj | None) -> None:
        obj = HwObj(type=elem.attrib["type"], attrs=dict(elem.attrib), parent=parent)
        objects.append(obj)
        if parent is not None:
            parent.children.append(obj)
        for child in elem:
            if child.tag == "object":
                walk(child, obj)
            elif child.tag == "info":
                obj.infos[child.attrib["name"]] = child.attrib["value"]

    for elem in root:
        if elem.tag == "object":
            walk(elem, None)
    distances: dict[str, tuple[list[int], list[int]]] = {}
    for d in root.iter("distances2"):
        indexes = [int(x) for e in d.iter("indexes") for x in (e.text or "").split()]
        values = [int(x) for e in d.iter("u64values") for x in (e.text or "").split()]
        distances[d.attrib.get("name", "")] = (indexes, values)
    kinds = []
    for k in root.iter("cpukind"):
        kinds.append(
            (parse_cpuset(k.attrib["cpuset"]), {i.attrib["name"]: i.attrib["value"] for i in k.iter("info")})
        )
    return HwTopology(objects=objects, distances=distances, cpukinds=kinds)


@dataclass(frozen=True)
class HwlocView:
    """What hwloc found, in the terms discovery is checked in."""

    pus: tuple[int, ...]
    packages: frozenset[tuple[int, ...]]
    cores: frozenset[tuple[int, ...]]
    caches: frozenset[tuple[int, str, tuple[int, ...]]]
    numa_ids: frozenset[int]
    numa_cpus: dict[int, tuple[int, ...]]
    pci: frozenset[str]


def view(root: Path) -> HwlocView:
    topo = parse(run(root, disallowed=True)[0])

    def cpus(o: HwObj) -> tuple[int, ...]:
        return tuple(sorted(o.cpuset))

    caches = {
        (int(o.attrs["depth"]), _CACHE_TYPES.get(o.attrs.get("cache_type", "0"), "?"), cpus(o))
        for o in topo.objects
        if o.type.endswith("Cache") and o.attrs.get("depth")
    }
    numa = {int(o.attrs.get("os_index", "-1")): cpus(o) for o in topo.of("NUMANode")}
    return HwlocView(
        pus=tuple(sorted(int(o.attrs.get("os_index", "-1")) for o in topo.of("PU"))),
        packages=frozenset(cpus(o) for o in topo.of("Package")),
        cores=frozenset(cpus(o) for o in topo.of("Core")),
        caches=frozenset(caches),
        numa_ids=frozenset(numa),
        numa_cpus=numa,
        pci=frozenset(
            o.attrs["pci_busid"].lower()
            for o in topo.objects
            if o.type in ("PCIDev", "Bridge") and o.attrs.get("pci_busid")
        ),
    )
