"""`topodra inspect -o svg`: the machine as nested boxes, in the manner of lstopo's picture.

Sockets hold NUMA nodes, NUMA nodes hold root complexes, root complexes hold PCIe switches and
the devices on their own ports, switches hold their devices. Every box that is a locality
group is labelled with the claim attribute and value its devices share, and tinted in the
colour `topodra inspect` uses for that level, so what a `matchAttribute` keeps together is one
box. VFs are counted on their PF's box (300 of them would hide everything else).

Plain SVG 1.1 written by hand (no dependency): rectangles, text and a title per device for
the full details on hover.
"""

from __future__ import annotations

from collections.abc import Iterable
from xml.sax.saxutils import escape

from topodra.common.records import field, record
from topodra.common.topology.parse import compress
from topodra.drivers.cli.inspect_view import Block, Item, View, speed

CHAR_W = 6.6  # average advance of 11 px monospace
LINE_H = 14
PAD = 8
GAP = 8
DEVICE_W = 196
WRAP_W = 1500.0  # a container's children wrap into rows no wider than this

FILL = {
    "machine": ("#ffffff", "#444444"),
    "socket": ("#f7eef7", "#8a4f8a"),  # SOCK: magenta, as in the text view
    "numa": ("#fff7d6", "#a08a2a"),  # NUMA: yellow
    "root": ("#e6f4e6", "#4d8a4d"),  # ROOT: green
    "switch": ("#c9eac9", "#2d6e2d"),  # SW: bold green
    "leaf": ("#c9ecec", "#1f6e6e"),  # LEAF: bold cyan
    "bare": ("#f4f4f4", "#9a9a9a"),  # devices on root ports (no switch)
    "accelerators": ("#d9eef8", "#2b6c8f"),
    "nics": ("#dfe5fb", "#3a4fa0"),
    "storage": ("#eeeeee", "#777777"),
    "other": ("#f8f8f8", "#999999"),
}


