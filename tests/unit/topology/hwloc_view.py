"""What Debian's hwloc (lstopo-no-graphics) sees in a sysfs tree, in our terms.

Used only to cross-check discovery; hwloc is an independent reader of the same files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

LSTOPO = "lstopo-no-graphics"
_CACHE_TYPES = {"0": "unified", "1": "data", "2": "instruction"}


def available() -> bool:
    return shutil.which(LSTOPO) is not None


def cpuset(text: str | None) -> tuple[int, ...]:
    """hwloc bitmap "0x000000ff,0xffffffff" (or "0x0...0,,0xf" with empty words)."""
    if not text:
        return ()
    value = 0
    for word in text.split(","):
        value = (value << 32) | (int(word, 16) if word else 0)
    out = []
    bit = 0
    while value:
        if value & 1:
            out.append(bit)
        value >>= 1
        bit += 1
    return tuple(out)


@dataclass(frozen=True)
class HwlocView:
    pus: tuple[int, ...]
    packages: frozenset[tuple[int, ...]]
    cores: frozenset[tuple[int, ...]]
    caches: frozenset[tuple[int, str, tuple[int, ...]]]
    numa_ids: frozenset[int]
    numa_cpus: dict[int, tuple[int, ...]]
    pci: frozenset[str]


def read(root: Path) -> HwlocView:
    # without the x86 backend: it would mix in the CPUID of the machine running the test
    env = dict(os.environ, HWLOC_FSROOT=str(root), HWLOC_COMPONENTS="-x86")
    env.pop("HWLOC_XMLFILE", None)
    out = subprocess.run(
        [LSTOPO, "--of", "xml", "--whole-io", "--disallowed", "-"],
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    doc = ET.fromstring(out)
    pus, packages, cores, caches, numa, pci = [], set(), set(), set(), {}, set()
    for obj in doc.iter("object"):
        kind = obj.get("type", "")
        cs = cpuset(obj.get("cpuset"))
        if kind == "PU":
            pus.append(int(obj.get("os_index", "-1")))
        elif kind == "Package":
            packages.add(cs)
        elif kind == "Core":
            cores.add(cs)
        elif kind.endswith("Cache") and obj.get("depth"):
            caches.add((int(obj.get("depth", "0")), _CACHE_TYPES.get(obj.get("cache_type", "0"), "?"), cs))
        elif kind == "NUMANode":
            numa[int(obj.get("os_index", "-1"))] = cs
        elif kind in ("PCIDev", "Bridge") and obj.get("pci_busid"):
            pci.add(obj.get("pci_busid", "").lower())
    return HwlocView(
        pus=tuple(sorted(pus)),
        packages=frozenset(packages),
        cores=frozenset(cores),
        caches=frozenset(caches),
        numa_ids=frozenset(numa),
        numa_cpus=numa,
        pci=frozenset(pci),
    )
