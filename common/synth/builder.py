"""Plan, render and write a synthetic machine's tree."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from topodra.common.synth.devnodes import HARMLESS, device_nodes
from topodra.common.synth.manifest import MANIFEST, manifest
from topodra.common.synth.plan import Plan, make_plan
from topodra.common.synth.reader import SpecError
from topodra.common.synth.render_cpu import render_cpuinfo, render_cpus, render_nodes
from topodra.common.synth.render_net import render_net
from topodra.common.synth.render_pci import render_pci
from topodra.common.synth.spec import MachineSpec
from topodra.common.synth.tree import Tree

OWNED = ("sys", "proc", "dev", MANIFEST)


class OutputError(Exception):
    """The output folder cannot take a tree (it holds one already, or it is a live system)."""


@dataclass(frozen=True)
class BuildResult:
    plan: Plan
    root: Path
    entries: int
    seconds: float


def render(plan: Plan, *, dev_nodes: bool = False) -> Tree:
    """The whole tree in memory; `dev_nodes` adds DIR/dev with harmless stand-ins (devnodes.py)."""
    tree = Tree()
    render_cpus(plan, tree)
    render_nodes(plan, tree)
    render_cpuinfo(plan, tree)
    render_pci(plan, tree)
    render_net(plan, tree)
    tree.raw(MANIFEST, json.dumps(manifest(plan), sort_keys=True) + "\n")
    if dev_nodes:
        for node in device_nodes(plan):
            tree.chardev(node.path.lstrip("/"), *HARMLESS)
    return tree


def build(spec: MachineSpec, output: Path, *, force: bool = False, dev_nodes: bool = False) -> BuildResult:
    """Write the tree of `spec` under `output` (`output/sys`, `output/proc`, the manifest).

    Refuses a folder that holds a tree already unless `force`, which replaces only what a
    previous build wrote; never touches a live /sys. `dev_nodes` also writes `output/dev`
    (character devices, so it needs CAP_MKNOD).
    """
    start = time.perf_counter()
    plan = make_plan(spec)
    tree = render(plan, dev_nodes=dev_nodes)
    _prepare(output, force)
    try:
        entries = tree.write(output)
    except PermissionError as exc:
        if dev_nodes and exc.filename and "/dev/" in str(exc.filename):
            raise OutputError(
                f"{output}: cannot create device nodes ({exc.strerror}); they need root"
            ) from None
        raise
    return BuildResult(plan=plan, root=output, entries=entries, seconds=time.perf_counter() - start)


def _prepare(output: Path, force: bool) -> None:
    if output.exists() and not output.is_dir():
        raise OutputError(f"{output}: exists and is not a folder")
    output.mkdir(parents=True, exist_ok=True)
    resolved = output.resolve()
    if resolved == Path("/") or os.path.ismount(resolved / "sys") or os.path.ismount(resolved / "proc"):
        raise OutputError(f"{output}: holds a mounted sys or proc; refusing to write a synthetic tree there")
    present = [name for name in OWNED if os.path.lexists(output / name)]
    if present and not force:
        raise OutputError(f"{output}: already holds {', '.join(present)} (use --force to replace them)")
    for name in present:
        target = output / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()


__all__ = ["BuildResult", "OutputError", "SpecError", "build", "render"]
