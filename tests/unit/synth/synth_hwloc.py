"""Running Debian's lstopo on a tree and reading its XML into plain Python data.

hwloc is the independent reader here: nothing in topodra parses these trees for these tests.
The x86 component is switched off (HWLOC_COMPONENTS=-x86) because it runs CPUID on the test
machine and would annotate the synthetic packages with the host CPU's model and caches.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

LSTOPO = "lstopo-no-graphics"


def lstopo_available() -> bool:
    return shutil.which(LSTOPO) is not None


def run_lstopo(root: Path) -> tuple[str, str]:
    env = {**os.environ, "HWLOC_FSROOT": str(root), "HWLOC_COMPONENTS": "-x86"}
    out = subprocess.run(
        [LSTOPO, "--of", "xml", "--whole-io", "-"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout, out.stderr


def parse_cpuset(text: str) -> frozenset[int]:
    """hwloc bitmaps: comma-separated 32-bit hex words, most significant first (`0x000000ff,0xffffffff`)."""
    value = 0
    for word in text.split(","):
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
        return parse_cpuset(self.attrs["cpuset"])

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


def parse_xml(text: str) -> HwTopology:
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
