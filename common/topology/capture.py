"""Turn what one discovery run touched into a tar.xz that reproduces it.

The recording reader knows the files it read (with the bytes it saw), the links it read, the
folders it listed and the folders whose existence it checked. The archive holds exactly those,
plus what a listing showed that is not a regular file (sub-folders, as empty folders unless read,
and links), because discovery decides from names in listings. Any link met on the way to a
recorded path is stored as a link at its real place, so paths resolve in the unpacked tree the
way they did on the machine.

A driver also reads a few files at its edge (`hostfiles`: the NVIDIA driver's minors, device
memory, `proc/devices`); the caller passes that reading as `edge_reads(root, topology)`, and
what it touched is read again through the recording reader, so those files travel too.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

from topodra.common.topology import hostfiles
from topodra.common.topology.discover import check_root, discover_with
from topodra.common.topology.model import Topology
from topodra.common.topology.reader import SysfsReader, is_dir, is_link

_MAX_HOPS = 40

Entry = tuple[str, bytes | str | None]  # ("dir", None) | ("file", bytes) | ("link", target)


class _Plan:
    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/") + "/"
        self.entries: dict[str, Entry] = {}

    def _abs(self, rel: str) -> str:
        return self.root + rel

    def _link_target(self, rel: str) -> tuple[str, str] | None:
        """(target as stored, root-relative resolved path) of a link, None if unreadable."""
        try:
            target = os.readlink(self._abs(rel))
        except OSError:
            return None
        parent = os.path.dirname(rel)
        if target.startswith("/"):
            resolved = os.path.normpath(target.lstrip("/"))
            target = os.path.relpath(resolved, parent or ".")
        else:
            resolved = os.path.normpath(os.path.join(parent, target))
        return target, resolved

    def real(self, rel: str, hops: int = 0) -> str:
        """`rel` with every link component resolved; links met are added to the plan."""
        cur = ""
        for comp in rel.split("/"):
            cand = f"{cur}/{comp}" if cur else comp
            try:
                mode = os.lstat(self._abs(cand)).st_mode
            except OSError:
                cur = cand
                continue
            if stat.S_ISLNK(mode) and hops < _MAX_HOPS:
                link = self._link_target(cand)
                if link is None or link[1].startswith(".."):
                    cur = cand
                    continue
                self.entries[cand] = ("link", link[0])
                cur = self.real(link[1], hops + 1)
            else:
                cur = cand
        return cur

    def add_dir(self, rel: str) -> str:
        real = self.real(rel)
        parts = real.split("/")
        for i in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:i]), ("dir", None))
        return real

    def add_file(self, rel: str, data: bytes) -> None:
        parent, name = os.path.split(rel)
        where = self.add_dir(parent) if parent else ""
        self.entries[f"{where}/{name}" if where else name] = ("file", data)

    def add_link(self, rel: str) -> None:
        parent, name = os.path.split(rel)
        where = self.add_dir(parent) if parent else ""
        at = f"{where}/{name}" if where else name
        link = self._link_target(at)
        if link is not None:
            self.entries[at] = ("link", link[0])

    def add_listing(self, rel: str) -> None:
        where = self.add_dir(rel)
        try:
            with os.scandir(self._abs(where)) as it:
                children = list(it)
        except OSError:
            return
        for e in children:
            at = f"{where}/{e.name}"
            if is_link(e):
                link = self._link_target(at)
                if link is not None:
                    self.entries.setdefault(at, ("link", link[0]))
            elif is_dir(e):
                self.entries.setdefault(at, ("dir", None))


def plan(r: SysfsReader) -> dict[str, Entry]:
    p = _Plan(r.root)
    for rel in sorted(r.listed):
        p.add_listing(rel)
    for rel in sorted(r.dirs):
        p.add_dir(rel)
    for rel in sorted(r.links):
        p.add_link(rel)
    for rel, data in sorted(r.files.items()):
        p.add_file(rel, data)
    return p.entries


def write_archive(entries: dict[str, Entry], output: str) -> int:
    with tarfile.open(output, "w:xz") as tar:
        for name in sorted(entries):
            kind, payload = entries[name]
            info = tarfile.TarInfo(name)
            info.mtime = 0
            info.uname = info.gname = "root"
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = str(payload)
                info.mode = 0o777
                tar.addfile(info)
            else:
                data = payload if isinstance(payload, bytes) else b""
                info.size = len(data)
                info.mode = 0o444
                tar.addfile(info, io.BytesIO(data))
    return len(entries)


EdgeReads = Callable[[Path, Topology], object]


def record_edge_reads(r: SysfsReader, topo: Topology, edge_reads: EdgeReads) -> None:
    """Run `edge_reads` and read each path under the root it touched through the recording reader."""
    with hostfiles.recording() as touched:
        edge_reads(Path(r.root), topo)
    for path in sorted(touched):
        rel = os.path.relpath(os.path.abspath(path), r.root)
        if rel == "." or rel == ".." or rel.startswith("../"):
            continue  # outside the tree (a pci.ids file, say): not the machine's to capture
        if r.is_dir(rel):
            r.scandir(rel)
        else:
            r.read(rel)


def capture(
    root: str | os.PathLike[str],
    output: str | os.PathLike[str],
    edge_reads: EdgeReads | None = None,
) -> int:
    """Discover `root` while recording, then write the archive; returns the number of entries."""
    check_root(root)
    r = SysfsReader(root, record=True)
    topo = discover_with(r)
    if edge_reads is not None:
        record_edge_reads(r, topo, edge_reads)
    return write_archive(plan(r), os.fspath(output))