@record(frozen=False)
class Box:
    kind: str
    lines: list[str]
    children: list[Box] = field(default_factory=list)
    tooltip: str = ""
    vertical: bool = False  # children stacked (sockets) instead of flowing in rows
    w: float = 0.0
    h: float = 0.0
    placed: list[tuple[Box, float, float]] = field(default_factory=list)

    def layout(self) -> tuple[float, float]:
        head = LINE_H * len(self.lines) + PAD
        text_w = max((len(s) for s in self.lines), default=0) * CHAR_W + 2 * PAD
        if not self.children:
            self.w, self.h = max(DEVICE_W, text_w), head + PAD / 2
            return self.w, self.h
        sizes = [c.layout() for c in self.children]
        x = y = row_h = 0.0
        widest = 0.0
        self.placed = []
        for child, (cw, ch) in zip(self.children, sizes, strict=True):
            if x > 0 and (self.vertical or x + cw > WRAP_W):
                x, y = 0.0, y + row_h + GAP
                row_h = 0.0
            self.placed.append((child, x, y))
            x += cw + GAP
            row_h = max(row_h, ch)
            widest = max(widest, x - GAP)
        self.w = max(text_w, widest + 2 * PAD)
        self.h = head + y + row_h + PAD
        return self.w, self.h

    def draw(self, x: float, y: float, out: list[str]) -> None:
        fill, stroke = FILL[self.kind]
        out.append(f'<g class="{self.kind}">')
        if self.tooltip:
            out.append(f"<title>{escape(self.tooltip)}</title>")
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{self.w:.1f}" height="{self.h:.1f}" rx="4" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.2"/>'
        )
        for i, line in enumerate(self.lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            baseline = y + PAD + LINE_H * (i + 1) - 3
            out.append(f'<text x="{x + PAD:.1f}" y="{baseline:.1f}"{weight}>{escape(line)}</text>')
        head = LINE_H * len(self.lines) + PAD
        for child, cx, cy in self.placed:
            child.draw(x + PAD + cx, y + head + cy, out)
        out.append("</g>")


def _device(view: View, item: Item) -> Box:
    fn = item.fn
    title = f"{item.label}  {fn.address}"
    second = item.product or item.class_name
    third = [*item.nets[:1], *item.rdma[:1]]
    if item.speed_mbps:
        third.append(speed(item.speed_mbps))
    if item.vfs:
        third.append(f"+{len(item.vfs)} VFs")
    lines = [title, second[:44]]
    if third:
        lines.append("  ".join(third))
    tooltip = "\n".join(
        [
            f"{item.label} {fn.address} {item.class_name}",
            f"driver {fn.driver or '-'}, NUMA {fn.numa_node if fn.numa_node is not None else '-'}, "
            f"CPUs {compress(fn.local_cpus) or '-'}",
            *(["net " + ",".join(item.nets)] if item.nets else []),
            *(["rdma " + ",".join(item.rdma)] if item.rdma else []),
            *([f"VFs {item.vfs[0].address}..{item.vfs[-1].address}"] if item.vfs else []),
        ]
    )
    return Box(item.kind, lines, tooltip=tooltip)


def _group(items: Iterable[tuple[str, Box]]) -> dict[str, list[Box]]:
    out: dict[str, list[Box]] = {}
    for key, box in items:
        out.setdefault(key, []).append(box)
    return out


def build_boxes(view: View) -> Box:
    t = view.topology
    blocks: list[Block] = view.blocks()
    machine = Box(
        "machine",
        [
            f"Machine: {len(t.packages)} socket(s), {len(t.numa_nodes)} NUMA node(s), "
            f"{len(t.usable_cpus())} CPUs, {len(view.items)} device(s) shown",
            "boxes are locality groups; each names the claim attribute its devices share",
        ],
        vertical=True,
    )
    sockets: dict[int | None, Box] = {}
    numas: dict[tuple[int | None, int | None], Box] = {}
    roots: dict[tuple[int | None, int | None, str | None], Box] = {}
    switches: dict[tuple[int | None, int | None, str | None, str], Box] = {}
    for pkg in t.packages:
        sockets[pkg.index] = Box(
            "socket",
            [f"Socket {pkg.index}   topology.topodra.io/socket={pkg.index}", f"CPUs {compress(pkg.cpus)}"],
        )
    for node in t.numa_nodes:
        owner = t.package_of_numa(node.id)
        key = (None if owner is None else owner.index, node.id)
        mem = f", {node.memory_bytes >> 30} GiB" if node.memory_bytes else ""
        numas[key] = Box(
            "numa",
            [
                f"NUMA node {node.id}   resource.kubernetes.io/numaNode={node.id}",
                f"CPUs {compress(node.cpus) or 'none'}{mem}",
            ],
        )
    for b in blocks:
        if b.socket not in sockets:
            sockets[b.socket] = Box(
                "socket", ["Socket unknown", "the kernel names no NUMA node or local CPUs"]
            )
        nkey = (b.socket, b.numa)
        if nkey not in numas:
            label = "NUMA node unknown" if b.numa is None else f"NUMA node {b.numa}"
            numas[nkey] = Box("numa", [label, "no numaNode attribute" if b.numa is None else ""])
        rkey = (b.socket, b.numa, b.root)
        if rkey not in roots:
            name = b.root or "root unknown"
            attr = f"resource.kubernetes.io/pcieRoot={b.root}" if b.root else "no pcieRoot attribute"
            roots[rkey] = Box("root", [f"Root complex {name}", attr])
        devices = [_device(view, i) for i in b.items]
        if b.switch is None:
            bare = Box("bare", ["on root ports (no switch)"], devices)
            roots[rkey].children.append(bare)
        else:
            skey = (*rkey, b.switch)
            if skey not in switches:
                switches[skey] = Box(
                    "switch", [f"PCIe switch {b.switch}", f"topology.topodra.io/pcieSwitch={b.switch}"]
                )
                roots[rkey].children.append(switches[skey])
            if b.leaf is None:
                switches[skey].children.extend(devices)
            else:
                switches[skey].children.append(
                    Box(
                        "leaf",
                        [f"leaf switch {b.leaf}", f"topology.topodra.io/pcieLeafSwitch={b.leaf}"],
                        devices,
                    )
                )
    for (sock, numa, _), box in roots.items():
        numas[(sock, numa)].children.append(box)
    for (sock, _), box in numas.items():
        if sock not in sockets:
            sockets[sock] = Box("socket", ["Socket unknown", "NUMA nodes without CPUs or spanning sockets"])
        sockets[sock].children.append(box)
    for sock in sorted(sockets, key=lambda s: (s is None, s or 0)):
        box = sockets[sock]
        if box.children or sock is not None:
            machine.children.append(box)
    return machine


def _legend(y: float) -> tuple[list[str], float]:
    rows = [
        ("leaf", "leaf switch of nested switches: topology.topodra.io/pcieLeafSwitch (nvidia-smi PIX)"),
        ("switch", "PCIe switch: topology.topodra.io/pcieSwitch (nvidia-smi PIX/PXB)"),
        ("root", "root complex: resource.kubernetes.io/pcieRoot (PHB)"),
        ("numa", "NUMA node: resource.kubernetes.io/numaNode (NODE)"),
        ("socket", "socket: topology.topodra.io/socket (SYS across sockets)"),
        ("accelerators", "accelerator"),
        ("nics", "NIC (VFs counted on their PF)"),
    ]
    out = []
    for i, (kind, text) in enumerate(rows):
        fill, stroke = FILL[kind]
        yy = y + i * (LINE_H + 4)
        out.append(f'<rect x="{PAD}" y="{yy:.1f}" width="14" height="12" fill="{fill}" stroke="{stroke}"/>')
        out.append(f'<text x="{PAD + 20}" y="{yy + 10:.1f}">{escape(text)}</text>')
    return out, len(rows) * (LINE_H + 4)


def render(view: View) -> str:
    machine = build_boxes(view)
    w, h = machine.layout()
    body: list[str] = []
    machine.draw(PAD, PAD, body)
    legend, legend_h = _legend(PAD * 2 + h)
    total_w = max(w + 2 * PAD, 520.0)
    total_h = h + 3 * PAD + legend_h
    head = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{total_w:.0f}" height="{total_h:.0f}" '
        f'viewBox="0 0 {total_w:.0f} {total_h:.0f}" font-family="DejaVu Sans Mono, monospace" font-size="11">'
    )
    return "\n".join([head, "<title>topodra inspect</title>", *body, *legend, "</svg>"]) + "\n"
