"""NUMA nodes as sys/devices/system/node lists them: none are invented when the folder is absent."""

from __future__ import annotations

from topodra.common.topology.model import NumaNode
from topodra.common.topology.names import numbered
from topodra.common.topology.parse import parse_int, read_cpus
from topodra.common.topology.reader import SysfsReader, is_dir, shown

NODE_DIR = "sys/devices/system/node"


def _memtotal(r: SysfsReader, rel: str) -> int | None:
    text = r.read(rel)
    if text is None:
        return None
    for line in text.splitlines():
        # "Node 0 MemTotal:       1048576 kB"
        head, _, value = line.partition(":")
        if head.split()[-1:] == ["MemTotal"]:
            parts = value.split()
            n: int | None = parse_int(parts[0]) if parts else None
            unit = parts[1] if len(parts) > 1 else "kB"
            if n is not None and unit == "kB":
                return n * 1024
            break
    r.warn(rel, "no readable MemTotal line")
    return None


def read_nodes(r: SysfsReader, usable: frozenset[int]) -> tuple[NumaNode, ...]:
    ids = []
    for entry in r.scandir(NODE_DIR):
        n = numbered(entry.name, "node")
        if n is not None and is_dir(entry):
            ids.append(n)
    if not ids:
        return ()
    ids.sort()
    rows: dict[int, tuple[int, ...]] = {}
    raw: list[tuple[int, frozenset[int], int | None]] = []
    for n in ids:
        base = f"{NODE_DIR}/node{n}"
        cpus = read_cpus(r, f"{base}/cpumap", f"{base}/cpulist")
        if cpus is None:
            # Without a CPU map the node is not usable as a place (hwloc drops it too); a
            # memory-only node still has a map, just an empty one.
            r.warn(f"{base}/cpumap", "no readable cpumap or cpulist: node ignored")
            continue
        raw.append((n, cpus, _memtotal(r, f"{base}/meminfo")))
        rel = f"{base}/distance"
        text = r.read(rel)
        if text is not None:
            values = [parse_int(v) for v in text.split()]
            if values and all(v is not None and v >= 0 for v in values):
                rows[n] = tuple(v for v in values if v is not None)
            else:
                r.warn(rel, f"not a distance row: {shown(text)}")

    # A row has one entry per *online* node, which is not always the set of nodeN folders
    # (a capture may hide a node): fall back on the online, then the possible list.
    columns: list[int] = [n for n, _, _ in raw]
    if rows:
        width = len(next(iter(rows.values())))
        for listing in ("online", "possible"):
            if width == len(columns):
                break
            ids_listed = read_cpus(r, None, f"{NODE_DIR}/{listing}")  # same list syntax as CPUs
            if ids_listed is not None:
                columns = sorted(ids_listed)
    nodes = []
    for n, cpus, mem in raw:
        row = rows.get(n, ())
        if row and len(row) != len(columns):
            r.warn(f"{NODE_DIR}/node{n}/distance", f"{len(row)} distances for {len(columns)} nodes")
            row = ()
        nodes.append(
            NumaNode(
                id=n,
                cpus=tuple(sorted(cpus & usable)),
                memory_bytes=mem,
                distances=tuple(zip(columns, row, strict=False)) if row else (),
                all_cpus=tuple(sorted(cpus)),
            )
        )
    return tuple(nodes)
